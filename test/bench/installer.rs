//! Installer micro-benchmark (`make bench`): one node installer run with nothing to do, and a
//! full install of two shims — staging, containerd config edit, validation with the real
//! containerd binary, verification — with the (simulated) containerd restart subtracted.
//!
//! A benchmark, not a test: it prints figures and asserts nothing about time. The figures and
//! the machine they came from are recorded in docs/performance.md.

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use gardener_extension_containerd_shim::installer::host::HostEvent;
use support::installer::{TestNode, corpus, desired, gvisor, spin};

const FULL_RUNS: usize = 5;
const NOOP_RUNS: usize = 30;

fn restart_time(node: &TestNode) -> Duration {
    node.host
        .events()
        .iter()
        .map(|e| match e {
            HostEvent::Restart {
                started, finished, ..
            } => finished.duration_since(*started),
            _ => Duration::ZERO,
        })
        .sum()
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let median = samples[samples.len() / 2];
    (samples[0], median, samples[samples.len() - 1])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    println!("installer micro-benchmark (two shims: spin and a gVisor-like two-binary shim)");
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>9}",
        "case", "min", "median", "max", "restarts"
    );
    for (major, fixture) in [(1u64, "v2-gardener.toml"), (2, "v3-default.toml")] {
        let shims = vec![spin("v0.22.0"), gvisor("20250101")];
        let want = desired(shims.clone());
        let config = corpus(fixture);

        let mut full = Vec::new();
        let mut restarts = 0;
        for _ in 0..FULL_RUNS {
            let mut node = TestNode::new(major, Some(&config));
            for shim in &shims {
                node.stage_shim(shim);
            }
            let started = Instant::now();
            let outcome = node.installer.run(&want).await.expect("install");
            let elapsed = started.elapsed();
            assert!(
                outcome.status.ready,
                "the install must verify: {:?}",
                outcome.status
            );
            restarts += node.host.restarts();
            full.push(elapsed.saturating_sub(restart_time(&node)));
        }
        let (min, median, max) = stats(full);
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>9}",
            format!("full install, containerd {major}.x"),
            ms(min),
            ms(median),
            ms(max),
            restarts
        );

        let mut node = TestNode::new(major, Some(&config));
        for shim in &shims {
            node.stage_shim(shim);
        }
        node.installer.run(&want).await.expect("install");
        let before = node.host.restarts();
        let mut noop = Vec::new();
        for _ in 0..NOOP_RUNS {
            let started = Instant::now();
            let outcome = node.installer.run(&want).await.expect("no-op run");
            noop.push(started.elapsed());
            assert!(
                !outcome.restarted,
                "a run with nothing to do must not restart containerd"
            );
        }
        let (min, median, max) = stats(noop);
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>9}",
            format!("nothing to do, containerd {major}.x"),
            ms(min),
            ms(median),
            ms(max),
            node.host.restarts() - before
        );
    }
    println!("target: a run with nothing to do restarts nothing and takes below 50 ms");
}
