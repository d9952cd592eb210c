//! gVisor on real nodes: the catalog's `gvisor` payload (runsc and containerd-shim-runsc-v1,
//! built by hack/tools/build.sh from the gvisor.dev/gvisor Go module).
//!
//! No pod runs under gVisor on these machines, and the test pins down why. gVisor's shim sets
//! its daemon's `oom_score_adj` to -999 when it starts a sandbox, which needs CAP_SYS_RESOURCE;
//! no process here has it (the reason the nodes' containerd runs with
//! `restrict_oom_score_adj`). The installer's verification starts a pod sandbox with the new
//! handler, sees the shim refuse it, and restores the node's configuration. (containerd's runc
//! shim cannot stand in: `runsc start` of a pod's second container hands its own stdout to the
//! sandbox, and the runc shim waits for that pipe to close.) What does run is runsc itself: a
//! container that each node's containerd starts with this build's runsc, through the runc
//! shim, sees gVisor's kernel.

use crate::scenario::{NODE_TIMEOUT, Scenario, assert_clean};
use crate::support::installer::gvisor_payload;
use crate::support::{poll, unique_name};
use serde_json::json;

/// The first line gVisor's kernel writes to its log; a Linux kernel never writes it.
const GVISOR_BOOT_LINE: &str = "Starting gVisor...";

/// What gVisor's shim reports when it cannot lower its daemon's `oom_score_adj`.
const OOM_SCORE_ERROR: &str = "failed to set OOM Score on shim";

/// Where the test puts the built runsc on a node, outside everything the installer owns.
const TEST_RUNSC_DIR: &str = "/var/lib/gvisor-test";

/// runsc's state root for that container (in the node's /run, a tmpfs of its own).
const TEST_RUNSC_ROOT: &str = "/run/gvisor-test";

