//! Reading a results folder back: the JSON is the source of truth, and a report can be
//! rendered from it alone — on the launch host, or from a copy taken off the cluster.
//!
//! A folder is either an acceptance run (`acceptance.json` with `probe/`, `sweep/`,
//! `train/`, `train-part/`, `train-resume/`, `chaos/` under it) or the `--out` folder
//! of one workload (`run.json`/`points.jsonl` of a sweep, `run.json`/`steps.jsonl` of
//! a training run, `chaos.json`, `probe.json`).
//!
//! Everything is tolerant of what a killed run leaves: a sweep without `run.json` is
//! read from `points.jsonl` (a torn last line is skipped with a note), a training run
//! without `run.json` from `steps.jsonl`. Training and chaos records are read into
//! views of the fields the report uses (the train types need libtorch to build; chaos
//! is another workload's format), so extra or missing fields do not stop a report.
//!
//! Versions: every burnin JSON record carries `schema_version`. A file of a newer
//! schema than this burnin reads, or of one older than it still understands, is
//! refused with a message that says which; compatible versions load.
use crate::card::Card;
use crate::kinds::Node;
use crate::results::acceptance::{AcceptanceRecord, JobRecord};
use crate::results::chaos::{ChaosReport, Trial};
use crate::results::probe::RankProbe;
use crate::results::sweep::{Point, SweepReport};
use crate::results::train::{CkptWrite, StepRecord, TrainReport};
pub use crate::results::{
    check_schema, SchemaRange, ACCEPTANCE_SCHEMA, SWEEP_SCHEMA, TRAIN_SCHEMA,
};
use crate::topology::file::Topology;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{}: not valid JSON", path.display()))
}

/// Lines of a JSONL file that parse; the count of those that did not (a torn last
/// line of a killed run).
fn read_jsonl(path: &Path) -> Result<(Vec<Value>, usize)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut good = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str(line) {
            Ok(v) => good.push(v),
            Err(_) => bad += 1,
        }
    }
    Ok((good, bad))
}

/// One rank of probe.json (the fields the report shows).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeRow {
    pub rank: usize,
    pub host: String,
    pub node: usize,
    pub local_rank: usize,
    pub gpu: Option<String>,
    pub driver: Option<String>,
    pub nccl: Option<String>,
    pub libtorch: Option<String>,
    pub mpi: String,
    /// Every GPU the CUDA driver showed this rank.
    #[serde(default)]
    pub cuda_gpus: Vec<String>,
    /// The node's discovered fabric (on one rank per node).
    #[serde(default)]
    pub fabric: Option<crate::fabric::NodeFabric>,
}

impl ProbeRow {
    /// The row of one rank's probe record.
    fn from_probe(p: &RankProbe) -> ProbeRow {
        ProbeRow {
            rank: p.rank,
            host: p.host.clone(),
            node: p.node,
            local_rank: p.local_rank,
            gpu: p.cuda.gpus.get(p.local_rank).map(|g| g.name.clone()),
            driver: p.cuda.driver_version.clone(),
            nccl: p.nccl_version.clone(),
            libtorch: p.libtorch_version.clone(),
            mpi: p.mpi_version.clone(),
            cuda_gpus: p.cuda.gpus.iter().map(|g| g.name.clone()).collect(),
            fabric: p.fabric.clone(),
        }
    }

    fn from_value(v: &Value) -> ProbeRow {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
        let local_rank = n("local_rank");
        let gpu = v
            .pointer("/cuda/gpus")
            .and_then(Value::as_array)
            .and_then(|g| g.get(local_rank))
            .and_then(|g| g.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string);
        ProbeRow {
            rank: n("rank"),
            host: s("host").unwrap_or_default(),
            node: n("node"),
            local_rank,
            gpu,
            driver: v
                .pointer("/cuda/driver_version")
                .and_then(Value::as_str)
                .map(str::to_string),
            nccl: s("nccl_version"),
            libtorch: s("libtorch_version"),
            mpi: s("mpi_version").unwrap_or_default(),
            cuda_gpus: v
                .pointer("/cuda/gpus")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(|x| x.get("name").and_then(Value::as_str))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            // an older or partial probe.json without it: no fabric to compare
            fabric: v
                .get("fabric")
                .and_then(|f| serde_json::from_value(f.clone()).ok()),
        }
    }
}

