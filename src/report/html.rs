//! The report as one self-contained HTML page: inline CSS, inline SVG charts, no
//! script, no font, image or stylesheet from anywhere else — it opens the same from a
//! laptop without network as on the cluster.
use super::{Block, Doc, Table};

/// Escape text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The Markdown spans the report uses — `code` and **bold** — as HTML, the rest
/// escaped.
pub fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    let mut bold = false;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('`') {
            if let Some(end) = r.find('`') {
                out.push_str(&format!("<code>{}</code>", escape(&r[..end])));
                rest = &r[end + 1..];
                continue;
            }
        }
        if let Some(r) = rest.strip_prefix("**") {
            out.push_str(if bold { "</b>" } else { "<b>" });
            bold = !bold;
            rest = r;
            continue;
        }
        let next = rest
            .char_indices()
            .skip(1)
            .find(|(_, c)| *c == '`' || *c == '*')
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        out.push_str(&escape(&rest[..next]));
        rest = &rest[next..];
    }
    if bold {
        out.push_str("</b>");
    }
    out
}

/// A CSS class for cells that carry a verdict.
fn class_of(cell: &str) -> Option<&'static str> {
    match cell {
        "PASS" => Some("pass"),
        "FAIL" => Some("fail"),
        "NOT RUN" => Some("notrun"),
        "missing" => Some("missing"),
        _ if cell.ends_with("(outlier)") => Some("fail"),
        _ => None,
    }
}

fn numeric(s: &str) -> bool {
    let t = s.trim().trim_end_matches('%').trim_end_matches('×');
    !t.is_empty() && t.parse::<f64>().is_ok()
}

fn table(t: &Table) -> String {
    let mut s = String::from("<table>\n<thead><tr>");
    for h in &t.header {
        s.push_str(&format!("<th>{}</th>", escape(h)));
    }
    s.push_str("</tr></thead>\n<tbody>\n");
    for r in &t.rows {
        s.push_str("<tr>");
        for c in r {
            let mut classes = Vec::new();
            if let Some(k) = class_of(c) {
                classes.push(k);
            }
            if numeric(c) {
                classes.push("num");
            }
            if classes.is_empty() {
                s.push_str(&format!("<td>{}</td>", escape(c)));
            } else {
                s.push_str(&format!(
                    "<td class=\"{}\">{}</td>",
                    classes.join(" "),
                    escape(c)
                ));
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody>\n</table>\n");
    s
}

const CSS: &str = "
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1180px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 1px solid #eee; }
h3 { font-size: 1.05em; margin-top: 1.3em; }
table { border-collapse: collapse; margin: .6em 0 1em; font-size: .88em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.pass { background: #e3f6e3; color: #1a6b1a; font-weight: bold; }
td.fail { background: #fde2e2; color: #a11; font-weight: bold; }
td.notrun { background: #eee; color: #666; }
td.missing { background: #fff3d6; color: #8a5a00; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
pre { background: #f7f7f7; border: 1px solid #e4e4e4; padding: .7em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; border: 1px solid #e4e4e4; padding: 4px; background: #fff; }
figure svg { display: block; max-width: 100%; height: auto; }
";

/// Render a document as a complete HTML page.
pub fn render(doc: &Doc) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        escape(&doc.title)
    );
    let mut in_charts = false;
    for b in &doc.blocks {
        let is_chart = matches!(b, Block::Chart(_));
        if is_chart && !in_charts {
            s.push_str("<div class=\"charts\">\n");
            in_charts = true;
        } else if !is_chart && in_charts {
            s.push_str("</div>\n");
            in_charts = false;
        }
        match b {
            Block::Heading(level, text) => {
                let l = (*level).clamp(1, 6);
                s.push_str(&format!("<h{l}>{}</h{l}>\n", inline(text)));
            }
            Block::Para(text) => s.push_str(&format!("<p>{}</p>\n", inline(text))),
            Block::List(items) => {
                s.push_str("<ul>\n");
                for i in items {
                    s.push_str(&format!("<li>{}</li>\n", inline(i)));
                }
                s.push_str("</ul>\n");
            }
            Block::Table(t) => s.push_str(&table(t)),
            Block::Code(text) => s.push_str(&format!("<pre>{}</pre>\n", escape(text.trim_end()))),
            Block::Chart(c) => s.push_str(&format!(
                "<figure class=\"chart\" title=\"{}\">\n{}\n</figure>\n",
                escape(&c.title),
                c.svg.trim()
            )),
        }
    }
    if in_charts {
        s.push_str("</div>\n");
    }
    s.push_str("</body>\n</html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_spans_and_escaping() {
        assert_eq!(
            inline("a `x<y` **b & c** d"),
            "a <code>x&lt;y</code> <b>b &amp; c</b> d"
        );
        assert_eq!(inline("2 * 3"), "2 * 3");
        assert_eq!(inline("**open"), "<b>open</b>");
    }

    #[test]
    fn page_is_self_contained() {
        let mut d = Doc {
            title: "t <1>".into(),
            ..Default::default()
        };
        d.p("hello");
        d.table(&["verdict"], vec![vec!["FAIL".into()]]);
        d.chart("c", Ok("<svg width=\"1\" height=\"1\"></svg>".into()));
        let h = render(&d);
        assert!(h.contains("<title>t &lt;1&gt;</title>"));
        assert!(h.contains("<td class=\"fail\">FAIL</td>"));
        assert!(h.contains("<div class=\"charts\">\n<figure"));
        for external in ["<script", "<link", "src=", "url(", "@import"] {
            assert!(!h.contains(external), "{external}");
        }
    }
}
