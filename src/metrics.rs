//! Live metrics for the cluster's monitoring: `--metrics-file PATH`, a Prometheus
//! text-format file in node_exporter's textfile-collector convention (written whole
//! to a temporary file beside it, whose name does not end in `.prom`, then renamed
//! over it, so a scrape never reads half a file), rewritten every `--metrics-every`
//! seconds and once more at the end. One writer per job: rank 0 of an MPI workload,
//! the launch host's process for `chaos` and `run`. No socket is opened.
//!
//! The workloads report through the process-wide sink ([`gauge`], [`count`],
//! [`phase`]): calls are no-ops when no file was asked for, so the measuring code
//! does not care whether anyone watches. Names follow Prometheus' conventions: base
//! units in the name (`_seconds`, `_bytes`, `_gigabytes_per_second`), `_total` for
//! counters, `_info` for a constant 1 carrying labels.
//!
//! `burnin run` gives each phase job its own file in `OUT/metrics/` and copies the
//! running (or last) job's file into its own after its `burnin_acceptance_*` families,
//! which no job writes, so the merged file has each family once.
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A Prometheus metric type as the `# TYPE` line spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn text(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// One metric family: its help, type, and a value per label set.
#[derive(Clone, Debug)]
struct Family {
    help: String,
    kind: Kind,
    samples: BTreeMap<String, f64>,
}

/// Every family one process reports, in name order.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    families: BTreeMap<String, Family>,
}

/// `{a="x",b="y"}` with Prometheus' escapes (backslash, quote, newline), or nothing.
fn label_text(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut s = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(s, "{k}=\"{v}\"");
    }
    s.push('}');
    s
}

/// A value as the text format writes it (`NaN`, `+Inf`, `-Inf` for the odd ones).
fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Whether `name` is a valid metric or label name (`[a-zA-Z_][a-zA-Z0-9_]*`; colons
/// are for recording rules, not exporters).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Registry {
    fn family(&mut self, name: &str, help: &str, kind: Kind) -> &mut Family {
        debug_assert!(valid_name(name), "metric name {name}");
        debug_assert!(kind != Kind::Counter || name.ends_with("_total"), "{name}");
        self.families
            .entry(name.to_string())
            .or_insert_with(|| Family {
                help: help.to_string(),
                kind,
                samples: BTreeMap::new(),
            })
    }

    /// Set gauge `name{labels}` to `v`.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.family(name, help, Kind::Gauge)
            .samples
            .insert(label_text(labels), v);
    }

    /// Add `by` to counter `name{labels}` (created at 0).
    pub fn count(&mut self, name: &str, help: &str, labels: &[(&str, &str)], by: f64) {
        *self
            .family(name, help, Kind::Counter)
            .samples
            .entry(label_text(labels))
            .or_insert(0.0) += by;
    }

    /// Make gauge `name` hold exactly one sample, `{labels}` = 1 (an "info" or state
    /// family: the current phase, say).
    pub fn only(&mut self, name: &str, help: &str, labels: &[(&str, &str)]) {
        let f = self.family(name, help, Kind::Gauge);
        f.samples.clear();
        f.samples.insert(label_text(labels), 1.0);
    }

    /// The value of `name{labels}`, if set.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.families
            .get(name)?
            .samples
            .get(&label_text(labels))
            .copied()
    }

    /// The text format: per family `# HELP`, `# TYPE`, then its samples.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, f) in &self.families {
            let help = f.help.replace('\\', "\\\\").replace('\n', "\\n");
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} {}", f.kind.text());
            for (labels, v) in &f.samples {
                let _ = writeln!(s, "{name}{labels} {}", value_text(*v));
            }
        }
        s
    }
}

/// Write `text` to `path` the textfile collector's way: a temporary file in the same
/// folder (`.NAME.tmp.PID`, not ending in `.prom`, so never collected), then a rename
/// over `path` ([`crate::results::write_atomic`]).
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    crate::results::write_atomic(path, text.as_bytes())
}

