//! The data of a ManagedResource secret, built the way Gardener's `managedresources.Registry`
//! builds it, plus the unique secret name and reference annotation derived from it.
//!
//! Everything here is pure: no client, no clock, no randomness. Equal input must give equal
//! bytes, because the secret's name is a hash of them: any nondeterminism would create a new
//! secret (and a ManagedResource update) on every reconcile.

use std::collections::BTreeMap;
use std::io::Read;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Error;

/// The one data key the registry writes: a Brotli-compressed multi-document YAML stream.
pub const COMPRESSED_DATA_KEY: &str = "data.yaml.br";
/// Keys with this suffix are Brotli-compressed (gardener-resource-manager's rule).
pub const BROTLI_SUFFIX: &str = ".br";
/// Prefix of every ManagedResource secret name.
pub const SECRET_PREFIX: &str = "managedresource-";
/// Marks a secret that GRM's garbage collector may delete once nothing references it.
pub const GARBAGE_COLLECTABLE_LABEL: &str =
    "resources.gardener.cloud/garbage-collectable-reference";
/// Prefix of the annotations that tell GRM's garbage collector which secrets are in use.
pub const REFERENCE_ANNOTATION_PREFIX: &str = "reference.resources.gardener.cloud/";

/// Gardener's registry uses Brotli's default quality; the window is Brotli's default too.
/// Both are fixed so that the bytes (and so the secret name) never depend on anything else.
const BROTLI_QUALITY: i32 = 6;
const BROTLI_LGWIN: i32 = 22;
/// Length of the checksum suffix in unique names and reference annotation keys.
const HASH_CHARS: usize = 8;
/// A Secret holds at most 1 MiB and the stream compresses well, but decoding is also used on
/// secrets we did not write: refuse to inflate anything absurd.
const MAX_DECOMPRESSED_BYTES: u64 = 64 * 1024 * 1024;

/// Whether a kind lives in a namespace. GRM puts a namespaced object that names no namespace
/// into `default`, so the packer must know the scope of every object it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for k8s_openapi::NamespaceResourceScope {}
    impl Sealed for k8s_openapi::ClusterResourceScope {}
}

/// The scope marker types whose meaning is known at compile time. Dynamic and subresource
/// scopes deliberately have no implementation: such objects must go through
/// [`Manifest::from_value`], where the caller states the scope.
pub trait KnownScope: sealed::Sealed {
    const SCOPE: Scope;
}

impl KnownScope for NamespaceResourceScope {
    const SCOPE: Scope = Scope::Namespaced;
}

impl KnownScope for ClusterResourceScope {
    const SCOPE: Scope = Scope::Cluster;
}

/// One object for a ManagedResource, validated and named the way the registry names it.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    file_name: String,
    value: Value,
}

