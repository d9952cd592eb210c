//! The real node: the host's root file system mounted below `/host`, the host's PID namespace
//! (`hostPID: true`), and commands run in the host's mount namespace.
//!
//! The installer image is distroless: there is no `nsenter`. Each host command is forked from
//! this process and, between fork and exec, joins PID 1's mount namespace with `setns(2)` on
//! `/proc/1/ns/mnt` (opened before the fork). The command then sees the host's files, so
//! `containerd`, `systemctl` and `crictl` are the host's own binaries reading the host's
//! `/etc/containerd` and talking to the host's sockets. That is why the container needs
//! `SYS_ADMIN` and `SYS_CHROOT` (both required by `setns` for a mount namespace), `SYS_PTRACE`
//! (opening another process's namespace file and reading `/proc/<pid>/exe` of host processes),
//! `hostPID` (so that PID 1 is the host's init) and an unconfined AppArmor profile (the runtime
//! default profile denies these ptrace-class accesses).

use std::fs;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::installer::containerd::{DumpOutput, ExpectedRuntime};

use super::error::{owned, stderr_of};
use super::rooted::{RootedFs, RootedHost};
use super::{Host, HostError, RunningExe};

/// `PATH` for host commands: the usual system directories (the pod's own `PATH` names
/// directories of the installer image).
const HOST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How the real node is reached.
#[derive(Clone, Debug)]
pub struct NodeHostConfig {
    /// Where the host's root file system is mounted (`/host`).
    pub root: PathBuf,
    /// The host's `/proc` as this process sees it (with `hostPID`, the pod's own `/proc`).
    pub proc_dir: PathBuf,
    /// The mount namespace host commands run in: PID 1's.
    pub mount_namespace: PathBuf,
    /// containerd binary on the host (resolved on the host's `PATH`).
    pub containerd_binary: String,
    /// The systemd unit that runs containerd.
    pub containerd_unit: String,
    /// containerd's CRI endpoint on the host.
    pub cri_endpoint: String,
    /// Bound for a single host command.
    pub command_timeout: Duration,
    /// How long containerd may take to serve again after a restart.
    pub verify_timeout: Duration,
}

impl Default for NodeHostConfig {
    fn default() -> Self {
        NodeHostConfig {
            root: PathBuf::from(crate::desired_shims::pod_paths::HOST_ROOT),
            proc_dir: PathBuf::from("/proc"),
            mount_namespace: PathBuf::from("/proc/1/ns/mnt"),
            containerd_binary: "containerd".into(),
            containerd_unit: "containerd".into(),
            cri_endpoint: "unix:///run/containerd/containerd.sock".into(),
            command_timeout: Duration::from_secs(90),
            verify_timeout: Duration::from_secs(180),
        }
    }
}

/// The real node.
pub struct NodeHost {
    fs: RootedFs,
    config: NodeHostConfig,
}

impl NodeHost {
    pub fn new(config: NodeHostConfig) -> Self {
        NodeHost {
            fs: RootedFs::new(config.root.clone()),
            config,
        }
    }

    /// Runs argv in the host's mount namespace with a timeout.
    fn run(&self, argv: &[&str]) -> Result<Output, HostError> {
        self.run_with_input(argv, None)
    }

