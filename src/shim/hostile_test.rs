//! Hostile providerConfigs through every step that reads one (see [`super::plan`]): reconcile
//! and restore, delete, the health check, the offline renderer and the OperatingSystemConfig
//! webhook. Huge and negative numbers, long lists, deep nesting, megabyte strings and duplicate
//! keys each end in a configuration
//! error or, on delete, in the safe defaults; never in a panic or an allocation that grows with
//! the value. The memory bound is measured as the peak resident set of a child process that
//! runs every case, under an address-space limit that turns a runaway allocation into a
//! failure of that child instead of an exhausted machine.

use std::process::Command;

use serde_json::Value;

use crate::gardener::api::{ErrorCode, Extension, ExtensionSpec, Shoot};
use crate::gardener::error_codes::CodedError;
use crate::gardener::imagevector::ImageVector;
use crate::gardener::managed_resource::Manifest;
use crate::shim::config::test_support::{pool, shoot_with};
use crate::shim::config::{Catalog, images};
use crate::shim::error::ShimError;
use crate::shim::offline::{OfflineError, render_extension};
use crate::shim::plan::Plan;

const HEADER: &str = r#""apiVersion":"containerd-shim.extensions.gardener.cloud/v1alpha1","kind":"ContainerdShimConfig""#;

/// How far the steps of one case may raise the resident set above what it is with the case's
/// inputs built. One unbounded Lease list for 4 000 000 000 slots would take 96 GB.
const STEP_RISE_LIMIT_KIB: u64 = 32 * 1024;

/// The child's resident set after every case, twice (catalog, image vector and the freed
/// inputs' pages the allocator keeps included): nothing of one case may pile up.
const END_RSS_LIMIT_KIB: u64 = 256 * 1024;

/// The child's address-space limit: far above what it needs (thread stacks and allocator
/// arenas are reserved, not used), far below what a runaway allocation asks for.
const ADDRESS_SPACE_LIMIT_KIB: u64 = 4 * 1024 * 1024;

