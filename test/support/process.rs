//! The real controller binary as a child process of a test: its own health and metrics ports,
//! its log in a temporary file (printed when the test fails), killed when dropped.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use super::poll;

/// The controller binary cargo built for this test crate.
pub const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-containerd-shim");
/// Leader-election timing short enough for fail-over tests (6 s lease, 4 s renew deadline,
/// 1 s retry); the heartbeat is renewed every second.
pub const LEASE_DURATION: Duration = Duration::from_secs(6);
pub const LEASE_TIMING: [&str; 3] = [
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
];
/// How long a signalled process may take to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// `GET http://127.0.0.1:<port><path>`: status and body, or why there is none. A blocking
/// socket on a blocking thread keeps the test free of an HTTP client dependency.
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    http_get_at(std::net::IpAddr::from([127, 0, 0, 1]), port, path).await
}

/// `GET http://<ip>:<port><path>`: status and body, or why there is none.
pub async fn http_get_at(
    ip: std::net::IpAddr,
    port: u16,
    path: &str,
) -> Result<(u16, String), String> {
    let path = path.to_string();
    let exchange = move || -> Result<(u16, String), String> {
        use std::io::{Read, Write};
        let timeout = Some(Duration::from_secs(5));
        let address = std::net::SocketAddr::from((ip, port));
        let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(timeout)
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(timeout)
            .map_err(|e| e.to_string())?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no HTTP response: {text:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {head:?}"))?;
        Ok((status, body.to_string()))
    };
    tokio::task::spawn_blocking(exchange)
        .await
        .unwrap_or_else(|e| Err(format!("the request task failed: {e}")))
}

/// The value of the sample `series` (`name{labels}`) in an OpenMetrics text.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// The process's pid, while it runs.
impl Replica {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// One process of the real binary with its own ports and log file; killed when dropped, so a
/// failing assertion never leaves it running. Its log is printed when the test fails.
pub struct Replica {
    name: String,
    child: tokio::process::Child,
    health_port: u16,
    metrics_port: u16,
    log: tempfile::NamedTempFile,
}

impl Replica {
    pub fn spawn(name: &str, kubeconfig: &Path, namespace: &str, extra: &[&str]) -> Replica {
        Replica::spawn_with_env(name, kubeconfig, namespace, extra, &[])
    }

    /// [`Replica::spawn`] with extra environment variables (e.g. `IMAGEVECTOR_OVERWRITE`).
    pub fn spawn_with_env(
        name: &str,
        kubeconfig: &Path,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        Replica::spawn_binary(Path::new(BIN), name, kubeconfig, namespace, extra, env)
    }

    /// [`Replica::spawn_with_env`] of another build of the controller (an earlier release's),
    /// which must take the same arguments.
    pub fn spawn_binary(
        bin: &Path,
        name: &str,
        kubeconfig: &Path,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        let health_port = free_port();
        let metrics_port = free_port();
        let mut args: Vec<String> = vec![
            "run".into(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--leader-election-namespace={namespace}"),
            format!("--heartbeat-namespace={namespace}"),
            "--heartbeat-renew-interval-seconds=1".into(),
            format!("--health-bind-address=127.0.0.1:{health_port}"),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        ];
        args.extend(LEASE_TIMING.iter().map(|s| s.to_string()));
        args.extend(extra.iter().map(|s| s.to_string()));
        Replica::spawn_exact_with_env(bin, name, args, health_port, metrics_port, env)
    }

    /// Starts the binary with exactly `args` (no test timings added); `args` must bind the
    /// health and metrics endpoints to `health_port` and `metrics_port`.
    pub fn spawn_exact(
        name: &str,
        args: Vec<String>,
        health_port: u16,
        metrics_port: u16,
    ) -> Replica {
        Replica::spawn_exact_with_env(Path::new(BIN), name, args, health_port, metrics_port, &[])
    }

    fn spawn_exact_with_env(
        bin: &Path,
        name: &str,
        args: Vec<String>,
        health_port: u16,
        metrics_port: u16,
        env: &[(&str, &str)],
    ) -> Replica {
        let log = tempfile::NamedTempFile::new()
            .unwrap_or_else(|e| panic!("cannot create a log file: {e}"));
        let stderr = log
            .reopen()
            .unwrap_or_else(|e| panic!("cannot open the log file: {e}"));
        let child = tokio::process::Command::new(bin)
            .args(&args)
            .env("POD_NAME", name)
            .env_remove("KUBECONFIG")
            .env_remove("LEADER_ELECTION_NAMESPACE")
            .env_remove("HEARTBEAT_NAMESPACE")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Replica {
            name: name.to_string(),
            child,
            health_port,
            metrics_port,
            log,
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path())
            .unwrap_or_else(|e| format!("(cannot read the log: {e})"))
    }

    /// The identity prefix this replica uses in the leader-election Lease.
    pub fn identity_prefix(&self) -> String {
        format!("{}_", self.name)
    }

    pub async fn metrics(&self) -> Result<String, String> {
        match http_get(self.metrics_port, "/metrics").await? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("/metrics answered {status}: {body}")),
        }
    }

    pub async fn metric(&self, series: &str) -> Result<f64, String> {
        let text = self.metrics().await?;
        sample(&text, series).ok_or_else(|| format!("no sample {series} in\n{text}"))
    }

    pub async fn wait_ready(&self) {
        poll::until(
            &format!("{} to be ready", self.name),
            poll::DEFAULT_TIMEOUT,
            || async {
                match http_get(self.health_port, "/readyz").await? {
                    (200, _) => Ok(()),
                    (status, body) => Err(format!("/readyz answered {status}: {body}")),
                }
            },
        )
        .await;
    }

    pub fn signal(&self, signal: &str) {
        let pid = self
            .child
            .id()
            .unwrap_or_else(|| panic!("{} has exited already", self.name));
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// The exit status, if the process has ended (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub async fn wait_exit(&mut self) -> ExitStatus {
        match tokio::time::timeout(EXIT_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("cannot wait for {}: {e}", self.name),
            Err(_) => panic!("{} did not exit within {EXIT_TIMEOUT:?}", self.name),
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!("----- log of replica {} -----\n{}", self.name, self.logs());
        }
    }
}

/// Starts the controller binary as the seed's admin in a fresh "release" namespace (its
/// leader-election and heartbeat Leases live there) and waits until it is ready.
pub async fn start_controller(clusters: &super::Clusters, extra: &[&str]) -> Replica {
    start_controller_with_env(clusters, extra, &[]).await
}

/// [`start_controller`] with extra environment variables.
pub async fn start_controller_with_env(
    clusters: &super::Clusters,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Replica {
    start_controller_binary(clusters, Path::new(BIN), extra, env).await
}

/// [`start_controller_with_env`] of another build of the controller (an earlier release's).
pub async fn start_controller_binary(
    clusters: &super::Clusters,
    bin: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Replica {
    let system = super::unique_name("extension-containerd-shim");
    super::create_namespace(&clusters.seed, &system, &[]).await;
    let controller = Replica::spawn_binary(
        bin,
        "controller",
        &clusters.env.seed_kubeconfig,
        &system,
        extra,
        env,
    );
    controller.wait_ready().await;
    controller
}
