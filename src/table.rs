//! Plain aligned text tables for the terminal (left-aligned text, right-aligned
//! numbers), one routine for every table burnin prints.

/// Whether a cell looks numeric (right-aligned).
fn numeric(s: &str) -> bool {
    let t = s.trim_end_matches('%');
    !t.is_empty() && t.parse::<f64>().is_ok()
}

/// Render `header` and `rows` with columns padded to their widest cell.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    // A column is right-aligned, header included, when all its cells are numbers.
    let right: Vec<bool> = (0..cols)
        .map(|i| !rows.is_empty() && rows.iter().all(|r| r.get(i).is_some_and(|c| numeric(c))))
        .collect();
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut parts = Vec::with_capacity(cols);
        for (i, c) in cells.iter().enumerate().take(cols) {
            let pad = width[i].saturating_sub(c.chars().count());
            if right[i] {
                parts.push(format!("{}{}", " ".repeat(pad), c));
            } else {
                parts.push(format!("{}{}", c, " ".repeat(pad)));
            }
        }
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligns_text_left_numbers_right() {
        let t = super::render(
            &["name", "n"],
            &[
                vec!["a".into(), "10".into()],
                vec!["bbb".into(), "2".into()],
            ],
        );
        assert_eq!(t, "name   n\na     10\nbbb    2\n");
    }
}
