//! Wires the containerd-shim extension into the process runtime: the Extension controller with
//! the shim actuator, the health-check controller with `SystemComponentsHealthy`, and the shared
//! caches both read.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use crate::gardener::cache::SharedCaches;
use crate::gardener::extension::backlog::Backlog;
use crate::gardener::extension::events::OutcomeEvents;
use crate::gardener::extension::options::ExtensionControllerOptions;
use crate::gardener::extension::{
    Context, ControllerMetrics, ReconcilerConfig, controller as extension_controller,
};
use crate::gardener::healthcheck::config::HealthCheckConfig;
use crate::gardener::healthcheck::controller as healthcheck_controller;
use crate::gardener::healthcheck::managed_resource::ManagedResourceCheck;
use crate::gardener::healthcheck::options::HealthCheckOptions;
use crate::gardener::imagevector::{ImageVector, ImageVectorError};
use crate::gardener::runtime::options::parse_duration;
use crate::gardener::runtime::{Manager, RuntimeError};
use crate::shim::actuator::{ActuatorSettings, ShimActuator};
use crate::shim::config::catalog::CatalogError;
use crate::shim::config::custom_policy::{CustomShimPolicy, PolicyError};
use crate::shim::config::types::DeliveryMode;
use crate::shim::config::{Catalog, images};
use crate::shim::health::VerifiedNodesCheck;
use crate::shim::identity::{EVENT_REPORTER, EXTENSION_TYPE, MANAGED_RESOURCE, ORIGIN};
use crate::shim::osc_webhook::{OSC_WEBHOOK, OscWebhookOptions, add_osc_webhook};

/// Controller names for `--controllers` / `--disable-controllers`.
pub const EXTENSION_CONTROLLER: &str = "extension";
pub const HEALTHCHECK_CONTROLLER: &str = "healthcheck";
pub const HEARTBEAT_CONTROLLER: &str = "heartbeat";
pub const CONTROLLERS: &[&str] = &[
    EXTENSION_CONTROLLER,
    HEALTHCHECK_CONTROLLER,
    HEARTBEAT_CONTROLLER,
    OSC_WEBHOOK,
];
/// The User-Agent component of the shared caches' watches.
pub const CACHE_COMPONENT: &str = "cache";
/// The condition gardenlet aggregates into the Shoot's `SystemComponentsHealthy`.
pub const SYSTEM_COMPONENTS_HEALTHY: &str = "SystemComponentsHealthy";

/// Flags specific to this extension.
#[derive(Clone, Debug, clap::Args)]
pub struct ShimOptions {
    #[command(flatten)]
    pub catalog: CatalogOptions,

    /// How long deleting the extension waits for every node to uninstall before it removes the
    /// installer anyway.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub uninstall_timeout: Duration,
}

/// What this installation offers shoot owners: the catalog with the operator's overlay, and
/// the rules for custom shims. The controller and the offline renderer both take these flags.
#[derive(Clone, Debug, clap::Args)]
pub struct CatalogOptions {
    /// A catalog overlay (YAML) that adds shims to the built-in catalog or overrides them.
    #[arg(long, env = "SHIM_CATALOG_OVERLAY", value_name = "PATH")]
    pub shim_catalog_overlay: Option<PathBuf>,

    /// Whether shoot owners may define custom shims (binaries from a URL or an image of their
    /// choosing) besides the catalog's.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub allow_custom_shims: bool,

    /// The only hosts custom shims may download from, comma-separated: `example.com`, or
    /// `*.example.com` for its subdomains. Unset: any https host.
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub custom_shim_download_hosts: Vec<String>,

    /// The only registries (`ghcr.io`) or repository prefixes (`ghcr.io/example`) custom shims
    /// may take files from, comma-separated. Unset: any registry.
    #[arg(long, value_name = "REGISTRIES", value_delimiter = ',')]
    pub custom_shim_image_registries: Vec<String>,

    /// How shims reach the nodes when a providerConfig names no `delivery`: `daemonset` (the
    /// installer DaemonSet edits containerd's config) or `osc` (gardener-node-agent applies
    /// them from the worker pools' OperatingSystemConfigs; needs the controller's
    /// OperatingSystemConfig webhook).
    #[arg(long, value_name = "MODE", default_value = "daemonset", value_parser = parse_delivery)]
    pub default_delivery: DeliveryMode,
}

