//! The runtime's command-line flags, named like the flags of Gardener's Go extensions so that
//! charts and operators can use the same values.
//!
//! The binary flattens [`RuntimeOptions`] into its own clap command. Flags that need to know
//! the extension (its name, its controllers) are checked by `Manager::new`, which does.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use super::error::RuntimeError;

/// Turns a `bool` argument into a flag the way Go's flag package reads one: bare (`--x`) or
/// with `=` (`--x=false`), never as `--x false`. Charts written for Gardener's Go extensions
/// pass boolean flags like this. Given as the derive attribute `go_bool_flag()`.
pub trait GoBoolFlag {
    fn go_bool_flag(self) -> Self;
}

impl GoBoolFlag for clap::Arg {
    fn go_bool_flag(self) -> Self {
        self.value_name("BOOL")
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .action(ArgAction::Set)
    }
}

/// The minimum level of log events that are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

/// How log events are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line in Gardener's shape (`level`, `ts`, `logger`, `msg`, fields).
    Json,
    /// Human-readable lines.
    Text,
}

/// The flags of the process runtime: API access, leader election, health and metrics
/// endpoints, logging, controller selection and the heartbeat.
#[derive(Clone, Debug, Args)]
pub struct RuntimeOptions {
    /// Kubeconfig file of the cluster the extension runs in (several, separated by ':', are
    /// merged like kubectl does). Without it the configuration is inferred: ~/.kube/config,
    /// then the pod's service account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<OsString>,

    /// Elect a leader among the replicas through a Lease; only the leader reconciles. With
    /// `=false` this process reconciles right away.
    #[arg(long, default_value_t = true, go_bool_flag())]
    pub leader_election: bool,

    /// Name of the leader-election Lease [default: <extension name>-leader-election].
    #[arg(long, value_name = "NAME")]
    pub leader_election_id: Option<String>,

    /// Namespace of the leader-election Lease [default: the pod's namespace when running in a
    /// cluster].
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// How long a leader's Lease stays valid without renewal; a stand-by replica takes over
    /// after this. Whole seconds.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// How long the leader keeps trying to renew its Lease before it gives up and exits.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// How often the leader renews its Lease. Whole seconds.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,

    /// Address of the metrics endpoint (`/metrics`); `0` disables it.
    #[arg(long, value_name = "[HOST]:PORT", default_value = ":8080")]
    pub metrics_bind_address: BindAddress,

    /// Address of the health endpoints (`/healthz`, `/readyz`); `0` disables them.
    #[arg(long, value_name = "[HOST]:PORT", default_value = ":8081")]
    pub health_bind_address: BindAddress,

    /// Minimum level of the log events written.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Format of the log events.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Comma-separated controllers to run [default: all]. Unknown names are an error.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub controllers: Option<Vec<String>>,

    /// Comma-separated controllers not to run, even when listed in --controllers. Unknown
    /// names are an error.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub disable_controllers: Vec<String>,

    /// Namespace of the heartbeat Lease `gardener-extension-heartbeat`, which gardenlet reads
    /// to tell whether the extension's health reports are current (the release namespace).
    #[arg(long, env = "HEARTBEAT_NAMESPACE", value_name = "NAMESPACE")]
    pub heartbeat_namespace: Option<String>,

    /// How often the leader renews the heartbeat Lease, in seconds (> 0).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX))
    )]
    pub heartbeat_renew_interval_seconds: u32,

    /// Version of the Gardener that deployed this extension (informational).
    #[arg(long, value_name = "VERSION")]
    pub gardener_version: Option<String>,

    /// How long caches may stay unsynced before /healthz fails (Gardener: 3 minutes).
    #[arg(long, hide = true, value_name = "DURATION", default_value = "3m", value_parser = parse_duration)]
    pub healthz_cache_sync_timeout: Duration,

    /// How long controllers get to stop after SIGTERM before they are aborted.
    #[arg(long, hide = true, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub graceful_shutdown_timeout: Duration,
}

