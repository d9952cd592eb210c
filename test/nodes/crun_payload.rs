//! The crun payload's binaries (hack/tools/build.sh crun): one per architecture the catalog
//! offers, for that machine, needing no library of crun's own on the node. The pods of the
//! other node tests run the amd64 one; no arm64 node runs here, so its header is the check.

use std::process::Command;

use crate::gvisor::{EM_AARCH64, EM_X86_64, Elf};
use crate::support::installer::crun_payload;

/// The shared libraries a binary names (`readelf -d`, the DT_NEEDED entries).
fn needed_libraries(path: &std::path::Path) -> Vec<String> {
    let output = Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("readelf (binutils) is needed: {e}"));
    assert!(
        output.status.success(),
        "readelf -d {}: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("(NEEDED)"))
        .filter_map(|line| line.split('[').nth(1)?.split(']').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn crun_payload_is_built_for_each_architecture_with_only_glibc_and_libsystemd_shared() {
    for (arch, machine) in [("amd64", EM_X86_64), ("arm64", EM_AARCH64)] {
        let path = crun_payload(arch).join("crun");
        let elf = Elf::read(&path);
        assert_eq!(elf.machine, machine, "{}: e_machine", path.display());
        // The dynamic loader (ld-linux-*) is glibc's too.
        let mut needed: Vec<String> = needed_libraries(&path)
            .into_iter()
            .filter(|lib| !lib.starts_with("ld-linux"))
            .collect();
        needed.sort();
        assert_eq!(
            needed,
            ["libc.so.6", "libsystemd.so.0"],
            "{}: libseccomp, libcap and yajl are linked in; only glibc and libsystemd are the node's",
            path.display()
        );
    }
}
