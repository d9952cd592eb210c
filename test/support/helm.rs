//! The seed chart through the real `helm` (HELM_BIN): lint it and render it into objects.
//! Test crates include this file as a module of their own (`#[path]`), next to `support`.
//! A missing helm fails the test and names the command that builds it.

#![allow(dead_code)] // each test crate uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The chart directory in this repository.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/gardener-extension-containerd-shim")
}

/// A file of the repository.
pub fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The helm binary `make tools` built, named by HELM_BIN.
pub fn helm_bin() -> PathBuf {
    let hint = "build the tools with `make tools` and export their paths with \
                `source <(hack/tools/env.sh | sed 's/^/export /')` (`make test` does both)";
    let path = std::env::var_os("HELM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("HELM_BIN is not set; {hint}"));
    if !path.is_file() {
        panic!("HELM_BIN={} does not exist; {hint}", path.display());
    }
    path
}

/// Runs helm with `args`; returns stdout, or fails the test with helm's stderr.
pub fn helm(args: &[&str]) -> String {
    let output = helm_output(args);
    if !output.0 {
        panic!("helm {} failed:\n{}", args.join(" "), output.2);
    }
    output.1
}

/// Runs helm with `args`: (success, stdout, stderr).
pub fn helm_output(args: &[&str]) -> (bool, String, String) {
    let bin = helm_bin();
    let output = Command::new(&bin)
        .args(args)
        // Keep the developer's helm configuration (repositories, plugins) out of the tests.
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("containerd-shim-test-helm"),
        )
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("containerd-shim-test-helm"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("containerd-shim-test-helm"),
        )
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `helm template <release> <chart> --namespace <namespace> [-f file]...`, parsed into objects.
pub fn template(release: &str, namespace: &str, value_files: &[&Path]) -> Vec<Value> {
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    let files: Vec<String> = value_files
        .iter()
        .map(|f| f.to_string_lossy().into_owned())
        .collect();
    let mut args = vec!["template", release, &chart, "--namespace", namespace];
    for f in &files {
        args.extend(["--values", f.as_str()]);
    }
    parse(&helm(&args))
}

/// A YAML stream into its non-empty documents.
pub fn parse(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)
        .unwrap_or_else(|e| panic!("the rendered chart is not valid YAML: {e}\n{yaml}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The one object of `kind` (and `name`, when given); fails the test when there is not exactly
/// one.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: Option<&str>) -> &'a Value {
    let matches: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind && name.is_none_or(|n| o["metadata"]["name"] == n))
        .collect();
    match matches.as_slice() {
        [one] => one,
        _ => panic!(
            "expected exactly one {kind} {name:?} in the rendered chart, found {}: {:?}",
            matches.len(),
            kinds(objects)
        ),
    }
}

pub use crate::support::objects::kinds;

/// One (apiGroup, resource[/subresource], verb) a rule grants.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    pub group: String,
    pub resource: String,
    pub verb: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)
    }
}

/// Every (group, resource, verb) the `rules` of a ClusterRole or Role grant.
pub fn grants(rules: &Value) -> std::collections::BTreeSet<Grant> {
    named_grants(rules)
        .into_iter()
        .map(|(group, resource, verb, _)| Grant {
            group,
            resource,
            verb,
        })
        .collect()
}

/// Every rule as (group, resource, verb, resourceNames joined by ","), "" for any name.
pub fn named_grants(rules: &Value) -> std::collections::BTreeSet<(String, String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let mut out = std::collections::BTreeSet::new();
    for rule in rules.as_array().into_iter().flatten() {
        let names = strings(&rule["resourceNames"]).join(",");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.clone(), resource.clone(), verb, names.clone()));
                }
            }
        }
    }
    out
}