impl RuntimeOptions {
    /// The controllers to run: those in `--controllers` (all known ones when absent) minus
    /// those in `--disable-controllers`. A name that is not in `known` is an error.
    pub fn enabled_controllers(
        &self,
        known: &[&'static str],
    ) -> Result<BTreeSet<&'static str>, RuntimeError> {
        let lookup = |flag: &'static str, name: &str| -> Result<&'static str, RuntimeError> {
            known.iter().copied().find(|k| *k == name).ok_or_else(|| {
                RuntimeError::UnknownController {
                    flag,
                    name: name.to_string(),
                    known: known.join(", "),
                }
            })
        };
        let names = |list: &[String]| -> Vec<String> {
            list.iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect()
        };
        let mut enabled = BTreeSet::new();
        match &self.controllers {
            None => enabled.extend(known.iter().copied()),
            Some(list) => {
                for name in names(list) {
                    enabled.insert(lookup("--controllers", &name)?);
                }
            }
        }
        for name in names(&self.disable_controllers) {
            enabled.remove(lookup("--disable-controllers", &name)?);
        }
        Ok(enabled)
    }

    /// The leader-election timing in the whole seconds the lease library works with, checked
    /// to be consistent: retry period < renew deadline < lease duration.
    pub fn leader_election_timing(&self) -> Result<LeaderElectionTiming, RuntimeError> {
        let whole_seconds = |flag: &'static str, d: Duration| -> Result<u64, RuntimeError> {
            if d.subsec_nanos() != 0 || d.as_secs() == 0 {
                return Err(RuntimeError::InvalidFlag {
                    flag,
                    value: format_duration(d),
                    reason:
                        "must be a whole number of seconds, at least 1s (the Lease is renewed in \
                             whole seconds)"
                            .to_string(),
                });
            }
            Ok(d.as_secs())
        };
        let lease_duration = whole_seconds(
            "--leader-election-lease-duration",
            self.leader_election_lease_duration,
        )?;
        let retry_period = whole_seconds(
            "--leader-election-retry-period",
            self.leader_election_retry_period,
        )?;
        let renew_deadline = self.leader_election_renew_deadline;
        if renew_deadline >= self.leader_election_lease_duration {
            return Err(RuntimeError::InvalidFlag {
                flag: "--leader-election-renew-deadline",
                value: format_duration(renew_deadline),
                reason: format!(
                    "must be shorter than --leader-election-lease-duration ({})",
                    format_duration(self.leader_election_lease_duration)
                ),
            });
        }
        if self.leader_election_retry_period >= renew_deadline {
            return Err(RuntimeError::InvalidFlag {
                flag: "--leader-election-retry-period",
                value: format_duration(self.leader_election_retry_period),
                reason: format!(
                    "must be shorter than --leader-election-renew-deadline ({})",
                    format_duration(renew_deadline)
                ),
            });
        }
        Ok(LeaderElectionTiming {
            lease_duration_seconds: lease_duration,
            renew_deadline,
            retry_period_seconds: retry_period,
        })
    }

    /// The heartbeat interval as a duration.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs(u64::from(self.heartbeat_renew_interval_seconds))
    }
}

/// Leader-election timing, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderElectionTiming {
    /// How long a Lease is valid after its last renewal.
    pub lease_duration_seconds: u64,
    /// How long the leader may go without a successful renewal before it gives up.
    pub renew_deadline: Duration,
    /// How often the leader renews.
    pub retry_period_seconds: u64,
}

/// Where a server listens: `host:port`, `:port` (every interface), `[v6]:port`, or `0` for not
/// at all, as in Go's `net.Listen` and controller-runtime's bind-address flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindAddress {
    /// The server is not started.
    Disabled,
    /// The server listens on `host` (every interface when `None`) and `port`.
    Listen { host: Option<String>, port: u16 },
}

impl FromStr for BindAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "0" {
            return Ok(BindAddress::Disabled);
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err("expected [HOST]:PORT, or 0 to disable".to_string());
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{port:?} is not a port number (0-65535)"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.contains(':') && !s.starts_with('[') {
            return Err("an IPv6 address must be in brackets, as in [::1]:8080".to_string());
        }
        Ok(BindAddress::Listen {
            host: (!host.is_empty()).then(|| host.to_string()),
            port,
        })
    }
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindAddress::Disabled => f.write_str("0"),
            BindAddress::Listen { host: None, port } => write!(f, ":{port}"),
            BindAddress::Listen {
                host: Some(h),
                port,
            } if h.contains(':') => write!(f, "[{h}]:{port}"),
            BindAddress::Listen {
                host: Some(h),
                port,
            } => write!(f, "{h}:{port}"),
        }
    }
}