    /// `crictl <args>` against the node's CRI endpoint, its output read by `parse`; `None`
    /// where crictl is missing.
    fn crictl_output<T>(
        &self,
        args: &[&str],
        parse: impl FnOnce(&str) -> Result<T, HostError>,
    ) -> Result<Option<T>, HostError> {
        let mut argv = vec![
            "crictl",
            "--runtime-endpoint",
            self.config.cri_endpoint.as_str(),
        ];
        argv.extend_from_slice(args);
        match self.run(&argv) {
            Ok(output) if output.status.success() => {
                parse(&String::from_utf8_lossy(&output.stdout)).map(Some)
            }
            Ok(output) => Err(HostError::exited(&argv, &output)),
            Err(err) if err.not_started() => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// [`NodeHost::run`], writing `input` to the command's stdin.
    fn run_with_input(&self, argv: &[&str], input: Option<&[u8]>) -> Result<Output, HostError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(HostError::EmptyCommand);
        };
        let namespace_path = &self.config.mount_namespace;
        let namespace =
            fs::File::open(namespace_path).map_err(|source| HostError::MountNamespace {
                path: namespace_path.clone(),
                source,
            })?;
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("PATH", HOST_PATH)
            .env("LANG", "C")
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the forked child before exec and only performs one raw
        // setns(2) system call on a descriptor opened before the fork; it allocates nothing.
        // The crate's only unsafe code (`unsafe_code` is denied everywhere else).
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                rustix::thread::move_into_link_name_space(
                    namespace.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Mount),
                )
                .map_err(io::Error::from)
            });
        }
        let mut child = command.spawn().map_err(|source| HostError::Spawn {
            argv: owned(argv),
            source,
        })?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use std::io::Write;
            // A command that exits without reading its input is judged by its exit status.
            let _ = stdin.write_all(input);
        }
        let timeout = self.config.command_timeout;
        match wait_with_timeout(child, timeout) {
            Ok(Some(output)) => Ok(output),
            Ok(None) => Err(HostError::TimedOut {
                argv: owned(argv),
                timeout,
            }),
            Err(source) => Err(HostError::Wait {
                argv: owned(argv),
                source,
            }),
        }
    }

    fn run_ok(&self, argv: &[&str]) -> Result<String, HostError> {
        let output = self.run(argv)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(HostError::exited(argv, &output))
        }
    }

    /// One verification attempt: the unit is active and the CRI reports our runtimes.
    fn verify_once(&self, runtimes: &[ExpectedRuntime]) -> Result<String, HostError> {
        let unit = self.config.containerd_unit.as_str();
        let active = self
            .run(&["systemctl", "is-active", unit])
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
        if active != "active" {
            return Err(HostError::UnitInactive {
                unit: unit.to_string(),
                state: active,
            });
        }
        let endpoint = self.config.cri_endpoint.as_str();
        let info = ["crictl", "--runtime-endpoint", endpoint, "info"];
        match self.run(&info) {
            Ok(output) if output.status.success() => {
                check_cri_info(&String::from_utf8_lossy(&output.stdout), runtimes)
                    .map(|()| CRICTL_EVIDENCE.to_string())
            }
            Ok(output) => Err(HostError::exited(&info, &output)),
            // No crictl on this host: containerd answering its own API proves it serves, and
            // the config it loaded at start is the one we validated before the restart.
            Err(crictl) if crictl.not_started() => {
                let address = endpoint.trim_start_matches("unix://");
                if let Err(fallback) = self.run_ok(&["ctr", "--address", address, "version"]) {
                    return Err(HostError::Fallback {
                        crictl: Box::new(crictl),
                        fallback: Box::new(fallback),
                    });
                }
                let dump = self.run(&[self.config.containerd_binary.as_str(), "config", "dump"])?;
                let output = DumpOutput::from_output(&dump);
                crate::installer::containerd::check_dump(
                    Path::new("(default config)"),
                    self.containerd_major_version()?,
                    runtimes,
                    &[],
                    &output,
                )?;
                Ok("ctr version + config dump".to_string())
            }
            Err(err) => Err(err),
        }
    }

    /// Starts a pod sandbox with `handler` through the CRI and removes it again. Listing the
    /// handler only shows that containerd read the configuration; starting a sandbox makes
    /// containerd start the runtime, so a binary that cannot run here (another architecture,
    /// a missing library, an OCI spec version it does not know) fails now, before the node is
    /// labelled, instead of in the first pod of the RuntimeClass. The sandbox shares the
    /// node's network (no CNI involved) and uses the node's own sandbox image.
    fn start_sandbox(&self, handler: &str) -> Result<(), HostError> {
        let endpoint = self.config.cri_endpoint.as_str();
        let attempt = jiff::Timestamp::now().as_nanosecond();
        let config = serde_json::json!({
            "metadata": {
                "name": format!("containerd-shim-verify-{handler}"),
                "namespace": "kube-system",
                "uid": format!("containerd-shim-verify-{handler}-{attempt}"),
                "attempt": 0
            },
            "labels": {"containerd-shim.extensions.gardener.cloud/verify": handler},
            // 2 = NODE: the sandbox shares the node's network namespace.
            "linux": {"security_context": {"namespace_options": {"network": 2}}}
        });
        let config = config.to_string();
        let output = self.run_with_input(
            &[
                "crictl",
                "--runtime-endpoint",
                endpoint,
                "--timeout",
                "60s",
                "runp",
                "--runtime",
                handler,
                "/dev/stdin",
            ],
            Some(config.as_bytes()),
        )?;
        if !output.status.success() {
            return Err(HostError::SandboxFailed {
                handler: handler.to_string(),
                status: output.status,
                stderr: stderr_of(&output),
            });
        }
        let id = String::from_utf8_lossy(&output.stdout).trim().to_string();
        for verb in ["stopp", "rmp"] {
            if let Err(err) = self.run_ok(&["crictl", "--runtime-endpoint", endpoint, verb, &id]) {
                tracing::warn!(error = %err, sandbox = %id, "cannot remove the verification sandbox");
            }
        }
        Ok(())
    }

    fn containerd_major_version(
        &self,
    ) -> Result<crate::installer::containerd::ContainerdVersion, HostError> {
        let text = self.containerd_version()?;
        Ok(crate::installer::containerd::ContainerdVersion::parse(
            &text,
        )?)
    }
}

