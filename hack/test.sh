#!/usr/bin/env bash
# `make test`: everything on a fresh machine. Builds the tools that are missing, checks
# formatting and lints, then runs every test (unit, integration, chart) with the embedded
# control plane up, and stops it again.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

step() { printf '\n==> %s\n' "$*" >&2; }

step "tools (skipped when cached)"
hack/tools/build.sh
set -a
source <(hack/tools/env.sh)
set +a

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --locked -- -D warnings

step "build tests"
cargo test --locked --all-targets --no-run

step "tests (with the embedded control plane)"
hack/control-plane.sh run --dir "$repo/.local/test-control-plane" -- \
  cargo test --locked --all-targets -- --test-threads="${TEST_THREADS:-8}"
