//! SVG charts for report.html, drawn with plotters' SVG backend only: no font library
//! is linked — plotters' built-in text metrics lay the chart out and the backend
//! writes `<text>` elements the browser renders, so the page needs nothing outside
//! itself.
//!
//! Each function takes plain numbers and returns one `<svg>` document as a string;
//! the report decides what to plot. Non-finite values are dropped before drawing.
use crate::units::Bytes;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Series colours, readable on white and told apart in print.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];
const ALERT: RGBColor = RGBColor(214, 39, 40);
const FONT: &str = "sans-serif";

pub fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn finite(v: &[(f64, f64)]) -> Vec<(f64, f64)> {
    v.iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect()
}

/// Draw into a fresh SVG string of `size`.
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    Ok(out)
}

fn upper(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() {
        max * 1.15
    } else {
        1.0
    }
}

/// One line of a busbw chart: a group's busbw (GB/s) per message size (bytes).
pub struct BwSeries {
    pub label: String,
    pub points: Vec<(u64, f64)>,
    /// Drawn in the alert colour (an outlier group).
    pub alert: bool,
}

/// busbw against message size (log2 axis), one line per group, the topology's
/// expectation as a dashed line, and sizes planned but not measured marked on the axis.
pub fn busbw_vs_size(
    title: &str,
    series: &[BwSeries],
    expected: Option<f64>,
    missing: &[u64],
) -> Result<String> {
    let sizes: Vec<u64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(missing.iter().copied())
        .filter(|b| *b > 0)
        .collect();
    let lo = sizes.iter().copied().min().unwrap_or(1) as f64;
    let hi = sizes.iter().copied().max().unwrap_or(2) as f64;
    let (x0, x1) = (lo.log2() - 0.5, hi.log2().max(lo.log2() + 1.0) + 0.5);
    let ymax = upper(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(expected)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
    );
    svg((560, 340), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 17))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..ymax)?;
        let fmt = |x: &f64| -> String {
            if (x - x.round()).abs() < 1e-6 && *x >= 0.0 {
                Bytes(2f64.powi(x.round() as i32) as u64).to_string()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_desc("message size")
            .y_desc("busbw (GB/s)")
            .y_label_formatter(&tick)
            .x_labels(((x1 - x0) as usize + 1).min(12))
            .x_label_formatter(&fmt)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let c = if s.alert { ALERT } else { color(i) };
            let pts = finite(
                &s.points
                    .iter()
                    .map(|(b, v)| ((*b as f64).log2(), *v))
                    .collect::<Vec<_>>(),
            );
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                .label(&s.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))?;
        }
        if let Some(e) = expected.filter(|e| e.is_finite()) {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(x0, e), (x1, e)],
                    8,
                    5,
                    ALERT.stroke_width(2),
                ))?
                .label(format!("expected {e:.3} GB/s"))
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], ALERT.stroke_width(2))
                });
        }
        if !missing.is_empty() {
            let grey = RGBColor(150, 150, 150);
            chart
                .draw_series(missing.iter().map(|b| {
                    Cross::new(((*b as f64).log2(), ymax * 0.03), 5, grey.stroke_width(2))
                }))?
                .label("planned, not measured")
                .legend(move |(x, y)| Cross::new((x + 9, y), 4, grey.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font((FONT, 12))
            .draw()?;
        Ok(())
    })
}

/// Mix from red (low) through yellow to green (high) for `t` in 0..=1.
fn heat(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let (r, g) = if t < 0.5 {
        (230.0, 80.0 + 330.0 * t)
    } else {
        (230.0 - 300.0 * (t - 0.5), 245.0 - 50.0 * (t - 0.5))
    };
    RGBColor(r as u8, g as u8, 90)
}

/// The node-pair busbw matrix as a heatmap; `outliers` (node names) are marked in red.
pub fn pair_heatmap(
    title: &str,
    nodes: &[String],
    matrix: &[Vec<Option<f64>>],
    outliers: &[String],
) -> Result<String> {
    heatmap(title, nodes, matrix, outliers, "busbw GB/s")
}

