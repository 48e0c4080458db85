//! Reading `dcgmi diag -r N -j` into [`DcgmDiag`]: DCGM 3's layout (root "DCGM GPU
//! Diagnostic", per-GPU results keyed by a `gpu_ids`/`gpu_id` string, `info` one
//! string) and DCGM 4's (root "DCGM Diagnostic" with `metadata` and `entity_groups`
//! beside it, results per entity with a numeric `entity_id`, a `test_summary` per test,
//! `info` a list). Text before or after the JSON is ignored; `--iterations` output
//! (`{"iterations": [run, …]}`) yields every run's tests in order.
use crate::results::dcgm::{DcgmDiag, DcgmResult, DcgmStatus, DcgmTest};
use anyhow::{anyhow, bail, Result};
use serde_json::Value;

const ROOTS: [&str; 2] = ["DCGM Diagnostic", "DCGM GPU Diagnostic"];

/// Parse dcgmi's JSON output; `what` names it in errors (a file, a host).
pub fn parse(text: &str, what: &str) -> Result<DcgmDiag> {
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        bail!("{what}: no JSON object in dcgmi's output");
    };
    if end < start {
        bail!("{what}: no JSON object in dcgmi's output");
    }
    let v: Value = serde_json::from_str(&text[start..=end])
        .map_err(|e| anyhow!("{what}: dcgmi's output is not valid JSON: {e}"))?;
    let runs: Vec<&Value> = match v.get("iterations").and_then(Value::as_array) {
        Some(a) => a.iter().collect(),
        None => vec![&v],
    };
    let mut diag = DcgmDiag {
        version: None,
        driver: None,
        runtime_error: None,
        tests: Vec::new(),
    };
    for run in runs {
        let Some(inner) = ROOTS.iter().find_map(|k| run.get(*k)) else {
            bail!(
                "{what}: not dcgmi diag output (no \"{}\" or \"{}\" object)",
                ROOTS[0],
                ROOTS[1]
            );
        };
        let meta = run.get("metadata").unwrap_or(inner);
        diag.version = diag.version.or_else(|| text_of(meta.get("version")));
        diag.driver = diag
            .driver
            .or_else(|| text_of(meta.get("Driver Version Detected")));
        if let Some(e) = text_of(inner.get("runtime_error")) {
            diag.runtime_error = Some(e);
        }
        for cat in array(inner.get("test_categories")) {
            let category = text_of(cat.get("category")).unwrap_or_default();
            for t in array(cat.get("tests")) {
                diag.tests.push(test(&category, t));
            }
        }
    }
    Ok(diag)
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn text_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Warning texts: a list of `{"warning": …}` objects or strings, or one string (DCGM
/// 3.3's deployment tests put the text itself under "warnings").
fn messages(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|w| match w {
                Value::String(s) => Some(s.clone()),
                o => text_of(o.get("warning")),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn info(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(|x| text_of(Some(x))).collect(),
        _ => Vec::new(),
    }
}

/// The GPU a result is about: DCGM 4's numeric `entity_id` of a GPU entity, DCGM 3's
/// `gpu_id`/`gpu_ids` string; None for a check of the whole node.
fn gpu_of(r: &Value) -> Option<u32> {
    if let Some(id) = r.get("entity_id").and_then(Value::as_u64) {
        let group = r.get("entity_group").and_then(Value::as_str);
        return (group.is_none() || group == Some("GPU")).then_some(id as u32);
    }
    ["gpu_id", "gpu_ids"]
        .iter()
        .find_map(|k| text_of(r.get(*k)))
        .and_then(|s| s.trim().parse().ok())
}

fn test(category: &str, t: &Value) -> DcgmTest {
    let results: Vec<DcgmResult> = array(t.get("results"))
        .iter()
        .map(|r| DcgmResult {
            gpu: gpu_of(r),
            status: DcgmStatus::parse(r.get("status").and_then(Value::as_str).unwrap_or("")),
            messages: messages(r.get("warnings")),
            info: info(r.get("info")),
        })
        .collect();
    let summary = t.get("test_summary");
    // DCGM 4.5 repeats the per-GPU warnings in the summary: keep only the others.
    let summary_messages = messages(summary.and_then(|s| s.get("warnings")))
        .into_iter()
        .filter(|m| !results.iter().any(|r| r.messages.contains(m)))
        .collect();
    DcgmTest {
        category: category.to_string(),
        name: text_of(t.get("name")).unwrap_or_default(),
        summary: summary
            .and_then(|s| s.get("status"))
            .and_then(Value::as_str)
            .map(DcgmStatus::parse),
        summary_messages,
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> DcgmDiag {
        let path = format!("{}/tests/fixtures/dcgm/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        parse(&text, &path).unwrap()
    }

    #[test]
    fn dcgm_3_all_pass_with_a_skip_is_a_pass_listing_the_skip() {
        let d = fixture("dcgm-3.1-r3-pass.json");
        assert!(d.tests.len() >= 10, "{} tests", d.tests.len());
        let pcie = d.tests.iter().find(|t| t.name == "PCIe").unwrap();
        assert_eq!(pcie.category, "Integration");
        assert_eq!(pcie.results[0].gpu, Some(0));
        assert_eq!(pcie.status(), DcgmStatus::Pass);
        assert!(pcie.results[0].info[0].contains("bandwidth"));
        let deny = d.tests.iter().find(|t| t.name == "Denylist").unwrap();
        assert_eq!(deny.results[0].gpu, None);
        assert_eq!(d.skipped(), vec!["EUD Test".to_string()]);
        assert!(d.failures().is_empty());
        assert!(d.passed());
        assert_eq!(d.version, None);
    }

    #[test]
    fn dcgm_4_failed_test_fails_naming_it_the_gpu_and_why() {
        let d = fixture("dcgm-4.5.2-r2-fail.json");
        assert_eq!(d.version.as_deref(), Some("4.5.2"));
        assert_eq!(d.driver.as_deref(), Some("580.82.09"));
        let names: Vec<&str> = d.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["software", "memory", "pcie"]);
        assert!(!d.passed());
        let f = d.failures();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].starts_with("software on GPU 0: Persistence Mode:"),
            "{f:?}"
        );
        assert_eq!(d.skipped(), vec!["memory".to_string(), "pcie".to_string()]);
        // the summary repeats the GPU's warning: not listed twice
        assert!(d.tests[0].summary_messages.is_empty());
        assert_eq!(d.tests[0].summary, Some(DcgmStatus::Fail));
    }

    #[test]
    fn every_dcgm_fixture_parses_and_only_the_pass_one_passes() {
        for (name, pass) in [
            ("dcgm-3.1-r3-pass.json", true),
            ("dcgm-4.2.3-r1-fail.json", false),
            ("dcgm-4.5.2-r2-fail.json", false),
            ("dcgm-4.5.2-r2-fail-memory-pcie-pass.json", false),
        ] {
            let d = fixture(name);
            assert!(!d.tests.is_empty(), "{name}");
            assert_eq!(d.passed(), pass, "{name}");
            assert_eq!(d.failures().is_empty(), pass, "{name}");
        }
        let allowed = fixture("dcgm-4.5.2-r2-fail-memory-pcie-pass.json");
        let memory = allowed.tests.iter().find(|t| t.name == "memory").unwrap();
        assert_eq!(memory.status(), DcgmStatus::Pass);
        assert!(!memory.results[0].info.is_empty());
    }

    #[test]
    fn a_runtime_error_is_no_verdict_and_bad_output_is_named() {
        let d = parse(
            "Error: ...\n{\"DCGM Diagnostic\": {\"version\": \"4.2.3\", \"runtime_error\": \"host engine not running\"}}",
            "x",
        )
        .unwrap();
        assert_eq!(d.runtime_error.as_deref(), Some("host engine not running"));
        assert!(!d.passed());
        let e = parse("dcgmi: command failed", "node1/dcgmi-diag-1.json").unwrap_err();
        assert!(format!("{e:#}").contains("node1/dcgmi-diag-1.json: no JSON object"));
        let e = parse("{\"other\": 1}", "f").unwrap_err();
        assert!(format!("{e:#}").contains("not dcgmi diag output"));
    }

    #[test]
    fn iterations_yield_every_runs_tests() {
        let one = r#"{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment",
            "tests": [{"name": "software", "results": [{"entity_group": "GPU",
            "entity_id": 1, "status": "Pass"}]}]}]}}"#;
        let fail = one.replace("\"Pass\"", "\"Fail\"");
        let text = format!("{{\"iterations\": [{one}, {fail}], \"Overall Result\": \"Fail\"}}");
        let d = parse(&text, "x").unwrap();
        assert_eq!(d.tests.len(), 2);
        assert_eq!(d.tests[1].results[0].gpu, Some(1));
        assert_eq!(d.failures(), vec!["software on GPU 1".to_string()]);
    }
}
