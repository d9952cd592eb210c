//! Shim binaries and config files on the host: versioned directories assembled next to their
//! final place and renamed into it, a stable symlink swapped atomically, and garbage collection
//! that never removes a version a running process executes. See [`layout`] for the directory
//! structure.
//!
//! Fetching is all-or-nothing: every new file of every shim is written to a staging path and
//! checked against its sha256 first; only when all are good are they renamed into place. A
//! checksum mismatch therefore leaves the host exactly as it was.

pub mod layout;
pub mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::installer::digest::sha256_hex;
use crate::installer::error::InstallerError;
use crate::installer::host::{FileKind, Host, RunningExe};

pub use crate::installer::download::{DownloadConfig, DownloadError, Downloader};
pub use layout::{Layout, MANIFEST, STAGING_SUFFIX};
pub use spec::{DigestCache, FileSource, PayloadFile, PayloadSpec, resolve};

/// The record of a version directory's files, written last when it is assembled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub files: Vec<ManifestEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestEntry {
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
}

impl ManifestEntry {
    /// The entry of a file verified against its spec, `size` bytes long.
    fn of(file: &PayloadFile, size: u64) -> Self {
        ManifestEntry {
            path: file.rel.clone(),
            sha256: file.sha256.clone(),
            size,
        }
    }
}

/// What is missing of a version directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Installed {
    /// Complete: every file present with its recorded size and mode.
    Complete,
    /// The directory does not exist.
    Absent,
    /// The directory exists but these files are missing or differ (drift).
    Damaged(Vec<PathBuf>),
}

/// Checks a version directory against its spec without reading whole binaries: presence,
/// type, mode and the size recorded in the manifest (written from the verified content).
pub fn inspect(
    host: &dyn Host,
    layout: &Layout,
    spec: &PayloadSpec,
) -> Result<Installed, InstallerError> {
    let dir = layout.version_dir(&spec.shim, &spec.dir);
    let info = host
        .info(&dir)
        .map_err(|err| InstallerError::host("inspect", &dir, err))?;
    match info {
        None => return Ok(Installed::Absent),
        Some(info) if info.kind != FileKind::Dir => {
            return Ok(Installed::Damaged(vec![PathBuf::new()]));
        }
        Some(_) => {}
    }
    let manifest_path = dir.join(MANIFEST);
    let manifest: Option<Manifest> = host
        .read_bytes(&manifest_path)
        .map_err(|err| InstallerError::host("read", &manifest_path, err))?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let mut damaged = Vec::new();
    for file in &spec.files {
        let path = dir.join(&file.rel);
        let info = host
            .info(&path)
            .map_err(|err| InstallerError::host("inspect", &path, err))?;
        let recorded = manifest.as_ref().and_then(|m| {
            m.files
                .iter()
                .find(|e| e.path == file.rel && e.sha256 == file.sha256)
        });
        let good = match (info, recorded) {
            (Some(info), Some(entry)) => {
                info.kind == FileKind::File && info.mode == file.mode && info.len == entry.size
            }
            _ => false,
        };
        if !good {
            damaged.push(file.rel.clone());
        }
    }
    if manifest.is_none() && damaged.is_empty() {
        damaged.push(PathBuf::from(MANIFEST));
    }
    Ok(if damaged.is_empty() {
        Installed::Complete
    } else {
        Installed::Damaged(damaged)
    })
}

/// Files fetched and verified at staging paths, ready to be renamed into place.
#[derive(Debug, Default)]
pub struct Fetched {
    /// (staging path, final path), in the order to rename.
    renames: Vec<(PathBuf, PathBuf)>,
    /// Everything to remove if the fetch is abandoned.
    cleanup: Vec<PathBuf>,
    /// Directories created for staging, outermost first.
    created_dirs: Vec<PathBuf>,
}

impl Fetched {
    /// Renames everything into place.
    pub fn commit(self, host: &dyn Host) -> Result<(), InstallerError> {
        for (from, to) in &self.renames {
            host.rename(from, to)
                .map_err(|err| InstallerError::host("rename into place", to, err))?;
        }
        Ok(())
    }

