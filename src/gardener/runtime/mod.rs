//! The process runtime of a Rust Gardener extension: flags, logging in Gardener's format,
//! metrics, health and readiness endpoints, leader election, the heartbeat, and a manager that
//! runs the extension's controllers with all of it. Nothing here knows what the extension
//! does.
//!
//! A binary flattens [`RuntimeOptions`] into its command line, calls [`logging::init`],
//! creates a [`Manager`], adds its controllers and runs it:
//!
//! ```no_run
//! # use gardener_extension_containerd_shim::gardener::runtime::{Manager, RuntimeOptions, RuntimeError, logging};
//! # async fn example(options: RuntimeOptions) -> Result<(), RuntimeError> {
//! logging::init(options.log_level, options.log_format)?;
//! let mut manager = Manager::new(options, "my-extension", &["extension", "heartbeat"]).await?;
//! manager.add_controller("extension", |ctx| {
//!     let cache = ctx.readiness.register("extension-cache");
//!     Box::pin(async move {
//!         // start watches; when they have synced:
//!         cache.mark_synced();
//!         if ctx.wait_until_leader().await.is_err() {
//!             return;
//!         }
//!         // reconcile until ctx.shutdown is cancelled
//!         ctx.shutdown.cancelled().await;
//!     })
//! })?;
//! manager.run().await
//! # }
//! ```

pub mod context;
pub mod error;
pub mod heartbeat;
pub(crate) mod http;
pub mod leader;
mod lifecycle;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod options;
pub mod readiness;

pub use context::{ControllerContext, ShuttingDown};
pub use error::RuntimeError;
pub use manager::{ControllerFactory, Manager};
pub use metrics::{Operation, OperationResult, ReconcileMetrics, ReconcileResult};
pub use options::{BindAddress, LogFormat, LogLevel, RuntimeOptions};
pub use readiness::{Readiness, SyncHandle};