#[tokio::test]
async fn gvisor_runsc_runs_a_container_on_both_nodes_and_its_shim_is_refused_and_rolled_back() {
    let s = Scenario::start("gvisor").await;
    let originals = s.nodes.containerd_configs();

    // The node's containerd runs a container with this build's runsc: it sees gVisor's
    // kernel, not the node's.
    let built = gvisor_payload("amd64").join("runsc");
    for node in &s.nodes.nodes {
        std::fs::create_dir_all(node.path(TEST_RUNSC_DIR)).unwrap();
        let runsc = format!("{TEST_RUNSC_DIR}/runsc");
        std::fs::copy(&built, node.path(&runsc)).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; build it with `make tools` (hack/tools/build.sh)",
                built.display()
            )
        });
        let id = unique_name("gvisor-ctr");
        // A state root of its own: runsc's state (its `null-netns` file among it) would
        // otherwise stay in runc's root of the k8s.io namespace, which runc and crun list.
        node.run(&["mkdir", "-p", TEST_RUNSC_ROOT]);
        // ctr runs only what the node's image store holds: the CRI pulls the workload from the
        // registry as a pod's image would be.
        let workload = s.nodes.image("WORKLOAD_IMAGE");
        if !node.has_image(workload) {
            node.run(&["crictl", "pull", workload]);
        }
        let output = node.run(&[
            "ctr",
            "--namespace",
            "k8s.io",
            "run",
            "--rm",
            "--runtime",
            "io.containerd.runc.v2",
            "--runc-binary",
            &runsc,
            "--runc-root",
            TEST_RUNSC_ROOT,
            workload,
            &id,
            "sh",
            "-c",
            "dmesg; cat /proc/version",
        ]);
        std::fs::remove_dir_all(node.path(TEST_RUNSC_DIR)).unwrap();
        // runsc leaves its network namespace file bind-mounted in its root.
        node.run(&[
            "sh",
            "-c",
            &format!(
                "grep -o ' {TEST_RUNSC_ROOT}/[^ ]*' /proc/self/mountinfo | sort -r | xargs -r umount \
                 && rm -rf {TEST_RUNSC_ROOT}"
            ),
        ]);
        assert!(
            output.contains(GVISOR_BOOT_LINE),
            "{}: no gVisor kernel log: {output}",
            node.name
        );
        let host_version = node.run(&["cat", "/proc/version"]);
        assert!(
            !output.contains(host_version.trim()),
            "{}: the container saw the node's kernel: {output}",
            node.name
        );
    }

    // The catalog entry through the extension: the first node's verification starts a pod
    // sandbox with gVisor's shim, which refuses it, and the installer restores the node.
    s.apply(json!([{"name": "gvisor"}])).await;
    let message = s
        .wait_health("to name the failed shim", |m| m.contains("gvisor on node-"))
        .await;
    assert!(message.contains("pod sandbox"), "{message}");
    let (failed, original) = s
        .nodes
        .nodes
        .iter()
        .zip(&originals)
        .find(|(n, _)| message.contains(&format!("gvisor on {}:", n.name)))
        .unwrap_or_else(|| panic!("no node named in {message:?}"));
    poll::until(
        &format!(
            "the installer on {} to report the shim's refusal and the rollback",
            failed.name
        ),
        NODE_TIMEOUT,
        || async {
            let logs: String = failed
                .tree("/var/log/pods")
                .into_iter()
                .filter(|(file, _)| file.starts_with("kube-system_containerd-shim-installer-"))
                .map(|(_, content)| String::from_utf8_lossy(&content).into_owned())
                .collect();
            if logs.contains(OOM_SCORE_ERROR)
                && logs.contains("the previous configuration was restored")
            {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await;
    assert_eq!(
        &failed.containerd_config(),
        original,
        "{}: not restored",
        failed.name
    );

    // Removing it leaves the nodes as they were.
    s.delete().await;
    for (node, original) in s.nodes.nodes.iter().zip(&originals) {
        assert_clean(&s.c, node).await;
        assert_eq!(&node.containerd_config(), original, "{}", node.name);
    }
}

/// The gvisor payload's binaries for every architecture the catalog offers are static
/// executables for that machine (no arm64 node runs here, so the header is the check).
#[test]
fn gvisor_payload_binaries_are_static_for_each_architecture() {
    for (arch, machine) in [("amd64", EM_X86_64), ("arm64", EM_AARCH64)] {
        for binary in ["runsc", "containerd-shim-runsc-v1"] {
            let path = gvisor_payload(arch).join(binary);
            let elf = Elf::read(&path);
            assert_eq!(elf.machine, machine, "{}: e_machine", path.display());
            assert_eq!(
                elf.kind,
                ET_EXEC,
                "{}: not a static executable",
                path.display()
            );
            assert!(
                !elf.segments.contains(&PT_INTERP) && !elf.segments.contains(&PT_DYNAMIC),
                "{}: dynamically linked (segments {:?})",
                path.display(),
                elf.segments
            );
        }
    }
}

pub(crate) const EM_X86_64: u16 = 0x3e;
pub(crate) const EM_AARCH64: u16 = 0xb7;
const ET_EXEC: u16 = 2;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;

/// The fields of a 64-bit little-endian ELF header that say what a binary runs on.
pub(crate) struct Elf {
    kind: u16,
    pub(crate) machine: u16,
    segments: Vec<u32>,
}

impl Elf {
    pub(crate) fn read(path: &std::path::Path) -> Elf {
        let bytes = std::fs::read(path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; build it with `make tools` (hack/tools/build.sh)",
                path.display()
            )
        });
        assert!(
            bytes.len() >= 64 && bytes[..4] == *b"\x7fELF",
            "{}: not ELF",
            path.display()
        );
        assert_eq!(bytes[4], 2, "{}: not ELF64", path.display());
        assert_eq!(bytes[5], 1, "{}: not little-endian", path.display());
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let phoff = usize::try_from(u64_at(32)).unwrap();
        let phentsize = usize::from(u16_at(54));
        let phnum = usize::from(u16_at(56));
        let segments = (0..phnum).map(|i| u32_at(phoff + i * phentsize)).collect();
        Elf {
            kind: u16_at(16),
            machine: u16_at(18),
            segments,
        }
    }
}