/// A square matrix (row = source, column = destination) as a heatmap, `unit` in its
/// legend; `outliers` (row names) are marked in red.
pub fn heatmap(
    title: &str,
    nodes: &[String],
    matrix: &[Vec<Option<f64>>],
    outliers: &[String],
    unit: &str,
) -> Result<String> {
    let n = nodes.len().max(1);
    let cell = (440 / n as u32).clamp(8, 90);
    let left = 110u32;
    let top = 50u32;
    let w = left + cell * n as u32 + 30;
    let h = top + cell * n as u32 + 60;
    let max = matrix
        .iter()
        .flatten()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let show_numbers = cell >= 44;
    svg((w.max(360), h), |root| {
        root.draw(&Text::new(
            title.to_string(),
            (10, 10),
            (FONT, 17).into_font(),
        ))?;
        let px = |i: usize| (left + cell * i as u32) as i32;
        let py = |j: usize| (top + cell * j as u32) as i32;
        for (i, row) in matrix.iter().enumerate().take(n) {
            for (j, v) in row.iter().enumerate().take(n) {
                let fill = match v {
                    Some(v) if max > 0.0 => heat(v / max),
                    _ => RGBColor(238, 238, 238),
                };
                root.draw(&Rectangle::new(
                    [(px(j), py(i)), (px(j + 1) - 1, py(i + 1) - 1)],
                    fill.filled(),
                ))?;
                if let (Some(v), true) = (v, show_numbers) {
                    root.draw(&Text::new(
                        if *v >= 100.0 {
                            format!("{v:.0}")
                        } else {
                            format!("{v:.3}")
                        },
                        (px(j) + cell as i32 / 2, py(i) + cell as i32 / 2),
                        (FONT, 12)
                            .into_font()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    ))?;
                }
            }
        }
        for (i, name) in nodes.iter().enumerate() {
            let bad = outliers.contains(name);
            let c = if bad { ALERT } else { BLACK };
            let label = if bad {
                format!("{name} (outlier)")
            } else {
                name.clone()
            };
            root.draw(&Text::new(
                label.clone(),
                (left as i32 - 6, py(i) + cell as i32 / 2),
                (FONT, 12)
                    .into_font()
                    .color(&c)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
            if cell >= 30 || bad {
                root.draw(&Text::new(
                    name.clone(),
                    (px(i) + cell as i32 / 2, py(n) + 6),
                    (FONT, 12)
                        .into_font()
                        .color(&c)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                ))?;
            }
            if bad {
                // Frame the outlier's row and column.
                root.draw(&Rectangle::new(
                    [(px(0), py(i)), (px(n) - 1, py(i + 1) - 1)],
                    ALERT.stroke_width(3),
                ))?;
                root.draw(&Rectangle::new(
                    [(px(i), py(0)), (px(i + 1) - 1, py(n) - 1)],
                    ALERT.stroke_width(3),
                ))?;
            }
        }
        root.draw(&Text::new(
            format!("{unit}, red = slow, green = {max:.3}"),
            (left as i32, py(n) + 30),
            (FONT, 12).into_font(),
        ))?;
        Ok(())
    })
}

/// A tick label with no more digits than it needs ("0.12", "250", "1.5").
fn tick(v: &f64) -> String {
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// One bar per rank (its median time, µs; drawn in ms when that reads better); the
/// slowest in the alert colour.
pub fn rank_bars(title: &str, labels: &[String], values_us: &[f64]) -> Result<String> {
    let big = values_us.iter().any(|v| *v >= 10_000.0);
    let (unit, scale) = if big { ("ms", 1e-3) } else { ("µs", 1.0) };
    let values: Vec<f64> = values_us.iter().map(|v| v * scale).collect();
    let values = values.as_slice();
    let y_desc = format!("median time ({unit})");
    let n = values.len().max(1);
    let ymax = upper(
        values
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
    );
    let slowest = values
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|x| x.0);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    svg((560, 300), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 17))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.6..(n as f64 - 0.4), 0.0..ymax)?;
        let fmt = |x: &f64| -> String {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("rank")
            .y_desc(y_desc.as_str())
            .y_label_formatter(&tick)
            .x_labels(n.min(16))
            .x_label_formatter(&fmt)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        chart.draw_series(
            values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, v)| {
                    let c = if Some(i) == slowest && *v > min * 1.05 {
                        ALERT
                    } else {
                        color(0)
                    };
                    Rectangle::new([(i as f64 - 0.38, 0.0), (i as f64 + 0.38, *v)], c.filled())
                }),
        )?;
        Ok(())
    })
}

/// A line chart over steps (loss, step time) with checkpoint steps as vertical lines.
pub fn over_steps(
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    marks: &[(f64, String)],
) -> Result<String> {
    over_x(title, "step", y_desc, series, marks)
}

