#!/usr/bin/env bash
# `make fuzz`: runs every cargo-fuzz target in test/fuzz for FUZZ_SECONDS each (default 60).
# Not part of `make test` or CI.
#
# cargo-fuzz instruments the code with SanitizerCoverage and AddressSanitizer through `-Z`
# flags of rustc, which only nightly accepts. With a nightly toolchain installed (rustup; only
# for this command, in its own target directory) the targets are built with it; without one,
# the stable toolchain is told to accept those flags with RUSTC_BOOTSTRAP=1.
#
#   FUZZ_SECONDS=600 make fuzz          # ten minutes per target
#   FUZZ_TARGETS=provider_config make fuzz
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

seconds="${FUZZ_SECONDS:-60}"
fuzz_dir="test/fuzz"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi
targets="${FUZZ_TARGETS:-$(cargo "${toolchain[@]}" fuzz list --fuzz-dir "$fuzz_dir")}"

export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$repo/.local/fuzz-target}"

# Seed corpora from the repository's own examples and fixtures (kept out of git).
corpus_root="$repo/.local/fuzz-corpus"
mkdir -p "$corpus_root/provider_config" "$corpus_root/containerd_config" "$corpus_root/extension_plan"
for f in example/provider-config/*.yaml; do
  # Byte 1 odd: YAML; byte 2: number of worker pools.
  { printf '\001\003'; cat "$f"; } >"$corpus_root/provider_config/yaml-$(basename "$f")"
done
header='"apiVersion":"containerd-shim.extensions.gardener.cloud/v1alpha1","kind":"ContainerdShimConfig"'
printf '\000\001{%s,"shims":[{"name":"spin"},{"name":"wasmtime","workerPools":["worker-a"]}]}' "$header" \
  >"$corpus_root/provider_config/json-catalog"
printf '\000\003{%s,"shims":[{"name":"foo","custom":{"runtimeType":"io.containerd.foo.v1","version":"v1","binaries":[{"name":"containerd-shim-foo-v1","url":{"amd64":{"url":"https://example.com/x","sha256":"%s"}}}]},"runtimeClass":{"handler":"foo","overhead":{"podFixed":{"cpu":"100m"}},"tolerations":[{"key":"k","operator":"Exists"}]},"options":{"A":true},"nodeSelector":{"example.com/x":"y"},"podAnnotations":["example.com/*"]}],"rollout":{"maxConcurrentRestarts":2,"maxUnavailable":"10%%"}}' "$header" "$(printf 'a%.0s' $(seq 64))" \
  >"$corpus_root/provider_config/json-custom"
# extension_plan: byte 1 the Shoot's pools, byte 2 the mode (even: providerConfig JSON, odd: a
# template filled with hostile numbers and lengths from the bytes that follow).
for f in "$corpus_root"/provider_config/json-*; do
  { printf '\001\000'; tail -c +3 "$f"; } >"$corpus_root/extension_plan/$(basename "$f")"
done
for seed in 0 1 2 3 4 5 6 7; do
  { printf '\001\001'; head -c 12 /dev/urandom; } >"$corpus_root/extension_plan/template-$seed"
done

# Bytes 1-3: containerd release, distribution layout, second file present; then the file,
# NUL, the second file, NUL, the desired sets (see test/fuzz/fuzz_targets/containerd_config.rs).
sets='spin|io.containerd.spin.v2|/opt/s/containerd-shim-spin-v2|example.com/*|0|SystemdCgroup=true
wasmtime|io.containerd.wasmtime.v1|/opt/w/containerd-shim-wasmtime-v1||1|Level=3;Path=/x'
for f in test/fixtures/containerd/input/* test/fixtures/containerd/minimal/*; do
  for release in 1 4; do
    for layout in 0 2 4 5; do
      { printf "\\$(printf '%03o' "$release")\\$(printf '%03o' "$layout")\\000"; cat "$f"
        printf '\000\000%s\000%s' "$sets" "spin"; } \
        >"$corpus_root/containerd_config/$(basename "$f")-$release-$layout"
    done
  done
done

# Fork mode keeps fuzzing after a crash for the whole time budget; every crash is written to
# .local/fuzz-artifacts/<target>/ and makes the run fail at the end.
status=0
for target in $targets; do
  echo "==> fuzzing $target for ${seconds}s" >&2
  artifacts="$repo/.local/fuzz-artifacts/$target/"
  mkdir -p "$artifacts"
  marker="$(mktemp)"
  if ! cargo "${toolchain[@]}" fuzz run --fuzz-dir "$fuzz_dir" "$target" "$corpus_root/$target" -- \
      -max_total_time="$seconds" -artifact_prefix="$artifacts" -rss_limit_mb=4096 \
      -fork=1 -ignore_crashes=1; then
    status=1
  fi
  crashes="$(find "$artifacts" -name 'crash-*' -newer "$marker" | sort)"
  rm -f "$marker"
  if [[ -n "$crashes" ]]; then
    echo "==> $target found crashes; reproduce one with" >&2
    echo "    $CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/$target <file>:" >&2
    echo "$crashes" | sed 's/^/    /' >&2
    status=1
  fi
done
exit "$status"