    /// Removes everything staged, leaving the host as before the fetch.
    pub fn discard(self, host: &dyn Host) {
        for path in self.cleanup.iter().rev() {
            let _ = remove_any(host, path);
        }
        for dir in self.created_dirs.iter().rev() {
            let _ = host.remove_empty_dir(dir);
        }
    }
}

/// Fetches what `specs` lack (per [`inspect`]) into staging paths, all or nothing.
pub async fn fetch_all(
    host: &dyn Host,
    layout: &Layout,
    downloader: Option<&Downloader>,
    specs: &[(PayloadSpec, Installed)],
) -> Result<Fetched, InstallerError> {
    let fetcher = Fetcher {
        host,
        layout,
        downloader,
    };
    let mut fetched = Fetched::default();
    for (spec, installed) in specs {
        let result = match installed {
            Installed::Complete => continue,
            Installed::Absent => fetcher.fetch_new(spec, &mut fetched).await,
            Installed::Damaged(_) => fetcher.repair(spec, &mut fetched).await,
        };
        if let Err(err) = result {
            fetched.discard(host);
            return Err(err);
        }
    }
    Ok(fetched)
}

/// Where a fetch writes (the host, below the layout) and where it downloads from.
struct Fetcher<'a> {
    host: &'a dyn Host,
    layout: &'a Layout,
    downloader: Option<&'a Downloader>,
}

impl Fetcher<'_> {
    /// Assembles a whole version directory at `<dir>.staging`.
    async fn fetch_new(
        &self,
        spec: &PayloadSpec,
        fetched: &mut Fetched,
    ) -> Result<(), InstallerError> {
        let Fetcher { host, layout, .. } = *self;
        let staging = layout.staging_dir(&spec.shim, &spec.dir);
        let final_dir = layout.version_dir(&spec.shim, &spec.dir);
        // A leftover of an interrupted run is never executed: start over.
        host.remove_dir_all(&staging)
            .map_err(|err| InstallerError::host("remove", &staging, err))?;
        fetched.created_dirs.extend(create_dir(host, &staging)?);
        fetched.cleanup.push(staging.clone());
        let mut entries = Vec::new();
        for file in &spec.files {
            let path = staging.join(&file.rel);
            // Removed with the staging directory.
            if let Some(parent) = path.parent() {
                create_dir(host, parent)?;
            }
            let size = self.fetch_file(spec, file, &path).await?;
            entries.push(ManifestEntry::of(file, size));
        }
        write_manifest(host, &staging.join(MANIFEST), entries)?;
        fetched.renames.push((staging, final_dir));
        Ok(())
    }

    /// Replaces the missing or damaged files of an existing version directory: each new file is
    /// written next to its place and renamed over it, so a running shim keeps its inode.
    async fn repair(
        &self,
        spec: &PayloadSpec,
        fetched: &mut Fetched,
    ) -> Result<(), InstallerError> {
        let Fetcher { host, layout, .. } = *self;
        let dir = layout.version_dir(&spec.shim, &spec.dir);
        let mut entries = Vec::new();
        for file in &spec.files {
            let path = dir.join(&file.rel);
            let existing = host.info(&path).ok().flatten();
            let parent = path.parent().unwrap_or(&dir).to_path_buf();
            fetched.created_dirs.extend(create_dir(host, &parent)?);
            // A file of the right size is re-hashed before it is trusted.
            if let Some(info) = existing
                && info.kind == FileKind::File
                && info.mode == file.mode
                && host.sha256(&path).ok().flatten().as_deref() == Some(file.sha256.as_str())
            {
                entries.push(ManifestEntry::of(file, info.len));
                continue;
            }
            let temp = crate::installer::host::temp_sibling(&path);
            fetched.cleanup.push(temp.clone());
            let size = self.fetch_file(spec, file, &temp).await?;
            entries.push(ManifestEntry::of(file, size));
            fetched.renames.push((temp, path));
        }
        let manifest = dir.join(MANIFEST);
        let temp_manifest = crate::installer::host::temp_sibling(&manifest);
        write_manifest(host, &temp_manifest, entries)?;
        fetched.cleanup.push(temp_manifest.clone());
        fetched.renames.push((temp_manifest, manifest));
        Ok(())
    }

    /// Writes one file to `path` from its source, verifying its sha256; returns its size.
    async fn fetch_file(
        &self,
        spec: &PayloadSpec,
        file: &PayloadFile,
        path: &Path,
    ) -> Result<u64, InstallerError> {
        let Fetcher {
            host, downloader, ..
        } = *self;
        let binary = file
            .rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let payload_error = |message: String| InstallerError::Payload {
            shim: spec.shim.clone(),
            binary: binary.clone(),
            message,
        };
        let (sha256, size) = match &file.source {
            FileSource::Inline(content) => {
                host.write_file(path, content.as_bytes(), file.mode)
                    .map_err(|err| InstallerError::host("write", path, err))?;
                (sha256_hex(content.as_bytes()), content.len() as u64)
            }
            FileSource::Staged(local) => copy_local(host, local, path, file.mode)
                .map_err(|err| payload_error(format!("copying {}: {err}", local.display())))?,
            FileSource::Url(url) => {
                let Some(downloader) = downloader else {
                    return Err(payload_error(format!(
                        "{url}: downloads are not configured"
                    )));
                };
                let open = || host.create_file(path, file.mode);
                let done = downloader.download(url, &open).await.map_err(|source| {
                    InstallerError::Download {
                        url: url.clone(),
                        source,
                    }
                })?;
                (done.sha256, done.bytes)
            }
        };
        if sha256 != file.sha256 {
            return Err(InstallerError::ChecksumMismatch {
                shim: spec.shim.clone(),
                binary,
                source_desc: PayloadSpec::describe(&file.source),
                expected: file.sha256.clone(),
                actual: sha256,
            });
        }
        Ok(size)
    }
}

