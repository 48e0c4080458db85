//! burnin-train: the training binary (`burnin train` replaces itself with it, after
//! putting libtorch on the loader path). It takes burnin's own command line; only
//! `train` runs here. Two one-line helpers for `burnin` itself, which has no libtorch:
//! `--torch-info` (this libtorch and its CUDA devices, as JSON) and `--matmul-check
//! DEVICE` (smoke's matrix product on `cpu` or `cuda:N`, as JSON).
use burnin::cli::Command;
use burnin::error::EXIT_ERROR;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    match argv.get(1).map(String::as_str) {
        Some("--torch-info") => {
            println!(
                "{}",
                serde_json::to_string(&burnin_train::torch_info()).unwrap_or_default()
            );
            return ExitCode::SUCCESS;
        }
        Some("--matmul-check") => {
            let r = burnin_train::matmul::check(argv.get(2).map(String::as_str).unwrap_or("cpu"));
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let cli = match burnin::app::parse_cli() {
        Ok(cli) => cli,
        Err(code) => return ExitCode::from(code as u8),
    };
    let Command::Train(args) = &cli.command else {
        eprintln!("Error: burnin-train runs `train` only (it is what `burnin train` runs); use burnin for the rest");
        return ExitCode::from(EXIT_ERROR as u8);
    };
    let code = burnin::app::run_mpi(&cli, |world, dog| {
        burnin_train::run(world, &cli.global, args, dog)
    });
    ExitCode::from(code as u8)
}
