//! A host for tests: a directory tree standing in for the host root, a real containerd binary
//! for `--version` and `config dump`, and a simulated containerd service whose restarts and
//! verifications are scripted and recorded.
//!
//! The simulated containerd "loads" its config when started or restarted: the test host runs
//! the real binary's `config dump` on the node's config at that moment and keeps the result. A
//! verification then checks our runtimes against what was loaded, so a config that was written
//! but never restarted into is not mistaken for a working one.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toml_edit::DocumentMut;

use crate::installer::containerd::{
    ContainerdVersion, DEFAULT_CONFIG, DumpOutput, ExpectedRuntime, check_dump,
};

use super::rooted::{RootedFs, RootedHost};
use super::{Host, HostError, RunningExe};

/// What a scripted restart or verification does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptedOutcome {
    Succeed,
    Fail(String),
}

/// What the host saw, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostEvent {
    /// `config dump` of this host path.
    Dump(PathBuf),
    /// A restart from `started` to `finished` (monotonic, for overlap checks) that succeeded or
    /// failed.
    Restart {
        started: Instant,
        finished: Instant,
        ok: bool,
    },
    /// A verification of these handlers and its result.
    Verify { handlers: Vec<String>, ok: bool },
}

struct Service {
    /// The dump of the config loaded at the last (re)start; `None` while stopped.
    loaded: Option<String>,
    /// How often the simulated containerd started: its instance.
    starts: u64,
    restarts: VecDeque<ScriptedOutcome>,
    verifies: VecDeque<ScriptedOutcome>,
}

/// Called with `"restart"` or `"verify"` when such an operation starts.
type Hook = Box<dyn Fn(&str) + Send + Sync>;

struct Process {
    pid: u32,
    path: PathBuf,
    id: Option<(u64, u64)>,
}

/// See the module documentation.
pub struct TestHost {
    fs: RootedFs,
    containerd: PathBuf,
    version_output: Mutex<Option<String>>,
    config: PathBuf,
    restart_duration: Mutex<Duration>,
    read_only: Mutex<Vec<PathBuf>>,
    service: Mutex<Service>,
    processes: Mutex<Vec<Process>>,
    events: Mutex<Vec<HostEvent>>,
    hook: Mutex<Option<Arc<Hook>>>,
    sandboxes: Mutex<BTreeMap<String, usize>>,
}

impl TestHost {
    /// A host rooted at `root` whose containerd is the binary at `containerd`.
    pub fn new(root: impl Into<PathBuf>, containerd: impl Into<PathBuf>) -> Self {
        TestHost {
            fs: RootedFs::new(root),
            containerd: containerd.into(),
            version_output: Mutex::new(None),
            config: PathBuf::from(DEFAULT_CONFIG),
            restart_duration: Mutex::new(Duration::ZERO),
            read_only: Mutex::new(Vec::new()),
            service: Mutex::new(Service {
                loaded: None,
                starts: 0,
                restarts: VecDeque::new(),
                verifies: VecDeque::new(),
            }),
            processes: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
            sandboxes: Mutex::new(BTreeMap::new()),
        }
    }

    /// Pretends the CRI has this many pod sandboxes with the handler.
    pub fn set_sandboxes(&self, handler: &str, count: usize) {
        lock(&self.sandboxes).insert(handler.to_string(), count);
    }

    /// The directory standing in for `/`.
    pub fn root(&self) -> &Path {
        self.fs.base()
    }

    /// Where a host path lies in the tree.
    pub fn path(&self, host_path: impl AsRef<Path>) -> PathBuf {
        self.fs.resolve(host_path.as_ref())
    }

    /// Pretends `containerd --version` printed this (e.g. an unsupported release).
    pub fn set_version_output(&self, output: &str) {
        *lock(&self.version_output) = Some(output.to_string());
    }

    /// Restarts take this long (to make concurrent restarts observable).
    pub fn set_restart_duration(&self, duration: Duration) {
        *lock(&self.restart_duration) = duration;
    }

    /// Writes into this directory (and below) fail as on a read-only mount.
    pub fn set_read_only(&self, dir: impl Into<PathBuf>) {
        lock(&self.read_only).push(dir.into());
    }

    /// Queues outcomes for the next restarts (then restarts succeed).
    pub fn script_restarts(&self, outcomes: impl IntoIterator<Item = ScriptedOutcome>) {
        lock(&self.service).restarts.extend(outcomes);
    }

    /// Queues outcomes for the next verifications (then the loaded config decides).
    pub fn script_verifications(&self, outcomes: impl IntoIterator<Item = ScriptedOutcome>) {
        lock(&self.service).verifies.extend(outcomes);
    }

    /// Runs `hook` at the start of every restart and verification (tests observe the cluster
    /// at exactly those moments).
    pub fn on_command(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        *lock(&self.hook) = Some(Arc::new(Box::new(hook)));
    }

