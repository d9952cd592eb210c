//! The benchmark's tables on the terminal and its targets (reported against, never asserted).

use std::collections::BTreeMap;

use crate::FleetResult;
use crate::audit::ByActor;

/// Peak RSS growth per Extension in KiB, between the smallest and the largest fleet of at
/// least 500 (`None` with fewer than two such sizes).
pub fn growth(results: &[FleetResult]) -> Option<f64> {
    let large: Vec<&FleetResult> = results.iter().filter(|r| r.n >= 500).collect();
    let (first, last) = (large.first()?, large.last()?);
    (last.n > first.n)
        .then(|| (last.peak_rss_mib - first.peak_rss_mib) * 1024.0 / (last.n - first.n) as f64)
}

/// Each target with its measured figure.
pub fn targets(results: &[FleetResult], growth: Option<f64>) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    let verdict = |ok: bool, figure: String| {
        if ok {
            format!("met ({figure})")
        } else {
            format!("MISSED ({figure})")
        }
    };
    for r in results {
        let steady: Vec<String> = [&r.episode_resync, &r.episode_noop]
            .iter()
            .flat_map(|e| e.writes_per_extension.iter())
            .filter(|(k, v)| (k.contains("managedresources") || k.contains("secrets")) && **v > 0.0)
            .map(|(k, v)| format!("{k}: {v:.2}"))
            .collect();
        t.insert(
            format!("N={}: resyncs write no ManagedResource and no Secret", r.n),
            verdict(
                steady.is_empty() && r.episode_resync.extensions > 0,
                format!("{steady:?}"),
            ),
        );
        if r.n == 500 || r.n == 2000 {
            t.insert(
                format!("N={}: first wave <= 1.3x the floor", r.n),
                verdict(
                    r.floor_ratio <= 1.3,
                    format!(
                        "{:.1} s / {:.1} s = {:.2}x; the API server's floor alone {:.1} s: {:.2}x",
                        r.all_succeeded_seconds,
                        r.floor.seconds,
                        r.floor_ratio,
                        r.floor_api.seconds,
                        r.floor_api_ratio
                    ),
                ),
            );
        }
        if r.n == 500 {
            t.insert(
                "N=500: reads per Extension in the first wave <= 2".into(),
                verdict(
                    r.first_wave_reads_per_extension <= 2.0,
                    format!(
                        "{:.2} in the Extensions' namespaces ({:.2} in the reconcile episodes); besides {} cluster-wide lists, watches and Lease reads for the whole wave",
                        r.first_wave_reads_per_extension,
                        r.episode_first.reads_total_per_extension,
                        r.first_wave_other_reads
                    ),
                ),
            );
            t.insert(
                "N=500: peak RSS <= 40 MiB".into(),
                verdict(r.peak_rss_mib <= 40.0, format!("{:.1} MiB", r.peak_rss_mib)),
            );
        }
        if r.n == 2000 {
            t.insert(
                "N=2000: peak RSS <= 96 MiB".into(),
                verdict(r.peak_rss_mib <= 96.0, format!("{:.1} MiB", r.peak_rss_mib)),
            );
        }
        if let Some(idle) = &r.idle {
            t.insert(
                format!("N={}: idle requests per Extension and minute <= 0.5", r.n),
                verdict(
                    idle.per_extension_per_minute <= 0.5,
                    format!("{:.3}", idle.per_extension_per_minute),
                ),
            );
        }
    }
    if let Some(g) = growth {
        t.insert(
            "peak RSS growth per Extension <= 25 KiB".into(),
            verdict(g <= 25.0, format!("{g:.1} KiB")),
        );
    }
    t
}

fn fmt_map(m: &BTreeMap<String, f64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_counts(m: &BTreeMap<String, u64>, top: usize) -> String {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.into_iter()
        .take(top)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_actors(name: &str, seconds: f64, requests: &ByActor) {
    println!("  {name} ({seconds:.1} s), requests by User-Agent:");
    let mut actors: Vec<(&String, &u64)> = requests.totals.iter().collect();
    actors.sort_by(|a, b| b.1.cmp(a.1));
    for (actor, total) in actors {
        let detail = requests
            .by_request
            .get(actor)
            .map(|m| fmt_counts(m, 8))
            .unwrap_or_default();
        println!("    {actor:<34} {total:>7}  {detail}");
    }
}

pub fn print(results: &[FleetResult]) {
    println!(
        "\n{:>5} {:>8} {:>8} {:>8} {:>6} {:>7} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "N",
        "floorAPI",
        "floor s",
        "wave s",
        "ratio",
        "reads/E",
        "CPU 1st s",
        "req wave",
        "peak MiB",
        "end MiB",
        "idle/E/min",
        "idle MiB",
        "resync s",
    );
    for r in results {
        println!(
            "{:>5} {:>8.1} {:>8.1} {:>8.1} {:>6.2} {:>7.2} {:>9.2} {:>9.1} {:>8.1} {:>8.1} {:>9} {:>9} {:>8}",
            r.n,
            r.floor_api.seconds,
            r.floor.seconds,
            r.all_succeeded_seconds,
            r.floor_ratio,
            r.first_wave_reads_per_extension,
            r.first_reconcile.cpu_seconds,
            r.requested_wave_seconds,
            r.peak_rss_mib,
            r.rss_at_end_mib,
            r.idle
                .as_ref()
                .map_or("-".into(), |i| format!("{:.3}", i.per_extension_per_minute)),
            r.idle
                .as_ref()
                .map_or("-".into(), |i| format!("{:.1}", i.rss_mib)),
            r.resync_period_seconds,
        );
    }
    for r in results {
        println!("\nN={}:", r.n);
        for (name, e) in [
            ("first reconcile", &r.episode_first),
            ("requested reconcile", &r.episode_requested),
            ("first resync", &r.episode_resync),
            ("no-op resync", &r.episode_noop),
        ] {
            println!(
                "  writes/Extension, {name} ({} seen): {}",
                e.extensions,
                fmt_map(&e.writes_per_extension)
            );
            println!(
                "  reads/Extension,  {name}: {}",
                fmt_map(&e.reads_per_extension)
            );
        }
        println!(
            "  health-check status writes/Extension (whole run): {:.2}",
            r.healthcheck_writes_per_extension
        );
        if let Some(idle) = &r.idle {
            println!(
                "  idle {:.0} s: {:.3} controller requests/Extension/min (leader election and heartbeat apart), CPU {:.2} s, RSS {:.1} MiB, GRM {:.1}/min",
                idle.seconds,
                idle.per_extension_per_minute,
                idle.cpu_seconds,
                idle.rss_mib,
                idle.grm_per_minute
            );
            println!(
                "    controller per minute: {}",
                fmt_map(&idle.controller_per_minute)
            );
        }
        for (name, phase) in [
            ("first reconcile", &r.first_reconcile),
            ("requested reconcile", &r.requested_reconcile),
            ("first resync", &r.first_resync),
            ("no-op resync", &r.noop_resync),
        ] {
            print_actors(name, phase.seconds, &phase.requests);
            println!(
                "    controller total {}, per Extension {:.2}",
                phase.requests.controller_total(),
                phase.requests.controller_total() as f64 / r.n as f64
            );
        }
        if let Some(idle) = &r.idle {
            print_actors("idle", idle.seconds, &idle.requests);
        }
        if r.controller_panicked {
            println!("  WARNING: the controller log contains \"panicked\"");
        }
    }
}
