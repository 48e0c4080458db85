//! Exporters: text tables for the terminal, and the report of a results folder as
//! Markdown and as one self-contained HTML page with SVG charts; `compare` puts two
//! folders side by side.
//!
//! Shape (after hyperfine): the content is built once, from the JSON alone, into a
//! small document model ([`Doc`]: headings, paragraphs, tables, charts, code); each
//! format renders that model in its own file, so Markdown and HTML always say the same
//! thing, and Markdown simply leaves the charts out.
//!
//! - `data`: reading a results folder (finished, killed, copied off the cluster);
//! - `verdict`: the card's criteria judged from the data (`criteria`: what its judges
//!   share, a leaf);
//! - `cost`: cost per completed unit of work;
//! - `doc`: the report's content (`text`: shared wording such as sizes, a leaf);
//! - `markdown`, `html`: the two renderings; `charts`: the SVG charts;
//! - `compare`: two folders side by side;
//! - `table`: aligned text tables for the terminal.
pub mod charts;
pub mod ci;
pub mod compare;
pub mod cost;
mod criteria;
pub mod data;
pub mod doc;
pub mod fabric;
pub mod gpu;
pub mod html;
pub mod markdown;
pub mod next_job;
pub mod replay;
pub mod soak;
pub mod text;
use crate::table;

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct ReportArgs {
    /// A results folder: of `burnin run`, or the --out folder of one sweep or train.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Write report.md and report.html here instead of into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct CompareArgs {
    /// The baseline results folder (A).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The results folder compared with it (B); ratios are B / A.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Write compare.md and compare.html here (default: Markdown on stdout).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}
pub mod verdict;

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use verdict::Criterion;

/// A block of a report.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Level (1 = title) and text.
    Heading(u8, String),
    /// Text with `code` and **bold** spans.
    Para(String),
    /// Items with `code` and **bold** spans.
    List(Vec<String>),
    Table(Table),
    /// Preformatted text.
    Code(String),
    /// An SVG chart (HTML only).
    Chart(Chart),
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str], rows: Vec<Vec<String>>) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows,
        }
    }

    /// The table as aligned text, for the terminal.
    pub fn text(&self) -> String {
        let header: Vec<&str> = self.header.iter().map(String::as_str).collect();
        table::render(&header, &self.rows)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub svg: String,
}

/// A report, format-free.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Doc {
    pub title: String,
    pub blocks: Vec<Block>,
}

impl Doc {
    pub fn h(&mut self, level: u8, text: impl Into<String>) {
        self.blocks.push(Block::Heading(level, text.into()));
    }
    pub fn p(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Para(text.into()));
    }
    pub fn list(&mut self, items: Vec<String>) {
        if !items.is_empty() {
            self.blocks.push(Block::List(items));
        }
    }
    pub fn table(&mut self, header: &[&str], rows: Vec<Vec<String>>) {
        self.blocks.push(Block::Table(Table::new(header, rows)));
    }
    pub fn code(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Code(text.into()));
    }
    /// Add a chart; a chart that cannot be drawn becomes a note, never an error.
    pub fn chart(&mut self, title: &str, svg: Result<String>) {
        match svg {
            Ok(svg) => self.blocks.push(Block::Chart(Chart {
                title: title.to_string(),
                svg,
            })),
            Err(e) => self.p(format!("(chart \"{title}\" could not be drawn: {e:#})")),
        }
    }
}

/// What rendering a folder produced.
pub struct Rendered {
    pub criteria: Vec<Criterion>,
    pub markdown: PathBuf,
    pub html: PathBuf,
}

/// Read `dir`, judge it, and write `report.md` and `report.html` into `out`.
pub fn render_dir(dir: &Path, out: &Path) -> Result<Rendered> {
    let data = data::RunData::load(dir)?;
    let criteria = verdict::judge(&data);
    std::fs::create_dir_all(out)
        .with_context(|| format!("--out: cannot create directory {}", out.display()))?;
    let md = markdown::render(&doc::build(&data, &criteria, false));
    let html = html::render(&doc::build(&data, &criteria, true));
    let markdown = out.join("report.md");
    let html_path = out.join("report.html");
    crate::results::write_atomic(&markdown, md.as_bytes())?;
    crate::results::write_atomic(&html_path, html.as_bytes())?;
    // The next job's nodes: a hostfile in ring order and Slurm's forms.
    if let Some(p) = next_job::plan(&data) {
        crate::results::write_atomic(&out.join("hosts.good"), next_job::hostfile(&p).as_bytes())?;
        crate::results::write_atomic(&out.join("next-job.txt"), next_job::text(&p).as_bytes())?;
    }
    // The verdict for CI dashboards: JUnit XML and CTRF JSON.
    let run = match &data.acceptance {
        Some(a) => ci::RunInfo {
            name: a.card_path.clone(),
            started_unix: Some(a.started_unix),
            finished_unix: a.finished_unix,
            version: a.burnin_version.clone(),
        },
        None => ci::RunInfo {
            name: dir.display().to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..ci::RunInfo::default()
        },
    };
    crate::results::write_atomic(
        &out.join("verdict.junit.xml"),
        ci::junit(&criteria, &run).as_bytes(),
    )?;
    crate::results::write_atomic(
        &out.join("verdict.ctrf.json"),
        &serde_json::to_vec_pretty(&ci::ctrf(&criteria, &run))?,
    )?;
    Ok(Rendered {
        criteria,
        markdown,
        html: html_path,
    })
}

/// "1.23×": B over A, "-" when either is missing or A is 0.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}×", b / a),
        _ => "-".into(),
    }
}

/// The verdict as an aligned text table with a last line, for the terminal: the
/// report's verdict table, as text.
pub fn verdict_text(criteria: &[Criterion]) -> String {
    let mut s = doc::verdict_table(criteria).text();
    s.push_str(&format!("# verdict: {}\n", doc::summary_line(criteria)));
    s
}

/// `burnin report DIR`: render, print the verdict and where the files are.
pub fn run_report(args: &ReportArgs) -> Result<crate::error::Outcome> {
    let out = args.out.clone().unwrap_or_else(|| args.dir.clone());
    let r = render_dir(&args.dir, &out)?;
    print!("{}", verdict_text(&r.criteria));
    println!("# report: {}", r.markdown.display());
    println!("# report: {}", r.html.display());
    Ok(crate::error::Outcome::Pass)
}
