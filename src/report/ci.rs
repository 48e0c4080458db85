//! The verdict as CI dashboards read it: JUnit XML (the Ant/Jenkins format GitLab,
//! GitHub Actions' reporters and Jenkins read) and CTRF JSON (ctrf.io's Common Test
//! Report Format), each criterion a test case, NOT RUN as skipped with its reason.
//!
//! Both are written beside report.md by `burnin run` and `burnin report`, from the
//! same criteria the report shows (`verdict.junit.xml`, `verdict.ctrf.json`).

use crate::results::acceptance::{Criterion, Status};
use serde_json::{json, Value};

/// The run a verdict belongs to: its name (the card's file), when it started and
/// ended (unix seconds; None when not known), and burnin's version.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub name: String,
    pub started_unix: Option<f64>,
    pub finished_unix: Option<f64>,
    pub version: String,
}

impl RunInfo {
    fn seconds(&self) -> f64 {
        match (self.started_unix, self.finished_unix) {
            (Some(a), Some(b)) if b >= a => b - a,
            _ => 0.0,
        }
    }
}

/// Text safe in an XML attribute or element: the report's HTML escape (the five
/// predefined entities), and the control characters XML 1.0 forbids as spaces.
fn xml(s: &str) -> String {
    super::html::escape(s)
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if (c as u32) < 0x20 => ' ',
            c => c,
        })
        .collect()
}

/// What a failed or skipped case says in one line: measured against the bar, and why.
fn message(c: &Criterion) -> String {
    let mut m = format!("{}: measured {}, needs {}", c.what, c.measured, c.threshold);
    if !c.detail.is_empty() {
        m.push_str(&format!(" ({})", c.detail));
    }
    m
}

fn count(criteria: &[Criterion], s: Status) -> usize {
    criteria.iter().filter(|c| c.status == s).count()
}

/// "2026-12-07T20:13:03" (UTC, no offset: the JUnit format's timestamp).
fn iso(unix: f64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second]"
            ))
            .ok()
        })
        .unwrap_or_default()
}

