//! The node installer of the containerd-shim Gardener extension.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use gardener_extension_containerd_shim::desired_shims::{
    CONFIG_MAP_KEY, DESIRED_SHA256_ENV, DesiredShims, Rollout, pod_paths,
};
use gardener_extension_containerd_shim::installer::cluster::{Cluster, LocalCluster};
use gardener_extension_containerd_shim::installer::converge::{Installer, Settings};
use gardener_extension_containerd_shim::installer::daemon::{self, DaemonConfig};
use gardener_extension_containerd_shim::installer::host::{NodeHost, NodeHostConfig};
use gardener_extension_containerd_shim::installer::host_watch;
use gardener_extension_containerd_shim::installer::node::{BudgetTiming, KubeCluster};
use gardener_extension_containerd_shim::installer::payload::{DownloadConfig, Downloader};
use gardener_extension_containerd_shim::installer::status::{self, STATUS_FILE};
use gardener_extension_containerd_shim::user_agent;

/// Node installer of the containerd-shim Gardener extension: runs on every node of a shoot
/// (DaemonSet), installs the desired containerd shims and their runtime handlers, restarts
/// containerd within a cluster-wide budget, verifies, and labels the node ready.
#[derive(Debug, Parser)]
#[command(name = "containerd-shim-installer", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Converge the node now and keep it converged (the DaemonSet's main container).
    Daemon(DaemonArgs),
    /// Readiness probe: exit 0 only when this node's desired shims are verified (or, with
    /// nothing to install, when everything of the installer is removed).
    Probe {
        #[arg(long, default_value_t = default_status_file())]
        status_file: String,
        #[arg(long, default_value_t = default_desired_file())]
        desired_file: String,
    },
    /// Copy this binary to another path (init container: makes it runnable in shim images).
    CopySelf {
        #[arg(long)]
        to: PathBuf,
    },
    /// Copy files of the current image into a directory: `stage --to DIR /path/in/image=name`.
    Stage {
        #[arg(long)]
        to: PathBuf,
        /// `<path in this image>=<file name in DIR>`
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Remove everything the installer put on this node, once (manual undo; see
    /// docs/installer.md). Uses the API for labels and the restart budget unless `--no-api`.
    Uninstall {
        #[command(flatten)]
        node: NodeArgs,
        /// Run without the Kubernetes API: no labels are changed, containerd restarts without
        /// waiting for a budget slot.
        #[arg(long)]
        no_api: bool,
        /// Budget slots to wait for (the desired set's `maxConcurrentRestarts`).
        #[arg(long, default_value_t = 1)]
        max_concurrent_restarts: u32,
    },
}

#[derive(Debug, Args)]
struct DaemonArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The mounted desired shim set.
    #[arg(long, default_value_t = default_desired_file())]
    desired_file: String,
    /// sha256 of the desired set this pod was created for; another mounted set is refused.
    #[arg(long, env = DESIRED_SHA256_ENV)]
    expected_desired_sha256: Option<String>,
    /// Status file the readiness probe reads.
    #[arg(long, default_value_t = default_status_file())]
    status_file: String,
    /// Drift-repair period: converge at least this often (e.g. `60s`, `5m`).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    check_period: Duration,
    /// While a removed shim waits for its pods to end: look again after this long (doubled
    /// after each such look, up to 5 s).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pod_recheck_period: Duration,
}

#[derive(Debug, Args)]
struct NodeArgs {
    /// Where the host's file system is mounted.
    #[arg(long, default_value = pod_paths::HOST_ROOT)]
    host_root: PathBuf,
    /// Host directory of the installer's state and shim binaries.
    #[arg(long, default_value = pod_paths::HOST_STATE_DIR)]
    state_dir: PathBuf,
    /// Directory the init containers staged image binaries into.
    #[arg(long, default_value = pod_paths::STAGING_DIR)]
    staging_dir: PathBuf,
    /// containerd's config file, a path on the host (default: /etc/containerd/config.toml).
    #[arg(long)]
    containerd_config: Option<PathBuf>,
    /// containerd binary on the host.
    #[arg(long, default_value = "containerd")]
    containerd_binary: String,
    /// systemd unit of containerd.
    #[arg(long, default_value = "containerd")]
    containerd_unit: String,
    /// containerd's CRI endpoint on the host.
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    cri_endpoint: String,
    /// How long containerd may take to serve again after a restart.
    #[arg(long, default_value = "180s", value_parser = parse_duration)]
    verify_timeout: Duration,
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// The installer's namespace (restart-budget Leases live there).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// A silent restart-slot holder loses its slot after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    restart_lease_duration: Duration,
    /// Refuse downloads larger than this many bytes.
    #[arg(long, default_value_t = 512 * 1024 * 1024)]
    download_max_bytes: u64,
    /// Extra CA certificates (PEM) trusted for downloads, besides the system's.
    #[arg(long)]
    download_ca_file: Option<PathBuf>,
}