/// A sweep, finished or not.
#[derive(Clone, Debug)]
pub struct SweepData {
    pub dir: PathBuf,
    /// run.json, when the sweep finished.
    pub report: Option<SweepReport>,
    /// Every measured point (run.json's, else points.jsonl's).
    pub points: Vec<Point>,
    /// Lines of points.jsonl that did not parse.
    pub torn_lines: usize,
}

impl SweepData {
    pub fn finished(&self) -> bool {
        self.report.is_some()
    }
}

/// A training run, finished or not.
#[derive(Clone, Debug)]
pub struct TrainData {
    pub dir: PathBuf,
    /// run.json, when the run finished.
    pub run: Option<TrainReport>,
    /// steps.jsonl's lines that parse.
    pub steps: Vec<StepRecord>,
}

impl TrainData {
    /// Step time per step: the finished run's mean, else the measured lines'.
    pub fn mean_step_s(&self) -> Option<f64> {
        if let Some(r) = &self.run {
            if r.steps_run > 0 && r.step_time.mean_us > 0.0 {
                return Some(r.step_time.mean_us / 1e6);
            }
        }
        (!self.steps.is_empty())
            .then(|| self.steps.iter().map(|s| s.step_s).sum::<f64>() / self.steps.len() as f64)
    }

    /// Checkpoint writes (the finished run's list, else those in steps.jsonl).
    pub fn checkpoints(&self) -> Vec<CkptWrite> {
        match &self.run {
            Some(r) => r.checkpoints.clone(),
            None => self
                .steps
                .iter()
                .filter_map(|s| s.checkpoint.clone())
                .collect(),
        }
    }

    /// Time lost to the average step when checkpoint stalls are spread over all
    /// steps: mean step + Σ stall / steps.
    pub fn effective_step_s(&self) -> Option<f64> {
        let mean = self.mean_step_s()?;
        let steps = match &self.run {
            Some(r) if r.steps_run > 0 => r.steps_run as f64,
            _ => self.steps.len().max(1) as f64,
        };
        let stall: f64 = self.checkpoints().iter().map(|c| c.stall_s).sum();
        Some(mean + stall / steps)
    }
}

/// The standard events of a chaos trial, in the order they happen.
pub const CHAOS_EVENTS: [&str; 6] = [
    "inject",
    "detect",
    "teardown",
    "relaunch",
    "restore",
    "first_step",
];

/// One fault-injection trial, read tolerantly from chaos.json.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ChaosTrial {
    pub index: usize,
    pub kind: String,
    /// (event, unix seconds) for the events found, in [`CHAOS_EVENTS`] order.
    pub events: Vec<(String, f64)>,
    /// Inject to detect, seconds.
    pub detect_s: Option<f64>,
    /// Inject to the first step after the restart, seconds.
    pub recovery_s: Option<f64>,
    pub steps_lost: Option<f64>,
    pub hung: Option<bool>,
    pub outcome: Option<String>,
    /// The recovered run matches the uninterrupted one (weights and losses), when the
    /// trial says.
    pub parity: Option<bool>,
}

impl ChaosTrial {
    /// The report's view of one of burnin's own trial records.
    fn from_trial(index: usize, t: &Trial) -> ChaosTrial {
        let mut events: Vec<(String, f64)> = Vec::new();
        for m in &t.timeline {
            if let Some(e) = canonical_event(&m.event) {
                if !events.iter().any(|(n, _)| n == e) {
                    events.push((e.to_string(), m.unix));
                }
            }
        }
        sort_events(&mut events);
        let since_inject = |n: &str| since_inject(&events, n);
        let flags: Vec<bool> = [t.parity.weights_match, t.parity.losses_match]
            .into_iter()
            .flatten()
            .collect();
        ChaosTrial {
            index,
            kind: t.fault.clone(),
            detect_s: t.times.detect_s.or_else(|| since_inject("detect")),
            recovery_s: t
                .times
                .total_recovery_s
                .or_else(|| since_inject("first_step")),
            steps_lost: t.steps_lost.map(|s| s as f64),
            hung: Some(t.hung),
            outcome: Some(t.outcome.clone()),
            parity: all_hold(&flags),
            events,
        }
    }