/// Parses a duration the way Go's `time.ParseDuration` does (`15s`, `1m30s`, `1.5h`, `500ms`),
/// so durations in charts mean the same for Go and Rust extensions. Negative durations make no
/// sense for any flag here and are rejected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const UNITS: &[(&str, u128)] = &[
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let invalid = || format!("{s:?} is not a duration (examples: 15s, 1m30s, 500ms)");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut rest = s;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{s:?} has a number without a unit (ns, us, ms, s, m, h)"))?;
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(invalid)?;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
        if !fraction.is_empty() {
            if !fraction.chars().all(|c| c.is_ascii_digit()) {
                return Err(invalid());
            }
            // Digits beyond nanoseconds cannot change the result.
            let digits = &fraction[..fraction.len().min(18)];
            let numerator: u128 = digits.parse().map_err(|_| invalid())?;
            value += numerator * scale / 10u128.pow(digits.len() as u32);
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// Formats a duration like Go does for whole seconds and minutes (`15s`, `3m0s`), so messages
/// show values the way the flags were written.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        return format!("{d:?}");
    }
    let secs = d.as_secs();
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// The flags parsed the way a binary that flattens them does.
#[cfg(test)]
pub(super) mod testing {
    use clap::Parser;

    use super::RuntimeOptions;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(flatten)]
        options: RuntimeOptions,
    }

    pub fn parse(args: &[&str]) -> Result<RuntimeOptions, clap::Error> {
        TestCli::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
            .map(|c| c.options)
    }

    pub fn parse_ok(args: &[&str]) -> RuntimeOptions {
        match parse(args) {
            Ok(options) => options,
            Err(e) => panic!("{args:?} should parse: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{parse, parse_ok};
    use super::*;

    const KNOWN: &[&str] = &["extension", "healthcheck", "heartbeat"];

    #[test]
    fn defaults_match_gardener_extensions() {
        let o = parse_ok(&[]);
        assert!(o.leader_election);
        assert_eq!(o.leader_election_id, None);
        assert_eq!(o.leader_election_lease_duration, Duration::from_secs(15));
        assert_eq!(o.leader_election_renew_deadline, Duration::from_secs(10));
        assert_eq!(o.leader_election_retry_period, Duration::from_secs(2));
        assert_eq!(
            o.metrics_bind_address,
            BindAddress::Listen {
                host: None,
                port: 8080
            }
        );
        assert_eq!(
            o.health_bind_address,
            BindAddress::Listen {
                host: None,
                port: 8081
            }
        );
        assert_eq!(o.log_level, LogLevel::Info);
        assert_eq!(o.log_format, LogFormat::Json);
        assert_eq!(o.heartbeat_renew_interval_seconds, 30);
        assert_eq!(o.healthz_cache_sync_timeout, Duration::from_secs(180));
        assert_eq!(
            o.enabled_controllers(KNOWN).ok(),
            Some(KNOWN.iter().copied().collect())
        );
        assert_eq!(
            o.leader_election_timing().ok(),
            Some(LeaderElectionTiming {
                lease_duration_seconds: 15,
                renew_deadline: Duration::from_secs(10),
                retry_period_seconds: 2
            })
        );
    }

    #[test]
    fn leader_election_is_a_go_style_bool_flag() {
        assert!(parse_ok(&["--leader-election"]).leader_election);
        assert!(!parse_ok(&["--leader-election=false"]).leader_election);
        assert!(parse_ok(&["--leader-election=true"]).leader_election);
        assert!(parse(&["--leader-election=maybe"]).is_err());
        assert!(parse(&["--leader-election", "false"]).is_err());
    }

    #[test]
    fn controllers_are_selected_by_both_lists() {
        let o = parse_ok(&[
            "--controllers=extension,heartbeat",
            "--disable-controllers=heartbeat",
        ]);
        assert_eq!(
            o.enabled_controllers(KNOWN).ok(),
            Some(["extension"].into())
        );
        let o = parse_ok(&["--disable-controllers", "healthcheck, heartbeat"]);
        assert_eq!(
            o.enabled_controllers(KNOWN).ok(),
            Some(["extension"].into())
        );
        let o = parse_ok(&["--controllers="]);
        assert_eq!(o.enabled_controllers(KNOWN).ok(), Some(BTreeSet::new()));
    }

    #[test]
    fn unknown_controllers_are_errors_naming_flag_and_value() {
        let o = parse_ok(&["--disable-controllers=bogus"]);
        let err = o.enabled_controllers(KNOWN).expect_err("bogus is unknown");
        let msg = err.to_string();
        assert!(
            msg.contains("\"bogus\"") && msg.contains("--disable-controllers"),
            "{msg}"
        );
        assert!(msg.contains("extension, healthcheck, heartbeat"), "{msg}");

        let o = parse_ok(&["--controllers=extension,typo"]);
        let msg = o
            .enabled_controllers(KNOWN)
            .expect_err("typo is unknown")
            .to_string();
        assert!(
            msg.contains("\"typo\"") && msg.contains("--controllers"),
            "{msg}"
        );
    }

    #[test]
    fn heartbeat_interval_must_be_positive() {
        let err = parse(&["--heartbeat-renew-interval-seconds=0"]).expect_err("0 is invalid");
        let msg = err.to_string();
        assert!(
            msg.contains("--heartbeat-renew-interval-seconds") && msg.contains("'0'"),
            "{msg}"
        );
        assert!(parse(&["--heartbeat-renew-interval-seconds=-5"]).is_err());
        assert_eq!(
            parse_ok(&["--heartbeat-renew-interval-seconds=1"]).heartbeat_interval(),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn log_flags_accept_gardener_values_only() {
        for (value, level) in [
            ("debug", LogLevel::Debug),
            ("info", LogLevel::Info),
            ("warn", LogLevel::Warn),
            ("error", LogLevel::Error),
        ] {
            assert_eq!(
                parse_ok(&[&format!("--log-level={value}")]).log_level,
                level
            );
        }
        let msg = parse(&["--log-level=loud"])
            .expect_err("loud is no level")
            .to_string();
        assert!(
            msg.contains("--log-level") && msg.contains("'loud'"),
            "{msg}"
        );
        assert_eq!(parse_ok(&["--log-format=text"]).log_format, LogFormat::Text);
        assert!(parse(&["--log-format=xml"]).is_err());
    }

    #[test]
    fn bind_addresses() {
        let addr = |s: &str| s.parse::<BindAddress>();
        assert_eq!(
            addr(":8080"),
            Ok(BindAddress::Listen {
                host: None,
                port: 8080
            })
        );
        assert_eq!(
            addr("127.0.0.1:9"),
            Ok(BindAddress::Listen {
                host: Some("127.0.0.1".into()),
                port: 9
            })
        );
        assert_eq!(
            addr("[::1]:9"),
            Ok(BindAddress::Listen {
                host: Some("::1".into()),
                port: 9
            })
        );
        assert_eq!(addr("0"), Ok(BindAddress::Disabled));
        assert!(addr("8080").is_err());
        assert!(addr(":http").is_err());
        assert!(addr(":70000").is_err());
        assert!(addr("::1:80").is_err());
        for s in [":8080", "127.0.0.1:9", "[::1]:9", "0"] {
            assert_eq!(addr(s).map(|a| a.to_string()).as_deref(), Ok(s));
        }
        let msg = parse(&["--metrics-bind-address=nowhere"])
            .expect_err("no port")
            .to_string();
        assert!(
            msg.contains("--metrics-bind-address") && msg.contains("'nowhere'"),
            "{msg}"
        );
    }

    #[test]
    fn go_durations() {
        let d = |s: &str| parse_duration(s);
        assert_eq!(d("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(d("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(d(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(d("0"), Ok(Duration::ZERO));
        for bad in ["", "15", "s", "1x", "-1s", "1..5s", ".s", "1e3s"] {
            assert!(d(bad).is_err(), "{bad:?} must be rejected");
        }
        assert_eq!(format_duration(Duration::from_secs(180)), "3m0s");
        assert_eq!(format_duration(Duration::from_secs(15)), "15s");
        assert_eq!(format_duration(Duration::from_secs(3723)), "1h2m3s");
    }

    #[test]
    fn leader_election_timing_is_checked() {
        let timing = |args: &[&str]| parse_ok(args).leader_election_timing();
        let msg = timing(&["--leader-election-retry-period=1500ms"])
            .expect_err("fraction")
            .to_string();
        assert!(
            msg.contains("--leader-election-retry-period") && msg.contains("1.5s"),
            "{msg}"
        );
        let msg = timing(&["--leader-election-renew-deadline=20s"])
            .expect_err("renew > lease")
            .to_string();
        assert!(
            msg.contains("--leader-election-renew-deadline") && msg.contains("\"20s\""),
            "{msg}"
        );
        let msg = timing(&["--leader-election-retry-period=10s"])
            .expect_err("retry = renew")
            .to_string();
        assert!(msg.contains("--leader-election-retry-period"), "{msg}");
        assert!(timing(&["--leader-election-lease-duration=0s"]).is_err());
        let ok = timing(&[
            "--leader-election-lease-duration=6s",
            "--leader-election-renew-deadline=4s",
            "--leader-election-retry-period=1s",
        ]);
        assert_eq!(ok.map(|t| t.retry_period_seconds).ok(), Some(1));
    }
}
