//! The report as Markdown (GitHub-flavoured tables). Charts are left out: they live in
//! report.html. One table routine for every table.
use super::{Block, Doc, Table};

/// Whether a cell is a number (right-aligned), "-" counts as one.
fn numeric(s: &str) -> bool {
    let t = s.trim().trim_end_matches('%').trim_end_matches('×');
    t == "-" || (!t.is_empty() && t.parse::<f64>().is_ok())
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A Markdown table; columns whose cells are all numbers are right-aligned.
pub fn table(t: &Table) -> String {
    let cols = t.header.len();
    let right: Vec<bool> = (0..cols)
        .map(|i| {
            !t.rows.is_empty()
                && t.rows.iter().all(|r| r.get(i).is_some_and(|c| numeric(c)))
                && t.rows.iter().any(|r| r.get(i).is_some_and(|c| c != "-"))
        })
        .collect();
    let mut s = String::new();
    s.push_str(&format!(
        "| {} |\n",
        t.header
            .iter()
            .map(|h| cell(h))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    s.push_str(&format!(
        "|{}|\n",
        right
            .iter()
            .map(|r| if *r { " ---: " } else { " --- " })
            .collect::<Vec<_>>()
            .join("|")
    ));
    for r in &t.rows {
        let cells: Vec<String> = (0..cols)
            .map(|i| cell(r.get(i).map(String::as_str).unwrap_or("")))
            .collect();
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    s
}

/// Render a document.
pub fn render(doc: &Doc) -> String {
    let mut s = String::new();
    for b in &doc.blocks {
        match b {
            Block::Heading(level, text) => {
                s.push_str(&format!("{} {text}\n\n", "#".repeat(*level as usize)));
            }
            Block::Para(text) => s.push_str(&format!("{text}\n\n")),
            Block::List(items) => {
                for i in items {
                    s.push_str(&format!("- {i}\n"));
                }
                s.push('\n');
            }
            Block::Table(t) => {
                s.push_str(&table(t));
                s.push('\n');
            }
            Block::Code(text) => {
                s.push_str("```\n");
                s.push_str(text.trim_end());
                s.push_str("\n```\n\n");
            }
            Block::Chart(_) => {}
        }
    }
    let trimmed = s.trim_end();
    format!("{trimmed}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_numbers_and_escape_pipes() {
        let t = Table {
            header: vec!["name".into(), "GB/s".into()],
            rows: vec![
                vec!["a|b".into(), "1.5".into()],
                vec!["c".into(), "-".into()],
            ],
        };
        assert_eq!(
            table(&t),
            "| name | GB/s |\n| --- | ---: |\n| a\\|b | 1.5 |\n| c | - |\n"
        );
    }
}