    pub fn event(&self, name: &str) -> Option<f64> {
        self.events.iter().find(|e| e.0 == name).map(|e| e.1)
    }
}

/// chaos.json, as far as it could be read.
#[derive(Clone, Debug)]
pub struct ChaosData {
    pub dir: PathBuf,
    pub raw: Value,
    pub trials: Vec<ChaosTrial>,
    /// Scalar fields of its summary, as (name, text).
    pub summary: Vec<(String, String)>,
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => ["unix", "t", "time", "at", "ts"]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_f64)),
        _ => None,
    }
}

fn canonical_event(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_lowercase().replace(['-', ' '], "_");
    let n = n
        .trim_end_matches("_unix")
        .trim_end_matches("_at")
        .trim_end_matches("_ts")
        .to_string();
    let n = match n.as_str() {
        "injected" | "fault" => "inject",
        "detected" => "detect",
        "torn_down" | "teardown_done" | "killed" => "teardown",
        "relaunched" | "restart" | "restarted" | "launch" => "relaunch",
        "restored" | "resume" | "resumed" => "restore",
        "first_step_after" | "first_step_done" | "firststep" => "first_step",
        other => other,
    };
    CHAOS_EVENTS.into_iter().find(|e| *e == n)
}

/// Read a trial from whatever shape chaos.json gives it: events as an object
/// (`{"inject": t, …}`), as a list (`[{"event": "inject", "unix": t}, …]`), or as
/// fields of the trial itself (`inject_unix`).
pub fn parse_trial(index: usize, t: &Value) -> ChaosTrial {
    let mut events: Vec<(String, f64)> = Vec::new();
    let mut add = |name: &str, v: &Value| {
        if let (Some(e), Some(x)) = (canonical_event(name), num(v)) {
            if !events.iter().any(|(n, _)| n == e) {
                events.push((e.to_string(), x));
            }
        }
    };
    for key in ["timeline", "events", "timestamps", "times"] {
        match t.get(key) {
            Some(Value::Object(o)) => o.iter().for_each(|(k, v)| add(k, v)),
            Some(Value::Array(a)) => {
                for e in a {
                    let name = ["event", "name", "kind", "what", "type"]
                        .iter()
                        .find_map(|k| e.get(*k).and_then(Value::as_str));
                    if let Some(name) = name {
                        add(name, e);
                    }
                }
            }
            _ => {}
        }
    }
    if let Value::Object(o) = t {
        for (k, v) in o {
            if v.is_number() && (k.ends_with("_unix") || k.ends_with("_at")) {
                add(k, v);
            }
        }
    }
    sort_events(&mut events);
    // Durations may sit on the trial or in a `times` object of it.
    let f = |keys: &[&str]| {
        keys.iter().find_map(|k| {
            t.get(*k)
                .and_then(Value::as_f64)
                .or_else(|| t.get("times")?.get(*k)?.as_f64())
        })
    };
    let since_inject = |n: &str| since_inject(&events, n);
    let outcome = ["outcome", "result", "status"]
        .iter()
        .find_map(|k| t.get(*k).and_then(Value::as_str))
        .map(str::to_string);
    let hung = ["hung", "hang", "hanged"]
        .iter()
        .find_map(|k| t.get(*k).and_then(Value::as_bool))
        .or_else(|| {
            outcome
                .as_deref()
                .map(|o| matches!(o, "hang" | "hung" | "timeout" | "timed_out"))
                .filter(|h| *h)
        });
    ChaosTrial {
        index,
        kind: ["kind", "fault", "injection"]
            .iter()
            .find_map(|k| t.get(*k).and_then(Value::as_str))
            .unwrap_or("")
            .to_string(),
        detect_s: f(&["detect_s", "time_to_detect_s", "detection_s"])
            .or_else(|| since_inject("detect")),
        recovery_s: f(&[
            "recovery_s",
            "total_recovery_s",
            "time_to_recover_s",
            "recover_s",
        ])
        .or_else(|| since_inject("first_step")),
        steps_lost: f(&["steps_lost", "lost_steps", "work_lost_steps"]),
        hung,
        outcome,
        parity: parity(t),
        events,
    }
}

/// Events in [`CHAOS_EVENTS`] order.
fn sort_events(events: &mut [(String, f64)]) {
    events.sort_by_key(|(n, _)| CHAOS_EVENTS.iter().position(|e| e == n));
}

