//! The seed controller of the containerd-shim Gardener extension, and its offline renderer.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gardener_extension_containerd_shim::admission::server::{self as admission, AdmissionOptions};
use gardener_extension_containerd_shim::gardener::runtime::options::{LogFormat, LogLevel};
use gardener_extension_containerd_shim::gardener::runtime::{self, Manager, RuntimeOptions};
use gardener_extension_containerd_shim::shim::controllers::{
    self, CONTROLLERS, CatalogOptions, ControllerOptions, SetupError,
};
use gardener_extension_containerd_shim::shim::identity::EXTENSION_NAME;
use gardener_extension_containerd_shim::shim::offline;

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
    /// endpoints, the Extension controller and the health-check controller.
    Run(Box<RunArgs>),
    /// Print the shoot bundle an Extension or a bare providerConfig would produce, without a
    /// cluster. Invalid input fails with the error the controller would report.
    Render(RenderArgs),
    /// Run the admission webhook in the garden: the Gardener API server sends it the Shoots
    /// that list the extension, and it refuses on `kubectl apply` what the controller would
    /// refuse in the seed (same code, same catalog flags), plus what only the whole Shoot shows.
    Admission(Box<AdmissionOptions>),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    runtime: RuntimeOptions,
    #[command(flatten)]
    controllers: ControllerOptions,
}

/// Only what decides the bundle: the input, the Shoot, and the catalog and custom-shim rules
/// the controller would apply; none of the controller's runtime flags.
#[derive(Debug, clap::Args)]
struct RenderArgs {
    /// The input (YAML): an Extension manifest, or a bare providerConfig (`kind:
    /// ContainerdShimConfig`, as in example/provider-config/), told apart by `kind`.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    input: PathBuf,
    /// The Cluster manifest whose Shoot provides worker pools and the Kubernetes version.
    /// Without it, a Shoot is assumed: Kubernetes 1.33, one containerd pool `worker` and every
    /// pool the providerConfig names, all amd64.
    #[arg(long, value_name = "CLUSTER")]
    cluster: Option<PathBuf>,
    #[command(flatten)]
    catalog: CatalogOptions,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => run(*args),
        Command::Render(args) => render(args),
        Command::Admission(options) => run_admission(*options),
    }
}

fn render(args: RenderArgs) -> ExitCode {
    let (catalog, images) = match controllers::load_catalog_and_images(&args.catalog) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match offline::render_files(&args.input, args.cluster.as_deref(), &catalog, &images) {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    let logging = (args.runtime.log_level, args.runtime.log_format);
    serve_until_done(logging, "Extension", serve(args))
}

async fn serve(args: RunArgs) -> Result<(), SetupError> {
    let mut manager = Manager::new(args.runtime, EXTENSION_NAME, CONTROLLERS).await?;
    controllers::add_controllers(&mut manager, &args.controllers)?;
    Ok(manager.run().await?)
}

fn run_admission(options: AdmissionOptions) -> ExitCode {
    let logging = (options.log_level, options.log_format);
    serve_until_done(logging, "Admission", admission::run(options))
}

/// Starts logging and an async runtime, runs `work` to its end and exits with its outcome.
fn serve_until_done<E: std::fmt::Display>(
    (level, format): (LogLevel, LogFormat),
    what: &str,
    work: impl std::future::Future<Output = Result<(), E>>,
) -> ExitCode {
    if let Err(e) = runtime::logging::init(level, format) {
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
    let result = tokio.block_on(work);
    // Tasks still blocked in the OS (a DNS lookup, a file read) must not delay the exit, in
    // particular after a lost leadership.
    tokio.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{what} stopped with an error");
            ExitCode::FAILURE
        }
    }
}
