#!/usr/bin/env bash
# `make bench`: the fleet benchmark (test/bench/fleet/) on a fresh control plane of its own,
# then the node-installer micro-benchmark (test/bench/installer.rs), then the installer on real
# nodes (test/bench/nodes.rs) on a third control plane with a containerd 1.x and a containerd
# 2.x node, after building the node images as `make test` does.
# Not part of `make test` or CI: it prints figures and writes .local/bench/fleet-<time>.json and
# .local/bench/nodes-<time>.json, and asserts nothing about time. Knobs: FLEET_SIZES (default
# 10,100,500,2000), FLEET_RESYNC_SECONDS (default 20), FLEET_IDLE_AT (default 500),
# FLEET_IDLE_SECONDS (default 300); NODES_BENCH_REPETITIONS (default 2),
# NODES_BENCH_PROBE_INTERVAL_MS (default 100); BENCH_STAGES (default "fleet installer nodes":
# the stages to run, e.g. BENCH_STAGES=nodes for the real-node stage alone).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

stages=" ${BENCH_STAGES:-fleet installer nodes} "
for name in $stages; do
  case "$name" in
    fleet | installer | nodes) ;;
    *) echo "BENCH_STAGES: unknown stage '$name' (the stages: fleet installer nodes)" >&2; exit 2 ;;
  esac
done
stage() { [[ "$stages" == *" $1 "* ]]; }

hack/tools/build.sh
set -a
source <(hack/tools/env.sh)
set +a

if stage fleet; then
  echo "==> fleet benchmark (release build of the controller, fresh control plane)" >&2
  # Every client's requests in the seed's audit log: the benchmark splits them by User-Agent.
  CONTROL_PLANE_AUDIT_ALL=1 hack/control-plane.sh run --dir "$repo/.local/bench-control-plane" -- \
    cargo bench --locked --bench fleet
fi

if stage installer; then
  echo "==> node-installer micro-benchmark (temporary host root, real containerd binaries)" >&2
  cargo bench --locked --bench installer
fi

if stage nodes; then
  echo "==> installer on real nodes (node images, a fresh control plane with two nodes)" >&2
  hack/nodes/images.sh "$repo/.local/images"
  # The dev profile, as the real-node tests: the figures are the nodes' and containerd's, and a
  # release build of every dependency would only add a cold build.
  hack/control-plane.sh run --dir "$repo/.local/bench-nodes-control-plane" \
    --nodes containerd1,containerd2 --node-images "$repo/.local/images" -- \
    cargo bench --locked --profile dev --bench nodes
fi
