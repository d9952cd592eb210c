//! What the health-check controller checks, and for which Extensions.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

use super::check::HealthCheck;
use super::error::HealthCheckError;
use crate::gardener::api::Extension;
use crate::gardener::api::extension::DEFAULT_CLASS;
use crate::gardener::extension::backlog::Backlog;

/// How often every Extension is checked when nothing else triggers a check.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(30);
/// How many Extensions are checked at the same time.
pub const DEFAULT_MAX_CONCURRENT: usize = 5;
/// The field manager of the condition writes (visible in `managedFields`).
pub const DEFAULT_FIELD_MANAGER: &str = "gardener-extension-healthcheck";

/// The Extension classes Gardener knows.
const KNOWN_CLASSES: [&str; 3] = ["shoot", "seed", "garden"];

/// The health-check controller's configuration.
#[derive(Clone)]
pub struct HealthCheckConfig {
    /// `spec.type` of the Extensions to check.
    pub extension_type: String,
    /// `spec.class` values to check; empty (or only `""`) means `shoot`. An Extension without
    /// a class counts as `shoot`.
    pub classes: Vec<String>,
    /// Check every Extension at least this often; also the timeout of each check.
    pub period: Duration,
    /// How many Extensions are checked at the same time (at least 1).
    pub max_concurrent: usize,
    /// The conditions to compute, each from its checks.
    pub registrations: Vec<ConditionRegistration>,
    /// Only Extensions in this namespace (tests, single-namespace deployments); `None` for all.
    pub namespace: Option<String>,
    /// The field manager of the condition writes.
    pub field_manager: String,
    /// The backlog of the lifecycle controller running beside this one, if any: while it has
    /// a queue, checks give way (for a while; see `backlog`). `None`: checks never wait for
    /// the lifecycle.
    pub lifecycle_backlog: Option<Arc<Backlog>>,
}

/// One condition type on the Extension and the checks that decide it.
#[derive(Clone)]
pub struct ConditionRegistration {
    /// e.g. `SystemComponentsHealthy`, one of the types gardenlet reads.
    pub condition_type: String,
    pub checks: Vec<Arc<dyn HealthCheck>>,
}

impl ConditionRegistration {
    pub fn new(
        condition_type: impl Into<String>,
        checks: Vec<Arc<dyn HealthCheck>>,
    ) -> ConditionRegistration {
        ConditionRegistration {
            condition_type: condition_type.into(),
            checks,
        }
    }
}

impl fmt::Debug for ConditionRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let checks: Vec<_> = self.checks.iter().map(|c| c.name().into_owned()).collect();
        f.debug_struct("ConditionRegistration")
            .field("condition_type", &self.condition_type)
            .field("checks", &checks)
            .finish()
    }
}

impl fmt::Debug for HealthCheckConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthCheckConfig")
            .field("extension_type", &self.extension_type)
            .field("classes", &self.classes)
            .field("period", &self.period)
            .field("max_concurrent", &self.max_concurrent)
            .field("registrations", &self.registrations)
            .field("namespace", &self.namespace)
            .field("field_manager", &self.field_manager)
            .field("lifecycle_backlog", &self.lifecycle_backlog.is_some())
            .finish()
    }
}

impl HealthCheckConfig {
    /// A configuration for Extensions of `extension_type` of class `shoot`, with the default
    /// period and concurrency and no conditions yet.
    pub fn new(extension_type: impl Into<String>) -> HealthCheckConfig {
        HealthCheckConfig {
            extension_type: extension_type.into(),
            classes: Vec::new(),
            period: DEFAULT_PERIOD,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            registrations: Vec::new(),
            namespace: None,
            field_manager: DEFAULT_FIELD_MANAGER.to_string(),
            lifecycle_backlog: None,
        }
    }

    /// Adds a condition type and its checks.
    pub fn register(
        mut self,
        condition_type: impl Into<String>,
        checks: Vec<Arc<dyn HealthCheck>>,
    ) -> HealthCheckConfig {
        self.registrations
            .push(ConditionRegistration::new(condition_type, checks));
        self
    }

    /// Rejects a configuration that cannot work, before anything starts.
    pub fn validate(&self) -> Result<(), HealthCheckError> {
        let invalid = |msg: String| Err(HealthCheckError::InvalidConfig(msg));
        if self.extension_type.is_empty() {
            return invalid("the extension type is empty".into());
        }
        if let Some(class) = self
            .classes
            .iter()
            .find(|c| !c.is_empty() && !KNOWN_CLASSES.contains(&c.as_str()))
        {
            return invalid(format!(
                "unknown extension class {class:?} (known: shoot, seed, garden)"
            ));
        }
        if self.period.is_zero() {
            return invalid("the period must be positive".into());
        }
        if self.max_concurrent == 0 {
            return invalid("max_concurrent must be at least 1".into());
        }
        if self.field_manager.is_empty() || self.field_manager.len() > 128 {
            return invalid(format!(
                "the field manager {:?} must have 1 to 128 characters",
                self.field_manager
            ));
        }
        if self.registrations.is_empty() {
            return invalid("no condition types registered".into());
        }
        let mut seen = BTreeSet::new();
        for registration in &self.registrations {
            if registration.condition_type.is_empty() {
                return invalid("a registered condition type is empty".into());
            }
            if !seen.insert(registration.condition_type.as_str()) {
                return invalid(format!(
                    "condition type {:?} is registered twice",
                    registration.condition_type
                ));
            }
            if registration.checks.is_empty() {
                return invalid(format!(
                    "condition type {:?} has no checks",
                    registration.condition_type
                ));
            }
        }
        Ok(())
    }

