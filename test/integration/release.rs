//! `hack/release.sh` (what `make release REGISTRY=…` runs) against the control plane's registry:
//! every published image lands as an image index with the platforms its catalog entry (or the
//! image vector) claims, the chart is pullable from the registry, and the registration names it
//! by the digest that landed. The controller and installer are the dev builds the other tests
//! made (RELEASE_PROFILE=dev), so the run mostly assembles and pushes.

use std::collections::BTreeSet;
use std::process::Command;

use gardener_extension_containerd_shim::shim::config::Catalog;
use serde_json::Value;

use crate::chart::helm;
use crate::chart_oci::{Registry, crane, registry, repo_path, run};
use crate::support::{Env, unique_name};

/// `KEY=value` lines of release.env.
fn release_env(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("release.env has no {key}:\n{text}"))
        .to_owned()
}

/// The platforms (os/architecture) of the image index at `reference`.
fn index_platforms(registry: &Registry, reference: &str) -> BTreeSet<String> {
    let index: Value = serde_json::from_str(&run(crane(registry).args(["manifest", reference])))
        .unwrap_or_else(|e| panic!("{reference}: the manifest is not JSON: {e}"));
    assert_eq!(
        index["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{reference} is not an image index: {index}"
    );
    index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or_default(),
                m["platform"]["architecture"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn platforms(archs: &[&str]) -> BTreeSet<String> {
    archs.iter().map(|a| format!("linux/{a}")).collect()
}

#[test]
fn release_pushes_every_image_for_its_platforms_and_the_chart() {
    let env = Env::load();
    let registry = registry(&env);
    let dir = tempfile::tempdir().expect("temporary directory");
    let helm_home = dir.path().join("helm");
    let target = format!("{}/{}", registry.address, unique_name("release"));
    let out = dir.path().join("release");

    run(Command::new(repo_path("hack/release.sh"))
        .arg(&target)
        .arg(&out)
        .env("RELEASE_CA_FILE", &registry.ca)
        .env("RELEASE_PROFILE", "dev")
        .env("HELM_CONFIG_HOME", &helm_home)
        .env("HELM_CACHE_HOME", &helm_home)
        .env("HELM_DATA_HOME", &helm_home));
    let released = std::fs::read_to_string(out.join("release.env")).expect("release.env");
    let version = env!("CARGO_PKG_VERSION");
    let images = format!("{target}/gardener/extensions");

    // Each payload of ours under its tag (the catalog version), for exactly the architectures
    // its catalog entry offers, and the same digest the release recorded.
    let catalog = Catalog::builtin().expect("built-in catalog");
    for (entry, repository, name) in [
        ("crun", "containerd-shim-payload/crun", "PAYLOAD_CRUN"),
        ("gvisor", "containerd-shim-payload/gvisor", "PAYLOAD_GVISOR"),
        (
            "wasmtime",
            "containerd-shim-payload/wasmtime",
            "PAYLOAD_WASMTIME",
        ),
    ] {
        let entry = catalog.get(entry).expect("catalog entry");
        let tag = &entry.default_version;
        let reference = format!("{images}/{repository}:{tag}");
        let offered: Vec<&str> = entry.architectures.iter().map(|a| a.as_str()).collect();
        assert_eq!(
            index_platforms(&registry, &reference),
            platforms(&offered),
            "{reference}"
        );
        let digest = run(crane(&registry).args(["digest", &reference]));
        assert_eq!(
            release_env(&released, &format!("{name}_IMAGE")),
            format!("{images}/{repository}@{}", digest.trim())
        );
    }

    // The controller and the installer, tagged with the release version, for this machine.
    let host_arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no image platform for {other}"),
    };
    for repository in ["containerd-shim", "containerd-shim-installer"] {
        let reference = format!("{images}/{repository}:v{version}");
        assert_eq!(
            index_platforms(&registry, &reference),
            platforms(&[host_arch]),
            "{reference}"
        );
    }

    // The chart: pullable with helm from the registry, the crate's version, and the
    // registration pins the digest that landed.
    let chart = release_env(&released, "CHART");
    let chart_digest = release_env(&released, "CHART_DIGEST");
    assert_eq!(
        chart,
        format!("{target}/charts/gardener/extensions/gardener-extension-containerd-shim:{version}")
    );
    let pulled = dir.path().join("pulled");
    std::fs::create_dir(&pulled).expect("the pull destination");
    let (repository, _) = chart.rsplit_once(':').expect("the chart has a tag");
    let pull = |args: &[&str]| {
        let output = Command::new(helm::helm_bin())
            .args(args)
            .env("HELM_CONFIG_HOME", &helm_home)
            .env("HELM_CACHE_HOME", &helm_home)
            .env("HELM_DATA_HOME", &helm_home)
            .output()
            .expect("helm");
        assert!(
            output.status.success(),
            "helm {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    };
    let report = pull(&[
        "pull",
        &format!("oci://{repository}"),
        "--version",
        version,
        "--ca-file",
        &registry.ca.to_string_lossy(),
        "--destination",
        &pulled.to_string_lossy(),
    ]);
    assert!(report.contains(&chart_digest), "{report}");
    assert!(
        pulled
            .join(format!("gardener-extension-containerd-shim-{version}.tgz"))
            .is_file(),
        "helm pull wrote no chart: {report}"
    );
    let registration = std::fs::read_to_string(out.join("controller-registration.yaml"))
        .expect("the release's registration");
    assert!(
        registration.contains(&format!("digest: {chart_digest}")),
        "{registration}"
    );
}