/// A line chart of `series` over `x_desc` (steps, seconds), `marks` as vertical lines.
pub fn over_x(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    marks: &[(f64, String)],
) -> Result<String> {
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| finite(&s.1)).collect();
    let x0 = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x1 = pts.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = if x0.is_finite() && x1 > x0 {
        (x0, x1)
    } else {
        (0.0, 1.0)
    };
    let ymin = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let y0 = if ymin.is_finite() && ymin > 0.0 && ymin > ymax * 0.5 {
        ymin * 0.9
    } else {
        0.0
    };
    let y1 = upper(ymax);
    svg((560, 300), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 17))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        let grey = RGBColor(120, 120, 120);
        for (i, (x, label)) in marks.iter().enumerate() {
            let drawn = chart.draw_series(DashedLineSeries::new(
                vec![(*x, y0), (*x, y1)],
                4,
                4,
                grey.stroke_width(1),
            ))?;
            // One legend entry for all the marks: the first carries it.
            if i == 0 {
                drawn.label(label).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(1))
                });
            }
        }
        for (i, (label, s)) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(finite(s), c.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font((FONT, 12))
            .draw()?;
        Ok(())
    })
}

/// One row per chaos trial: the phases between its events (seconds since the fault)
/// as coloured segments, each event named.
pub fn recovery_timeline(title: &str, trials: &[(String, Vec<(String, f64)>)]) -> Result<String> {
    let n = trials.len().max(1);
    let tmax = upper(
        trials
            .iter()
            .flat_map(|t| t.1.iter().map(|e| e.1))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
    );
    let h = 110 + 120 * n as u32;
    svg((760, h), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 17))
            .margin(14)
            .x_label_area_size(45)
            .y_label_area_size(10)
            .build_cartesian_2d(0.0..tmax, 0.0..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("seconds since the fault was injected")
            .y_labels(0)
            .x_label_formatter(&tick)
            .label_style((FONT, 13))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for (row, (label, events)) in trials.iter().enumerate() {
            let y = (n - 1 - row) as f64;
            chart.draw_series(std::iter::once(Text::new(
                label.clone(),
                (tmax * 0.005, y + 0.97),
                (FONT, 14)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Top)),
            )))?;
            let ev: Vec<(String, f64)> =
                events.iter().filter(|e| e.1.is_finite()).cloned().collect();
            for (k, pair) in ev.windows(2).enumerate() {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(pair[0].1, y + 0.35), (pair[1].1, y + 0.6)],
                    color(k).filled(),
                )))?;
            }
            for (k, (name, t)) in ev.iter().enumerate() {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(*t, y + 0.28), (*t, y + 0.67)],
                    BLACK.stroke_width(1),
                )))?;
                // Alternate above and below the bar so neighbours do not collide.
                let (at, v) = if k % 2 == 0 {
                    (y + 0.7, VPos::Bottom)
                } else {
                    (y + 0.25, VPos::Top)
                };
                // The first and last labels grow inwards, so neither leaves the plot.
                let hpos = if k == 0 {
                    HPos::Left
                } else if k + 1 == ev.len() {
                    HPos::Right
                } else {
                    HPos::Center
                };
                chart.draw_series(std::iter::once(Text::new(
                    format!("{name} +{t:.2}s"),
                    (*t, at),
                    (FONT, 12).into_font().color(&BLACK).pos(Pos::new(hpos, v)),
                )))?;
            }
        }
        Ok(())
    })
}

/// One call of a step timeline: its lane (communicator), start and length (µs), the
/// colour's key (the collective) and its label.
pub struct Span {
    pub lane: usize,
    pub start_us: f64,
    pub time_us: f64,
    pub kind: usize,
    pub label: String,
}

