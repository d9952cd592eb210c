//! The node installer of the containerd-shim Gardener extension.

use clap::Parser;

/// Node installer of the containerd-shim Gardener extension: runs on every node of a shoot
/// (DaemonSet), installs the desired containerd shims and their runtime handlers, restarts
/// containerd within a cluster-wide budget, verifies, and labels the node ready.
#[derive(Debug, Parser)]
#[command(name = "containerd-shim-installer", version)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