fn parse_delivery(value: &str) -> Result<DeliveryMode, String> {
    match value {
        "daemonset" => Ok(DeliveryMode::DaemonSet),
        "osc" => Ok(DeliveryMode::Osc),
        other => Err(format!("{other:?} is not a delivery; use daemonset or osc")),
    }
}

/// The flags' defaults: the built-in catalog, custom shims from anywhere.
impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            shim_catalog_overlay: None,
            allow_custom_shims: true,
            custom_shim_download_hosts: Vec::new(),
            custom_shim_image_registries: Vec::new(),
            default_delivery: DeliveryMode::DaemonSet,
        }
    }
}

/// Everything the controllers of this extension are configured with.
#[derive(Clone, Debug, clap::Args)]
pub struct ControllerOptions {
    #[command(flatten)]
    pub extension: ExtensionControllerOptions,
    #[command(flatten)]
    pub healthcheck: HealthCheckOptions,
    #[command(flatten)]
    pub shim: ShimOptions,
    #[command(flatten)]
    pub osc_webhook: OscWebhookOptions,
}

/// Why the controllers could not be set up; every one stops the process at start-up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("invalid flag: {0}")]
    Flag(String),
    #[error("shim catalog: {0}")]
    Catalog(#[from] CatalogError),
    #[error("image vector: {0}")]
    Images(#[from] ImageVectorError),
    #[error("the shim catalog names images the image vector cannot give:\n- {}", .0.join("\n- "))]
    CatalogImages(Vec<String>),
    #[error("invalid flag: {0}")]
    CustomShimPolicy(#[from] PolicyError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("OperatingSystemConfig webhook: {0}")]
    OscWebhook(#[from] crate::shim::osc_webhook::OscWebhookError),
}

/// Loads the catalog (with the operator's overlay and custom-shim rules) and the image vector
/// (with `IMAGEVECTOR_OVERWRITE`) and checks that every catalog image resolves; shared by the
/// controller and the offline renderer.
pub fn load_catalog_and_images(
    options: &CatalogOptions,
) -> Result<(Catalog, crate::gardener::imagevector::ImageVector), SetupError> {
    let catalog = load_catalog(options)?;
    let images = images::image_vector()?;
    images::check_catalog_images(&images, &catalog).map_err(SetupError::CatalogImages)?;
    Ok((catalog, images))
}

/// The catalog with the operator's overlay and custom-shim rules: all that validating a
/// providerConfig needs (the admission webhook loads no image vector).
pub fn load_catalog(options: &CatalogOptions) -> Result<Catalog, SetupError> {
    let mut catalog = Catalog::load(options.shim_catalog_overlay.as_deref())?;
    catalog.custom_shims = CustomShimPolicy::new(
        options.allow_custom_shims,
        &options.custom_shim_download_hosts,
        &options.custom_shim_image_registries,
    )?;
    catalog.default_delivery = options.default_delivery;
    Ok(catalog)
}

/// Adds this extension's controllers to the manager. Nothing runs until `manager.run()`.
pub fn add_controllers(
    manager: &mut Manager,
    options: &ControllerOptions,
) -> Result<(), SetupError> {
    let reconciler_config = options
        .extension
        .to_config(EXTENSION_TYPE)
        .map_err(SetupError::Flag)?;
    let (catalog, images) = load_catalog_and_images(&options.shim.catalog)?;
    let caches = shared_caches(manager);
    let catalog = Arc::new(catalog);
    let images = Arc::new(images);
    let actuator = ShimActuator::new(
        manager.client_for(EXTENSION_CONTROLLER),
        catalog.clone(),
        images.clone(),
        ActuatorSettings {
            uninstall_timeout: options.shim.uninstall_timeout,
            catch_up_timeout: options.extension.reconcile_timeout,
            ..ActuatorSettings::default()
        },
    )
    .with_shoot_user_agent(&manager.user_agent(EXTENSION_CONTROLLER));
    // Work that only reports (health checks, Events) gives way to a queue of reconciles.
    let backlog = Arc::new(Backlog::new(
        caches.extensions.store().clone(),
        usize::from(reconciler_config.max_concurrent),
        options.healthcheck.healthcheck_period,
    ));
    add_extension_controller(
        manager,
        actuator,
        caches.clone(),
        reconciler_config,
        backlog.clone(),
    )?;
    if manager.is_enabled(OSC_WEBHOOK) {
        add_osc_webhook(
            manager,
            &options.osc_webhook,
            catalog.clone(),
            images.clone(),
            caches.clone(),
        )?;
    }
    add_healthcheck_controller(manager, options, catalog, images, caches, backlog)
}

/// One set of caches (one watch per kind) for both controllers; started on every replica so
/// stand-bys are Ready.
fn shared_caches(manager: &mut Manager) -> SharedCaches {
    let caches = SharedCaches::spawn_in(
        &manager.client_for(CACHE_COMPONENT),
        ORIGIN,
        Some(EXTENSION_TYPE),
        None,
    );
    let caches_synced = manager.readiness().register("shared-caches");
    {
        let caches = caches.clone();
        tokio::spawn(async move {
            caches.wait_until_ready().await;
            caches_synced.mark_synced();
        });
    }
    caches
}

fn add_extension_controller(
    manager: &mut Manager,
    actuator: ShimActuator,
    extension_caches: SharedCaches,
    reconciler_config: ReconcilerConfig,
    backlog: Arc<Backlog>,
) -> Result<(), SetupError> {
    manager.add_controller(EXTENSION_CONTROLLER, move |ctx| {
        let synced = ctx.readiness.register("extension-cache");
        let observer = Arc::new(ControllerMetrics {
            metrics: ctx.metrics.clone(),
            controller: EXTENSION_CONTROLLER,
        });
        let (events, publisher) = OutcomeEvents::new(
            ctx.client.clone(),
            EVENT_REPORTER,
            &crate::gardener::runtime::leader::identity(),
            Some(backlog),
        );
        let context = Arc::new(
            Context::new(
                ctx.client.clone(),
                actuator,
                extension_caches,
                reconciler_config,
                observer,
            )
            .with_events(events),
        );
        async move {
            // Ends when the controller, which holds the recorder, is gone.
            tokio::spawn(publisher);
            let shutdown = ctx.shutdown.clone();
            let leader = {
                let ctx = &ctx;
                async move {
                    // A shutdown while waiting ends the controller below anyway.
                    let _ = ctx.wait_until_leader().await;
                }
            };
            extension_controller::run(context, leader, shutdown.cancelled_owned(), move || {
                synced.mark_synced()
            })
            .await;
        }
        .boxed()
    })?;
    Ok(())
}

fn add_healthcheck_controller(
    manager: &mut Manager,
    options: &ControllerOptions,
    catalog: Arc<Catalog>,
    images: Arc<ImageVector>,
    health_caches: SharedCaches,
    backlog: Arc<Backlog>,
) -> Result<(), SetupError> {
    let mut health = HealthCheckConfig::new(EXTENSION_TYPE).register(
        SYSTEM_COMPONENTS_HEALTHY,
        vec![
            Arc::new(ManagedResourceCheck::new(MANAGED_RESOURCE)),
            Arc::new(VerifiedNodesCheck::new(
                catalog,
                images,
                &manager.user_agent(HEALTHCHECK_CONTROLLER),
            )),
        ],
    );
    health.classes = options.extension.extension_classes.clone();
    health.period = options.healthcheck.healthcheck_period;
    health.max_concurrent = usize::from(options.healthcheck.healthcheck_max_concurrent_reconciles);
    health.lifecycle_backlog = Some(backlog);
    manager.add_controller(HEALTHCHECK_CONTROLLER, move |ctx| {
        async move {
            if ctx.wait_until_leader().await.is_err() {
                return;
            }
            health_caches.wait_until_ready().await;
            let shutdown = ctx.shutdown.clone();
            if let Err(e) = healthcheck_controller::run(
                ctx.client.clone(),
                health_caches,
                health,
                shutdown.cancelled_owned(),
                || {},
            )
            .await
            {
                tracing::error!(error = %e, "health-check controller stopped");
            }
        }
        .boxed()
    })?;
    Ok(())
}
