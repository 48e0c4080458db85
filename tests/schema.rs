//! The records' published JSON Schema (docs/schema/) is generated from the types in
//! `burnin::results`, and the committed fixtures (real runs' output) validate against
//! it.
//!
//! After changing a record type: `BURNIN_WRITE_SCHEMA=1 cargo test --release --test
//! schema` rewrites docs/schema/, and the diff shows what changed for readers.
use burnin::results;
use schemars::{schema_for, Schema};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One published schema: its file name, the type's schema, and which fixture files
/// hold records of it (whole files, or JSONL lines).
struct Kind {
    file: &'static str,
    schema: Schema,
    whole: &'static [&'static str],
    lines: &'static [&'static str],
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            file: "acceptance.schema.json",
            schema: schema_for!(results::acceptance::AcceptanceRecord),
            whole: &["sim-healthy/acceptance.json", "sim-shaped/acceptance.json"],
            lines: &[],
        },
        Kind {
            file: "probe.schema.json",
            schema: schema_for!(Vec<results::probe::RankProbe>),
            whole: &[
                "sim-healthy/probe/probe.json",
                "sim-shaped/probe/probe.json",
            ],
            lines: &[],
        },
        Kind {
            file: "sweep-run.schema.json",
            schema: schema_for!(results::sweep::SweepReport),
            whole: &["sim-healthy/sweep/run.json", "sim-shaped/sweep/run.json"],
            lines: &[],
        },
        Kind {
            file: "sweep-point.schema.json",
            schema: schema_for!(results::sweep::Point),
            whole: &[],
            lines: &[
                "sim-healthy/sweep/points.jsonl",
                "sim-shaped/sweep/points.jsonl",
            ],
        },
        Kind {
            file: "train-run.schema.json",
            schema: schema_for!(results::train::TrainReport),
            whole: &[
                "sim-healthy/train/run.json",
                "sim-healthy/train-part/run.json",
                "sim-healthy/train-resume/run.json",
            ],
            lines: &[],
        },
        Kind {
            file: "train-step.schema.json",
            schema: schema_for!(results::train::StepRecord),
            whole: &[],
            lines: &[
                "sim-healthy/train/steps.jsonl",
                "sim-healthy/train-part/steps.jsonl",
                "sim-healthy/train-resume/steps.jsonl",
            ],
        },
        Kind {
            file: "chaos.schema.json",
            schema: schema_for!(results::chaos::ChaosReport),
            whole: &["sim-healthy/chaos/chaos.json"],
            lines: &[],
        },
        Kind {
            file: "chaos-trial.schema.json",
            schema: schema_for!(results::chaos::Trial),
            whole: &[],
            lines: &[],
        },
        Kind {
            file: "smoke.schema.json",
            schema: schema_for!(results::smoke::SmokeReport),
            whole: &["smoke/smoke.json"],
            lines: &[],
        },
        Kind {
            file: "gpu.schema.json",
            schema: schema_for!(results::gpu::GpuReport),
            whole: &["gpu/no-gpu.json"],
            lines: &[],
        },
        Kind {
            file: "replay.schema.json",
            schema: schema_for!(results::replay::ReplayReport),
            whole: &[],
            lines: &[],
        },
        Kind {
            file: "evidence-index.schema.json",
            schema: schema_for!(results::evidence::HostIndex),
            whole: &["evidence/index.json"],
            lines: &[],
        },
    ]
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pretty(v: &Schema) -> String {
    serde_json::to_string_pretty(v).unwrap() + "\n"
}

#[test]
fn published_schemas_are_the_types_schemas() {
    let dir = root().join("docs/schema");
    let write = std::env::var_os("BURNIN_WRITE_SCHEMA").is_some();
    let mut stale = Vec::new();
    for k in kinds() {
        let path = dir.join(k.file);
        let want = pretty(&k.schema);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            _ => stale.push(k.file),
        }
    }
    assert!(
        stale.is_empty(),
        "docs/schema/ is not what the record types generate: {stale:?}; run \
         `BURNIN_WRITE_SCHEMA=1 cargo test --release --test schema` and commit docs/schema/"
    );
    // No stray files: every published schema is one of the kinds.
    let names: Vec<&str> = kinds().iter().map(|k| k.file).collect();
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            name == "README.md" || names.contains(&name.as_str()),
            "docs/schema/{name} is not generated by any record type"
        );
    }
}

fn validator(file: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join("docs/schema").join(file)).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("docs/schema/{file} is not a valid JSON Schema: {e}"))
}

fn check(v: &jsonschema::Validator, schema: &str, what: &str, record: &Value) -> usize {
    let errors: Vec<String> = v
        .iter_errors(record)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not validate against docs/schema/{schema}:\n{}",
        errors.join("\n")
    );
    1
}

#[test]
fn committed_fixtures_validate_against_the_published_schemas() {
    let fixtures = root().join("tests/fixtures");
    let mut checked = 0;
    for k in kinds() {
        let v = validator(k.file);
        for f in k.whole {
            let path: &Path = &fixtures.join(f);
            let record: Value =
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            checked += check(&v, k.file, f, &record);
        }
        for f in k.lines {
            let text = std::fs::read_to_string(fixtures.join(f)).unwrap();
            let mut lines = 0;
            for (i, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let record: Value = serde_json::from_str(line).unwrap();
                lines += check(&v, k.file, &format!("{f} line {}", i + 1), &record);
            }
            assert!(lines > 0, "{f} holds no record");
            checked += lines;
        }
    }
    assert!(checked >= 20, "only {checked} records checked");
}

#[test]
fn a_record_with_a_wrong_field_type_is_refused() {
    // The schema is not vacuous: a point whose busbw is a string fails.
    let v = validator("sweep-point.schema.json");
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/sim-healthy/sweep/points.jsonl"))
            .unwrap();
    let mut point: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(v.is_valid(&point));
    let obj = point.as_object_mut().unwrap();
    let key = obj
        .keys()
        .find(|k| k.starts_with("busbw"))
        .cloned()
        .expect("a point has a busbw field");
    obj.insert(key, Value::String("fast".into()));
    assert!(!v.is_valid(&point));
    let mut missing: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    missing.as_object_mut().unwrap().remove("schema_version");
    assert!(!v.is_valid(&missing), "schema_version is required");
}

/// Every field of every record says what it holds (and its unit, where the name does
/// not): its `///` doc, which becomes the schema's description.
#[test]
fn every_field_of_every_record_is_documented() {
    fn walk(v: &Value, at: &str, missing: &mut Vec<String>) {
        if let Some(props) = v.get("properties").and_then(Value::as_object) {
            for (name, p) in props {
                if p.get("description").is_none() {
                    missing.push(format!("{at}.{name}"));
                }
            }
        }
        if let Some(defs) = v.get("$defs").and_then(Value::as_object) {
            for (name, d) in defs {
                walk(d, name, missing);
            }
        }
    }
    let mut missing = Vec::new();
    let mut fields = 0;
    for k in kinds() {
        let v = serde_json::to_value(&k.schema).unwrap();
        fields += v
            .get("properties")
            .and_then(Value::as_object)
            .map_or(0, |p| p.len());
        walk(&v, k.file, &mut missing);
    }
    assert!(fields > 100, "only {fields} top-level fields seen");
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "record fields without a doc comment: {missing:?}"
    );
}
