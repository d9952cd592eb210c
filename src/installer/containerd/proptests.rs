//! Property tests: over generated configs (versions, foreign tables, comments, indentation,
//! CRLF, missing final newline) and generated runtimes (handler names, option maps of every
//! type), install is idempotent, never changes or drops a byte of the original, and uninstall
//! gives the original back byte for byte. Over foreign documents spelled every way TOML allows
//! ([`super::foreign_docs`]), an install only adds lines: no line that is not ours changes,
//! except the one `imports` entry a containerd 2.x main file gets when nothing imports our
//! drop-in yet.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use toml_edit::{DocumentMut, Item, Value};

use crate::desired_shims::OptionValue;

use super::foreign_docs::{foreign_document, imports_lines, line_changes, seeds};
use super::test_support::install;
use super::*;

const MAIN: &str = "/etc/containerd/config.toml";
const FOREIGN: [&str; 3] = ["runc", "nvidia", "crun"];

fn option_value() -> impl Strategy<Value = OptionValue> {
    prop_oneof![
        any::<bool>().prop_map(OptionValue::Bool),
        any::<i64>().prop_map(OptionValue::Int),
        "[ -~]{0,16}".prop_map(OptionValue::String),
        "\\PC{0,8}".prop_map(OptionValue::String),
    ]
}

fn option_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Z][A-Za-z]{0,12}",
        "[a-z]{1,5}\\.[a-z]{1,5}",
        "[a-z]{1,4} [a-z]{1,4}",
    ]
}

fn handler() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,14}[a-z0-9])?"
        .prop_filter("foreign runtime names", |h| !FOREIGN.contains(&h.as_str()))
}

fn runtime(handler: String) -> impl Strategy<Value = RuntimeEntry> {
    (
        "io\\.containerd\\.[a-z]{1,8}\\.v[12]",
        "/opt/[a-z]{1,8}/containerd-shim-[a-z]{1,6}",
        prop::collection::btree_map(option_key(), option_value(), 0..4),
        prop::collection::vec("[a-z.*/]{1,12}", 0..3),
        any::<bool>(),
    )
        .prop_map(
            move |(runtime_type, runtime_path, options, pod_annotations, privileged)| {
                RuntimeEntry {
                    managed_key: Default::default(),
                    handler: handler.clone(),
                    runtime_type,
                    runtime_path,
                    pod_annotations,
                    privileged_without_host_devices: privileged,
                    options,
                    node_agent_dir: None,
                }
            },
        )
}

fn runtimes() -> impl Strategy<Value = Vec<RuntimeEntry>> {
    prop::collection::btree_set(handler(), 1..4)
        .prop_flat_map(|handlers| handlers.into_iter().map(runtime).collect::<Vec<_>>())
}

/// A containerd config as people and tools write them.
fn config() -> impl Strategy<Value = String> {
    let version = prop_oneof![
        Just(None),
        Just(Some(1)),
        Just(Some(2)),
        Just(Some(3)),
        Just(Some(4))
    ];
    (
        version,
        prop::sample::subsequence((0..4usize).collect::<Vec<_>>(), 0..4),
        prop::sample::subsequence((0..10usize).collect::<Vec<_>>(), 0..10)
            .prop_shuffle(),
        prop::collection::vec((any::<bool>(), 0..3usize, any::<bool>()), 10),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(version, top, tables, styles, imports, crlf, final_newline)| {
                let cri = match version {
                    None | Some(1) => "cri",
                    Some(2) => "\"io.containerd.grpc.v1.cri\"",
                    _ => "'io.containerd.cri.v1.runtime'",
                };
                let mut text = String::new();
                if let Some(v) = version {
                    text.push_str(&format!("version = {v}\n"));
                }
                let top_keys = [
                    "root = \"/var/lib/containerd\"\n",
                    "oom_score = -999 # keep\n",
                    "# a comment about the state dir\nstate = '/run/containerd'\n",
                    "disabled_plugins = [\n  \"io.containerd.internal.v1.tracing\",\n]\n",
                ];
                for index in top {
                    text.push_str(top_keys[index]);
                }
                if imports {
                    text.push_str("imports = [\"/etc/containerd/conf.d/*.toml\"]\n");
                }
                let bodies = [
                    "[grpc]\n@address = \"/run/containerd/containerd.sock\"\n".to_string(),
                    format!("[plugins.{cri}]\n@sandbox_image = \"registry.k8s.io/pause:3.10\"\n"),
                    format!("[plugins.{cri}.containerd]\n@snapshotter = \"overlayfs\" # fast\n"),
                    format!("[plugins.{cri}.containerd.runtimes.runc]\n@runtime_type = \"io.containerd.runc.v2\"\n"),
                    format!("[plugins.{cri}.containerd.runtimes.runc.options]\n@SystemdCgroup = true\n@IoUid = 0\n"),
                    format!("# GPU nodes\n[plugins.{cri}.containerd.runtimes.nvidia]\n@runtime_type = \"io.containerd.runc.v2\"\n@privileged_without_host_devices = false\n"),
                    format!("[plugins.{cri}.containerd.runtimes]\n"),
                    format!("[plugins.{cri}.registry]\n@config_path = \"/etc/containerd/certs.d\"\n"),
                    "[plugins.\"io.containerd.gc.v1.scheduler\"]\n@pause_threshold = 0.02\n".to_string(),
                    "[plugins]\n".to_string(),
                ];
                for index in tables {
                    let (indent, blank, comment) = styles[index];
                    text.push_str(&"\n".repeat(blank));
                    if comment {
                        text.push_str("# section\n");
                    }
                    let pad = if indent { "  " } else { "" };
                    let body = bodies[index]
                        .lines()
                        .map(|line| match line.strip_prefix('@') {
                            Some(key) => format!("{pad}  {key}\n"),
                            None => format!("{pad}{line}\n"),
                        })
                        .collect::<String>();
                    text.push_str(&body);
                }
                if !final_newline {
                    while text.ends_with('\n') {
                        text.pop();
                    }
                }
                if crlf {
                    text = text.replace('\n', "\r\n");
                }
                text
            },
        )
}