    /// The classes this controller handles, with the defaulting applied.
    pub fn effective_classes(&self) -> BTreeSet<&str> {
        let set: BTreeSet<&str> = self
            .classes
            .iter()
            .map(String::as_str)
            .filter(|c| !c.is_empty())
            .collect();
        if set.is_empty() {
            BTreeSet::from([DEFAULT_CLASS])
        } else {
            set
        }
    }

    /// Whether the controller checks this Extension: our type, one of our classes, and in our
    /// namespace if we are limited to one.
    pub fn handles(&self, extension: &Extension) -> bool {
        extension.spec.type_ == self.extension_type
            && self
                .effective_classes()
                .contains(extension.class_or_default())
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| extension.namespace().as_deref() == Some(ns))
    }

    /// Tells every check that the Extensions of `namespace` are not checked any more for now.
    pub fn release(&self, namespace: &str) {
        for check in self.registrations.iter().flat_map(|r| r.checks.iter()) {
            check.release(namespace);
        }
    }

    /// The condition types, in registration order.
    pub fn condition_types(&self) -> impl Iterator<Item = &str> {
        self.registrations.iter().map(|r| r.condition_type.as_str())
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;

    use super::*;
    use crate::gardener::api::extension::test_extension;
    use crate::gardener::healthcheck::check::CheckContext;
    use crate::gardener::healthcheck::result::CheckResult;

    struct AlwaysHealthy;
    impl HealthCheck for AlwaysHealthy {
        fn check<'a>(&'a self, _: &'a CheckContext) -> BoxFuture<'a, CheckResult> {
            Box::pin(std::future::ready(CheckResult::Successful))
        }
    }

    fn config() -> HealthCheckConfig {
        HealthCheckConfig::new("containerd-shim")
            .register("SystemComponentsHealthy", vec![Arc::new(AlwaysHealthy)])
    }

    fn extension(ns: &str, type_: &str, class: Option<&str>) -> Extension {
        test_extension(ns, type_, type_, class)
    }

    #[test]
    fn defaults() {
        let c = config();
        assert_eq!(c.period, Duration::from_secs(30));
        assert_eq!(c.max_concurrent, 5);
        assert!(c.validate().is_ok());
        assert_eq!(
            c.condition_types().collect::<Vec<_>>(),
            ["SystemComponentsHealthy"]
        );
        assert!(format!("{c:?}").contains("SystemComponentsHealthy"));
    }

    #[test]
    fn no_class_means_shoot_on_both_sides() {
        let c = config();
        assert!(c.handles(&extension("a", "containerd-shim", None)));
        assert!(c.handles(&extension("a", "containerd-shim", Some("shoot"))));
        assert!(!c.handles(&extension("a", "containerd-shim", Some("seed"))));
        assert!(!c.handles(&extension("a", "other", None)));
        let blank = HealthCheckConfig {
            classes: vec![String::new()],
            ..config()
        };
        assert!(blank.handles(&extension("a", "containerd-shim", None)));
        assert!(!blank.handles(&extension("a", "containerd-shim", Some("garden"))));
    }

    #[test]
    fn explicit_classes_replace_the_default() {
        let c = HealthCheckConfig {
            classes: vec!["seed".into()],
            ..config()
        };
        assert!(c.handles(&extension("garden", "containerd-shim", Some("seed"))));
        assert!(!c.handles(&extension("a", "containerd-shim", None)));
        let both = HealthCheckConfig {
            classes: vec!["seed".into(), "shoot".into()],
            ..config()
        };
        assert!(both.handles(&extension("a", "containerd-shim", None)));
    }

    #[test]
    fn a_namespace_limits_the_extensions() {
        let c = HealthCheckConfig {
            namespace: Some("mine".into()),
            ..config()
        };
        assert!(c.handles(&extension("mine", "containerd-shim", None)));
        assert!(!c.handles(&extension("other", "containerd-shim", None)));
    }

    #[test]
    fn validation_rejects_what_cannot_work() {
        let bad = [
            HealthCheckConfig {
                extension_type: String::new(),
                ..config()
            },
            HealthCheckConfig {
                classes: vec!["shot".into()],
                ..config()
            },
            HealthCheckConfig {
                period: Duration::ZERO,
                ..config()
            },
            HealthCheckConfig {
                max_concurrent: 0,
                ..config()
            },
            HealthCheckConfig {
                field_manager: String::new(),
                ..config()
            },
            HealthCheckConfig {
                field_manager: "x".repeat(129),
                ..config()
            },
            HealthCheckConfig::new("containerd-shim"),
            config().register("SystemComponentsHealthy", vec![Arc::new(AlwaysHealthy)]),
            config().register("", vec![Arc::new(AlwaysHealthy)]),
            config().register("EveryNodeReady", vec![]),
        ];
        for c in bad {
            assert!(
                matches!(c.validate(), Err(HealthCheckError::InvalidConfig(_))),
                "{c:?}"
            );
        }
    }
}