/// Check `--metrics-file PATH` before anything is measured: its folder exists and a
/// file can be written there. The error names the flag.
pub fn check_path(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() || path.file_name().is_none() || path.is_dir() {
        bail!("--metrics-file: {} is not a file name", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "--metrics-file: folder {} does not exist (node_exporter's textfile folder, e.g. /var/lib/node_exporter/textfile_collector)",
            dir.display()
        );
    }
    write_textfile(path, "").with_context(|| format!("--metrics-file: {}", path.display()))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The process-wide sink: the registry, where it goes, and a file to append.
struct Sink {
    path: PathBuf,
    /// Prefix of this writer's own `_info` and `_updated_timestamp_seconds`.
    namespace: &'static str,
    registry: Registry,
    /// A job's metrics file copied after ours (`burnin run`'s phase jobs).
    merge: Option<PathBuf>,
    /// The last write's error, said once.
    failed: bool,
    /// This host's name, for per-GPU labels (looked up once).
    host: String,
}

impl Sink {
    fn text(&mut self) -> String {
        let ns = self.namespace;
        self.registry.gauge(
            &format!("{ns}_updated_timestamp_seconds"),
            "When burnin last rewrote this file (Unix time).",
            &[],
            unix_now(),
        );
        let mut text = self.registry.render();
        if let Some(m) = &self.merge {
            if let Ok(t) = std::fs::read_to_string(m) {
                text.push_str(&t);
            }
        }
        text
    }

    fn write(&mut self) {
        let text = self.text();
        match write_textfile(&self.path, &text) {
            Ok(()) => self.failed = false,
            Err(e) if !self.failed => {
                eprintln!("burnin: warning: metrics: {e:#}");
                self.failed = true;
            }
            Err(_) => {}
        }
    }
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

fn with_sink(f: impl FnOnce(&mut Sink)) {
    if let Ok(mut g) = SINK.lock() {
        if let Some(s) = g.as_mut() {
            f(s);
        }
    }
}

/// Whether a metrics file is being written by this process.
pub fn enabled() -> bool {
    SINK.lock().map(|g| g.is_some()).unwrap_or(false)
}

/// Set gauge `name{labels}` (no-op without `--metrics-file`).
pub fn gauge(name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
    with_sink(|s| s.registry.gauge(name, help, labels, v));
}

/// Add `by` to counter `name{labels}` (no-op without `--metrics-file`).
pub fn count(name: &str, help: &str, labels: &[(&str, &str)], by: f64) {
    with_sink(|s| s.registry.count(name, help, labels, by));
}

/// Make gauge `name` hold exactly `{labels}` = 1 (no-op without `--metrics-file`).
pub fn only(name: &str, help: &str, labels: &[(&str, &str)]) {
    with_sink(|s| s.registry.only(name, help, labels));
}

/// Say which phase the workload is in (`burnin_phase_info{phase=...}`, and when it
/// began).
pub fn phase(name: &str) {
    with_sink(|s| {
        let ns = s.namespace;
        s.registry.only(
            &format!("{ns}_phase_info"),
            "The phase burnin is in now (value 1).",
            &[("phase", name)],
        );
        s.registry.gauge(
            &format!("{ns}_phase_started_timestamp_seconds"),
            "When the current phase began (Unix time).",
            &[],
            unix_now(),
        );
    });
}

/// Copy `path` (another burnin's metrics file) after this process's families, or stop.
pub fn merge(path: Option<PathBuf>) {
    with_sink(|s| s.merge = path);
}

/// Rewrite the file now (as at the end of a phase).
pub fn flush() {
    with_sink(Sink::write);
}

/// The writer: rewrites the file every period until dropped, then once more.
pub struct Writer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        let (m, cv) = &*self.stop;
        if let Ok(mut s) = m.lock() {
            *s = true;
        }
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        flush();
        if let Ok(mut g) = SINK.lock() {
            *g = None;
        }
    }
}

/// Start writing `path` every `every` (at least 0.1 s), its own families named under
/// `namespace` (`burnin`, or `burnin_acceptance` for `run`), with `burnin_info`'s
/// labels `info`. The file is checked and written once before this returns.
pub fn start(
    path: &Path,
    every: Duration,
    namespace: &'static str,
    info: &[(&str, &str)],
) -> Result<Writer> {
    check_path(path)?;
    let mut registry = Registry::default();
    let mut labels: Vec<(&str, &str)> = info.to_vec();
    labels.push(("version", env!("CARGO_PKG_VERSION")));
    registry.gauge(
        &format!("{namespace}_info"),
        "The burnin writing this file (value 1; labels say which).",
        &labels,
        1.0,
    );
    let mut sink = Sink {
        path: path.to_path_buf(),
        namespace,
        registry,
        merge: None,
        failed: false,
        host: crate::world::hostname(),
    };
    sink.write();
    if sink.failed {
        bail!("--metrics-file: cannot write {}", path.display());
    }
    *SINK
        .lock()
        .map_err(|_| anyhow::anyhow!("metrics sink poisoned"))? = Some(sink);
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let every = every.max(Duration::from_millis(100));
    let s2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("burnin-metrics".into())
        .spawn(move || {
            let (m, cv) = &*s2;
            let Ok(mut stopped) = m.lock() else { return };
            while !*stopped {
                let (g, _) = match cv.wait_timeout(stopped, every) {
                    Ok(r) => r,
                    Err(_) => return,
                };
                stopped = g;
                if !*stopped {
                    flush();
                }
            }
        })
        .context("cannot start the metrics writer")?;
    Ok(Writer {
        stop,
        thread: Some(thread),
    })
}

