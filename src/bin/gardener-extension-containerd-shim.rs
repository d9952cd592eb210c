//! The seed controller of the containerd-shim Gardener extension.

use clap::Parser;

/// Gardener extension controller that installs extra containerd runtimes (Spin, wasmtime,
/// WasmEdge, gVisor, Kata, ...) on shoot nodes: it reconciles `Extension` resources of type
/// `containerd-shim` in the seed and delivers an installer DaemonSet and RuntimeClasses into
/// each shoot through a ManagedResource.
#[derive(Debug, Parser)]
#[command(name = "gardener-extension-containerd-shim", version)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
