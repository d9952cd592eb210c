//! Who the extension is, in every place Gardener and Kubernetes see it. A leaf: the wiring
//! (`controllers`), the actuator, the renderer and the offline tools all name the extension the
//! same way without depending on one another.

/// The `Extension` type gardenlet creates for shoots that list us, also the finalizer suffix
/// and the namespace label `extensions.gardener.cloud/<type>`.
pub const EXTENSION_TYPE: &str = "containerd-shim";

/// The extension's name: heartbeat holder and leader-election Lease prefix.
pub const EXTENSION_NAME: &str = "containerd-shim";

/// Name of the ManagedResource in the shoot namespace.
pub const MANAGED_RESOURCE: &str = "extension-containerd-shim";

/// The component's name: the value of `app.kubernetes.io/managed-by` on everything we render,
/// the `origin` of our ManagedResources (never `gardener`) and the `reportingController` of our
/// Events.
pub const COMPONENT: &str = "gardener-extension-containerd-shim";

/// The `origin` label of our ManagedResources.
pub const ORIGIN: &str = COMPONENT;

/// `reportingController` of the Events this extension records.
pub const EVENT_REPORTER: &str = COMPONENT;