// ----------------------------------------------------------------------------
// What each workload reports: every name burnin writes is below (and in docs/metrics.md).

/// A sweep point (rank 0, as it is recorded): busbw, algbw and size of the latest
/// measured size per tier, group, collective, type and op; points and wrong elements
/// so far.
pub fn sweep_point(p: &crate::results::sweep::Point) {
    if !enabled() {
        return;
    }
    let tier = p.tier.to_string();
    let collective = p.collective.to_string();
    let dtype = p.dtype.to_string();
    let op = p.op.map(|o| o.name()).unwrap_or("none");
    let l = [
        ("tier", tier.as_str()),
        ("group", p.label.as_str()),
        ("collective", collective.as_str()),
        ("dtype", dtype.as_str()),
        ("op", op),
    ];
    gauge(
        "burnin_busbw_gigabytes_per_second",
        "Bus bandwidth at the median time of the latest size measured (nccl-tests' busbw, GB/s).",
        &l,
        p.busbw_gbps,
    );
    gauge(
        "burnin_algbw_gigabytes_per_second",
        "Algorithm bandwidth at the median time of the latest size measured (GB/s).",
        &l,
        p.algbw_gbps,
    );
    gauge(
        "burnin_message_size_bytes",
        "The latest size measured.",
        &l,
        p.bytes as f64,
    );
    gauge(
        "burnin_collective_time_seconds",
        "Median time of one collective at the latest size measured.",
        &l,
        p.time.p50_us * 1e-6,
    );
    count(
        "burnin_sweep_points_total",
        "Sweep points measured (one per collective, type, op, size, placement and group).",
        &[("tier", tier.as_str())],
        1.0,
    );
    count(
        "burnin_wrong_elements_total",
        "Result elements that were wrong, over every rank and point so far.",
        &[],
        p.wrong.unwrap_or(0) as f64,
    );
}

/// A training step (rank 0).
pub fn train_step(r: &crate::results::train::StepRecord) {
    if !enabled() {
        return;
    }
    gauge(
        "burnin_train_step",
        "The latest training step completed.",
        &[],
        r.step as f64,
    );
    gauge(
        "burnin_train_step_seconds",
        "Wall time of the latest training step (slowest rank).",
        &[],
        r.step_s,
    );
    gauge(
        "burnin_train_gradient_exchange_seconds",
        "Of the latest step, the gradient all-reduce.",
        &[],
        r.comm_s,
    );
    gauge("burnin_train_loss", "Loss of the latest step.", &[], r.loss);
    gauge(
        "burnin_train_tokens_per_second",
        "Tokens per second of the latest step, whole job.",
        &[],
        r.tokens_per_s,
    );
    count(
        "burnin_train_steps_total",
        "Training steps completed by this run.",
        &[],
        1.0,
    );
    if let Some(c) = &r.checkpoint {
        count(
            "burnin_checkpoints_written_total",
            "Checkpoints written by this run.",
            &[],
            1.0,
        );
        gauge(
            "burnin_checkpoint_write_gigabytes_per_second",
            "Write rate of the latest checkpoint, all ranks' shards (GB/s).",
            &[],
            c.write_gbps,
        );
    }
}

/// A chaos trial that ended (the supervisor): trials by fault and outcome, recoveries,
/// hangs, and the latest recovery time.
pub fn chaos_trial(t: &crate::results::chaos::Trial) {
    if !enabled() {
        return;
    }
    count(
        "burnin_chaos_trials_total",
        "Chaos trials ended, by fault and outcome (recovered, completed, failed).",
        &[("fault", t.fault.as_str()), ("outcome", t.outcome.as_str())],
        1.0,
    );
    count(
        "burnin_chaos_recoveries_total",
        "Chaos trials the job recovered from (restored and trained on).",
        &[],
        if t.outcome == "recovered" { 1.0 } else { 0.0 },
    );
    count(
        "burnin_chaos_hangs_total",
        "Chaos trials where the job hung instead of failing.",
        &[],
        if t.hung { 1.0 } else { 0.0 },
    );
    if let Some(s) = t.times.total_recovery_s {
        gauge(
            "burnin_chaos_recovery_seconds",
            "Injection to the first new step, latest recovered trial.",
            &[("fault", t.fault.as_str())],
            s,
        );
    }
}