    fn call_hook(&self, what: &str) {
        let hook = lock(&self.hook).clone();
        if let Some(hook) = hook {
            hook(what);
        }
    }

    /// Starts the simulated containerd with the node's current config, as at boot.
    pub fn start_containerd(&self) -> Result<(), HostError> {
        let dump = self.dump_checked(&self.config)?;
        let mut service = lock(&self.service);
        service.loaded = Some(dump);
        service.starts += 1;
        Ok(())
    }

    /// The dump of the config the simulated containerd runs with.
    pub fn loaded_config(&self) -> Option<String> {
        lock(&self.service).loaded.clone()
    }

    /// Everything recorded so far.
    pub fn events(&self) -> Vec<HostEvent> {
        lock(&self.events).clone()
    }

    /// Number of restarts so far (successful or not).
    pub fn restarts(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, HostEvent::Restart { .. }))
            .count()
    }

    /// Starts a fake process executing the file at `host_path` (symlinks resolved as the
    /// kernel would), returning its pid.
    pub fn start_process(&self, host_path: impl AsRef<Path>) -> io::Result<u32> {
        let resolved = std::fs::canonicalize(self.path(host_path.as_ref()))?;
        let root = std::fs::canonicalize(self.root())?;
        let relative = resolved
            .strip_prefix(&root)
            .map_err(|_| io::Error::other("the executable is outside the host root"))?;
        let meta = std::fs::metadata(&resolved)?;
        use std::os::unix::fs::MetadataExt;
        let mut processes = lock(&self.processes);
        let pid = 10_000 + processes.len() as u32;
        processes.push(Process {
            pid,
            path: Path::new("/").join(relative),
            id: Some((meta.dev(), meta.ino())),
        });
        Ok(pid)
    }

    /// Ends a fake process.
    pub fn stop_process(&self, pid: u32) {
        lock(&self.processes).retain(|p| p.pid != pid);
    }

    fn record(&self, event: HostEvent) {
        lock(&self.events).push(event);
    }

    /// Runs the real `config dump` on a host path: absolute imports are rebased below the root
    /// (in a scratch copy next to the file, so relative imports still resolve the same), and
    /// the working directory is the root, as containerd's is `/` under systemd.
    fn dump_raw(&self, config: &Path) -> Result<DumpOutput, HostError> {
        let resolved = self.path(config);
        let text = std::fs::read_to_string(&resolved).unwrap_or_default();
        // containerd started without a config file runs on its defaults, as with an empty one.
        let rebased = if resolved.exists() {
            rebase_imports(&text, self.root())
        } else {
            Some(String::new())
        };
        let (file, scratch) = match rebased {
            Some(rebased) => {
                let scratch = resolved.with_file_name(format!(
                    ".{}.rebased",
                    resolved
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ));
                std::fs::write(&scratch, rebased).map_err(|source| HostError::Io {
                    action: "write",
                    path: scratch.clone(),
                    source,
                })?;
                (scratch.clone(), Some(scratch))
            }
            None => (resolved, None),
        };
        let output = Command::new(&self.containerd)
            .arg("--config")
            .arg(&file)
            .args(["config", "dump"])
            .current_dir(self.root())
            .output();
        if let Some(scratch) = scratch {
            let _ = std::fs::remove_file(scratch);
        }
        let output = output.map_err(|source| HostError::Spawn {
            argv: vec![
                self.containerd.display().to_string(),
                "--config".into(),
                file.display().to_string(),
                "config".into(),
                "dump".into(),
            ],
            source,
        })?;
        Ok(DumpOutput::from_output(&output))
    }

    fn dump_checked(&self, config: &Path) -> Result<String, HostError> {
        let output = self.dump_raw(config)?;
        if output.exit_code != Some(0) {
            return Err(HostError::DoesNotStart {
                config: config.to_path_buf(),
                stderr: output.stderr.trim().to_string(),
            });
        }
        Ok(output.stdout)
    }

    fn version(&self) -> Result<ContainerdVersion, HostError> {
        let text = Host::containerd_version(self)?;
        Ok(ContainerdVersion::parse(&text)?)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The text with absolute `imports` entries moved below `root`, or `None` when it has none.
fn rebase_imports(text: &str, root: &Path) -> Option<String> {
    let mut doc = text.parse::<DocumentMut>().ok()?;
    let imports = doc.get_mut("imports")?.as_array_mut()?;
    let mut changed = false;
    for value in imports.iter_mut() {
        if let Some(entry) = value.as_str().filter(|e| e.starts_with('/')) {
            let rebased = format!("{}{entry}", root.display());
            let decor = value.decor().clone();
            *value = rebased.into();
            *value.decor_mut() = decor;
            changed = true;
        }
    }
    changed.then(|| doc.to_string())
}

impl RootedHost for TestHost {
    fn fs(&self) -> &RootedFs {
        &self.fs
    }

    fn guard_write(&self, path: &Path) -> io::Result<()> {
        if lock(&self.read_only)
            .iter()
            .any(|dir| path.starts_with(dir))
        {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::ROFS.raw_os_error(),
            ));
        }
        Ok(())
    }
}

