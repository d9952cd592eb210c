//! Command-line flags of the Extension reconciler, named like Gardener's Go extensions'.

use std::time::Duration;

use crate::gardener::runtime::options::{GoBoolFlag, parse_duration};

use super::context::ReconcilerConfig;
use super::predicate::TriggerMode;

/// Flags of the Extension controller.
#[derive(Clone, Debug, clap::Args)]
pub struct ExtensionControllerOptions {
    /// How many Extensions are reconciled at the same time (never two reconciles of one object).
    #[arg(long = "max-concurrent-reconciles", value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,

    /// Reconcile on every spec change instead of waiting for gardenlet's
    /// `gardener.cloud/operation` annotation.
    #[arg(long, default_value_t = false, go_bool_flag())]
    pub ignore_operation_annotation: bool,

    /// Extension classes to reconcile (`shoot`, `seed`, `garden`); an Extension without a class is
    /// `shoot`.
    #[arg(
        long,
        value_name = "CLASSES",
        value_delimiter = ',',
        default_value = "shoot"
    )]
    pub extension_classes: Vec<String>,

    /// Reconcile every Extension again after this long, even without a request.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub resync_period: Duration,

    /// Deadline of one reconcile.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_duration, hide = true)]
    pub reconcile_timeout: Duration,
}

/// Extension classes Gardener knows.
pub const CLASSES: &[&str] = &["shoot", "seed", "garden"];

impl ExtensionControllerOptions {
    /// The reconciler's configuration for `extension_type`; an unknown class is an error that
    /// names it.
    pub fn to_config(&self, extension_type: &str) -> Result<ReconcilerConfig, String> {
        if let Some(bad) = self
            .extension_classes
            .iter()
            .find(|c| !c.is_empty() && !CLASSES.contains(&c.as_str()))
        {
            return Err(format!(
                "--extension-classes: unknown class {bad:?} (known: {})",
                CLASSES.join(", ")
            ));
        }
        let mut config = ReconcilerConfig::new(extension_type);
        config.classes = self.extension_classes.clone();
        config.resync = self.resync_period;
        config.timeout = self.reconcile_timeout;
        config.max_concurrent = self.max_concurrent_reconciles;
        config.trigger = if self.ignore_operation_annotation {
            TriggerMode::GenerationChanged
        } else {
            TriggerMode::OperationAnnotation
        };
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: ExtensionControllerOptions,
    }

    #[test]
    fn defaults_match_gardeners_extensions() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        let config = cli.options.to_config("containerd-shim").unwrap();
        assert_eq!(config.classes, ["shoot"]);
        assert_eq!(config.resync, Duration::from_secs(3600));
        assert_eq!(config.timeout, Duration::from_secs(180));
        assert_eq!(config.max_concurrent, 5);
        assert_eq!(config.trigger, TriggerMode::OperationAnnotation);
    }

    #[test]
    fn flags_are_parsed_and_checked() {
        let cli = Cli::try_parse_from([
            "x",
            "--max-concurrent-reconciles=20",
            "--ignore-operation-annotation",
            "--extension-classes=seed,shoot",
            "--resync-period=10m",
        ])
        .unwrap();
        let config = cli.options.to_config("t").unwrap();
        assert_eq!(config.max_concurrent, 20);
        assert_eq!(config.trigger, TriggerMode::GenerationChanged);
        assert_eq!(config.classes, ["seed", "shoot"]);
        assert_eq!(config.resync, Duration::from_secs(600));
        let bad = Cli::try_parse_from(["x", "--extension-classes=shot"]).unwrap();
        assert!(bad.options.to_config("t").unwrap_err().contains("\"shot\""));
        assert!(Cli::try_parse_from(["x", "--max-concurrent-reconciles=0"]).is_err());
    }
}