fn default_desired_file() -> String {
    format!("{}/{CONFIG_MAP_KEY}", pod_paths::DESIRED_DIR)
}

fn default_status_file() -> String {
    format!("{}/{STATUS_FILE}", pod_paths::STATUS_DIR)
}

/// `90s`, `5m`, `1h`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 60s, 5m or 1h"))?;
    let seconds = match unit {
        "s" => value,
        "m" => value * 60,
        "h" => value * 3600,
        "ms" => return Ok(Duration::from_millis(value)),
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Ok(Duration::from_secs(seconds))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe {
            status_file,
            desired_file,
        } => match status::probe(Path::new(&status_file), Path::new(&desired_file)) {
            Ok(message) => {
                println!("{message}");
                Ok(())
            }
            Err(err) => Err(err.to_string()),
        },
        Command::CopySelf { to } => copy_self(&to),
        Command::Stage { to, files } => stage(&to, &files),
        Command::Daemon(args) => {
            init_logging();
            runtime().and_then(|rt| rt.block_on(run_daemon(args)))
        }
        Command::Uninstall {
            node,
            no_api,
            max_concurrent_restarts,
        } => {
            init_logging();
            runtime().and_then(|rt| rt.block_on(uninstall(node, no_api, max_concurrent_restarts)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "containerd-shim-installer: {message}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the async runtime: {err}"))
}

/// Copies a file atomically with the executable mode (temp file in the target directory).
fn install_file(from: &Path, to: &Path) -> Result<(), String> {
    let parent = to
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", to.display()))?;
    std::fs::create_dir_all(parent).map_err(|err| format!("{}: {err}", parent.display()))?;
    let temp = gardener_extension_containerd_shim::installer::host::temp_sibling(to);
    let copy = || -> std::io::Result<()> {
        std::fs::copy(from, &temp)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::File::open(&temp)?.sync_all()?;
        std::fs::rename(&temp, to)
    };
    copy().map_err(|err| {
        let _ = std::fs::remove_file(&temp);
        format!("copying {} to {}: {err}", from.display(), to.display())
    })
}

fn copy_self(to: &Path) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?;
    install_file(&me, to)?;
    println!("copied {} to {}", me.display(), to.display());
    Ok(())
}

fn stage(to: &Path, files: &[String]) -> Result<(), String> {
    for spec in files {
        let (from, name) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?} is not <path in image>=<name>"))?;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(format!("{spec:?}: {name:?} is not a plain file name"));
        }
        install_file(Path::new(from), &to.join(name))?;
        println!("staged {from} as {}", to.join(name).display());
    }
    Ok(())
}

fn settings(node: &NodeArgs) -> Settings {
    let mut settings = Settings::new(&node.state_dir, &node.staging_dir);
    settings.config_override = node.containerd_config.clone();
    settings
}

fn node_host(node: &NodeArgs) -> NodeHost {
    NodeHost::new(NodeHostConfig {
        root: node.host_root.clone(),
        containerd_binary: node.containerd_binary.clone(),
        containerd_unit: node.containerd_unit.clone(),
        cri_endpoint: node.cri_endpoint.clone(),
        verify_timeout: node.verify_timeout,
        ..NodeHostConfig::default()
    })
}

fn downloader(node: &NodeArgs) -> Result<Downloader, String> {
    let extra_roots_pem = match &node.download_ca_file {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|err| format!("{}: {err}", path.display()))?,
        ),
        None => None,
    };
    Downloader::new(DownloadConfig {
        max_bytes: node.download_max_bytes,
        extra_roots_pem,
        ..DownloadConfig::default()
    })
    .map_err(|err| err.to_string())
}

/// The installer's name in its User-Agent.
const INSTALLER_BINARY: &str = "containerd-shim-installer";

