#![no_main]
//! NCCL INFO logs and Open MPI BTL verbose output: any bytes parse (unknown lines are
//! ignored) and the summaries, the report built from them and the fabric criterion
//! never panic.
use burnin::{mpi_log, nccl_log, transport};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let log = nccl_log::parse(&text);
    let s = nccl_log::summarize(&log);
    let _ = (s.intra.describe(), s.inter.describe(), log.gdr_enabled());
    let rep = transport::report_from_logs(&[log.clone(), log]);
    let _ = transport::judge_nccl_fabric(Some(&rep), Some(8));
    let _ = transport::render_lines(&rep);
    let m = mpi_log::parse(&text, None);
    let _ = m.peers.len();
    for line in text.lines().take(64) {
        let _ = mpi_log::is_verbose(line);
    }
});