impl Manifest {
    /// A typed object (k8s-openapi or `kube::CustomResource`); its scope comes from its type,
    /// so a namespaced object without a namespace is an error, never a silent `default`.
    pub fn from_resource<K>(object: &K) -> Result<Manifest, Error>
    where
        K: kube::Resource<DynamicType = ()> + Serialize,
        K::Scope: KnownScope,
    {
        let kind = K::kind(&()).into_owned();
        let name = object.meta().name.clone().unwrap_or_default();
        let mut value = serde_json::to_value(object).map_err(|source| Error::ToJson {
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?;
        // Typed objects serialise their apiVersion and kind, but the type is the authority.
        if let Value::Object(map) = &mut value {
            map.insert(
                "apiVersion".into(),
                Value::String(K::api_version(&()).into_owned()),
            );
            map.insert("kind".into(), Value::String(kind));
        }
        Manifest::from_value(value, <K::Scope as KnownScope>::SCOPE)
    }

    /// An untyped object with `apiVersion`, `kind` and `metadata`; the caller states its scope
    /// because nothing in the value says whether the kind is namespaced.
    pub fn from_value(value: Value, scope: Scope) -> Result<Manifest, Error> {
        let str_field = |path: &[&str]| -> Option<&str> {
            path.iter()
                .try_fold(&value, |v, key| v.get(key))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let kind = str_field(&["kind"]).unwrap_or_default().to_string();
        let name = str_field(&["metadata", "name"])
            .unwrap_or_default()
            .to_string();
        let invalid = |problem: &str| Error::InvalidObject {
            kind: kind.clone(),
            name: name.clone(),
            problem: problem.to_string(),
        };
        if !value.is_object() {
            return Err(invalid("it is not a JSON object"));
        }
        let api_version =
            str_field(&["apiVersion"]).ok_or_else(|| invalid("it has no apiVersion"))?;
        if kind.is_empty() {
            return Err(invalid("it has no kind"));
        }
        if name.is_empty() {
            return Err(invalid("it has no metadata.name"));
        }
        let namespace = str_field(&["metadata", "namespace"]);
        match (scope, namespace) {
            (Scope::Namespaced, None) => {
                return Err(Error::MissingNamespace { kind, name });
            }
            (Scope::Cluster, Some(namespace)) => {
                return Err(Error::UnexpectedNamespace {
                    kind,
                    name,
                    namespace: namespace.to_string(),
                });
            }
            _ => {}
        }
        let file_name = file_name(api_version, &kind, namespace.unwrap_or_default(), &name);
        Ok(Manifest { file_name, value })
    }

    /// The registry's sort key, e.g. `apps/v1, kind=daemonset__kube-system__foo.yaml`.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn into_value(self) -> Value {
        self.value
    }
}

/// Gardener's `<lower(gvk.String())>__<namespace>__<name with ':' → '_'>.yaml`, where
/// `gvk.String()` is `<group>/<version>, Kind=<kind>` (the group is empty for core objects).
fn file_name(api_version: &str, kind: &str, namespace: &str, name: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = format!("{group}/{version}, Kind={kind}").to_lowercase();
    format!("{gvk}__{namespace}__{}.yaml", name.replace(':', "_"))
}

/// The data of a ManagedResource secret (Gardener's `map[string][]byte`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretData {
    data: BTreeMap<String, Vec<u8>>,
}

impl SecretData {
    /// Data built elsewhere (for example an uncompressed `data.yaml`).
    pub fn from_map(data: BTreeMap<String, Vec<u8>>) -> SecretData {
        SecretData { data }
    }

    pub fn data(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.data
    }

    /// Gardener's `ComputeSecretChecksum`: sha256hex over the concatenated sha256hex of each
    /// value, in key order.
    pub fn checksum(&self) -> String {
        let concatenated: String = self.data.values().map(|v| sha256_hex(v)).collect();
        sha256_hex(concatenated.as_bytes())
    }

    /// `managedresource-<mr>-<first 8 hex of the checksum>`.
    pub fn secret_name(&self, managed_resource: &str) -> String {
        unique_name(
            &format!("{SECRET_PREFIX}{managed_resource}"),
            &self.checksum(),
        )
    }

    /// The immutable, garbage-collectable secret for the ManagedResource `managed_resource`.
    pub fn to_secret(&self, namespace: &str, managed_resource: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name(managed_resource)),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    GARBAGE_COLLECTABLE_LABEL.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            },
            immutable: Some(true),
            type_: Some("Opaque".to_string()),
            data: Some(self.byte_strings()),
            ..Default::default()
        }
    }

    fn byte_strings(&self) -> BTreeMap<String, ByteString> {
        self.data
            .iter()
            .map(|(k, v)| (k.clone(), ByteString(v.clone())))
            .collect()
    }
}