/// What one case must come to.
#[derive(Clone, Copy)]
enum Expect {
    /// A configuration error naming this text; delete uses the safe defaults (one slot).
    Invalid(&'static str),
    /// Valid, with this many restart slots.
    Valid { slots: usize },
}

struct Case {
    name: &'static str,
    /// The raw JSON text of `spec.providerConfig`, as the API server would send it.
    provider_config: String,
    expect: Expect,
}

fn cfg(rest: &str) -> String {
    format!("{{{HEADER},{rest}}}")
}

fn shims(body: &str) -> String {
    cfg(&format!(r#""shims":[{body}]"#))
}

fn repeated(item: &str, n: usize) -> String {
    vec![item; n].join(",")
}

fn keys(n: usize, value: &str) -> String {
    (0..n)
        .map(|i| format!(r#""k{i}":{value}"#))
        .collect::<Vec<_>>()
        .join(",")
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let mib = "x".repeat(1 << 20);
    let case = |name, provider_config: String, expect| Case {
        name,
        provider_config,
        expect,
    };
    let restarts = |n: &str| cfg(&format!(r#""rollout":{{"maxConcurrentRestarts":{n}}}"#));
    let unavailable = |n: &str| cfg(&format!(r#""rollout":{{"maxUnavailable":{n}}}"#));
    let bad_restarts = Invalid("providerConfig.rollout.maxConcurrentRestarts");
    let bad_unavailable = Invalid("providerConfig.rollout.maxUnavailable");
    vec![
        // Numbers.
        case(
            "4 000 000 000 restarts",
            restarts("4000000000"),
            bad_restarts,
        ),
        case("u32::MAX restarts", restarts("4294967295"), bad_restarts),
        case(
            "u64::MAX restarts",
            restarts("18446744073709551615"),
            bad_restarts,
        ),
        case("1e30 restarts", restarts("1e30"), bad_restarts),
        case("-1 restarts", restarts("-1"), bad_restarts),
        case(
            "i64::MIN restarts",
            restarts("-9223372036854775808"),
            bad_restarts,
        ),
        case("0 restarts", restarts("0"), bad_restarts),
        case("1.5 restarts", restarts("1.5"), bad_restarts),
        case("101 restarts", restarts("101"), bad_restarts),
        case("100 restarts", restarts("100"), Valid { slots: 100 }),
        case(
            "i32::MAX unavailable",
            unavailable("2147483647"),
            Valid { slots: 1 },
        ),
        case(
            "i64::MAX unavailable",
            unavailable("9223372036854775807"),
            bad_unavailable,
        ),
        case(
            "negative unavailable",
            unavailable("-2147483648"),
            bad_unavailable,
        ),
        case(
            "4e9 percent",
            unavailable(r#""4000000000%""#),
            bad_unavailable,
        ),
        case("negative percent", unavailable(r#""-5%""#), bad_unavailable),
        case(
            "huge option integer",
            shims(
                r#"{"name":"foo","custom":{"runtimeType":"io.containerd.foo.v1","version":"v1","binaries":[]},"options":{"A":99999999999999999999}}"#,
            ),
            Invalid("providerConfig.shims[0].options[A]"),
        ),
        // Long lists and maps.
        case(
            "100 000 shims",
            cfg(&format!(
                r#""shims":[{}]"#,
                repeated(r#"{"name":"spin"}"#, 100_000)
            )),
            Invalid("providerConfig"),
        ),
        case(
            "64 shims",
            cfg(&format!(
                r#""shims":[{}]"#,
                repeated(r#"{"name":"spin"}"#, 64)
            )),
            Invalid("providerConfig.shims: 64 entries exceed the limit of 16"),
        ),
        case(
            "10 000 worker pools",
            shims(&format!(
                r#"{{"name":"spin","workerPools":[{}]}}"#,
                repeated(r#""worker-a""#, 10_000)
            )),
            Invalid("providerConfig.shims[0].workerPools"),
        ),
        case(
            "10 000 tolerations",
            shims(&format!(
                r#"{{"name":"spin","runtimeClass":{{"tolerations":[{}]}}}}"#,
                repeated(r#"{"operator":"Exists"}"#, 10_000)
            )),
            Invalid("providerConfig.shims[0].runtimeClass.tolerations"),
        ),
        case(
            "10 000 option keys",
            shims(&format!(
                r#"{{"name":"spin","options":{{{}}}}}"#,
                keys(10_000, "true")
            )),
            Invalid("providerConfig.shims[0].options"),
        ),
        case(
            "10 000 node-selector keys",
            shims(&format!(
                r#"{{"name":"spin","nodeSelector":{{{}}}}}"#,
                keys(10_000, r#""v""#)
            )),
            Invalid("providerConfig.shims[0].nodeSelector"),
        ),
        case(
            "10 000 pod annotations",
            shims(&format!(
                r#"{{"name":"spin","podAnnotations":[{}]}}"#,
                repeated(r#""a/*""#, 10_000)
            )),
            Invalid("providerConfig.shims[0].podAnnotations"),
        ),
        case(
            "10 000 custom binaries",
            shims(&format!(
                r#"{{"name":"foo","custom":{{"runtimeType":"io.containerd.foo.v1","version":"v1","binaries":[{}]}}}}"#,
                repeated(r#"{"name":"b"}"#, 10_000)
            )),
            Invalid("providerConfig.shims[0].custom.binaries"),
        ),
        // Nesting.
        case(
            "nesting 13",
            shims(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(13)
            )),
            Invalid("nesting exceeds the limit of 12 levels"),
        ),
        case(
            "nesting 300",
            shims(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(300)
            )),
            Invalid("providerConfig: nesting exceeds the limit"),
        ),
        case(
            "nesting 100 000",
            shims(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(100_000)
            )),
            Invalid("providerConfig: nesting exceeds the limit"),
        ),
        // Megabyte strings.
        case(
            "1 MiB shim name",
            shims(&format!(r#"{{"name":"{mib}"}}"#)),
            Invalid("providerConfig"),
        ),
        case(
            "1 MiB option key",
            shims(&format!(r#"{{"name":"spin","options":{{"{mib}":true}}}}"#)),
            Invalid("providerConfig"),
        ),
        case(
            "1 MiB maxUnavailable",
            unavailable(&format!(r#""{mib}""#)),
            Invalid("providerConfig"),
        ),
        case(
            "5000-character handler",
            shims(&format!(
                r#"{{"name":"spin","runtimeClass":{{"handler":"{}"}}}}"#,
                "h".repeat(5000)
            )),
            Invalid("providerConfig.shims[0].runtimeClass.handler"),
        ),
        case(
            "4096-character handler",
            shims(&format!(
                r#"{{"name":"spin","runtimeClass":{{"handler":"{}"}}}}"#,
                "h".repeat(4096)
            )),
            Invalid("providerConfig.shims[0].runtimeClass.handler"),
        ),
        // Duplicate keys: the last one counts, as in the API server.
        case(
            "duplicate rollout, last hostile",
            cfg(
                r#""rollout":{"maxConcurrentRestarts":3},"rollout":{"maxConcurrentRestarts":4000000000}"#,
            ),
            bad_restarts,
        ),
        case(
            "duplicate rollout, last good",
            cfg(
                r#""rollout":{"maxConcurrentRestarts":4000000000},"rollout":{"maxConcurrentRestarts":3}"#,
            ),
            Valid { slots: 3 },
        ),
        case(
            "duplicate field inside rollout",
            cfg(r#""rollout":{"maxConcurrentRestarts":4000000000,"maxConcurrentRestarts":2}"#),
            Valid { slots: 2 },
        ),
        // The largest valid configuration: every catalog-free limit at its maximum.
        case(
            "16 custom shims at their limits",
            cfg(&format!(
                r#""shims":[{}],"rollout":{{"maxConcurrentRestarts":100,"maxUnavailable":"100%"}}"#,
                (0..16).map(largest_shim).collect::<Vec<_>>().join(",")
            )),
            Valid { slots: 100 },
        ),
    ]
}

/// A custom shim with 8 binaries, 32 options, 16 tolerations, 16 node-selector labels and
/// 16 pod annotations.
fn largest_shim(i: usize) -> String {
    let sha = "a".repeat(64);
    let binaries = (0..8)
        .map(|b| {
            format!(
                r#"{{"name":"bin-{b}","url":{{"amd64":{{"url":"https://example.com/{i}/{b}","sha256":"{sha}"}}}}}}"#
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    let options = (0..32)
        .map(|o| format!(r#""Option{o}":"{}""#, "v".repeat(8)))
        .collect::<Vec<_>>()
        .join(",");
    let tolerations = (0..16)
        .map(|t| format!(r#"{{"key":"example.com/t{t}","operator":"Exists"}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let selector = (0..16)
        .map(|l| format!(r#""example.com/l{l}":"v""#))
        .collect::<Vec<_>>()
        .join(",");
    let annotations = (0..16)
        .map(|a| format!(r#""example.com/a{a}""#))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        r#"{{"name":"shim-{i}","custom":{{"runtimeType":"io.containerd.shim{i}.v1","version":"v1","binaries":[{binaries}]}},"options":{{{options}}},"runtimeClass":{{"tolerations":[{tolerations}]}},"nodeSelector":{{{selector}}},"podAnnotations":[{annotations}],"workerPools":["worker-a","worker-b"]}}"#
    )
}

/// Every containerd pool amd64, so that the largest case's custom shims (amd64 downloads only)
/// are valid on all of them.
fn shoot() -> Shoot {
    shoot_with(vec![
        pool("worker-a", None, None),
        pool("worker-b", Some("containerd"), None),
        pool("legacy", Some("docker"), None),
    ])
}

fn fixtures() -> (Catalog, ImageVector) {
    (
        Catalog::builtin().unwrap(),
        images::embedded().expect("embedded image vector"),
    )
}

/// The Extension as the controller decodes it from the API server's JSON.
fn extension_from_wire(provider_config: &str) -> Extension {
    let text = format!(
        r#"{{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Extension","metadata":{{"name":"containerd-shim","namespace":"shoot--p--s"}},"spec":{{"type":"containerd-shim","providerConfig":{provider_config}}}}}"#
    );
    serde_json::from_str(&text).expect("the Extension envelope decodes")
}

/// The same providerConfig as a value, bypassing the wire's size limit (as a bare
/// providerConfig file of the offline renderer does); `None` when it is no value.
fn extension_from_value(provider_config: &str) -> Option<Extension> {
    let value: Value = serde_json::from_str(provider_config).ok()?;
    let mut ext = Extension::new(
        "containerd-shim",
        ExtensionSpec {
            type_: "containerd-shim".into(),
            class: None,
            provider_config: Some(value),
            provider_config_error: None,
        },
    );
    ext.metadata.namespace = Some("shoot--p--s".into());
    Some(ext)
}

/// The restart-budget Lease names the bundle's Role grants.
fn role_leases(manifests: &[Manifest]) -> usize {
    let role = manifests
        .iter()
        .map(Manifest::value)
        .find(|v| v["kind"] == "Role")
        .expect("the bundle has a Role");
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|rule| rule["resourceNames"].as_array())
        .map(Vec::len)
        .sum()
}

fn check_config_error(case: &str, error: &ShimError, needle: &str) {
    let text = error.to_string();
    assert!(
        matches!(error, ShimError::Config(_)),
        "{case}: not a configuration error: {text:.300}"
    );
    assert_eq!(
        error.codes(),
        vec![ErrorCode::ConfigurationProblem],
        "{case}"
    );
    assert!(
        text.contains(needle),
        "{case}: {needle:?} not in {text:.300}"
    );
}

/// Every step that reads the providerConfig, on one Extension.
fn drive(case: &Case, ext: &Extension, shoot: &Shoot, plan: Plan<'_>) {
    let name = case.name;
    let install = plan.install(ext, shoot);
    let uninstall = plan
        .uninstall(ext, shoot)
        .unwrap_or_else(|e| panic!("{name}: delete must not fail on the providerConfig: {e}"));
    let health = plan.health(ext, shoot);
    let rendered = render_extension(ext, shoot, plan.catalog, plan.images);
    let osc = crate::shim::osc::admit::wanted(
        &crate::shim::osc::admit::Facts {
            extension: Some(ext),
            shoot: Ok(Some(shoot)),
        },
        &plan,
    );
    match &case.expect {
        Expect::Invalid(needle) => {
            let refused = osc.expect_err(name);
            assert!(
                refused.contains(needle),
                "{name}: the OSC webhook: {refused:.300}"
            );
            match &install {
                Ok(_) => panic!("{name}: reconcile accepted it"),
                Err(e) => check_config_error(name, e, needle),
            }
            let ignored = uninstall
                .invalid_config
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: delete did not notice the invalid config"));
            assert!(ignored.to_string().contains(needle), "{name}: {ignored}");
            assert_eq!(role_leases(&uninstall.manifests), 1, "{name}: safe default");
            assert!(health.is_none(), "{name}: health counted nodes");
            match rendered {
                Err(OfflineError::Extension { description, codes }) => {
                    assert!(description.contains(needle), "{name}: {description:.300}");
                    assert_eq!(codes, vec![ErrorCode::ConfigurationProblem], "{name}");
                }
                other => panic!("{name}: render: {other:?}"),
            }
        }
        Expect::Valid { slots } => {
            osc.unwrap_or_else(|e| panic!("{name}: the OSC webhook: {e}"));
            let manifests = install.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(role_leases(&manifests), *slots, "{name}");
            assert!(uninstall.invalid_config.is_none(), "{name}");
            assert_eq!(role_leases(&uninstall.manifests), *slots, "{name}");
            assert!(health.is_some(), "{name}");
            let yaml = rendered.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(yaml.starts_with("---\n"), "{name}");
        }
    }
}

/// Drives every case; `measure` wraps the steps of each (the inputs are built outside it).
fn run_every_case(mut measure: impl FnMut(&str, &mut dyn FnMut())) {
    let (catalog, images) = fixtures();
    let plan = Plan {
        catalog: &catalog,
        images: &images,
    };
    let shoot = shoot();
    for case in cases() {
        let from_wire = extension_from_wire(&case.provider_config);
        // Only the wire limits megabyte texts; the value path must hold without it.
        let from_value = extension_from_value(&case.provider_config);
        measure(case.name, &mut || {
            drive(&case, &from_wire, &shoot, plan);
            if let Some(ext) = &from_value {
                drive(&case, ext, &shoot, plan);
            }
        });
    }
}

/// A figure of `/proc/self/status`, in KiB.
fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// Resets the kernel's resident-set peak (`VmHWM`) to the current resident set.
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
}

#[test]
fn every_hostile_case_ends_in_an_error_or_the_safe_defaults() {
    run_every_case(|_, steps| steps());
}

/// Run by [`every_path_stays_within_bounded_memory`] in a process of its own: for each case,
/// how far the resident set rose above what it was with the case's inputs built.
#[test]
#[ignore = "the child of every_path_stays_within_bounded_memory, which runs it"]
fn hostile_cases_in_a_child_process() {
    // Twice: a second pass over the same inputs shows whether anything was retained.
    for pass in 1..=2 {
        run_every_case(|name, steps| {
            reset_peak_rss();
            let before = proc_status_kib("VmRSS:");
            steps();
            let rise = proc_status_kib("VmHWM:").saturating_sub(before);
            println!("\nRSS_RISE_KIB pass={pass} rise={rise} case={name}");
        });
    }
    println!("\nRSS_END_KIB {}", proc_status_kib("VmRSS:"));
}

#[test]
fn every_path_stays_within_bounded_memory() {
    let exe = std::env::current_exe().expect("the test binary");
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_LIMIT_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(&exe)
        .args([
            "shim::hostile_test::hostile_cases_in_a_child_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child died ({}): {stdout:.2000}\n{stderr:.2000}",
        output.status
    );
    let mut rises = Vec::new();
    let mut end = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("RSS_RISE_KIB ") {
            let field = |name: &str| {
                rest.split(' ')
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or_default()
                    .to_string()
            };
            let rise: u64 = field("rise=").parse().expect("a rise in KiB");
            let case = rest.split("case=").nth(1).unwrap_or_default().to_string();
            rises.push((field("pass="), case, rise));
        } else if let Some(rest) = line.strip_prefix("RSS_END_KIB ") {
            end = rest.trim().parse::<u64>().ok();
        }
    }
    assert_eq!(
        rises.len(),
        2 * cases().len(),
        "the child did not run every case: {stdout:.3000}"
    );
    let largest = rises
        .iter()
        .max_by_key(|(_, _, rise)| *rise)
        .expect("cases");
    let end = end.expect("the child's final resident set");
    eprintln!(
        "largest rise of the resident set over one case's steps: {} KiB ({}, pass {}); \
         the child's resident set at the end: {end} KiB",
        largest.2, largest.1, largest.0
    );
    for (pass, case, rise) in &rises {
        assert!(
            *rise <= STEP_RISE_LIMIT_KIB,
            "{case} (pass {pass}): the steps raised the resident set by {rise} KiB, more than \
             {STEP_RISE_LIMIT_KIB} KiB"
        );
    }
    assert!(
        end <= END_RSS_LIMIT_KIB,
        "the child ended with {end} KiB resident, more than {END_RSS_LIMIT_KIB} KiB"
    );
}