/// Creates a directory and its missing parents; returns those it created, outermost first.
fn create_dir(host: &dyn Host, dir: &Path) -> Result<Vec<PathBuf>, InstallerError> {
    host.create_dir_all(dir)
        .map_err(|err| InstallerError::host("create directory", dir, err))
}

fn write_manifest(
    host: &dyn Host,
    path: &Path,
    entries: Vec<ManifestEntry>,
) -> Result<(), InstallerError> {
    let text = serde_json::to_vec_pretty(&Manifest { files: entries }).unwrap_or_default();
    host.write_file(path, &text, 0o644)
        .map_err(|err| InstallerError::host("write", path, err))
}

/// Copies a file of this process's file system to a host path, hashing while copying.
fn copy_local(
    host: &dyn Host,
    local: &Path,
    path: &Path,
    mode: u32,
) -> std::io::Result<(String, u64)> {
    use sha2::Digest;
    use std::io::Read;
    let mut source = std::fs::File::open(local)?;
    let mut writer = host.create_file(path, mode)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = source.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        writer.write_all(&buf[..n])?;
        total += n as u64;
    }
    writer.finish()?;
    Ok((hex::encode(hasher.finalize()), total))
}

/// The version directory `current/<shim>` points at, if it is one of ours.
pub fn current_dir(
    host: &dyn Host,
    layout: &Layout,
    shim: &str,
) -> Result<Option<String>, InstallerError> {
    let link = layout.current(shim);
    let target = host
        .read_link(&link)
        .map_err(|err| InstallerError::host("read symlink", &link, err))?;
    Ok(target.and_then(|t| Layout::dir_of_target(shim, &t)))
}

/// Points `current/<shim>` at a version directory (atomic rename of a new symlink).
pub fn swap(host: &dyn Host, layout: &Layout, shim: &str, dir: &str) -> Result<(), InstallerError> {
    let root = layout.current_root();
    host.create_dir_all(&root)
        .map_err(|err| InstallerError::host("create directory", &root, err))?;
    let link = layout.current(shim);
    host.swap_symlink(&link, &Layout::link_target(shim, dir))
        .map_err(|err| InstallerError::host("swap symlink", &link, err))
}

