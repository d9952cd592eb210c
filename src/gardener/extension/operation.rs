//! Which operation an Extension asks for, and what the reconciler does about it
//! (gardener-contract.md §1.6 and §1.7). Pure functions over the object and the facts fetched
//! for it, so every branch is unit-tested without an API server.

use crate::gardener::api::{
    Extension, OPERATION_ANNOTATION, OperationState, OperationType, Shoot, operation,
};

/// The `gardener.cloud/operation` annotation, if any.
pub fn operation_annotation(ext: &Extension) -> Option<&str> {
    ext.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OPERATION_ANNOTATION))
        .map(String::as_str)
}

/// `ComputeOperationType`: the first matching row of §1.7 wins.
pub fn operation_type(ext: &Extension) -> OperationType {
    let annotation = operation_annotation(ext);
    if annotation == Some(operation::MIGRATE) {
        return OperationType::Migrate;
    }
    if ext.metadata.deletion_timestamp.is_some() {
        return OperationType::Delete;
    }
    if annotation == Some(operation::RESTORE) {
        return OperationType::Restore;
    }
    let Some(last) = ext.status.as_ref().and_then(|s| s.last_operation.as_ref()) else {
        return OperationType::Create;
    };
    let unfinished = last.state != OperationState::Succeeded;
    match last.type_ {
        OperationType::Create if unfinished => OperationType::Create,
        // A failed migration is retried even after gardenlet removed nothing.
        OperationType::Migrate if unfinished => OperationType::Migrate,
        OperationType::Restore if unfinished => OperationType::Restore,
        _ => OperationType::Reconcile,
    }
}

/// `ShouldSkipOperation`: after a successful migration only another migrate or a restore may
/// touch the object (gardenlet deletes it on the source seed; Delete must not run there).
pub fn skip_after_migration(op: OperationType, ext: &Extension) -> bool {
    let migrated = ext
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|l| l.type_ == OperationType::Migrate && l.state == OperationState::Succeeded);
    migrated && !matches!(op, OperationType::Migrate | OperationType::Restore)
}

/// What the Cluster lookup of a reconcile found.
#[derive(Debug)]
pub enum ClusterFacts<'a> {
    /// The Extension is not in a shoot namespace: no Cluster is read, force-delete never applies.
    NotShootNamespace,
    /// The Cluster of the shoot namespace, with its Shoot (None when gardenlet left it empty).
    Found(Option<&'a Shoot>),
}

/// What the reconciler does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The Shoot's last operation failed: leave everything alone, no status write, no requeue.
    SkipFailedShoot,
    /// Migrated successfully before: neither delete nor reconcile may run.
    SkipMigrated,
    Migrate,
    /// Deletion requested; `force` when the Shoot confirms force-deletion.
    Delete {
        force: bool,
    },
    Restore,
    /// Create or Reconcile.
    Reconcile(OperationType),
}

