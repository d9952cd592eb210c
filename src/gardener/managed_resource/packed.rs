//! Packed bundles remembered by their content. The shoots of a seed mostly share a handful of
//! bundles (the same shims, the same images), and Brotli at Gardener's quality is the largest
//! CPU cost of a reconcile: each distinct bundle is compressed once, not once per shoot and
//! resync.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Error;
use super::secret::{Manifest, SecretData, by_file_name, pack_sorted};

/// How many distinct bundles are remembered by default: a few hundred kilobytes at most.
pub const DEFAULT_CAPACITY: usize = 64;

/// [`super::pack`] with a memory of the last distinct bundles. The oldest is forgotten first.
pub struct PackedBundles {
    capacity: usize,
    memo: Mutex<Memo>,
}

#[derive(Default)]
struct Memo {
    packed: HashMap<[u8; 32], SecretData>,
    /// Keys from the oldest to the newest.
    order: VecDeque<[u8; 32]>,
}

impl Default for PackedBundles {
    fn default() -> Self {
        PackedBundles::with_capacity(DEFAULT_CAPACITY)
    }
}

impl PackedBundles {
    pub fn with_capacity(capacity: usize) -> Self {
        PackedBundles {
            capacity: capacity.max(1),
            memo: Mutex::default(),
        }
    }

    /// The same result as [`super::pack`], from memory when these objects were packed before.
    /// The objects are borrowed: a bundle packed before costs its key and nothing else.
    pub fn pack(&self, manifests: &[Manifest]) -> Result<SecretData, Error> {
        let sorted = by_file_name(manifests)?;
        let key = content_key(&sorted);
        if let Some(packed) = self.lock().packed.get(&key) {
            return Ok(packed.clone());
        }
        // Packed outside the lock: two reconciles of one new bundle may both pack it, which
        // costs less than making every other reconcile wait.
        let packed = pack_sorted(&sorted)?;
        let mut memo = self.lock();
        if memo.packed.insert(key, packed.clone()).is_none() {
            memo.order.push_back(key);
            while memo.order.len() > self.capacity {
                if let Some(oldest) = memo.order.pop_front() {
                    memo.packed.remove(&oldest);
                }
            }
        }
        Ok(packed)
    }

    /// How many bundles are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().packed.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// SHA-256 over every file name and the object's JSON. Equal JSON means equal objects, and so
/// an equal YAML stream; objects that differ only in key order hash apart, which costs one
/// more compression, never a wrong bundle.
fn content_key(sorted: &BTreeMap<&str, &Value>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for (file_name, value) in sorted {
        hasher.update(file_name.as_bytes());
        hasher.update([0]);
        // Serializing a `Value` into memory cannot fail (its keys are strings).
        if let Ok(json) = serde_json::to_vec(value) {
            hasher.update(&json);
        }
        hasher.update([0]);
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gardener::managed_resource::{Scope, pack};

    fn config_map(name: &str, value: &str) -> Manifest {
        Manifest::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "kube-system"},
                   "data": {"key": value}}),
            Scope::Namespaced,
        )
        .unwrap()
    }

    #[test]
    fn a_remembered_bundle_is_the_bundle_pack_builds() {
        let bundles = PackedBundles::default();
        let objects = || [config_map("a", "1"), config_map("b", "2")];
        let first = bundles.pack(&objects()).unwrap();
        let mut reversed = objects();
        reversed.reverse();
        let again = bundles.pack(&reversed).unwrap();
        assert_eq!(first, pack(objects()).unwrap());
        assert_eq!(again, first, "the order objects come in does not matter");
        assert_eq!(bundles.len(), 1, "packed once");
    }

    #[test]
    fn a_changed_object_is_a_different_bundle() {
        let bundles = PackedBundles::default();
        let one = bundles.pack(&[config_map("a", "1")]).unwrap();
        let two = bundles.pack(&[config_map("a", "2")]).unwrap();
        assert_ne!(one, two);
        assert_eq!(two, pack([config_map("a", "2")]).unwrap());
        assert_eq!(bundles.len(), 2);
    }

    #[test]
    fn the_oldest_bundle_is_forgotten_first() {
        let bundles = PackedBundles::with_capacity(2);
        for value in ["1", "2", "3"] {
            bundles.pack(&[config_map("a", value)]).unwrap();
        }
        assert_eq!(bundles.len(), 2);
        let memo = bundles.lock();
        let remembered = |value: &str| {
            let objects = [config_map("a", value)];
            memo.packed
                .contains_key(&content_key(&by_file_name(&objects).unwrap()))
        };
        assert!(!remembered("1") && remembered("2") && remembered("3"));
    }

    #[test]
    fn errors_are_those_of_pack_and_are_not_remembered() {
        let bundles = PackedBundles::default();
        let err = bundles
            .pack(&[config_map("a", "1"), config_map("a", "2")])
            .unwrap_err();
        assert!(matches!(err, Error::DuplicateObject { .. }), "{err}");
        assert_eq!(bundles.len(), 0);
    }
}
