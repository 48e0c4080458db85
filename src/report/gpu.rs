//! The report's GPU health section: per-GPU numbers, each node's peer-copy matrix as
//! a heatmap, the burn's TFLOP/s and the SM clock and temperature over time, the error
//! counters before and after, and DCGM's diagnostic.
use super::charts;
use super::data::{GpuData, RunData};
use super::Doc;
use crate::results::gpu::{CopyRate, GpuHealth, NodeMatrix};
use crate::results::gpu_analysis::{
    counter_changes, end_counters, gpu_name, pair_outlier_list, PairOutlier, PAIR_OUTLIER_FRACTION,
};

fn rate(x: &Option<CopyRate>) -> String {
    match x {
        Some(c) if c.error.is_none() => format!("{:.1}", c.gbps),
        Some(_) => "error".into(),
        None => "-".into(),
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// The section, from what the phase wrote (or why it measured nothing).
pub fn section(d: &mut Doc, data: &RunData, charts: bool) {
    let Some(g) = &data.gpu else {
        d.p("No GPU health results: the phase did not run or wrote nothing.");
        return;
    };
    let r = &g.report;
    if let Some(x) = &r.sdc {
        sdc_section(d, x);
    }
    if let Some(e) = &r.error {
        d.p(format!("Not run: {e}."));
        return;
    }
    d.p(format!(
        "{} GPU(s) on {} node(s), {:.0} s: copies of {} ({} timed each), a {:.0} s burn, NVML sampled every {} ms. GB/s are 10^9 bytes/s; memory bandwidth counts the device-local copy's reads and writes.",
        r.gpus.len(),
        r.nodes.len().max(1),
        r.seconds,
        super::text::human_bytes(r.settings.copy_bytes),
        r.settings.reps,
        r.settings.burn_s,
        r.settings.sample_ms
    ));
    let (header, rows) = per_gpu_rows(&r.gpus);
    d.table(&header, rows);
    let fraction = data
        .card()
        .and_then(|c| c.gpu.as_ref())
        .and_then(|g| g.criteria.pair_outlier_fraction)
        .unwrap_or(PAIR_OUTLIER_FRACTION);
    for n in &r.nodes {
        matrix(d, n, fraction, charts);
    }
    if charts {
        burn_charts(d, g);
    }
    counters_table(d, g);
    dcgm_table(d, g);
}

/// The per-GPU table (header and rows): the report's, and what `burnin gpu` prints.
pub fn per_gpu_rows(gpus: &[GpuHealth]) -> ([&'static str; 13], Vec<Vec<String>>) {
    let rows = gpus
        .iter()
        .map(|g| {
            let t = g.throttle.as_ref();
            vec![
                g.host.clone(),
                g.gpu.to_string(),
                g.name.clone(),
                rate(&g.copies.h2d),
                rate(&g.copies.d2h),
                g.copies
                    .memory_gbps()
                    .map_or("-".into(), |m| format!("{m:.0}")),
                g.burn
                    .as_ref()
                    .filter(|b| b.error.is_none())
                    .map_or("-".into(), |b| format!("{:.1}", b.tflops)),
                t.map_or("-".into(), |t| format!("{:.0}%", 100.0 * t.throttled_share)),
                opt(t.and_then(|t| t.sm_mhz_p50).map(|v| format!("{v:.0}"))),
                opt(t.and_then(|t| t.temp_c_max)),
                opt(t.and_then(|t| t.power_w_p50).map(|v| format!("{v:.0}"))),
                g.pcie.as_ref().map_or("-".into(), |p| {
                    format!(
                        "Gen{} x{} (max Gen{} x{})",
                        opt(p.gen),
                        opt(p.width),
                        opt(p.max_gen),
                        opt(p.max_width)
                    )
                }),
                g.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let header = [
        "host",
        "GPU",
        "name",
        "H2D GB/s",
        "D2H GB/s",
        "memory GB/s",
        "TFLOP/s",
        "throttled",
        "SM MHz p50",
        "max °C",
        "W p50",
        "PCIe",
        "error",
    ];
    (header, rows)
}

fn matrix(d: &mut Doc, n: &NodeMatrix, fraction: f64, charts: bool) {
    let labels: Vec<String> = n.gpus.iter().map(|g| format!("GPU{g}")).collect();
    let cell = |s: usize, t: usize| {
        n.pairs
            .iter()
            .find(|p| p.src == s && p.dst == t)
            .and_then(|p| p.copy.as_ref())
            .filter(|c| c.error.is_none())
            .map(|c| c.gbps)
    };
    let m: Vec<Vec<Option<f64>>> = n
        .gpus
        .iter()
        .map(|&s| n.gpus.iter().map(|&t| cell(s, t)).collect())
        .collect();
    let (_, outliers) = pair_outlier_list(std::slice::from_ref(n), fraction);
    if charts {
        let slow: Vec<String> = n
            .gpus
            .iter()
            .filter(|g| outliers.iter().any(|o| o.src == **g))
            .map(|g| format!("GPU{g}"))
            .collect();
        d.chart(
            &format!("Peer copies on {} (row → column)", n.host),
            charts::heatmap(
                &format!("{}: peer copy GB/s, row → column", n.host),
                &labels,
                &m,
                &slow,
                "GB/s",
            ),
        );
    }
    let mut header = vec!["src \\ dst".to_string()];
    header.extend(labels.iter().cloned());
    let rows = n
        .gpus
        .iter()
        .zip(&m)
        .map(|(s, row)| {
            let mut r = vec![format!("GPU{s}")];
            r.extend(
                row.iter()
                    .map(|v| v.map_or("-".into(), |v| format!("{v:.1}"))),
            );
            r
        })
        .collect();
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    d.table(&h, rows);
    if !outliers.is_empty() {
        d.list(outliers.iter().map(PairOutlier::text).collect());
    }
    let no_peer: Vec<String> = n
        .pairs
        .iter()
        .filter(|p| !p.peer_access)
        .map(|p| format!("GPU{}→GPU{}", p.src, p.dst))
        .collect();
    if !no_peer.is_empty() {
        d.p(format!(
            "No peer access (copies staged by the driver): {}.",
            no_peer.join(", ")
        ));
    }
    if let Some(e) = &n.error {
        d.p(format!("{}: {e}", n.host));
    }
}

fn burn_charts(d: &mut Doc, g: &GpuData) {
    let tflops: Vec<(String, Vec<(f64, f64)>)> = g
        .report
        .gpus
        .iter()
        .filter_map(|h| {
            let b = h.burn.as_ref()?;
            let pts = b
                .tflops_by_tenth
                .iter()
                .enumerate()
                .map(|(i, v)| (10.0 * (i as f64 + 0.5), *v))
                .collect();
            Some((gpu_name(h), pts))
        })
        .collect();
    if !tflops.is_empty() {
        d.chart(
            "Burn TFLOP/s per GPU",
            charts::over_x(
                "Burn TFLOP/s per GPU",
                "% of the burn",
                "TFLOP/s",
                &tflops,
                &[],
            ),
        );
    }
    let series = |f: &dyn Fn(&crate::results::gpu::Sample) -> Option<f64>| {
        let mut by: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for s in &g.samples {
            let Some(v) = f(&s.sample) else { continue };
            let name = format!("{} GPU {}", s.host, s.gpu);
            match by.iter_mut().find(|x| x.0 == name) {
                Some(x) => x.1.push((s.sample.t_s, v)),
                None => by.push((name, vec![(s.sample.t_s, v)])),
            }
        }
        by
    };
    let sm = series(&|s| s.sm_mhz.map(f64::from));
    if !sm.is_empty() {
        d.chart(
            "SM clock over the phase",
            charts::over_x("SM clock", "seconds", "MHz", &sm, &[]),
        );
    }
    let temp = series(&|s| s.temp_c.map(f64::from));
    if !temp.is_empty() {
        d.chart(
            "Temperature over the phase",
            charts::over_x("GPU temperature", "seconds", "°C", &temp, &[]),
        );
    }
}

fn counters_table(d: &mut Doc, g: &GpuData) {
    let rows: Vec<Vec<String>> = g
        .report
        .gpus
        .iter()
        .filter(|h| h.error.is_none())
        .map(|h| {
            let b = h.counters_before.clone().unwrap_or_default();
            let a = end_counters(h, g.after.as_ref())
                .cloned()
                .unwrap_or_default();
            let (fatal, notes) = counter_changes(&b, &a);
            let xids: Vec<String> = h.xids.iter().map(|x| format!("XID {}", x.xid)).collect();
            vec![
                gpu_name(h),
                format!(
                    "{} → {}",
                    opt(b.ecc_volatile_uncorrected),
                    opt(a.ecc_volatile_uncorrected)
                ),
                format!(
                    "{} → {}",
                    opt(b.ecc_volatile_corrected),
                    opt(a.ecc_volatile_corrected)
                ),
                format!(
                    "{} → {}",
                    opt(b.remapped_rows_uncorrected),
                    opt(a.remapped_rows_uncorrected)
                ),
                if h.xid_listening {
                    if xids.is_empty() {
                        "none".into()
                    } else {
                        xids.join(", ")
                    }
                } else {
                    "not listened".into()
                },
                [fatal, notes].concat().join("; "),
            ]
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    d.p("Error counters from the start of the GPU phase to the end of the acceptance (NVML; `-` where the GPU does not report it):");
    d.table(
        &[
            "GPU",
            "ECC uncorrected",
            "ECC corrected",
            "rows remapped (uncorr.)",
            "XID events",
            "new",
        ],
        rows,
    );
}

fn dcgm_table(d: &mut Doc, g: &GpuData) {
    let mut rows = Vec::new();
    for h in &g.report.dcgm {
        match &h.diag {
            Some(diag) => {
                for t in &diag.tests {
                    rows.push(vec![
                        h.host.clone(),
                        t.name.clone(),
                        format!("{:?}", t.status()).to_lowercase(),
                        t.summary_messages.join(" "),
                    ]);
                }
            }
            None => rows.push(vec![
                h.host.clone(),
                "-".into(),
                "not run".into(),
                h.error.clone().unwrap_or_default(),
            ]),
        }
    }
    if !rows.is_empty() {
        d.p("DCGM diagnostic (`dcgmi diag -r 1 -j`):");
        d.table(&["host", "test", "result", "messages"], rows);
    }
}

/// The SDC vote: what ran, each rank's disagreements and host check, and the
/// findings in round order (the first 20: a timeline of who disagreed when).
fn sdc_section(d: &mut Doc, x: &crate::results::sdc::SdcReport) {
    use crate::results::sdc::name;
    d.p(format!(
        "Silent data corruption vote: {} round(s) from round {} in {:.1} s ({:.1} ms a round, {} a kind), {} disagreement(s){}.",
        x.rounds,
        x.first_round,
        x.seconds,
        x.round_s_median * 1e3,
        super::text::human_bytes(x.bytes_per_kind),
        x.findings_total,
        x.error.as_ref().map(|e| format!("; {e}")).unwrap_or_default()
    ));
    let rows = x
        .ranks
        .iter()
        .filter(|r| r.disagreements > 0 || r.host_check == Some(false))
        .map(|r| {
            vec![
                name(r),
                r.model.clone(),
                r.kinds.join(", "),
                r.disagreements.to_string(),
                match r.host_check {
                    Some(true) => "equal".into(),
                    Some(false) => "DIFFERS".into(),
                    None => "-".into(),
                },
            ]
        })
        .collect::<Vec<_>>();
    if !rows.is_empty() {
        d.table(
            &[
                "rank",
                "model",
                "kinds",
                "rounds named",
                "first round vs host",
            ],
            rows,
        );
    }
    let findings: Vec<Vec<String>> = x
        .findings
        .iter()
        .take(20)
        .map(|f| {
            vec![
                f.round.to_string(),
                format!("{:.1}", f.t_s),
                f.kind.clone(),
                f.block.to_string(),
                f.ranks
                    .iter()
                    .map(|r| x.ranks.get(*r).map_or_else(|| format!("rank {r}"), name))
                    .collect::<Vec<_>>()
                    .join("; "),
                if f.majority {
                    format!("minority of {}", f.voters)
                } else {
                    format!("no majority of {}", f.voters)
                },
                f.temp_c.map_or("-".into(), |t| format!("{t} °C")),
                f.sm_mhz.map_or("-".into(), |c| format!("{c} MHz")),
            ]
        })
        .collect();
    if !findings.is_empty() {
        d.table(
            &[
                "round",
                "s",
                "kind",
                "block",
                "named",
                "vote",
                "temperature",
                "SM clock",
            ],
            findings,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Block;
    use crate::results::sdc::{SdcFinding, SdcRank, SdcReport};

    #[test]
    fn the_sdc_section_names_the_gpu_and_lists_its_rounds() {
        let ranks: Vec<SdcRank> = (0..3)
            .map(|r| SdcRank {
                rank: r,
                host: format!("node{r}"),
                gpu: Some(1),
                pci_bus_id: "0000:18:00.0".into(),
                model: "NVIDIA H200".into(),
                kinds: vec!["fma".into(), "memory".into()],
                disagreements: u32::from(r == 2) * 2,
                host_check: Some(r != 1),
                host_checks: Vec::new(),
                ..Default::default()
            })
            .collect();
        let f = |round| SdcFinding {
            round,
            kind: "memory".into(),
            block: 9,
            model: "NVIDIA H200".into(),
            ranks: vec![2],
            majority: true,
            voters: 3,
            t_s: 4.25,
            temp_c: Some(77),
            sm_mhz: Some(1755),
        };
        let x = SdcReport {
            rounds: 40,
            seconds: 2.0,
            round_s_median: 0.05,
            bytes_per_kind: 16 << 20,
            ranks,
            findings: vec![f(3), f(8)],
            findings_total: 2,
            ..Default::default()
        };
        let mut d = Doc::default();
        sdc_section(&mut d, &x);
        let Block::Para(p) = &d.blocks[0] else {
            panic!("{d:?}")
        };
        assert!(p.starts_with("Silent data corruption vote: 40 round(s) from round 0 in 2.0 s (50.0 ms a round, 16.0 MiB a kind), 2 disagreement(s)."), "{p}");
        let Block::Table(t) = &d.blocks[1] else {
            panic!("{d:?}")
        };
        // rank 1 (host check differs) and rank 2 (named twice); rank 0 is healthy
        assert_eq!(t.rows.len(), 2, "{t:?}");
        assert_eq!(t.rows[0][4], "DIFFERS");
        assert_eq!(
            (t.rows[1][0].as_str(), t.rows[1][3].as_str()),
            ("node2 GPU 1 (rank 2, PCI 0000:18:00.0)", "2")
        );
        let Block::Table(t) = &d.blocks[2] else {
            panic!("{d:?}")
        };
        assert_eq!(
            t.rows[0],
            [
                "3",
                "4.2",
                "memory",
                "9",
                "node2 GPU 1 (rank 2, PCI 0000:18:00.0)",
                "minority of 3",
                "77 °C",
                "1755 MHz"
            ]
        );
        assert_eq!(t.rows[1][0], "8");
    }
}
