//! What makes the daemon look at its node again at once, besides its Node's labels: a change in
//! containerd's configuration directory, and a restart of containerd. The check period stays as
//! the safety net for whatever these miss (a watch that could not be set up, a binary deleted
//! below the installer's own directory).
//!
//! Why these mechanisms:
//! - Files: inotify on the directory the pod mounts from the host (`/etc/containerd`, and its
//!   `conf.d` once it exists). A write by any process of the host reaches the same inode, so
//!   the kernel reports it the moment it is closed or renamed into place: no polling, no
//!   reading of files that did not change. Our own writes are reported too; the run they cause
//!   finds the node converged and writes nothing, so they do not feed back.
//! - containerd's restarts: the pod shares the host's PID namespace, so containerd's process is
//!   visible; a pidfd of it becomes readable when it exits (event-driven, like the files). The
//!   new process is then looked for in `/proc` (it takes systemd a moment to start it), and the
//!   run starts once it is there. The CRI's own event stream would need containerd 1.7+ and
//!   says nothing of a configuration it failed to load; the systemd unit's state would need
//!   the host's D-Bus socket in the pod.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::process::{Pid, PidfdFlags, pidfd_open};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

/// containerd's drop-in directory, below its configuration directory.
const DROP_IN_DIR: &str = "conf.d";
/// The process name of containerd (`/proc/<pid>/comm`); its shims are `containerd-shim…`.
const CONTAINERD_COMM: &str = "containerd";
/// How often `/proc` is looked at while containerd is not running.
const CONTAINERD_LOOKUP: Duration = Duration::from_millis(200);

/// Bumps the counter on every change in `config_dir` and after every restart of containerd
/// (seen through `proc_dir`). A watch that cannot be set up is logged and left out.
pub fn watch_host(config_dir: PathBuf, proc_dir: PathBuf) -> watch::Receiver<u64> {
    let (sender, receiver) = watch::channel(0u64);
    let files = sender.clone();
    tokio::spawn(async move {
        if let Err(err) = watch_files(&config_dir, &files).await {
            tracing::warn!(error = %err, dir = %config_dir.display(), "cannot watch containerd's configuration; the check period catches changes");
        }
    });
    tokio::spawn(async move {
        watch_containerd(&proc_dir, &sender).await;
    });
    receiver
}

fn file_events() -> WatchFlags {
    WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::ATTRIB
}

async fn watch_files(dir: &Path, sender: &watch::Sender<u64>) -> std::io::Result<()> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    inotify::add_watch(&fd, dir, file_events())?;
    let drop_ins = dir.join(DROP_IN_DIR);
    if drop_ins.is_dir() {
        inotify::add_watch(&fd, &drop_ins, file_events())?;
    }
    let fd = readable(fd)?;
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 4096];
    loop {
        let mut guard = fd.readable().await?;
        let mut changed = false;
        let mut new_drop_in_dir = false;
        {
            let mut reader = inotify::Reader::new(guard.get_inner(), &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => {
                        changed = true;
                        let is_dir = event.events().contains(ReadFlags::ISDIR);
                        let named_drop_ins = event
                            .file_name()
                            .is_some_and(|n| n.to_bytes() == DROP_IN_DIR.as_bytes());
                        new_drop_in_dir |= is_dir && named_drop_ins;
                    }
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(err) => return Err(err.into()),
                }
            }
        }
        guard.clear_ready();
        if new_drop_in_dir && drop_ins.is_dir() {
            // Watching it again is harmless: the kernel returns the same watch.
            inotify::add_watch(fd.get_ref(), &drop_ins, file_events())?;
        }
        if changed {
            tracing::debug!(dir = %dir.display(), "containerd's configuration changed");
            sender.send_modify(|n| *n += 1);
        }
    }
}

async fn watch_containerd(proc_dir: &Path, sender: &watch::Sender<u64>) {
    let mut known = None;
    loop {
        let Some(pid) = containerd_pid(proc_dir) else {
            tokio::time::sleep(CONTAINERD_LOOKUP).await;
            continue;
        };
        if known.is_some_and(|k| k != pid) {
            tracing::info!(pid, "containerd restarted");
            sender.send_modify(|n| *n += 1);
        }
        known = Some(pid);
        match exited(pid).await {
            Ok(()) => {}
            Err(err) => {
                // No pidfd (an old kernel): the check period is what is left.
                tracing::warn!(error = %err, pid, "cannot follow containerd's process; the check period catches its restarts");
                return;
            }
        }
    }
}