/// Seconds from the inject event to `name`, when both are there in that order.
fn since_inject(events: &[(String, f64)], name: &str) -> Option<f64> {
    let at = |n: &str| events.iter().find(|e| e.0 == n).map(|e| e.1);
    Some(at(name)? - at("inject")?).filter(|d| *d >= 0.0)
}

/// Whether every stated flag holds; None when none is stated.
fn all_hold(flags: &[bool]) -> Option<bool> {
    (!flags.is_empty()).then(|| flags.iter().all(|b| *b))
}

/// `parity: true`, or `parity: {weights_match, losses_match}` (both must hold).
fn parity(t: &Value) -> Option<bool> {
    match t.get("parity")? {
        Value::Bool(b) => Some(*b),
        Value::Object(o) => {
            let flags: Vec<bool> = ["weights_match", "losses_match", "ok"]
                .iter()
                .filter_map(|k| o.get(*k).and_then(Value::as_bool))
                .collect();
            all_hold(&flags)
        }
        _ => None,
    }
}

impl ChaosData {
    pub fn from_value(dir: &Path, raw: Value) -> ChaosData {
        // burnin's own chaos.json through its type; any other shape field by field
        let typed = serde_json::from_value::<ChaosReport>(raw.clone()).ok();
        let trials = typed
            .map(|r| {
                r.trials
                    .iter()
                    .enumerate()
                    .map(|(i, t)| ChaosTrial::from_trial(i, t))
                    .collect()
            })
            .or_else(|| {
                ["trials", "runs", "results"]
                    .iter()
                    .find_map(|k| raw.get(*k).and_then(Value::as_array))
                    .map(|a| {
                        a.iter()
                            .enumerate()
                            .map(|(i, t)| parse_trial(i, t))
                            .collect()
                    })
            })
            .unwrap_or_default();
        let mut summary = Vec::new();
        if let Some(Value::Object(o)) = raw.get("summary") {
            for (k, v) in o {
                let text = match v {
                    Value::Number(n) => n
                        .as_f64()
                        .map(|f| format!("{}", (f * 1000.0).round() / 1000.0))
                        .unwrap_or_else(|| n.to_string()),
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Null => "-".into(),
                    _ => continue,
                };
                summary.push((k.clone(), text));
            }
        }
        ChaosData {
            dir: dir.to_path_buf(),
            raw,
            trials,
            summary,
        }
    }
}

/// Everything a results folder holds.
#[derive(Clone, Debug)]
pub struct RunData {
    pub dir: PathBuf,
    pub acceptance: Option<AcceptanceRecord>,
    pub probe: Option<Vec<ProbeRow>>,
    pub sweep: Option<SweepData>,
    pub train: Option<TrainData>,
    pub train_part: Option<TrainData>,
    pub train_resume: Option<TrainData>,
    pub chaos: Option<ChaosData>,
    /// The soak phase of an acceptance run (`soak/`; a bare `sweep --duration` folder
    /// is its `sweep`: see [`RunData::soaked`]).
    pub soak: Option<SweepData>,
    /// The GPU health phase.
    pub gpu: Option<GpuData>,
    /// The replay of a job's trace (replay.json).
    pub replay: Option<crate::results::replay::ReplayReport>,
    /// What could not be read, as notes for the report.
    pub notes: Vec<String>,
}

fn load_sweep(dir: &Path, notes: &mut Vec<String>) -> Result<Option<SweepData>> {
    let run = dir.join("run.json");
    let pts = dir.join("points.jsonl");
    if run.is_file() {
        let v = read_json(&run)?;
        if v.get("kind").and_then(Value::as_str) == Some("sweep") {
            check_schema(&v, &run, &SWEEP_SCHEMA)?;
            let report: SweepReport = serde_json::from_value(v)
                .with_context(|| format!("{}: not a sweep record", run.display()))?;
            return Ok(Some(SweepData {
                dir: dir.to_path_buf(),
                points: report.points.clone(),
                report: Some(report),
                torn_lines: 0,
            }));
        }
    }
    if !pts.is_file() {
        return Ok(None);
    }
    let (lines, bad) = read_jsonl(&pts)?;
    if let Some(first) = lines.first() {
        check_schema(first, &pts, &SWEEP_SCHEMA)?;
    }
    let mut points = Vec::new();
    let mut unreadable = bad;
    for l in lines {
        match serde_json::from_value::<Point>(l) {
            Ok(p) => points.push(p),
            Err(_) => unreadable += 1,
        }
    }
    notes.push(format!(
        "{}: no run.json — the sweep did not finish; {} measured point(s) read from points.jsonl{}",
        dir.display(),
        points.len(),
        if unreadable > 0 {
            format!(", {unreadable} torn line(s) skipped")
        } else {
            String::new()
        }
    ));
    Ok(Some(SweepData {
        dir: dir.to_path_buf(),
        report: None,
        points,
        torn_lines: unreadable,
    }))
}

