#![no_main]
//! The results loader: run.json and points.jsonl from a results folder (possibly
//! truncated or edited) load or fail cleanly; loaded points can be judged.
use burnin::results::sweep::{Point, SweepReport};
use burnin::sweep::analysis::{analyze, Rules};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<SweepReport>(data);
    let points: Vec<Point> = data
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .take(64)
        .collect();
    let hosts: Vec<String> = (0..4).map(|i| format!("node{i}")).collect();
    let _ = analyze(&points, None, &Rules::from(None, None, None), &hosts);
});
