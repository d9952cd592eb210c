//! The seed controller of the containerd-shim Gardener extension.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gardener_extension_containerd_shim::gardener::runtime::{
    self, Manager, RuntimeError, RuntimeOptions,
};

/// The extension's name: `holderIdentity` of the heartbeat, prefix of the leader-election Lease.
const EXTENSION_NAME: &str = "containerd-shim";

/// Every controller of this extension, for `--controllers` and `--disable-controllers`.
const CONTROLLERS: &[&str] = &["extension", "healthcheck", "heartbeat"];

/// Gardener extension controller that installs extra containerd runtimes (Spin, wasmtime,
/// WasmEdge, gVisor, Kata, ...) on shoot nodes: it reconciles `Extension` resources of type
/// `containerd-shim` in the seed and delivers an installer DaemonSet and RuntimeClasses into
/// each shoot through a ManagedResource.
#[derive(Debug, Parser)]
#[command(name = "gardener-extension-containerd-shim", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller in the seed: leader election, heartbeat, health and metrics
    /// endpoints, and the extension's controllers.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    runtime: RuntimeOptions,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => run(args),
    }
}

fn run(args: RunArgs) -> ExitCode {
    if let Err(e) = runtime::logging::init(args.runtime.log_level, args.runtime.log_format) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let tokio = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "Failed to start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = tokio.block_on(serve(args.runtime));
    // Tasks still blocked in the OS (a DNS lookup, a file read) must not delay the exit, in
    // particular after a lost leadership.
    tokio.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "Extension stopped with an error");
            ExitCode::FAILURE
        }
    }
}

async fn serve(options: RuntimeOptions) -> Result<(), RuntimeError> {
    let manager = Manager::new(options, EXTENSION_NAME, CONTROLLERS).await?;
    // The extension and health-check controllers are added here once they exist; until then
    // the manager runs the built-in heartbeat only.
    manager.run().await
}