fn load_train(dir: &Path, notes: &mut Vec<String>) -> Result<Option<TrainData>> {
    let run = dir.join("run.json");
    let steps_path = dir.join("steps.jsonl");
    let mut data = TrainData {
        dir: dir.to_path_buf(),
        run: None,
        steps: Vec::new(),
    };
    if run.is_file() {
        let v = read_json(&run)?;
        if v.get("kind").and_then(Value::as_str) == Some("train") {
            check_schema(&v, &run, &TRAIN_SCHEMA)?;
            data.run = Some(
                serde_json::from_value(v)
                    .with_context(|| format!("{}: not a train record", run.display()))?,
            );
        }
    }
    if steps_path.is_file() {
        let (lines, bad) = read_jsonl(&steps_path)?;
        if let Some(first) = lines.first() {
            check_schema(first, &steps_path, &TRAIN_SCHEMA)?;
        }
        data.steps = lines
            .into_iter()
            .filter_map(|l| serde_json::from_value(l).ok())
            .collect();
        if bad > 0 {
            notes.push(format!(
                "{}: {bad} torn line(s) skipped",
                steps_path.display()
            ));
        }
    }
    if data.run.is_none() && data.steps.is_empty() {
        return Ok(None);
    }
    if data.run.is_none() {
        notes.push(format!(
            "{}: no run.json — the training run did not finish; {} step(s) read from steps.jsonl",
            dir.display(),
            data.steps.len()
        ));
    }
    Ok(Some(data))
}

fn load_probe(path: &Path) -> Result<Option<Vec<ProbeRow>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let v = read_json(path)?;
    let rows = v
        .as_array()
        .ok_or_else(|| anyhow!("{}: expected a list of ranks", path.display()))?;
    // burnin's own records through their type; an older or partial file field by field
    match serde_json::from_value::<Vec<RankProbe>>(v.clone()) {
        Ok(ranks) => Ok(Some(ranks.iter().map(ProbeRow::from_probe).collect())),
        Err(_) => Ok(Some(rows.iter().map(ProbeRow::from_value).collect())),
    }
}

/// The GPU health phase: its gpu.json, the counters re-read at the end of the
/// acceptance (gpu-after/gpu.json), and the NVML samples.
#[derive(Clone, Debug)]
pub struct GpuData {
    pub report: crate::results::gpu::GpuReport,
    pub after: Option<crate::results::gpu::GpuReport>,
    pub samples: Vec<crate::results::gpu::SampleRecord>,
}

fn read_gpu(p: &Path) -> Result<Option<crate::results::gpu::GpuReport>> {
    if !p.is_file() {
        return Ok(None);
    }
    let v = read_json(p)?;
    check_schema(&v, p, &crate::results::GPU_SCHEMA)?;
    Ok(Some(serde_json::from_value(v).with_context(|| {
        format!("{}: not a GPU health record", p.display())
    })?))
}

fn load_gpu(dir: &Path, after: Option<&Path>, notes: &mut Vec<String>) -> Result<Option<GpuData>> {
    let Some(report) = read_gpu(&dir.join("gpu.json"))? else {
        return Ok(None);
    };
    let after = match after {
        Some(a) => read_gpu(&a.join("gpu.json"))?,
        None => None,
    };
    let mut samples = Vec::new();
    let sp = dir.join("samples.jsonl");
    if sp.is_file() {
        let (lines, bad) = read_jsonl(&sp)?;
        let mut unreadable = bad;
        for l in lines {
            match serde_json::from_value(l) {
                Ok(s) => samples.push(s),
                Err(_) => unreadable += 1,
            }
        }
        if unreadable > 0 {
            notes.push(format!("{}: {unreadable} unreadable line(s)", sp.display()));
        }
    }
    Ok(Some(GpuData {
        report,
        after,
        samples,
    }))
}