/// Restores a symlink to a recorded target (`None`: remove it).
pub fn restore_link(
    host: &dyn Host,
    link: &Path,
    target: Option<&Path>,
) -> Result<(), InstallerError> {
    match target {
        Some(target) => host
            .swap_symlink(link, target)
            .map_err(|err| InstallerError::host("restore symlink", link, err)),
        None => host
            .remove_file(link)
            .map_err(|err| InstallerError::host("remove symlink", link, err)),
    }
}

/// What garbage collection did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub removed: Vec<PathBuf>,
    /// Versions kept only because a running process executes one of their files.
    pub in_use: Vec<PathBuf>,
}

/// Removes a directory tree, a file or a symlink.
fn remove_any(host: &dyn Host, path: &Path) -> std::io::Result<()> {
    match host.info(path)? {
        Some(info) if info.kind == FileKind::Dir => host.remove_dir_all(path),
        Some(_) => host.remove_file(path),
        None => Ok(()),
    }
}

/// Whether a running process executes a file below `dir`: by the path the kernel reports, or
/// by inode (robust when the path shows through another mount).
fn in_use(host: &dyn Host, dir: &Path, running: &[RunningExe]) -> bool {
    if running.iter().any(|exe| exe.path.starts_with(dir)) {
        return true;
    }
    let ids: BTreeSet<(u64, u64)> = running.iter().filter_map(|exe| exe.id).collect();
    if ids.is_empty() {
        return false;
    }
    let bin = dir.join("bin");
    host.list_dir(&bin).unwrap_or_default().iter().any(|name| {
        host.info(&bin.join(name))
            .ok()
            .flatten()
            .is_some_and(|info| ids.contains(&info.id))
    })
}

/// Removes every version directory (and staging leftover) not in `keep` and not in use, and
/// empty per-shim directories of shims not in `keep`. Returns what it removed and what it kept
/// because it is in use. `before_remove` runs before each removal (crash-test checkpoints).
pub fn collect_garbage(
    host: &dyn Host,
    layout: &Layout,
    keep: &BTreeMap<String, BTreeSet<String>>,
    running: &[RunningExe],
    before_remove: &mut dyn FnMut() -> Result<(), InstallerError>,
) -> Result<GcReport, InstallerError> {
    let mut report = GcReport::default();
    let root = layout.versions_root();
    let shims = host
        .list_dir(&root)
        .map_err(|err| InstallerError::host("list", &root, err))?;
    for shim in shims {
        let shim_dir = layout.versions(&shim);
        let kept = keep.get(&shim);
        let entries = host
            .list_dir(&shim_dir)
            .map_err(|err| InstallerError::host("list", &shim_dir, err))?;
        for entry in entries {
            if kept.is_some_and(|k| k.contains(&entry)) {
                continue;
            }
            let path = shim_dir.join(&entry);
            let leftover = entry.ends_with(STAGING_SUFFIX) || entry.starts_with('.');
            if !leftover && in_use(host, &path, running) {
                report.in_use.push(path);
                continue;
            }
            before_remove()?;
            remove_any(host, &path).map_err(|err| InstallerError::host("remove", &path, err))?;
            report.removed.push(path);
        }
        if kept.is_none() {
            host.remove_empty_dir(&shim_dir)
                .map_err(|err| InstallerError::host("remove", &shim_dir, err))?;
        }
    }
    // `<shim>.new` symlinks of an interrupted swap.
    let current = layout.current_root();
    for entry in host
        .list_dir(&current)
        .map_err(|err| InstallerError::host("list", &current, err))?
    {
        if entry.ends_with(".new") {
            let path = current.join(&entry);
            host.remove_file(&path)
                .map_err(|err| InstallerError::host("remove", &path, err))?;
        }
    }
    for dir in [current, root] {
        host.remove_empty_dir(&dir)
            .map_err(|err| InstallerError::host("remove", &dir, err))?;
    }
    Ok(report)
}