/// Waits for a child, reading its output on helper threads so a full pipe cannot block it;
/// `None` when it ran out of time (it is killed then).
fn wait_with_timeout(
    mut child: std::process::Child,
    timeout: Duration,
) -> io::Result<Option<Output>> {
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    });
    let err_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_thread.join().unwrap_or_default();
    let stderr = err_thread.join().unwrap_or_default();
    Ok(Some(Output {
        status,
        stdout,
        stderr,
    }))
}

/// How many times a sandbox start is tried before the handler counts as broken: the first
/// start after a restart can meet a CRI that is still settling.
const SANDBOX_ATTEMPTS: u32 = 3;

impl NodeHost {
    fn start_sandbox_with_retries(&self, handler: &str) -> Result<(), HostError> {
        let mut attempt = 1;
        loop {
            match self.start_sandbox(handler) {
                Ok(()) => return Ok(()),
                Err(err) if attempt >= SANDBOX_ATTEMPTS => return Err(err),
                Err(err) => {
                    tracing::debug!(error = %err, attempt, "starting the verification sandbox failed");
                    std::thread::sleep(Duration::from_secs(2));
                    attempt += 1;
                }
            }
        }
    }
}

/// The evidence of a verification through the CRI (crictl is on the host).
const CRICTL_EVIDENCE: &str = "crictl info";

/// `crictl pods -o json`: the ready sandboxes whose runtime handler is `handler`. A sandbox
/// that is not ready (`SANDBOX_NOTREADY`) runs nothing: its pod was deleted or stopped, and
/// containerd removes it without starting the runtime again.
pub(crate) fn count_sandboxes(json: &str, handler: &str) -> Result<usize, HostError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|source| HostError::NotJson {
            command: "crictl pods",
            source,
        })?;
    Ok(value
        .get("items")
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|item| {
                    item.get("runtimeHandler")
                        .and_then(serde_json::Value::as_str)
                        == Some(handler)
                        && item.get("state").and_then(serde_json::Value::as_str)
                            == Some("SANDBOX_READY")
                })
                .count()
        })
        .unwrap_or(0))
}

/// `crictl info`: the runtime is ready and the CRI config lists our runtimes as written.
pub(crate) fn check_cri_info(json: &str, runtimes: &[ExpectedRuntime]) -> Result<(), HostError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|source| HostError::NotJson {
            command: "crictl info",
            source,
        })?;
    let conditions = value
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let runtime_ready = conditions.iter().any(|c| {
        c.get("type").and_then(serde_json::Value::as_str) == Some("RuntimeReady")
            && c.get("status").and_then(serde_json::Value::as_bool) == Some(true)
    });
    if !runtime_ready {
        return Err(HostError::RuntimeNotReady);
    }
    for runtime in runtimes {
        let pointer = format!("/config/containerd/runtimes/{}", runtime.handler);
        let Some(entry) = value.pointer(&pointer) else {
            return Err(HostError::HandlerMissing {
                handler: runtime.handler.clone(),
            });
        };
        let runtime_type = entry.get("runtimeType").and_then(serde_json::Value::as_str);
        if runtime_type != Some(runtime.runtime_type.as_str()) {
            return Err(HostError::HandlerType {
                handler: runtime.handler.clone(),
                actual: runtime_type.map(str::to_string),
                expected: runtime.runtime_type.clone(),
            });
        }
    }
    Ok(())
}

impl RootedHost for NodeHost {
    fn fs(&self) -> &RootedFs {
        &self.fs
    }
}