/// A step call after call, one row per communicator: each call a bar from its start
/// for its time, coloured by collective, labelled where the bar is wide enough; a
/// legend of the collectives under the lanes.
pub fn step_timeline(
    title: &str,
    lanes: &[String],
    kinds: &[String],
    spans: &[Span],
) -> Result<String> {
    let n = lanes.len().max(1);
    let tmax = upper(
        spans
            .iter()
            .map(|s| s.start_us + s.time_us)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
    );
    let h = 150 + 46 * n as u32;
    svg((820, h), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 17))
            .margin(14)
            .x_label_area_size(45)
            .y_label_area_size(120)
            .build_cartesian_2d(0.0..tmax, -0.8..n as f64)?;
        let lane_of = |y: &f64| -> String {
            let i = y.floor();
            if y.fract().abs() < 0.55 && y.fract() > 0.45 && i >= 0.0 {
                lanes.get(n - 1 - i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("µs since the step's start")
            .y_labels(2 * n + 2)
            .y_label_formatter(&lane_of)
            .x_label_formatter(&tick)
            .label_style((FONT, 13))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for s in spans
            .iter()
            .filter(|s| s.start_us.is_finite() && s.time_us.is_finite())
        {
            let y = (n - 1 - s.lane.min(n - 1)) as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(s.start_us, y + 0.2), (s.start_us + s.time_us, y + 0.8)],
                color(s.kind).filled(),
            )))?;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(s.start_us, y + 0.2), (s.start_us + s.time_us, y + 0.8)],
                WHITE.stroke_width(1),
            )))?;
            if s.time_us > tmax * 0.08 {
                chart.draw_series(std::iter::once(Text::new(
                    s.label.clone(),
                    (s.start_us + s.time_us / 2.0, y + 0.5),
                    (FONT, 11)
                        .into_font()
                        .color(&WHITE)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                )))?;
            }
        }
        // The legend: one swatch per collective under the lanes.
        let step = tmax / kinds.len().max(1) as f64;
        for (i, k) in kinds.iter().enumerate() {
            let x = step * i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, -0.65), (x + tmax * 0.02, -0.35)],
                color(i).filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                k.clone(),
                (x + tmax * 0.025, -0.5),
                (FONT, 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            )))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_text_elements_and_no_external_references() {
        let s = busbw_vs_size(
            "all_reduce inter <tier> & co",
            &[BwSeries {
                label: "inter".into(),
                points: vec![(65536, 0.05), (1 << 20, 0.1), (16 << 20, f64::NAN)],
                alert: false,
            }],
            Some(0.1),
            &[32 << 20],
        )
        .unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..80]);
        assert!(s.contains("<text"), "text drawn as SVG text");
        assert!(s.contains("&lt;tier&gt; &amp; co"), "escaped");
        assert!(s.contains("64KiB") && s.contains("expected 0.100 GB/s"));
        assert!(!s.contains("NaN"));
        assert!(!s.contains("href"), "no external reference");
        let h = pair_heatmap(
            "pairs",
            &["node0".into(), "node1".into(), "node2".into()],
            &[
                vec![None, Some(0.2), Some(0.05)],
                vec![Some(0.2), None, Some(0.05)],
                vec![Some(0.05), Some(0.05), None],
            ],
            &["node2".into()],
        )
        .unwrap();
        assert!(h.contains("node2 (outlier)"));
        let b = rank_bars("ranks", &["0".into(), "1".into()], &[10.0, 20.0]).unwrap();
        assert!(b.contains("<rect"));
        let o = over_steps(
            "loss",
            "loss",
            &[("loss".into(), vec![(1.0, 5.0), (2.0, 4.0)])],
            &[(2.0, "checkpoint".into())],
        )
        .unwrap();
        assert!(o.contains("checkpoint"));
        let t = recovery_timeline(
            "recovery",
            &[(
                "trial 1 (kill)".into(),
                vec![
                    ("inject".into(), 0.0),
                    ("detect".into(), 0.4),
                    ("first_step".into(), 5.0),
                ],
            )],
        )
        .unwrap();
        assert!(t.contains("detect +0.40s"));
        let st = step_timeline(
            "step",
            &["dp0".into(), "tp0".into()],
            &["all_gather".into(), "all_reduce".into()],
            &[
                Span {
                    lane: 1,
                    start_us: 0.0,
                    time_us: 20.0,
                    kind: 0,
                    label: "all_gather 256KiB".into(),
                },
                Span {
                    lane: 0,
                    start_us: 20.0,
                    time_us: 200.0,
                    kind: 1,
                    label: "all_reduce 1MiB".into(),
                },
            ],
        )
        .unwrap();
        // Both lanes named, the wide bar labelled, the narrow one not, both legends.
        let lines: Vec<&str> = st.lines().map(str::trim).collect();
        for t in ["dp0", "tp0", "all_reduce 1MiB", "all_gather", "all_reduce"] {
            assert!(lines.contains(&t), "{t}: {st}");
        }
        assert!(!st.contains("all_gather 256KiB") && st.matches("<rect").count() >= 6);
        assert!(step_timeline("empty", &[], &[], &[]).is_ok());
        // Empty inputs draw an empty chart rather than failing.
        assert!(busbw_vs_size("empty", &[], None, &[]).is_ok());
        assert!(over_steps("empty", "x", &[], &[]).is_ok());
        assert!(recovery_timeline("empty", &[]).is_ok());
    }
}