/// Whether `needle`'s bytes all appear in `haystack`, in order.
fn is_subsequence(needle: &str, haystack: &str) -> bool {
    let mut rest = haystack.bytes();
    needle.bytes().all(|b| rest.any(|h| h == b))
}

/// The typed value at `path` below a handler table, in whichever file holds it.
fn option_in(host: &MemoryHost, plan: &Plan, handler: &str, key: &str) -> Option<Value> {
    let owned = plan
        .ownership
        .files
        .iter()
        .find(|file| file.handler(handler).is_some())?;
    let table = &owned.handler(handler)?.table;
    let doc: DocumentMut = host.files[&owned.path].parse().ok()?;
    let mut item: &Item = doc.as_item();
    for segment in table.segments() {
        item = item.get(segment)?;
    }
    item.get("options")?.get(key)?.as_value().cloned()
}

fn same_option(value: &Value, option: &OptionValue) -> bool {
    match (value, option) {
        (Value::Boolean(v), OptionValue::Bool(o)) => v.value() == o,
        (Value::Integer(v), OptionValue::Int(o)) => v.value() == o,
        (Value::String(v), OptionValue::String(o)) => v.value() == o,
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn generated_configs_parse(text in config()) {
        prop_assert!(text.parse::<DocumentMut>().is_ok(), "{}", text);
    }

    #[test]
    fn install_is_idempotent_and_uninstall_restores_every_byte(
        text in config(),
        runtimes in runtimes(),
        containerd_2 in any::<bool>(),
    ) {
        let containerd = if containerd_2 {
            ContainerdVersion::new(2, 3, 7)
        } else {
            ContainerdVersion::new(1, 7, 27)
        };
        let mut host = MemoryHost::new().with(MAIN, text.clone());
        let first = install(&mut host, containerd, &runtimes, &Ownership::default());
        prop_assert!(first.changed);
        let main = &host.files[Path::new(MAIN)];
        prop_assert!(main.parse::<DocumentMut>().is_ok(), "{}", main);
        prop_assert!(is_subsequence(&text, main), "original bytes changed:\n{}\n---\n{}", text, main);

        for runtime in &runtimes {
            for (key, option) in &runtime.options {
                let value = option_in(&host, &first, &runtime.handler, key);
                prop_assert!(
                    value.as_ref().is_some_and(|v| same_option(v, option)),
                    "{}.options.{}: {:?} != {:?}", runtime.handler, key, value, option
                );
            }
        }

        let snapshot = host.clone();
        let second = install(&mut host, containerd, &runtimes, &first.ownership);
        prop_assert!(!second.changed);
        prop_assert!(second.writes.is_empty() && second.deletes.is_empty());
        prop_assert_eq!(&second.ownership, &first.ownership);
        prop_assert_eq!(&host, &snapshot);

        let removal = plan_uninstall(&host, containerd, &first.ownership).unwrap();
        host.apply(&removal);
        prop_assert_eq!(&host.files[Path::new(MAIN)], &text);
        let leftovers: Vec<_> = host
            .files
            .keys()
            .filter(|p| p.as_path() != Path::new(MAIN) && !p.to_string_lossy().ends_with(".bak"))
            .collect();
        prop_assert!(leftovers.is_empty(), "{:?}", leftovers);
    }

    #[test]
    fn changing_the_desired_set_then_uninstalling_restores_every_byte(
        text in config(),
        first_set in runtimes(),
        second_set in runtimes(),
    ) {
        let containerd = ContainerdVersion::new(1, 7, 27);
        let mut host = MemoryHost::new().with(MAIN, text.clone());
        let first = install(&mut host, containerd, &first_set, &Ownership::default());
        let second = install(&mut host, containerd, &second_set, &first.ownership);
        let doc: DocumentMut = host.files[Path::new(MAIN)].parse().unwrap();
        // Handlers of the first set that the second does not name are gone.
        for gone in first_set.iter().filter(|r| !second_set.iter().any(|s| s.handler == r.handler)) {
            let table = locate(&host, containerd, None).unwrap().version.runtime_table(&gone.handler);
            let mut item = Some(doc.as_item());
            for segment in table.segments() {
                item = item.and_then(|i| i.get(segment));
            }
            prop_assert!(item.is_none(), "{} still present", gone.handler);
        }
        let removal = plan_uninstall(&host, containerd, &second.ownership).unwrap();
        host.apply(&removal);
        prop_assert_eq!(&host.files[Path::new(MAIN)], &text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn foreign_documents_parse(seed in seeds()) {
        let text = foreign_document(&seed);
        prop_assert!(text.parse::<DocumentMut>().is_ok(), "{}", text);
    }

    #[test]
    fn an_install_only_adds_lines_to_a_foreign_document(
        seed in seeds(),
        runtimes in runtimes(),
        containerd_2 in any::<bool>(),
    ) {
        let text = foreign_document(&seed);
        let containerd = if containerd_2 {
            ContainerdVersion::new(2, 3, 7)
        } else {
            ContainerdVersion::new(1, 7, 27)
        };
        let mut host = MemoryHost::new().with(MAIN, text.clone());
        let target = locate(&host, containerd, None).unwrap();
        let first = install(&mut host, containerd, &runtimes, &Ownership::default());
        let main = host.files[Path::new(MAIN)].clone();
        prop_assert!(main.parse::<DocumentMut>().is_ok(), "{}", main);

        let (gone, added) = line_changes(&text, &main);
        match &target.strategy {
            // The main file is imported from, not edited: not one byte changes.
            WriteStrategy::DropIn { .. } => prop_assert_eq!(&main, &text),
            // Exactly our entry joins `imports` (a one-line array is one changed line).
            WriteStrategy::DropInWithImport { .. } => {
                let imports = imports_lines(&text);
                prop_assert!(
                    gone.iter().all(|line| imports.contains(line)),
                    "lines not ours changed: {:?}\n{}\n---\n{}", gone, text, main
                );
                let new_lines: Vec<&str> = main.trim_start_matches('\u{feff}').lines().collect();
                let ours = added
                    .iter()
                    .filter(|&&line| new_lines[line].contains(DROP_IN_NAME))
                    .count();
                prop_assert_eq!(ours, 1, "{}", main);
                // A multi-line array gets our entry on a line of its own, the comma where the
                // previous entry ends.
                prop_assert!(!new_lines.iter().any(|line| line.trim() == ","), "{}", main);
            }
            WriteStrategy::InPlace { .. } => prop_assert!(
                gone.is_empty(),
                "lines not ours changed: {:?}\n{}\n---\n{}", gone, text, main
            ),
        }

        let snapshot = host.clone();
        let again = install(&mut host, containerd, &runtimes, &first.ownership);
        prop_assert!(!again.changed);
        prop_assert_eq!(&host, &snapshot);

        let removal = plan_uninstall(&host, containerd, &first.ownership).unwrap();
        host.apply(&removal);
        prop_assert_eq!(&host.files[Path::new(MAIN)], &text);
    }
}

#[test]
fn subsequence_helper() {
    assert!(is_subsequence("ace", "abcde"));
    assert!(!is_subsequence("aec", "abcde"));
    assert!(is_subsequence("", "x"));
}

#[test]
fn option_maps_keep_their_types_in_a_drop_in() {
    let runtime = RuntimeEntry {
        managed_key: Default::default(),
        handler: "w".into(),
        runtime_type: "io.containerd.w.v1".into(),
        runtime_path: "/opt/w".into(),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        options: BTreeMap::from([
            ("Flag".into(), OptionValue::Bool(false)),
            ("Count".into(), OptionValue::Int(-3)),
            ("Text".into(), OptionValue::String("true".into())),
        ]),
        node_agent_dir: None,
    };
    let mut host = MemoryHost::new().with(MAIN, "version = 3\n");
    let plan = install(
        &mut host,
        ContainerdVersion::new(2, 1, 0),
        std::slice::from_ref(&runtime),
        &Ownership::default(),
    );
    for (key, option) in &runtime.options {
        let value = option_in(&host, &plan, "w", key).unwrap();
        assert!(same_option(&value, option), "{key}: {value:?}");
    }
}
