//! What the benchmarks (`make bench`) share: how they start, their knobs and the description
//! of the machine their figures came from.

use std::future::Future;

use serde_json::{Value, json};

/// Runs `run` on a two-thread runtime when started as a benchmark. `cargo test --all-targets`
/// runs bench targets without `--bench`; they only say how to run them then.
pub fn main(name: &str, run: impl Future<Output = ()>) {
    if !std::env::args().any(|a| a == "--bench") {
        println!("{name}: run it with `make bench`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start tokio: {e}"));
    runtime.block_on(run);
}

/// A knob from the environment, or its default when unset or unparsable.
pub fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// The trimmed output of a shell command; empty when it fails.
pub fn sh(cmd: &str) -> String {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The machine and its load now: every figure is read against these.
pub fn machine() -> Value {
    json!({
        "nproc": sh("nproc"),
        "memTotal": sh("grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2-"),
        "free_g": sh("free -g"),
        "cpu_model": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-"),
        "kernel": sh("uname -r"),
        "load_average_at_start": sh("cat /proc/loadavg"),
    })
}