/// `mode` (`daemon`, `uninstall`) names the command in the User-Agent, so the shoot's audit
/// log tells the installer's requests from every other client's.
async fn kube_cluster(node: &NodeArgs, mode: &str) -> Result<KubeCluster, String> {
    let node_name = node
        .node_name
        .clone()
        .ok_or("the node name is unknown: set NODE_NAME or --node-name")?;
    let namespace = node
        .namespace
        .clone()
        .ok_or("the namespace is unknown: set POD_NAMESPACE or --namespace")?;
    let mut config = kube::Config::infer()
        .await
        .map_err(|err| format!("cannot reach the Kubernetes API: {err}"))?;
    user_agent::set(&mut config, &user_agent::user_agent(INSTALLER_BINARY, mode))
        .map_err(|err| err.to_string())?;
    let client = kube::Client::try_from(config)
        .map_err(|err| format!("cannot reach the Kubernetes API: {err}"))?;
    Ok(KubeCluster::new(
        client,
        &namespace,
        &node_name,
        BudgetTiming {
            lease_duration: node.restart_lease_duration,
            ..BudgetTiming::default()
        },
    ))
}

async fn run_daemon(args: DaemonArgs) -> Result<(), String> {
    let cluster = kube_cluster(&args.node, "daemon").await?;
    let labels = daemon::watch_node_labels(cluster.nodes().clone(), cluster.node_name());
    let mut installer = Installer::new(
        Arc::new(node_host(&args.node)),
        cluster,
        settings(&args.node),
        Some(downloader(&args.node)?),
    );
    let config = DaemonConfig {
        desired_file: PathBuf::from(&args.desired_file),
        expected_sha256: args.expected_desired_sha256.clone(),
        status_file: PathBuf::from(&args.status_file),
        check_period: args.check_period,
        pod_recheck_period: args.pod_recheck_period,
    };
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|err| tracing::error!(error = %err, "cannot watch SIGTERM"))
            .ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    };
    let host_changed = host_watch::watch_host(
        args.node
            .host_root
            .join(pod_paths::HOST_CONTAINERD_DIR.trim_start_matches('/')),
        PathBuf::from("/proc"),
    );
    daemon::run(&mut installer, config, labels, host_changed, shutdown).await;
    Ok(())
}

async fn uninstall(node: NodeArgs, no_api: bool, max: u32) -> Result<(), String> {
    let desired = DesiredShims::uninstall(Rollout {
        max_concurrent_restarts: max,
    });
    let host = Arc::new(node_host(&node));
    // It may run beside the pod's daemon (`kubectl exec`), which keeps using the directory.
    let mut settings = settings(&node);
    settings.remove_state_dir = false;
    let status = if no_api {
        let mut installer = Installer::new(host, LocalCluster, settings, None);
        run_uninstall(&mut installer, &desired).await?
    } else {
        let cluster = kube_cluster(&node, "uninstall").await?;
        let mut installer = Installer::new(host, cluster, settings, None);
        run_uninstall(&mut installer, &desired).await?
    };
    println!("{status}");
    Ok(())
}

async fn run_uninstall<C: Cluster>(
    installer: &mut Installer<C>,
    desired: &DesiredShims,
) -> Result<String, String> {
    let outcome = installer
        .run(desired)
        .await
        .map_err(|err| err.to_string())?;
    if outcome.status.ready {
        Ok(outcome.status.message)
    } else {
        Err(outcome.status.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn help_says_what_it_is() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("Node installer of the containerd-shim"),
            "{help}"
        );
        for sub in ["daemon", "probe", "copy-self", "stage", "uninstall"] {
            assert!(help.contains(sub), "{sub}: {help}");
        }
        Cli::command().debug_assert();
    }

    #[test]
    fn stage_copies_files_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("shim");
        std::fs::write(&source, b"bin").unwrap();
        let to = dir.path().join("staging/spin");
        stage(
            &to,
            &[format!("{}=containerd-shim-spin-v2", source.display())],
        )
        .unwrap();
        assert_eq!(
            std::fs::read(to.join("containerd-shim-spin-v2")).unwrap(),
            b"bin"
        );
        assert!(stage(&to, &["nope".into()]).is_err());
        assert!(stage(&to, &[format!("{}=../x", source.display())]).is_err());
    }
}
