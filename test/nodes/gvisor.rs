//! gVisor on real nodes: the catalog's `gvisor` payload (runsc and containerd-shim-runsc-v1,
//! built by hack/tools/build.sh from the gvisor.dev/gvisor Go module) installed through the
//! extension on both containerd versions.
//!
//! No pod runs under gVisor on these machines, and the test pins down why. gVisor's shim sets
//! its daemon's `oom_score_adj` to -999 when it starts a sandbox, which needs CAP_SYS_RESOURCE;
//! no process here has it (the reason the nodes' containerd runs with
//! `restrict_oom_score_adj`), and the shim refuses every pod. (containerd's runc shim cannot
//! stand in: `runsc start` of a pod's second container hands its own stdout to the sandbox,
//! and the runc shim waits for that pipe to close.) What does run is the installed runsc itself:
//! a container that the node's containerd starts with it through the runc shim sees gVisor's
//! kernel.

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::scenario::{NODE_TIMEOUT, STATE_DIR, Scenario, assert_clean};
use crate::support::installer::{gvisor_payload, pinned_version};
use crate::support::{poll, unique_name};

/// The first line gVisor's kernel writes to its log; a Linux kernel never writes it.
const GVISOR_BOOT_LINE: &str = "Starting gVisor...";

/// What gVisor's shim reports when it cannot lower its daemon's `oom_score_adj`.
const OOM_SCORE_ERROR: &str = "failed to set OOM Score on shim";

#[tokio::test]
async fn gvisor_installs_on_both_containerd_versions_and_its_runsc_runs_a_container() {
    let s = Scenario::start("gvisor").await;
    let version = pinned_version("GVISOR_VERSION");
    let originals: Vec<_> = s
        .nodes
        .nodes
        .iter()
        .map(|n| n.containerd_config())
        .collect();

    s.apply(json!([{"name": "gvisor"}])).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("runsc").await;

    let bin = format!("{STATE_DIR}/current/gvisor/bin");
    let runsc = format!("{bin}/runsc");
    for node in &s.nodes.nodes {
        // The installed files are this repository's build of the pinned version.
        let runsc_version = node.run(&[&runsc, "--version"]);
        assert!(
            runsc_version.contains(&format!("runsc version {version}")),
            "{}: {runsc_version}",
            node.name
        );
        assert!(node.exists(&format!("{bin}/containerd-shim-runsc-v1")));
        let config = String::from_utf8(
            node.read(&format!("{STATE_DIR}/current/gvisor/config/runsc.toml"))
                .expect("runsc.toml installed"),
        )
        .unwrap();
        assert!(
            config.contains(&format!("binary_name = \"{runsc}\"")),
            "{}: {config}",
            node.name
        );

        // The node's containerd runs a container with the installed runsc: it sees gVisor's
        // kernel, not the node's.
        let id = unique_name("gvisor-ctr");
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
            s.nodes.image("WORKLOAD_IMAGE"),
            &id,
            "sh",
            "-c",
            "dmesg; cat /proc/version",
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

        // A pod of the RuntimeClass: gVisor's shim refuses it on these machines.
        let refused = s
            .create_pod(
                node,
                "gvisor",
                json!({"runtimeClassName": "gvisor",
                       "containers": [{"name": "main", "image": s.nodes.image("WORKLOAD_IMAGE"),
                                       "imagePullPolicy": "IfNotPresent",
                                       "command": ["sh", "-c", "sleep 3600"]}]}),
            )
            .await;
        wait_event(&s, &refused, OOM_SCORE_ERROR).await;
    }

    // Removing it (the refused pods go first) leaves the nodes as they were.
    s.delete_workloads_except(&[]).await;
    s.delete().await;
    for (node, original) in s.nodes.nodes.iter().zip(&originals) {
        assert_clean(&s.c, node).await;
        assert_eq!(&node.containerd_config(), original, "{}", node.name);
    }
}

/// Waits for an event of the pod whose message contains `text`.
async fn wait_event(s: &Scenario, pod: &str, text: &str) {
    let events: Api<Event> = Api::namespaced(s.c.shoot.clone(), &s.workloads);
    poll::until(
        &format!("an event of {pod} saying {text:?}"),
        NODE_TIMEOUT,
        || async {
            let list = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
                .await
                .map_err(|e| e.to_string())?;
            let messages: Vec<String> = list.items.into_iter().filter_map(|e| e.message).collect();
            if messages.iter().any(|m| m.contains(text)) {
                Ok(())
            } else {
                Err(format!("{messages:?}"))
            }
        },
    )
    .await;
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

const EM_X86_64: u16 = 0x3e;
const EM_AARCH64: u16 = 0xb7;
const ET_EXEC: u16 = 2;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;

/// The fields of a 64-bit little-endian ELF header that say what a binary runs on.
struct Elf {
    kind: u16,
    machine: u16,
    segments: Vec<u32>,
}

impl Elf {
    fn read(path: &std::path::Path) -> Elf {
        let bytes = std::fs::read(path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; build it with `hack/tools/build.sh gvisor`",
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