/// Gardener's `MakeUnique` naming: `<base>-<first 8 hex of checksum>` (no extra hyphen when
/// the base already ends in one).
pub fn unique_name(base: &str, checksum: &str) -> String {
    let suffix = checksum.get(..HASH_CHARS).unwrap_or(checksum);
    if base.ends_with('-') {
        format!("{base}{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
}

/// `reference.resources.gardener.cloud/<kind>-<first 8 hex of sha256(name)>`; `kind` is
/// `secret` or `configmap`.
pub fn reference_annotation_key(kind: &str, name: &str) -> String {
    let hash = sha256_hex(name.as_bytes());
    format!(
        "{REFERENCE_ANNOTATION_PREFIX}{kind}-{}",
        &hash[..HASH_CHARS]
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Gardener's `Registry.AddAllAndSerialize`: objects sorted by file name, each a YAML document
/// ending in a newline, separated by `---\n`, Brotli-compressed under [`COMPRESSED_DATA_KEY`].
/// Two objects with the same file name (same kind, namespace and name) are an error.
pub fn pack(manifests: impl IntoIterator<Item = Manifest>) -> Result<SecretData, Error> {
    let manifests: Vec<Manifest> = manifests.into_iter().collect();
    pack_sorted(&by_file_name(&manifests)?)
}

/// The objects by file name, borrowed; two with the same file name are an error.
pub(super) fn by_file_name(manifests: &[Manifest]) -> Result<BTreeMap<&str, &Value>, Error> {
    let mut sorted: BTreeMap<&str, &Value> = BTreeMap::new();
    for manifest in manifests {
        if sorted
            .insert(manifest.file_name.as_str(), &manifest.value)
            .is_some()
        {
            return Err(Error::DuplicateObject {
                file_name: manifest.file_name.clone(),
            });
        }
    }
    Ok(sorted)
}

/// [`pack`] of objects already sorted by file name.
pub(super) fn pack_sorted(sorted: &BTreeMap<&str, &Value>) -> Result<SecretData, Error> {
    let mut stream = String::new();
    for (index, (file_name, value)) in sorted.iter().enumerate() {
        if index > 0 {
            stream.push_str("---\n");
        }
        let document = to_yaml(value).map_err(|source| Error::ToYaml {
            file_name: file_name.to_string(),
            source,
        })?;
        // GRM splits the stream at every line that starts with `---` (and treats `...` as a
        // document end): a document must contain neither at column 0, or it would be cut.
        if document
            .lines()
            .any(|l| l.starts_with("---") || l.starts_with("..."))
        {
            return Err(Error::UnsafeDocument {
                file_name: file_name.to_string(),
            });
        }
        stream.push_str(&document);
        if !document.ends_with('\n') {
            stream.push('\n');
        }
    }
    let params = brotli::enc::BrotliEncoderParams {
        quality: BROTLI_QUALITY,
        lgwin: BROTLI_LGWIN,
        ..Default::default()
    };
    // The whole stream in one write: the encoder then sizes its ring buffer to a stream smaller
    // than one block (64 KiB at this quality) instead of to the 4 MiB window, with the same
    // output. Reading it in 4 KiB chunks made every concurrent reconcile hold the full window.
    let mut encoder = brotli::CompressorWriter::with_params(Vec::new(), 4096, &params);
    std::io::Write::write_all(&mut encoder, stream.as_bytes()).map_err(Error::Compress)?;
    let compressed = encoder.into_inner();
    Ok(SecretData::from_map(BTreeMap::from([(
        COMPRESSED_DATA_KEY.to_string(),
        compressed,
    )])))
}

/// YAML as Gardener writes it: keys sorted (Go encodes maps in key order), two-space indent,
/// compact sequences. Strings that YAML 1.1 readers (GRM decodes with go-yaml) would take for
/// booleans, numbers or null are quoted by serde-saphyr's default. Long single-line strings
/// are not folded: a folded scalar is one more dialect difference to get wrong.
fn to_yaml(value: &Value) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! {
        indent_step: 2,
        compact_list_indent: true,
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(&Sorted(value), options)
}

/// Serialises a JSON value with object keys in byte order whatever map type serde_json was
/// built with (`preserve_order` would otherwise make the output depend on insertion order).
struct Sorted<'a>(&'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    out.serialize_entry(key, &Sorted(value))?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Sorted(item))?;
                }
                out.end()
            }
            scalar => scalar.serialize(serializer),
        }
    }
}

/// The objects in a ManagedResource secret's data, as gardener-resource-manager reads them:
/// keys in order, `.br` keys Brotli-decompressed, the stream split at `---` lines, empty
/// documents skipped.
pub fn decode(data: &BTreeMap<String, ByteString>) -> Result<Vec<Value>, Error> {
    let mut objects = Vec::new();
    for (key, bytes) in data {
        let raw = if key.ends_with(BROTLI_SUFFIX) {
            let mut out = Vec::new();
            brotli::Decompressor::new(bytes.0.as_slice(), 4096)
                .take(MAX_DECOMPRESSED_BYTES)
                .read_to_end(&mut out)
                .map_err(|source| Error::Decompress {
                    key: key.clone(),
                    source,
                })?;
            out
        } else {
            bytes.0.clone()
        };
        let text = String::from_utf8(raw).map_err(|_| Error::Decode {
            key: key.clone(),
            document: 0,
            problem: "the data is not UTF-8".into(),
        })?;
        for (index, document) in split_documents(&text).into_iter().enumerate() {
            if document.trim().is_empty() {
                continue;
            }
            let value: Value = serde_saphyr::from_str(document).map_err(|e| Error::Decode {
                key: key.clone(),
                document: index,
                problem: e.to_string(),
            })?;
            if !value.is_null() {
                objects.push(value);
            }
        }
    }
    Ok(objects)
}