/// The verdict as JUnit XML: one `<testsuite>` for the run, one `<testcase>` per
/// criterion (classname `burnin.<phase>`, name its id), a `<failure>` for FAIL and a
/// `<skipped>` with the reason for NOT RUN.
pub fn junit(criteria: &[Criterion], run: &RunInfo) -> String {
    let (n, failed, skipped) = (
        criteria.len(),
        count(criteria, Status::Fail),
        count(criteria, Status::NotRun),
    );
    let time = run.seconds();
    let suite = xml(&format!("burnin acceptance: {}", run.name));
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&format!(
        "<testsuites name=\"burnin\" tests=\"{n}\" failures=\"{failed}\" errors=\"0\" skipped=\"{skipped}\" time=\"{time:.3}\">\n"
    ));
    let stamp = run
        .started_unix
        .map(|t| format!(" timestamp=\"{}\"", iso(t)))
        .unwrap_or_default();
    s.push_str(&format!(
        "  <testsuite name=\"{suite}\" tests=\"{n}\" failures=\"{failed}\" errors=\"0\" skipped=\"{skipped}\" time=\"{time:.3}\"{stamp}>\n"
    ));
    s.push_str(&format!(
        "    <properties>\n      <property name=\"burnin.version\" value=\"{}\"/>\n    </properties>\n",
        xml(&run.version)
    ));
    for c in criteria {
        let head = format!(
            "    <testcase classname=\"burnin.{}\" name=\"{}\" time=\"0\"",
            xml(&c.phase),
            xml(&c.id)
        );
        match c.status {
            Status::Pass => s.push_str(&format!(
                "{head}>\n      <system-out>{}: {} ({})</system-out>\n    </testcase>\n",
                xml(&c.what),
                xml(&c.measured),
                xml(&c.threshold)
            )),
            Status::Fail => s.push_str(&format!(
                "{head}>\n      <failure message=\"{}\" type=\"FAIL\">{}</failure>\n    </testcase>\n",
                xml(&message(c)),
                xml(&message(c))
            )),
            Status::NotRun => {
                let why = if c.detail.is_empty() {
                    format!("NOT RUN: {}", c.measured)
                } else {
                    format!("NOT RUN: {}", c.detail)
                };
                s.push_str(&format!(
                    "{head}>\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                    xml(&why)
                ))
            }
        }
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

/// The verdict as a CTRF report: each criterion a test (status passed, failed or
/// skipped; rawStatus burnin's label; tags its phase; the numbers in `extra`).
pub fn ctrf(criteria: &[Criterion], run: &RunInfo) -> Value {
    let ms = |t: Option<f64>| t.map_or(0, |t| (t * 1e3).round() as i64);
    let tests: Vec<Value> = criteria
        .iter()
        .map(|c| {
            let status = match c.status {
                Status::Pass => "passed",
                Status::Fail => "failed",
                Status::NotRun => "skipped",
            };
            let mut t = json!({
                "name": c.id,
                "status": status,
                "duration": 0,
                "rawStatus": c.status.label(),
                "tags": [c.phase],
                "type": "acceptance",
                "extra": {
                    "what": c.what,
                    "measured": c.measured,
                    "threshold": c.threshold,
                    "detail": c.detail,
                },
            });
            if c.status != Status::Pass {
                t["message"] = json!(message(c));
            }
            t
        })
        .collect();
    json!({
        "reportFormat": "CTRF",
        "specVersion": "0.0.0",
        "generatedBy": format!("burnin {}", run.version),
        "results": {
            "tool": { "name": "burnin", "version": run.version },
            "summary": {
                "tests": criteria.len(),
                "passed": count(criteria, Status::Pass),
                "failed": count(criteria, Status::Fail),
                "skipped": count(criteria, Status::NotRun),
                "pending": 0,
                "other": 0,
                "start": ms(run.started_unix),
                "stop": ms(run.finished_unix.or(run.started_unix)),
            },
            "tests": tests,
            "environment": { "reportName": format!("burnin acceptance: {}", run.name) },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crit(id: &str, phase: &str, status: Status, detail: &str) -> Criterion {
        Criterion {
            id: id.into(),
            phase: phase.into(),
            what: format!("{id} <&> \"quoted\""),
            measured: "0.041 GB/s (inter at 16MiB)".into(),
            threshold: "≥ 0.05 GB/s".into(),
            status,
            detail: detail.into(),
        }
    }

    fn criteria() -> Vec<Criterion> {
        vec![
            crit("sweep.busbw.inter", "sweep", Status::Fail, ""),
            crit("probe.gpus", "probe", Status::Pass, ""),
            crit("gpu.burn", "gpu", Status::NotRun, "no GPU on any rank"),
        ]
    }

    fn run() -> RunInfo {
        RunInfo {
            name: "cards/sim-4node.toml".into(),
            started_unix: Some(1_796_674_383.0),
            finished_unix: Some(1_796_674_443.5),
            version: "0.1.0".into(),
        }
    }

    #[test]
    fn junit_has_a_case_per_criterion_a_failure_and_a_skip_with_its_reason() {
        let x = junit(&criteria(), &run());
        assert!(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"burnin\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\" time=\"60.500\">"), "{x}");
        assert!(x.contains("timestamp=\"2026-12-07T20:13:03\""), "{x}");
        assert_eq!(x.matches("<testcase ").count(), 3);
        assert!(x.contains("<testcase classname=\"burnin.sweep\" name=\"sweep.busbw.inter\" time=\"0\">\n      <failure message=\"sweep.busbw.inter &lt;&amp;&gt; &quot;quoted&quot;: measured 0.041 GB/s (inter at 16MiB), needs ≥ 0.05 GB/s\" type=\"FAIL\">"), "{x}");
        assert!(
            x.contains("<skipped message=\"NOT RUN: no GPU on any rank\"/>"),
            "{x}"
        );
        // Nothing unescaped is left of the criterion's text.
        assert!(!x.contains("<&>") && !x.contains("\"quoted\""), "{x}");
    }

    /// xmllint's verdict on `xml` against tests/fixtures/ci/junit.xsd (launch/setup
    /// installs libxml2-utils).
    fn xsd_valid(xml: &str) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("verdict.junit.xml");
        std::fs::write(&f, xml).unwrap();
        let xsd = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ci/junit.xsd");
        let out = std::process::Command::new("xmllint")
            .args(["--noout", "--schema", xsd])
            .arg(&f)
            .output()
            .expect("xmllint (Debian's libxml2-utils; launch/setup installs it)");
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn junit_validates_against_the_formats_schema() {
        let x = junit(&criteria(), &run());
        xsd_valid(&x).unwrap();
        // Without times or criteria, still a valid report.
        xsd_valid(&junit(&[], &RunInfo::default())).unwrap();
        // The schema catches what it must: two outcomes in one case, a case without
        // a name.
        let two = x.replacen("<failure ", "<skipped message=\"x\"/>\n      <failure ", 1);
        assert!(xsd_valid(&two).is_err());
        let nameless = x.replacen(" name=\"probe.gpus\"", "", 1);
        assert!(xsd_valid(&nameless).is_err());
    }

    #[test]
    fn ctrf_counts_and_statuses_follow_the_verdict() {
        let j = ctrf(&criteria(), &run());
        assert_eq!(j["reportFormat"], "CTRF");
        let s = &j["results"]["summary"];
        assert_eq!(
            (&s["tests"], &s["passed"], &s["failed"], &s["skipped"]),
            (&json!(3), &json!(1), &json!(1), &json!(1))
        );
        assert_eq!(
            (&s["start"], &s["stop"]),
            (&json!(1_796_674_383_000i64), &json!(1_796_674_443_500i64))
        );
        let t = j["results"]["tests"].as_array().unwrap();
        let st: Vec<&str> = t.iter().map(|x| x["status"].as_str().unwrap()).collect();
        assert_eq!(st, ["failed", "passed", "skipped"]);
        assert_eq!(t[2]["rawStatus"], "NOT RUN");
        assert!(t[2]["message"]
            .as_str()
            .unwrap()
            .ends_with("(no GPU on any rank)"));
        assert!(t[1].get("message").is_none());
        assert_eq!(t[0]["extra"]["threshold"], "≥ 0.05 GB/s");
    }

    /// The required fields, types and values of CTRF's published JSON Schema
    /// (github.com/ctrf-io/ctrf, schema/ctrf.schema.json), restated in
    /// tests/fixtures/ci/ctrf-required.schema.json.
    #[test]
    fn ctrf_validates_against_the_formats_required_fields() {
        let schema: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/ci/ctrf-required.schema.json"
        ))
        .unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        let j = ctrf(&criteria(), &run());
        let errors: Vec<String> = v.iter_errors(&j).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
        // The schema catches what it must: a status CTRF does not know.
        let mut bad = j.clone();
        bad["results"]["tests"][0]["status"] = json!("NOT RUN");
        assert!(!v.is_valid(&bad));
        let mut bad = j;
        bad["results"]["summary"]
            .as_object_mut()
            .unwrap()
            .remove("stop");
        assert!(!v.is_valid(&bad));
    }
}