/// Returns when the process `pid` has exited (at once when it is gone already).
async fn exited(pid: u32) -> std::io::Result<()> {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Ok(());
    };
    let fd: OwnedFd = match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Ok(()),
        Err(err) => return Err(err.into()),
    };
    let fd = readable(fd)?;
    let _ready = fd.readable().await?;
    Ok(())
}

/// Registers `fd` with the runtime for readability. The safe constructor is deprecated because
/// a type implementing `AsRawFd` may close or swap its descriptor while registered; an
/// `OwnedFd` owned by the `AsyncFd` cannot, which is the requirement of the unsafe one.
#[allow(deprecated)]
fn readable(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd, Interest::READABLE)
}

/// The PID of containerd's main process, the one with the lowest PID of that name.
/// Which containerd process runs now: its pid and its start time (`/proc/<pid>/stat`, field
/// 22, in clock ticks since boot), so that a restart that happens to get the same pid still
/// reads as another process. `None` when no containerd runs or its `stat` cannot be read.
pub(crate) fn containerd_instance(proc_dir: &Path) -> Option<String> {
    let pid = containerd_pid(proc_dir)?;
    let stat = std::fs::read_to_string(proc_dir.join(pid.to_string()).join("stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let start_time = after_name.split_whitespace().nth(19)?;
    Some(format!("{pid}@{start_time}"))
}

fn containerd_pid(proc_dir: &Path) -> Option<u32> {
    let entries = std::fs::read_dir(proc_dir).ok()?;
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(proc_dir.join(pid.to_string()).join("comm"))
                .is_ok_and(|comm| comm.trim_end() == CONTAINERD_COMM)
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_and_a_new_drop_in_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (sender, mut receiver) = watch::channel(0u64);
        let root = dir.path().to_path_buf();
        let task = tokio::spawn(async move { watch_files(&root, &sender).await });
        // The watch is set up by the task: write until it reports, bounded.
        let changed = async {
            let mut n = 0;
            loop {
                std::fs::write(dir.path().join("config.toml"), format!("{n}")).unwrap();
                n += 1;
                if tokio::time::timeout(Duration::from_millis(200), receiver.changed())
                    .await
                    .is_ok()
                {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), changed)
            .await
            .expect("a write to be reported");
        std::fs::create_dir(dir.path().join(DROP_IN_DIR)).unwrap();
        tokio::time::timeout(Duration::from_secs(10), receiver.changed())
            .await
            .expect("the new drop-in directory to be reported")
            .unwrap();
        receiver.borrow_and_update();
        // Files in the new drop-in directory are watched too.
        let drop_in = async {
            loop {
                std::fs::write(dir.path().join(DROP_IN_DIR).join("50-x.toml"), "x").unwrap();
                if tokio::time::timeout(Duration::from_millis(200), receiver.changed())
                    .await
                    .is_ok()
                {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), drop_in)
            .await
            .expect("a drop-in write to be reported");
        task.abort();
    }

    #[test]
    fn finds_no_containerd_in_an_empty_proc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("12")).unwrap();
        std::fs::write(dir.path().join("12/comm"), "containerd-shim\n").unwrap();
        assert_eq!(containerd_pid(dir.path()), None);
        std::fs::create_dir_all(dir.path().join("40")).unwrap();
        std::fs::write(dir.path().join("40/comm"), "containerd\n").unwrap();
        std::fs::create_dir_all(dir.path().join("30")).unwrap();
        std::fs::write(dir.path().join("30/comm"), "containerd\n").unwrap();
        assert_eq!(containerd_pid(dir.path()), Some(30));
    }

    #[test]
    fn a_containerd_instance_is_its_pid_and_start_time() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(containerd_instance(dir.path()), None);
        std::fs::create_dir_all(dir.path().join("30")).unwrap();
        std::fs::write(dir.path().join("30/comm"), "containerd\n").unwrap();
        // No stat to read: not known.
        assert_eq!(containerd_instance(dir.path()), None);
        let stat = |start: u64| {
            format!(
                "30 (contain erd) S 1 30 30 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 12 0 {start} 1 2 3\n"
            )
        };
        std::fs::write(dir.path().join("30/stat"), stat(4711)).unwrap();
        assert_eq!(containerd_instance(dir.path()).as_deref(), Some("30@4711"));
        std::fs::write(dir.path().join("30/stat"), stat(4712)).unwrap();
        assert_eq!(containerd_instance(dir.path()).as_deref(), Some("30@4712"));
    }

    #[test]
    fn this_machines_processes_have_a_start_time() {
        // The format as the kernel writes it: this process's own entry.
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 1..];
        let start: u64 = after_name
            .split_whitespace()
            .nth(19)
            .unwrap()
            .parse()
            .unwrap();
        assert!(start > 0);
    }
}