fn load_replay(p: &Path) -> Result<Option<crate::results::replay::ReplayReport>> {
    if !p.is_file() {
        return Ok(None);
    }
    let v = read_json(p)?;
    check_schema(&v, p, &crate::results::REPLAY_SCHEMA)?;
    Ok(Some(serde_json::from_value(v).with_context(|| {
        format!("{}: not a replay record", p.display())
    })?))
}

fn load_chaos(dir: &Path) -> Result<Option<ChaosData>> {
    let p = dir.join("chaos.json");
    if !p.is_file() {
        return Ok(None);
    }
    Ok(Some(ChaosData::from_value(dir, read_json(&p)?)))
}

impl RunData {
    /// The training's gradient all-reduce against the sweep's world-tier all_reduce
    /// (f32; in-place points when the sweep has them, as the training's are) at the
    /// bucket size; None unless both ran and the sweep's sizes reach it.
    pub fn comm_efficiency(&self) -> Option<crate::results::comm::CommEfficiency> {
        let train = self.train.as_ref()?.run.as_ref()?;
        let sweep = self.sweep.as_ref()?;
        let world: Vec<&Point> = sweep
            .points
            .iter()
            .filter(|p| {
                p.tier == crate::kinds::TierKind::World
                    && p.collective == crate::kinds::CollKind::AllReduce
                    && p.dtype == crate::kinds::Dtype::F32
            })
            .collect();
        let in_place = world.iter().any(|p| p.in_place);
        let pts: Vec<(u64, f64)> = world
            .iter()
            .filter(|p| p.in_place == in_place)
            .map(|p| (p.bytes, p.busbw_gbps))
            .collect();
        crate::results::comm::efficiency(&train.allreduce, &pts)
    }

    /// Read a results folder (see the module header for what it may hold).
    pub fn load(dir: &Path) -> Result<RunData> {
        if !dir.is_dir() {
            bail!("{}: no such results folder", dir.display());
        }
        let mut notes = Vec::new();
        let acc_path = dir.join("acceptance.json");
        let acceptance = if acc_path.is_file() {
            let v = read_json(&acc_path)?;
            check_schema(&v, &acc_path, &ACCEPTANCE_SCHEMA)?;
            Some(
                serde_json::from_value::<AcceptanceRecord>(v)
                    .with_context(|| format!("{}: not an acceptance record", acc_path.display()))?,
            )
        } else {
            None
        };
        let sub = |name: &str| -> PathBuf {
            if acceptance.is_some() {
                dir.join(name)
            } else {
                dir.to_path_buf()
            }
        };
        let probe = load_probe(&sub("probe").join("probe.json"))?;
        let sweep = load_sweep(&sub("sweep"), &mut notes)?;
        let train = load_train(&sub("train"), &mut notes)?;
        let (train_part, train_resume) = if acceptance.is_some() {
            (
                load_train(&dir.join("train-part"), &mut notes)?,
                load_train(&dir.join("train-resume"), &mut notes)?,
            )
        } else {
            (None, None)
        };
        let chaos = load_chaos(&sub("chaos"))?;
        let soak = match &acceptance {
            Some(_) => load_sweep(&dir.join("soak"), &mut notes)?,
            None => None,
        };
        let after = dir.join("gpu-after");
        let gpu = load_gpu(
            &sub("gpu"),
            acceptance.as_ref().map(|_| after.as_path()),
            &mut notes,
        )?;
        let replay = load_replay(&sub("replay").join("replay.json"))?;
        if acceptance.is_none()
            && gpu.is_none()
            && replay.is_none()
            && probe.is_none()
            && sweep.is_none()
            && train.is_none()
            && chaos.is_none()
        {
            bail!(
                "{}: no burnin results here (acceptance.json, run.json, points.jsonl, steps.jsonl, chaos.json, gpu.json, replay.json or probe.json)",
                dir.display()
            );
        }
        Ok(RunData {
            dir: dir.to_path_buf(),
            acceptance,
            probe,
            sweep,
            train,
            train_part,
            train_resume,
            chaos,
            soak,
            gpu,
            replay,
            notes,
        })
    }

