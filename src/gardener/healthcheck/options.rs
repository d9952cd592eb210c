//! Command-line flags of the health-check controller.

use std::time::Duration;

use crate::gardener::runtime::options::parse_duration;

/// Flags of the health-check controller.
#[derive(Clone, Debug, clap::Args)]
pub struct HealthCheckOptions {
    /// How often every Extension's health conditions are computed and written (when changed).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub healthcheck_period: Duration,

    /// How many Extensions are checked at the same time.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub healthcheck_max_concurrent_reconciles: u16,
}