impl Host for NodeHost {
    /// The pod sees the directory as a bind mount of its own, which cannot be removed from
    /// inside it; in the host's mount namespace it is a plain directory. Once removed there,
    /// the pod's mount shows it unlinked (no links), and nothing is done again.
    fn remove_state_dir(&self, dir: &Path) -> io::Result<()> {
        self.guard_write(dir)?;
        let here = self.fs.resolve(dir);
        match fs::metadata(&here) {
            Ok(meta) if meta.nlink() == 0 => return Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err),
            Ok(_) => {}
        }
        if fs::read_dir(&here)?.next().is_some() {
            return Ok(());
        }
        let path = dir.to_string_lossy();
        self.run_ok(&["rmdir", "--", &path])
            .map(|_| ())
            .map_err(io::Error::other)
    }

    fn running_executables(&self) -> io::Result<Vec<RunningExe>> {
        scan_proc(&self.config.proc_dir)
    }

    fn sandboxes_with_handler(&self, handler: &str) -> Result<Option<usize>, HostError> {
        self.crictl_output(&["pods", "-o", "json"], |out| count_sandboxes(out, handler))
    }

    fn containerd_version(&self) -> Result<String, HostError> {
        self.run_ok(&[self.config.containerd_binary.as_str(), "--version"])
    }

    fn config_dump(&self, config: &Path) -> Result<DumpOutput, HostError> {
        // The path becomes an argument of a host command, which takes text.
        let config = config.to_str().ok_or_else(|| HostError::PathNotUtf8 {
            path: config.to_path_buf(),
        })?;
        let output = self.run(&[
            self.config.containerd_binary.as_str(),
            "--config",
            config,
            "config",
            "dump",
        ])?;
        Ok(DumpOutput::from_output(&output))
    }

    fn restart_containerd(&self) -> Result<(), HostError> {
        self.run_ok(&["systemctl", "restart", self.config.containerd_unit.as_str()])
            .map(|_| ())
    }

    fn verify_containerd(&self, runtimes: &[ExpectedRuntime]) -> Result<(), HostError> {
        let deadline = Instant::now() + self.config.verify_timeout;
        let mut delay = Duration::from_millis(500);
        loop {
            match self.verify_once(runtimes) {
                Ok(evidence) if evidence == CRICTL_EVIDENCE => {
                    for runtime in runtimes {
                        self.start_sandbox_with_retries(&runtime.handler)?;
                    }
                    tracing::info!(%evidence, "containerd verified: each handler started a pod sandbox");
                    return Ok(());
                }
                Ok(evidence) => {
                    tracing::warn!(%evidence, "containerd verified without crictl: the handlers were not started");
                    return Ok(());
                }
                Err(err) if Instant::now() + delay >= deadline => {
                    return Err(HostError::StillFailing {
                        last: Box::new(err),
                        waited: self.config.verify_timeout,
                    });
                }
                Err(err) => {
                    tracing::debug!(error = %err, "containerd not verified yet");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    fn served_handlers(&self) -> Result<Option<std::collections::BTreeSet<String>>, HostError> {
        self.crictl_output(&["--timeout", "5s", "info"], served_in_cri_info)
    }

    fn containerd_instance(&self) -> Option<String> {
        crate::installer::host_watch::containerd_instance(&self.config.proc_dir)
    }

    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// The handler names under `config.containerd.runtimes` of `crictl info`.
pub(crate) fn served_in_cri_info(
    json: &str,
) -> Result<std::collections::BTreeSet<String>, HostError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|source| HostError::NotJson {
            command: "crictl info",
            source,
        })?;
    Ok(value
        .pointer("/config/containerd/runtimes")
        .and_then(serde_json::Value::as_object)
        .map(|runtimes| runtimes.keys().cloned().collect())
        .unwrap_or_default())
}

/// Every process's executable: `readlink` gives the host path (the process lives in the host's
/// mount namespace), `stat` through the magic link gives the inode even when the file was
/// replaced or deleted. Processes that vanish or deny access (kernel threads) are skipped.
pub(crate) fn scan_proc(proc_dir: &Path) -> io::Result<Vec<RunningExe>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(proc_dir)? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let exe = entry.path().join("exe");
        let Ok(target) = fs::read_link(&exe) else {
            continue;
        };
        let text = target.to_string_lossy();
        let path = PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(&text));
        let id = fs::metadata(&exe).ok().map(|m| (m.dev(), m.ino()));
        out.push(RunningExe { pid, path, id });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_sandboxes_of_a_handler() {
        let json = r#"{"items":[{"id":"a","runtimeHandler":"crun","state":"SANDBOX_READY"},
                                {"id":"b","runtimeHandler":"","state":"SANDBOX_READY"},
                                {"id":"c","runtimeHandler":"crun","state":"SANDBOX_READY"},
                                {"id":"d","runtimeHandler":"crun","state":"SANDBOX_NOTREADY"}]}"#;
        // The stopped sandbox of a deleted pod does not count.
        assert_eq!(count_sandboxes(json, "crun").unwrap(), 2);
        assert_eq!(count_sandboxes(json, "spin").unwrap(), 0);
        assert_eq!(count_sandboxes("{}", "crun").unwrap(), 0);
        assert!(matches!(
            count_sandboxes("nope", "crun"),
            Err(HostError::NotJson {
                command: "crictl pods",
                ..
            })
        ));
    }

    #[test]
    fn reads_cri_info() {
        let spin = ExpectedRuntime::new("spin", "io.containerd.spin.v2", "/x");
        let ok = r#"{"status":{"conditions":[{"type":"RuntimeReady","status":true},{"type":"NetworkReady","status":false}]},
                    "config":{"containerd":{"runtimes":{"spin":{"runtimeType":"io.containerd.spin.v2"}}}}}"#;
        check_cri_info(ok, std::slice::from_ref(&spin)).unwrap();
        let not_ready = ok.replace(
            r#""type":"RuntimeReady","status":true"#,
            r#""type":"RuntimeReady","status":false"#,
        );
        let err = check_cri_info(&not_ready, std::slice::from_ref(&spin)).unwrap_err();
        assert!(matches!(err, HostError::RuntimeNotReady), "{err}");
        assert!(err.to_string().contains("RuntimeReady"), "{err}");
        let other = ok.replace("io.containerd.spin.v2", "io.containerd.other.v1");
        let err = check_cri_info(&other, std::slice::from_ref(&spin)).unwrap_err();
        assert!(
            matches!(&err, HostError::HandlerType { actual: Some(actual), .. }
                if actual == "io.containerd.other.v1"),
            "{err}"
        );
        assert!(err.to_string().contains("other"), "{err}");
        let missing = ExpectedRuntime::new("wasmtime", "io.containerd.wasmtime.v1", "/y");
        let err = check_cri_info(ok, &[missing]).unwrap_err();
        assert!(err.to_string().contains("wasmtime"), "{err}");
        assert!(check_cri_info("nope", &[]).is_err());
    }

    /// The state directory goes through `rmdir` in the joined namespace (this process's own
    /// here), only once empty; a directory that is gone already is no error.
    #[test]
    fn removes_the_state_directory_only_once_empty() {
        let host = NodeHost::new(NodeHostConfig {
            root: PathBuf::from("/"),
            mount_namespace: PathBuf::from("/proc/self/ns/mnt"),
            ..NodeHostConfig::default()
        });
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("containerd-shim-installer");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("left"), "x").unwrap();
        host.remove_state_dir(&dir).unwrap();
        assert!(dir.join("left").exists());
        fs::remove_file(dir.join("left")).unwrap();
        host.remove_state_dir(&dir).unwrap();
        assert!(!dir.exists());
        host.remove_state_dir(&dir).unwrap();
    }

    /// The real fork + setns + exec path. PID 1 of a test sandbox is usually out of reach, so
    /// the namespace joined is this process's own (the same system calls).
    #[test]
    fn runs_commands_in_a_joined_mount_namespace() {
        let host = NodeHost::new(NodeHostConfig {
            root: PathBuf::from("/"),
            mount_namespace: PathBuf::from("/proc/self/ns/mnt"),
            ..NodeHostConfig::default()
        });
        let out = host
            .run_ok(&["sh", "-c", "echo in-host-namespace"])
            .unwrap();
        assert_eq!(out.trim(), "in-host-namespace");
        let err = host
            .run_ok(&["sh", "-c", "echo oops >&2; exit 3"])
            .unwrap_err();
        assert!(
            matches!(&err, HostError::Exited { status, stderr, .. }
                if status.code() == Some(3) && stderr == "oops"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("oops") && text.contains("exit status: 3"),
            "{text}"
        );
        let err = host.run_ok(&["no-such-command-here"]).unwrap_err();
        assert!(err.not_started(), "{err:?}");
        assert!(err.to_string().contains("cannot start"), "{err}");
    }

    #[test]
    fn a_command_that_outlives_its_bound_is_killed_and_says_so() {
        let timeout = Duration::from_millis(200);
        let host = NodeHost::new(NodeHostConfig {
            root: PathBuf::from("/"),
            mount_namespace: PathBuf::from("/proc/self/ns/mnt"),
            command_timeout: timeout,
            ..NodeHostConfig::default()
        });
        let err = host.run(&["sleep", "30"]).unwrap_err();
        assert!(
            matches!(&err, HostError::TimedOut { argv, timeout: t } if argv == &["sleep", "30"] && *t == timeout),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "`sleep 30`: did not finish within 200ms; killed"
        );
    }

    #[test]
    fn scans_this_machines_proc() {
        let exes = scan_proc(Path::new("/proc")).unwrap();
        let me = std::process::id();
        let own = exes.iter().find(|e| e.pid == me).unwrap();
        assert_eq!(own.path, std::env::current_exe().unwrap());
        assert!(own.id.is_some());
    }
}