    /// The soak: the acceptance's soak phase, else a bare sweep that soaked.
    pub fn soaked(&self) -> Option<&SweepData> {
        match &self.acceptance {
            Some(_) => self.soak.as_ref(),
            None => self.sweep.as_ref().filter(|s| {
                s.report.as_ref().is_some_and(|r| r.soak.is_some())
                    || s.points.iter().any(|p| p.pass > 0)
            }),
        }
    }

    /// The card the run was judged by (None for a bare workload folder).
    pub fn card(&self) -> Option<&Card> {
        self.acceptance.as_ref().map(|a| &a.card)
    }

    /// The topology: the acceptance run's, else the sweep's.
    pub fn topology(&self) -> Option<&Topology> {
        self.acceptance
            .as_ref()
            .and_then(|a| a.topology.as_ref())
            .or_else(|| self.sweep.as_ref()?.report.as_ref()?.topology.as_ref())
    }

    /// Job records of a phase, in run order.
    pub fn jobs(&self, phase: &str) -> Vec<&JobRecord> {
        self.acceptance
            .iter()
            .flat_map(|a| a.jobs.iter())
            .filter(|j| j.phase == phase)
            .collect()
    }

    pub fn job(&self, name: &str) -> Option<&JobRecord> {
        self.acceptance
            .iter()
            .flat_map(|a| a.jobs.iter())
            .find(|j| j.name == name)
    }

    /// The node map: the sweep's, else the probe's, else the hosts seen in points.
    pub fn nodes(&self) -> Vec<Node> {
        if let Some(r) = self.sweep.as_ref().and_then(|s| s.report.as_ref()) {
            return r.provenance.nodes.clone();
        }
        for t in [&self.train, &self.train_part, &self.train_resume]
            .into_iter()
            .flatten()
        {
            if let Some(p) = t.run.as_ref().map(|r| &r.provenance) {
                return p.nodes.clone();
            }
        }
        if let Some(rows) = &self.probe {
            let mut nodes: Vec<Node> = Vec::new();
            let mut sorted = rows.clone();
            sorted.sort_by_key(|r| (r.node, r.local_rank));
            for r in sorted {
                match nodes.iter_mut().find(|n| n.index == r.node) {
                    Some(n) => n.ranks.push(r.rank),
                    None => nodes.push(Node {
                        index: r.node,
                        host: r.host.clone(),
                        ranks: vec![r.rank],
                    }),
                }
            }
            return nodes;
        }
        // Last resort: hosts in the order their lowest rank appears in the points.
        let mut hosts: Vec<(usize, String)> = Vec::new();
        for p in self.sweep.iter().flat_map(|s| s.points.iter()) {
            for (i, h) in p.hosts.iter().enumerate() {
                let rank = p.members.get(i).copied().unwrap_or(usize::MAX);
                match hosts.iter_mut().find(|x| &x.1 == h) {
                    Some(x) => x.0 = x.0.min(rank),
                    None => hosts.push((rank, h.clone())),
                }
            }
        }
        hosts.sort();
        hosts
            .into_iter()
            .enumerate()
            .map(|(i, (_, host))| Node {
                index: i,
                host,
                ranks: Vec::new(),
            })
            .collect()
    }

    /// Ranks in the job, from whichever record knows.
    pub fn world_size(&self) -> Option<usize> {
        if let Some(r) = self.sweep.as_ref().and_then(|s| s.report.as_ref()) {
            return Some(r.provenance.world_size);
        }
        if let Some(p) = &self.probe {
            return Some(p.len());
        }
        for t in [&self.train, &self.train_part, &self.train_resume]
            .into_iter()
            .flatten()
        {
            if let Some(p) = t.run.as_ref().map(|r| &r.provenance) {
                return Some(p.world_size);
            }
        }
        let ranks: usize = self.nodes().iter().map(|n| n.ranks.len()).sum();
        (ranks > 0).then_some(ranks)
    }