/// The decision procedure of §1.6, after the operation-annotation wrapper has run and the
/// Cluster has been looked up.
pub fn decide(ext: &Extension, cluster: &ClusterFacts<'_>) -> Decision {
    let shoot = match cluster {
        ClusterFacts::NotShootNamespace => None,
        ClusterFacts::Found(shoot) => *shoot,
    };
    if shoot.is_some_and(Shoot::is_failed) {
        return Decision::SkipFailedShoot;
    }
    let op = operation_type(ext);
    if skip_after_migration(op, ext) {
        return Decision::SkipMigrated;
    }
    if op == OperationType::Migrate {
        return Decision::Migrate;
    }
    if ext.metadata.deletion_timestamp.is_some() {
        return Decision::Delete {
            force: shoot.is_some_and(Shoot::needs_force_deletion),
        };
    }
    if op == OperationType::Restore {
        return Decision::Restore;
    }
    Decision::Reconcile(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::{
        ExtensionSpec, ExtensionStatus, FORCE_DELETION_ANNOTATION, LastOperation,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ext(
        annotation: Option<&str>,
        deleting: bool,
        last: Option<(OperationType, OperationState)>,
    ) -> Extension {
        let mut e = Extension::new("containerd-shim", ExtensionSpec::default());
        if let Some(a) = annotation {
            e.metadata.annotations =
                Some([(OPERATION_ANNOTATION.to_string(), a.to_string())].into());
        }
        if deleting {
            e.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        }
        e.status = last.map(|(type_, state)| ExtensionStatus {
            last_operation: Some(LastOperation {
                description: String::new(),
                last_update_time: Time(jiff::Timestamp::UNIX_EPOCH),
                progress: 0,
                state,
                type_,
            }),
            ..Default::default()
        });
        e
    }

    use OperationState::*;
    use OperationType::*;

    #[test]
    fn operation_type_table() {
        type Row = (
            Option<&'static str>,
            bool,
            Option<(OperationType, OperationState)>,
            OperationType,
        );
        let rows: &[Row] = &[
            (Some("migrate"), true, Some((Reconcile, Succeeded)), Migrate), // row 1 beats deletion
            (None, true, None, Delete),
            (Some("restore"), true, None, Delete), // deletion beats restore
            (
                Some("restore"),
                false,
                Some((Reconcile, Succeeded)),
                Restore,
            ),
            (None, false, None, Create),
            (Some("reconcile"), false, None, Create),
            (None, false, Some((Create, Error)), Create),
            (None, false, Some((Create, Processing)), Create),
            (None, false, Some((Create, Succeeded)), Reconcile),
            (None, false, Some((Migrate, Error)), Migrate),
            (None, false, Some((Migrate, Succeeded)), Reconcile),
            (None, false, Some((Restore, Error)), Restore),
            (None, false, Some((Restore, Succeeded)), Reconcile),
            (None, false, Some((Reconcile, Error)), Reconcile),
            (None, false, Some((Delete, Error)), Reconcile),
            (
                Some("wait-for-state"),
                false,
                Some((Reconcile, Succeeded)),
                Reconcile,
            ),
        ];
        for (annotation, deleting, last, expected) in rows {
            let e = ext(*annotation, *deleting, *last);
            assert_eq!(
                operation_type(&e),
                *expected,
                "{annotation:?} deleting={deleting} last={last:?}"
            );
        }
    }

    #[test]
    fn migrated_objects_only_accept_migrate_and_restore() {
        let e = ext(None, true, Some((Migrate, Succeeded)));
        assert_eq!(
            decide(&e, &ClusterFacts::NotShootNamespace),
            Decision::SkipMigrated
        );
        let e = ext(Some("restore"), false, Some((Migrate, Succeeded)));
        assert_eq!(
            decide(&e, &ClusterFacts::NotShootNamespace),
            Decision::Restore
        );
        let e = ext(Some("migrate"), false, Some((Migrate, Succeeded)));
        assert_eq!(
            decide(&e, &ClusterFacts::NotShootNamespace),
            Decision::Migrate
        );
        let e = ext(None, false, Some((Migrate, Error)));
        assert_eq!(
            decide(&e, &ClusterFacts::NotShootNamespace),
            Decision::Migrate
        );
    }

    #[test]
    fn failed_shoots_are_skipped_and_force_deletion_needs_the_shoot() {
        let mut failed = Shoot::default();
        failed.status.last_operation = Some(LastOperation {
            description: String::new(),
            last_update_time: Time(jiff::Timestamp::UNIX_EPOCH),
            progress: 0,
            state: Failed,
            type_: Reconcile,
        });
        let e = ext(None, true, None);
        assert_eq!(
            decide(&e, &ClusterFacts::Found(Some(&failed))),
            Decision::SkipFailedShoot
        );

        let mut forced = Shoot::default();
        forced
            .metadata
            .annotations
            .insert(FORCE_DELETION_ANNOTATION.into(), "1".into());
        assert_eq!(
            decide(&e, &ClusterFacts::Found(Some(&forced))),
            Decision::Delete { force: true }
        );
        assert_eq!(
            decide(&e, &ClusterFacts::Found(None)),
            Decision::Delete { force: false }
        );
        assert_eq!(
            decide(&e, &ClusterFacts::NotShootNamespace),
            Decision::Delete { force: false }
        );
    }

    #[test]
    fn plain_objects_reconcile_with_create_first() {
        let e = ext(None, false, None);
        assert_eq!(
            decide(&e, &ClusterFacts::Found(Some(&Shoot::default()))),
            Decision::Reconcile(Create)
        );
        let e = ext(None, false, Some((Create, Succeeded)));
        assert_eq!(
            decide(&e, &ClusterFacts::NotShootNamespace),
            Decision::Reconcile(Reconcile)
        );
    }
}