/// One SDC vote round (rank 0): the rounds, and each rank's disagreements (0 for
/// the ranks not named, so every GPU's series exists from the first round).
pub fn sdc_round(ranks: &[crate::results::sdc::SdcRank], named: &[usize]) {
    if !enabled() {
        return;
    }
    count(
        "burnin_gpu_sdc_rounds_total",
        "Silent-data-corruption vote rounds run.",
        &[],
        1.0,
    );
    for r in ranks {
        let rank = r.rank.to_string();
        let gpu = r.gpu.map_or_else(|| "cpu".to_string(), |g| g.to_string());
        count(
            "burnin_gpu_sdc_disagreements_total",
            "Times a rank's output disagreed with its model's majority (or with no majority) in the SDC vote.",
            &[("host", r.host.as_str()), ("rank", rank.as_str()), ("gpu", gpu.as_str())],
            named.iter().filter(|x| **x == r.rank).count() as f64,
        );
    }
}

/// An NVML sample of one GPU (rank 0's GPU during `burnin gpu`), `throttled` as the
/// throttle criterion reads its clock event reasons.
pub fn gpu_sample(gpu: u32, s: &crate::results::gpu::Sample, throttled: Option<bool>) {
    with_sink(|sink| {
        let g = gpu.to_string();
        let l = [("host", sink.host.as_str()), ("gpu", g.as_str())];
        let r = &mut sink.registry;
        if let Some(t) = s.temp_c {
            r.gauge(
                "burnin_gpu_temperature_celsius",
                "GPU temperature (NVML).",
                &l,
                f64::from(t),
            );
        }
        if let Some(m) = s.sm_mhz {
            r.gauge(
                "burnin_gpu_sm_clock_hertz",
                "GPU SM clock (NVML).",
                &l,
                f64::from(m) * 1e6,
            );
        }
        if let Some(m) = s.mem_mhz {
            r.gauge(
                "burnin_gpu_memory_clock_hertz",
                "GPU memory clock (NVML).",
                &l,
                f64::from(m) * 1e6,
            );
        }
        if let Some(w) = s.power_w {
            r.gauge("burnin_gpu_power_watts", "GPU power draw (NVML).", &l, w);
        }
        if let Some(t) = throttled {
            r.gauge(
                "burnin_gpu_throttled",
                "1 when NVML's clock event reasons say the GPU is held back (thermal, power brake, HW slowdown, sync boost).",
                &l,
                if t { 1.0 } else { 0.0 },
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_help_type_and_escaped_labels() {
        let mut r = Registry::default();
        r.gauge(
            "burnin_busbw_gigabytes_per_second",
            "Bus bandwidth.",
            &[("tier", "inter"), ("label", "a\"b\\c\nd")],
            12.5,
        );
        r.count("burnin_wrong_elements_total", "Wrong.", &[], 2.0);
        r.count("burnin_wrong_elements_total", "Wrong.", &[], 3.0);
        r.gauge("burnin_x", "odd values", &[("k", "nan")], f64::NAN);
        r.gauge("burnin_x", "odd values", &[("k", "inf")], f64::INFINITY);
        let t = r.render();
        assert!(t.contains("# HELP burnin_busbw_gigabytes_per_second Bus bandwidth.\n# TYPE burnin_busbw_gigabytes_per_second gauge\n"), "{t}");
        assert!(
            t.contains(
                r#"burnin_busbw_gigabytes_per_second{tier="inter",label="a\"b\\c\nd"} 12.5"#
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "# TYPE burnin_wrong_elements_total counter\nburnin_wrong_elements_total 5\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("burnin_x{k=\"nan\"} NaN") && t.contains("burnin_x{k=\"inf\"} +Inf"),
            "{t}"
        );
        assert_eq!(r.get("burnin_wrong_elements_total", &[]), Some(5.0));
    }

    #[test]
    fn only_keeps_one_sample_and_names_are_checked() {
        let mut r = Registry::default();
        r.only("burnin_phase_info", "Phase.", &[("phase", "sweep")]);
        r.only("burnin_phase_info", "Phase.", &[("phase", "train")]);
        assert_eq!(r.get("burnin_phase_info", &[("phase", "sweep")]), None);
        assert_eq!(r.get("burnin_phase_info", &[("phase", "train")]), Some(1.0));
        assert!(valid_name("burnin_info") && valid_name("_x1"));
        assert!(!valid_name("1x") && !valid_name("a-b") && !valid_name("a:b") && !valid_name(""));
    }

    #[test]
    fn the_file_is_replaced_whole_and_a_missing_folder_names_the_flag() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("burnin.prom");
        write_textfile(&p, "a 1\n").unwrap();
        write_textfile(&p, "b 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "b 2\n");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
        let e = check_path(&d.path().join("no/such/x.prom")).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("--metrics-file: folder "),
            "{e:#}"
        );
        let e = check_path(d.path()).unwrap_err();
        assert!(format!("{e:#}").contains("is not a file name"), "{e:#}");
    }
}