    /// A short name for headings: the card's, else the folder's.
    pub fn name(&self) -> String {
        match self.card() {
            Some(c) => c.name.clone(),
            None => self
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.dir.display().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_versions_are_checked_with_clear_messages() {
        let p = Path::new("x/run.json");
        assert_eq!(
            check_schema(&json!({"schema_version": 1}), p, &SWEEP_SCHEMA).unwrap(),
            1
        );
        let e = check_schema(&json!({"schema_version": 99}), p, &SWEEP_SCHEMA).unwrap_err();
        assert!(
            e.to_string()
                .contains("x/run.json: sweep schema_version 99 is newer"),
            "{e}"
        );
        let e = check_schema(&json!({"schema_version": 0}), p, &SWEEP_SCHEMA).unwrap_err();
        assert!(e.to_string().contains("is older than this burnin"), "{e}");
        let e = check_schema(&json!({"kind": "sweep"}), p, &SWEEP_SCHEMA).unwrap_err();
        assert!(e.to_string().contains("no schema_version"), "{e}");
        let e = check_schema(&json!({"schema_version": "1"}), p, &SWEEP_SCHEMA).unwrap_err();
        assert!(e.to_string().contains("not a whole number"), "{e}");
    }

    #[test]
    fn chaos_trials_read_from_any_reasonable_shape() {
        let as_object = json!({"kind": "kill", "timeline": {"inject": 100.0, "detect": 100.5,
            "teardown": 101.0, "relaunch": 102.0, "restore": 104.0, "first_step": 105.0},
            "steps_lost": 3});
        let t = parse_trial(0, &as_object);
        assert_eq!(t.kind, "kill");
        assert_eq!(t.events.len(), 6);
        assert_eq!(t.detect_s, Some(0.5));
        assert_eq!(t.recovery_s, Some(5.0));
        assert_eq!(t.steps_lost, Some(3.0));
        let as_list = json!({"fault": "hang", "events": [
            {"event": "first_step", "unix": 9.0}, {"event": "inject", "unix": 1.0},
            {"name": "detected", "t": 3.0}], "outcome": "recovered"});
        let t = parse_trial(1, &as_list);
        assert_eq!(t.kind, "hang");
        assert_eq!(
            t.events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            vec!["inject", "detect", "first_step"]
        );
        assert_eq!(t.recovery_s, Some(8.0));
        assert_eq!(t.hung, None);
        let flat = json!({"kind": "kill", "inject_unix": 5.0, "detect_unix": 6.5,
            "detect_s": 1.25, "hung": true});
        let t = parse_trial(2, &flat);
        assert_eq!(t.detect_s, Some(1.25), "an explicit number wins");
        assert_eq!(t.hung, Some(true));
        // The shape `burnin chaos` writes: a list of marks, durations under `times`.
        let supervisor = json!({"fault": "kill", "timeline": [
                {"event": "inject", "unix": 10.0, "source": "victim"},
                {"event": "detect", "unix": 10.2, "source": "supervisor"},
                {"event": "teardown-begin", "unix": 10.2, "source": "supervisor"},
                {"event": "teardown-done", "unix": 11.0, "source": "supervisor"},
                {"event": "relaunch", "unix": 11.1, "source": "supervisor"},
                {"event": "ranks-up", "unix": 12.0, "source": "rank 0"},
                {"event": "restore", "unix": 12.5, "source": "rank 0"},
                {"event": "first-step", "unix": 12.7, "source": "rank 0"}],
            "times": {"detect_s": 0.2, "total_recovery_s": 2.7}, "hung": false,
            "steps_lost": 4, "outcome": "recovered",
            "parity": {"weights_match": true, "losses_match": true, "steps_compared": 9}});
        let t = parse_trial(3, &supervisor);
        assert_eq!(
            t.events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            CHAOS_EVENTS.to_vec()
        );
        assert_eq!((t.detect_s, t.recovery_s), (Some(0.2), Some(2.7)));
        assert_eq!(
            (t.hung, t.parity, t.steps_lost),
            (Some(false), Some(true), Some(4.0))
        );
        let c = ChaosData::from_value(
            Path::new("."),
            json!({"trials": [as_object], "summary": {"detect_s_max": 0.5, "note": "x", "nested": {}}}),
        );
        assert_eq!(c.trials.len(), 1);
        assert_eq!(
            c.summary,
            vec![
                ("detect_s_max".to_string(), "0.5".to_string()),
                ("note".to_string(), "x".to_string())
            ]
        );
        assert!(
            ChaosData::from_value(Path::new("."), json!({"whatever": 1}))
                .trials
                .is_empty()
        );
    }
}