impl Host for TestHost {
    fn sandboxes_with_handler(&self, handler: &str) -> Result<Option<usize>, HostError> {
        Ok(Some(
            lock(&self.sandboxes).get(handler).copied().unwrap_or(0),
        ))
    }

    fn running_executables(&self) -> io::Result<Vec<RunningExe>> {
        Ok(lock(&self.processes)
            .iter()
            .map(|p| RunningExe {
                pid: p.pid,
                path: p.path.clone(),
                id: p.id,
            })
            .collect())
    }

    fn containerd_version(&self) -> Result<String, HostError> {
        if let Some(output) = lock(&self.version_output).clone() {
            return Ok(output);
        }
        let output = Command::new(&self.containerd)
            .arg("--version")
            .output()
            .map_err(|source| HostError::Spawn {
                argv: vec![self.containerd.display().to_string(), "--version".into()],
                source,
            })?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn config_dump(&self, config: &Path) -> Result<DumpOutput, HostError> {
        self.record(HostEvent::Dump(config.to_path_buf()));
        self.dump_raw(config)
    }

    fn restart_containerd(&self) -> Result<(), HostError> {
        self.call_hook("restart");
        let started = Instant::now();
        let duration = *lock(&self.restart_duration);
        if !duration.is_zero() {
            std::thread::sleep(duration);
        }
        let scripted = lock(&self.service).restarts.pop_front();
        let result = match scripted {
            Some(ScriptedOutcome::Fail(message)) => {
                lock(&self.service).loaded = None;
                Err(HostError::Scripted(message))
            }
            _ => match self.dump_checked(&self.config) {
                Ok(dump) => {
                    let mut service = lock(&self.service);
                    service.loaded = Some(dump);
                    service.starts += 1;
                    Ok(())
                }
                Err(err) => {
                    lock(&self.service).loaded = None;
                    Err(err)
                }
            },
        };
        self.record(HostEvent::Restart {
            started,
            finished: Instant::now(),
            ok: result.is_ok(),
        });
        result
    }

    fn verify_containerd(&self, runtimes: &[ExpectedRuntime]) -> Result<(), HostError> {
        self.call_hook("verify");
        let scripted = lock(&self.service).verifies.pop_front();
        let result = match scripted {
            Some(ScriptedOutcome::Fail(message)) => Err(HostError::Scripted(message)),
            Some(ScriptedOutcome::Succeed) => Ok(()),
            None => match lock(&self.service).loaded.clone() {
                None => Err(HostError::NotRunning),
                Some(dump) => {
                    // Without a path (the follow run's check of a handler someone else
                    // delivered), what the node host's CRI check proves: containerd serves
                    // the handler.
                    let (any_path, exact): (Vec<ExpectedRuntime>, Vec<ExpectedRuntime>) = runtimes
                        .iter()
                        .cloned()
                        .partition(|r| r.runtime_path.is_empty());
                    let output = DumpOutput {
                        exit_code: Some(0),
                        stdout: dump,
                        stderr: String::new(),
                    };
                    self.version().and_then(|version| {
                        check_dump(&self.config, version, &exact, &[], &output)
                            .map_err(HostError::RunningConfig)?;
                        let served = crate::installer::containerd::EffectiveConfig::parse(
                            &self.config,
                            version,
                            &output.stdout,
                        )?
                        .runtime_handlers();
                        match any_path.iter().find(|r| !served.contains(&r.handler)) {
                            Some(missing) => Err(HostError::HandlerMissing {
                                handler: missing.handler.clone(),
                            }),
                            None => Ok(()),
                        }
                    })
                }
            },
        };
        self.record(HostEvent::Verify {
            handlers: runtimes.iter().map(|r| r.handler.clone()).collect(),
            ok: result.is_ok(),
        });
        result
    }

    fn served_handlers(&self) -> Result<Option<std::collections::BTreeSet<String>>, HostError> {
        let Some(dump) = lock(&self.service).loaded.clone() else {
            return Err(HostError::NotRunning);
        };
        let version = self.version()?;
        let effective =
            crate::installer::containerd::EffectiveConfig::parse(&self.config, version, &dump)?;
        Ok(Some(effective.runtime_handlers().into_iter().collect()))
    }

    fn containerd_instance(&self) -> Option<String> {
        let service = lock(&self.service);
        service
            .loaded
            .as_ref()
            .map(|_| format!("start-{}", service.starts))
    }

    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}