/// [`decode`] applied to a secret's `data`.
pub fn decode_secret(secret: &Secret) -> Result<Vec<Value>, Error> {
    decode(secret.data.as_ref().unwrap_or(&BTreeMap::new()))
}

/// Splits at lines that start with `---` (the rest being blank or a comment), as Kubernetes'
/// YAML reader does.
fn split_documents(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("---") {
            let rest = rest.trim();
            if rest.is_empty() || rest.starts_with('#') {
                documents.push(&text[start..offset]);
                start = offset + line.len();
            }
        }
        offset += line.len();
    }
    documents.push(&text[start..]);
    documents
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use proptest::prelude::*;
    use serde_json::json;

    fn config_map(namespace: Option<&str>, name: &str, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: namespace.map(Into::into),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn cluster_role(name: &str) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn decoded_stream(data: &SecretData) -> String {
        let bytes = data
            .data()
            .get(COMPRESSED_DATA_KEY)
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        brotli::Decompressor::new(bytes.as_slice(), 4096)
            .read_to_end(&mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn file_names_follow_the_registry() {
        let cm = Manifest::from_resource(&config_map(Some("kube-system"), "a:b", &[])).unwrap();
        assert_eq!(cm.file_name(), "/v1, kind=configmap__kube-system__a_b.yaml");
        let cr = Manifest::from_resource(&cluster_role("system:foo")).unwrap();
        assert_eq!(
            cr.file_name(),
            "rbac.authorization.k8s.io/v1, kind=clusterrole____system_foo.yaml"
        );
        let ds = DaemonSet {
            metadata: ObjectMeta {
                name: Some("x".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let ds = Manifest::from_resource(&ds).unwrap();
        assert_eq!(ds.file_name(), "apps/v1, kind=daemonset__ns__x.yaml");
        assert_eq!(ds.value()["apiVersion"], "apps/v1");
        assert_eq!(ds.value()["kind"], "DaemonSet");
    }

    #[test]
    fn a_namespaced_object_without_namespace_is_refused() {
        let err = Manifest::from_resource(&config_map(None, "cm", &[])).unwrap_err();
        assert!(matches!(err, Error::MissingNamespace { .. }), "{err}");
        assert!(err.to_string().contains("ConfigMap cm"), "{err}");
        let err = Manifest::from_resource(&config_map(Some(""), "cm", &[])).unwrap_err();
        assert!(matches!(err, Error::MissingNamespace { .. }), "{err}");
        let untyped = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let err = Manifest::from_value(untyped.clone(), Scope::Namespaced).unwrap_err();
        assert!(matches!(err, Error::MissingNamespace { .. }), "{err}");
    }

    #[test]
    fn a_cluster_scoped_object_with_namespace_is_refused() {
        let mut cr = cluster_role("cr");
        cr.metadata.namespace = Some("kube-system".into());
        let err = Manifest::from_resource(&cr).unwrap_err();
        assert!(matches!(err, Error::UnexpectedNamespace { .. }), "{err}");
    }

    #[test]
    fn untyped_objects_need_api_version_kind_and_name() {
        for bad in [
            json!("just a string"),
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "b"}}),
            json!({"apiVersion": "v1", "metadata": {"name": "a", "namespace": "b"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "b"}}),
        ] {
            let err = Manifest::from_value(bad.clone(), Scope::Namespaced).unwrap_err();
            assert!(matches!(err, Error::InvalidObject { .. }), "{bad}: {err}");
        }
        let ok =
            json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "a"}});
        let m = Manifest::from_value(ok, Scope::Cluster).unwrap();
        assert_eq!(m.file_name(), "example.com/v1, kind=thing____a.yaml");
    }

    #[test]
    fn duplicates_are_refused() {
        let a = Manifest::from_resource(&config_map(Some("ns"), "a", &[("k", "1")])).unwrap();
        let b = Manifest::from_resource(&config_map(Some("ns"), "a", &[("k", "2")])).unwrap();
        let err = pack([a, b]).unwrap_err();
        assert!(matches!(err, Error::DuplicateObject { .. }), "{err}");
    }

    /// T9a with a hand-computed value: for X = "hello",
    /// sha256hex(X) = 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 and
    /// sha256hex of that hex text = d7914fe546b684688bb95f4f888a92dfc680603a75f23eb823658031fff766d9
    /// (`printf hello | sha256sum`, then `printf 2cf2…9824 | sha256sum`).
    #[test]
    fn secret_name_is_gardeners_unique_name() {
        let data = SecretData::from_map(BTreeMap::from([(
            COMPRESSED_DATA_KEY.to_string(),
            b"hello".to_vec(),
        )]));
        assert_eq!(
            data.checksum(),
            "d7914fe546b684688bb95f4f888a92dfc680603a75f23eb823658031fff766d9"
        );
        assert_eq!(data.secret_name("shim"), "managedresource-shim-d7914fe5");
        let secret = data.to_secret("shoot--p--s", "shim");
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("managedresource-shim-d7914fe5")
        );
        assert_eq!(secret.metadata.namespace.as_deref(), Some("shoot--p--s"));
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        assert_eq!(
            secret
                .metadata
                .labels
                .unwrap_or_default()
                .get(GARBAGE_COLLECTABLE_LABEL)
                .map(String::as_str),
            Some("true")
        );
        // `printf managedresource-shim-d7914fe5 | sha256sum` starts with 1b11fa8a.
        assert_eq!(
            reference_annotation_key("secret", "managedresource-shim-d7914fe5"),
            "reference.resources.gardener.cloud/secret-1b11fa8a"
        );
    }

    #[test]
    fn checksum_covers_every_key_in_order() {
        let two = SecretData::from_map(BTreeMap::from([
            ("a".to_string(), b"hello".to_vec()),
            ("b".to_string(), b"world".to_vec()),
        ]));
        let concatenated = format!("{}{}", sha256_hex(b"hello"), sha256_hex(b"world"));
        assert_eq!(two.checksum(), sha256_hex(concatenated.as_bytes()));
        assert_eq!(unique_name("x-", "0123456789"), "x-01234567");
        assert_eq!(unique_name("x", "0123456789"), "x-01234567");
    }

    #[test]
    fn the_stream_is_sorted_separated_and_newline_terminated() {
        let objects = [
            Manifest::from_resource(&config_map(Some("ns"), "b", &[("k", "v")])).unwrap(),
            Manifest::from_resource(&cluster_role("a")).unwrap(),
            Manifest::from_resource(&config_map(Some("ns"), "a", &[("k", "v")])).unwrap(),
        ];
        let stream = decoded_stream(&pack(objects).unwrap());
        assert_eq!(
            stream,
            "apiVersion: v1\ndata:\n  k: v\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n\
             ---\n\
             apiVersion: v1\ndata:\n  k: v\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: ns\n\
             ---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: a\n"
        );
    }

    #[test]
    fn sequences_are_compact_and_multiline_strings_literal() {
        let value = json!({
            "apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t"},
            "list": [{"a": 1, "b": [true, false]}],
            "text": "line one\nline two\n",
        });
        let stream =
            decoded_stream(&pack([Manifest::from_value(value, Scope::Cluster).unwrap()]).unwrap());
        assert!(
            stream.contains("list:\n- a: 1\n  b:\n  - true\n  - false\n"),
            "{stream}"
        );
        assert!(
            stream.contains("text: |\n  line one\n  line two\n"),
            "{stream}"
        );
    }

    #[test]
    fn an_empty_bundle_is_an_empty_stream() {
        let data = pack([]).unwrap();
        assert_eq!(decoded_stream(&data), "");
        assert!(decode(&data_of(&data)).unwrap().is_empty());
    }

    fn data_of(data: &SecretData) -> BTreeMap<String, ByteString> {
        data.byte_strings()
    }

    #[test]
    fn tricky_strings_survive_the_round_trip() {
        let tricky = [
            ("yes", "yes"),
            ("on", "on"),
            ("n", "n"),
            ("hex", "0x1F"),
            ("octal", "012"),
            ("exp", "1e3"),
            ("null", "null"),
            ("tilde", "~"),
            ("empty", ""),
            ("time", "2001-12-14t21:59:43.10-05:00"),
            ("sexagesimal", "1:20"),
            ("separator", "a\n---\nb\n...\n"),
            ("indented", "  leading spaces\nnext\n"),
            ("trailing", "no newline at end\nsecond"),
            ("blank-lines", "a\n\n\nb\n\n"),
            (
                "toml",
                "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  x = 'y' # c\n",
            ),
            ("long", &"word ".repeat(40)),
            ("colon", "key: value"),
            ("hash", "# not a comment"),
            ("tab", "a\tb"),
            ("unicode", "grüße ✓"),
            ("cr", "a\r\nb"),
        ];
        let cm = config_map(Some("ns"), "tricky", &tricky);
        let data = pack([Manifest::from_resource(&cm).unwrap()]).unwrap();
        let decoded = decode(&data_of(&data)).unwrap();
        assert_eq!(decoded.len(), 1);
        let back: ConfigMap = serde_json::from_value(decoded[0].clone()).unwrap();
        assert_eq!(back, cm);
    }

    #[test]
    fn decode_reads_plain_keys_and_skips_empty_documents() {
        let data = BTreeMap::from([(
            "data.yaml".to_string(),
            ByteString(
                b"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n\n--- # c\n"
                    .to_vec(),
            ),
        )]);
        let decoded = decode(&data).unwrap();
        assert_eq!(
            decoded,
            vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}})]
        );
    }

    #[test]
    fn decode_reports_the_key_of_broken_data() {
        let data = BTreeMap::from([(
            "data.yaml.br".to_string(),
            ByteString(b"not brotli".to_vec()),
        )]);
        let err = decode(&data).unwrap_err();
        assert!(err.to_string().contains("data.yaml.br"), "{err}");
    }

    fn arbitrary_config_maps() -> impl Strategy<Value = Vec<ConfigMap>> {
        let key = "[-._a-zA-Z0-9]{1,12}";
        let data = prop::collection::btree_map(key, any::<String>(), 0..5);
        let name = "[a-z0-9][-a-z0-9.:]{0,12}";
        let namespace = prop::sample::select(vec!["kube-system", "default", "ns-a"]);
        prop::collection::btree_map((namespace, name), data, 0..6).prop_map(|maps| {
            maps.into_iter()
                .map(|((namespace, name), data)| ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(namespace.to_string()),
                        labels: Some(BTreeMap::from([
                            ("z".to_string(), "1".to_string()),
                            ("a".to_string(), "2".to_string()),
                        ])),
                        ..Default::default()
                    },
                    data: Some(data),
                    ..Default::default()
                })
                .collect()
        })
    }

    fn manifests(config_maps: &[ConfigMap], cluster_roles: &[String]) -> Vec<Manifest> {
        config_maps
            .iter()
            .map(Manifest::from_resource)
            .chain(
                cluster_roles
                    .iter()
                    .map(|n| Manifest::from_resource(&cluster_role(n))),
            )
            .collect::<Result<_, _>>()
            .unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Same objects in any order give identical bytes and so the same secret name.
        #[test]
        fn packing_is_deterministic(
            (config_maps, shuffled) in arbitrary_config_maps().prop_flat_map(|cms| (Just(cms.clone()), Just(cms).prop_shuffle())),
            roles in prop::collection::btree_set("[a-z]{1,8}", 0..3),
        ) {
            let roles: Vec<String> = roles.into_iter().collect();
            let mut reversed_roles = roles.clone();
            reversed_roles.reverse();
            let a = pack(manifests(&config_maps, &roles)).unwrap();
            let b = pack(manifests(&shuffled, &reversed_roles)).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(a.secret_name("mr"), b.secret_name("mr"));
        }

        /// T9e: decode(pack(x)) == x, in file-name order, and every namespaced object keeps
        /// its namespace.
        #[test]
        fn packing_round_trips(config_maps in arbitrary_config_maps()) {
            let packed = pack(manifests(&config_maps, &[])).unwrap();
            let decoded = decode(&data_of(&packed)).unwrap();
            let mut expected = manifests(&config_maps, &[]);
            expected.sort_by(|a, b| a.file_name().cmp(b.file_name()));
            let expected: Vec<Value> = expected.into_iter().map(Manifest::into_value).collect();
            prop_assert_eq!(&decoded, &expected);
            for object in &decoded {
                let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
                prop_assert!(!namespace.is_empty(), "{}", object);
            }
        }
    }
}
