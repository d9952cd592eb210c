#!/usr/bin/env bash
# `make test`: everything on a fresh machine. Builds the tools that are missing, checks
# formatting and lints, runs the unit tests and the command blocks of the docs, then the
# integration tests with the embedded control plane up, then the end-to-end tests of the
# controller binary on a second, fresh control plane (the binary reconciles every Extension it
# can see), then the tests on real nodes on a third one that has three nodes, and the
# gardener-node-agent tests on a fourth whose two nodes run the agent.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

step() { printf '\n==> %s\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --all -- --check

# On a fresh machine the tool build (Go) and the Rust build are the two long items, and neither
# needs the other: the Rust build runs beside the tools (measured on two cores, the pair ends
# minutes sooner than one after the other, since neither keeps both cores busy all the time).
# Its output is printed once it ends.
step "tools (skipped when cached), beside the Rust build: clippy --all-targets -D warnings, the tests"
rust_log="$(mktemp)"
(
  cargo clippy --all-targets --locked -- -D warnings
  cargo test --locked --all-targets --no-run
) >"$rust_log" 2>&1 &
rust_build=$!
trap 'kill "$rust_build" 2>/dev/null || true; rm -f "$rust_log"' EXIT
tools_status=0
hack/tools/build.sh || tools_status=$?
rust_status=0
wait "$rust_build" || rust_status=$?
step "the Rust build's output (clippy, then the test build)"
cat "$rust_log"
((tools_status == 0)) || { echo "hack/tools/build.sh failed (exit $tools_status)" >&2; exit "$tools_status"; }
((rust_status == 0)) || { echo "clippy or the test build failed (exit $rust_status)" >&2; exit "$rust_status"; }
set -a
source <(hack/tools/env.sh)
set +a

step "unit tests"
cargo test --locked --lib --bins

step "repository checks: contract references, module boundaries, no test double in the binaries"
cargo test --locked --test repository

step "documentation commands (no control plane)"
cargo test --locked --test docs

step "integration tests (embedded control plane)"
hack/control-plane.sh run --dir "$repo/.local/test-control-plane" -- \
  cargo test --locked --test integration -- --test-threads="${TEST_THREADS:-8}"

step "end-to-end tests of the controller binary (a fresh control plane)"
hack/control-plane.sh run --dir "$repo/.local/e2e-control-plane" -- \
  cargo test --locked --test e2e -- --test-threads=1

step "admission webhook behind a real gardener-apiserver (a control plane with a garden)"
hack/control-plane.sh run --dir "$repo/.local/garden-control-plane" --garden -- \
  cargo test --locked --test garden

step "tests on real nodes (a control plane with three nodes: Debian's containerd 1.6, containerd 1.7 and 2.x)"
hack/nodes/images.sh "$repo/.local/images"
hack/control-plane.sh run --dir "$repo/.local/nodes-control-plane" \
  --nodes containerd1,containerd17,containerd2 --node-images "$repo/.local/images" -- \
  cargo test --locked --test nodes -- --test-threads=1 --skip node_agent::

step "tests on Gardener-shaped nodes (gardener-node-agent owns containerd's config; 1.7 and 2.x)"
hack/control-plane.sh run --dir "$repo/.local/node-agent-control-plane" \
  --nodes containerd17,containerd2 --node-images "$repo/.local/images" --node-agent -- \
  cargo test --locked --test nodes -- --test-threads=1 node_agent::
