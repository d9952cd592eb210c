#!/usr/bin/env bash
# Builds the WebAssembly test images, as OCI image layouts pinned by digest (hack/nodes/oci.sh;
# `hack/nodes/images.sh push` pushes them with the others), into OUT_DIR:
#
#   oci/payload-wasmtime  the wasmtime payload (an image index): the test shim of
#                         test/wasm/shim (runwasi's shim library on Wasmtime) at
#                         /payload/containerd-shim-wasmtime-v1
#   oci/wasm-hello        test/wasm/workloads/hello.wat as /hello.wasm, the entrypoint: prints
#                         "hello from wasm on containerd-shim" and exits 0
#   oci/wasm-http         test/wasm/workloads/http.wat as /http.wasm, the entrypoint, with
#                         WASI_TCP_LISTEN=0.0.0.0:8080: answers every HTTP request on port 8080
#                         with "hello from wasm http on containerd-shim"
#   wasm.env              the three references: WASMTIME_PAYLOAD_IMAGE, WASM_HELLO_IMAGE,
#                         WASM_HTTP_IMAGE (and WASM_HTTP_PORT)
#
#   hack/nodes/wasm-images.sh OUT_DIR
#
# The references name the registry IMAGE_REGISTRY (default: the nodes' registry, NODE_REGISTRY
# of hack/nodes/lib.sh), and each image is added to OUT_DIR/images.list.
#
# The shim is built once per content of its package (sources, Cargo.toml, Cargo.lock) and Rust
# toolchain, into the tools cache (wasm-shim-<hash>), so a second run only assembles the
# workloads and writes the images. A cold build takes a few minutes (test/wasm/shim/README.md).
# Every image is named by its digest, so a changed build is a new reference.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/hack/tools/versions.env"
source "$repo/hack/tools/lib.sh"
source "$repo/hack/nodes/lib.sh"
out="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

log() { printf '[wasm-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

IMAGE_REGISTRY="${IMAGE_REGISTRY:-$NODE_REGISTRY}"
source "$repo/hack/nodes/oci.sh"
shim_pkg="$repo/test/wasm/shim"
workloads="$repo/test/wasm/workloads"
http_port=8080

# The shim is static for the same reason as the installer (hack/nodes/images.sh): it runs on
# whatever glibc the node has. glibc with a static C runtime, from the host target, needs no
# extra Rust target; libseccomp (youki's libcontainer uses it) is linked statically too.
command -v cargo >/dev/null && command -v rustc >/dev/null \
  || die "cargo and rustc are missing: install Rust with rustup (https://rustup.rs)"
host="$(rustc -vV | sed -n 's/^host: //p')"
rustflags="-C target-feature=+crt-static"
profile=payload

# The cache key: everything that decides the binary. The build recipe is part of it, so a
# changed flag is a new build rather than a stale hit.
shim_key="$(
  cd "$shim_pkg"
  find Cargo.toml Cargo.lock src -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  rustc -vV
  printf 'target=%s profile=%s rustflags=%s\n' "$host" "$profile" "$rustflags"
)"
shim_key="$(printf '%s' "$shim_key" | sha256sum | cut -c1-12)"
shim_dir="$TOOLS_CACHE/wasm-shim-$shim_key"

# apt_install <package>...: Debian packages the build needs, installed when missing (as
# hack/tools/build.sh does for its own).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} > 0)) || return 0
  command -v apt-get >/dev/null || die "missing Debian packages (${missing[*]}) and apt-get is not available: install them"
  local sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  log "installing Debian packages with apt-get: ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
    || { $sudo apt-get update >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; } \
    || die "could not install ${missing[*]}: run 'apt-get install ${missing[*]}'"
}

build_shim() {
  # protoc: the containerd API bindings of the shim library are generated at build time.
  # libseccomp-dev: the static libseccomp.
  apt_install protobuf-compiler libseccomp-dev
  local libdir
  libdir="$(dirname "$(dpkg -L libseccomp-dev | grep '/libseccomp\.a$' | head -n 1)")"
  [[ -f "$libdir/libseccomp.a" ]] || die "libseccomp.a not found: run 'apt-get install libseccomp-dev'"

  local target_dir="$repo/target/wasm-shim" started=$SECONDS
  log "building the wasmtime test shim for $host (cache key $shim_key; a few minutes when cold)"
  (cd "$shim_pkg" && \
    CARGO_TARGET_DIR="$target_dir" RUSTFLAGS="$rustflags" \
    LIBSECCOMP_LINK_TYPE=static LIBSECCOMP_LIB_PATH="$libdir" WASM_SHIM_SOURCE_HASH="$shim_key" \
    cargo build --locked --profile "$profile" --target "$host" --bins)
  local bin="$target_dir/$host/$profile"

  # A dynamic loader in the binary would tie it to this machine's glibc.
  if readelf -l "$bin/containerd-shim-wasmtime-v1" | grep -q 'program interpreter'; then
    die "$bin/containerd-shim-wasmtime-v1 is dynamically linked; it must be static"
  fi
  "$bin/containerd-shim-wasmtime-v1" -v >/dev/null || die "$bin/containerd-shim-wasmtime-v1 -v failed"

  # Into the cache under a temporary name, then renamed: an interrupted run never leaves a
  # half-filled entry that a later run would take for a hit.
  local tmp="$shim_dir.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp "$bin/containerd-shim-wasmtime-v1" "$bin/wat2wasm" "$tmp/"
  mv -T "$tmp" "$shim_dir" 2>/dev/null || rm -rf "$tmp" # another run may have filled it meanwhile
  log "built the shim in $((SECONDS - started)) s: $shim_dir"
}

if [[ -x "$shim_dir/containerd-shim-wasmtime-v1" && -x "$shim_dir/wat2wasm" ]]; then
  log "up to date: $shim_dir"
else
  build_shim
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$shim_dir/wat2wasm" "$workloads/hello.wat" "$work/hello.wasm"
"$shim_dir/wat2wasm" "$workloads/http.wat" "$work/http.wasm"

payload_ref="$(oci_image payload-wasmtime containerd-shim-payload/wasmtime --index \
  --file "$shim_dir/containerd-shim-wasmtime-v1=/payload/containerd-shim-wasmtime-v1:0755")"

# The classic layout runwasi runs: an ordinary layer holding the module and an entrypoint naming
# it. The module is not executable, so runwasi never takes it for a Linux program.
hello_ref="$(oci_image wasm-hello wasm-hello \
  --file "$work/hello.wasm=/hello.wasm:0644" --entrypoint '["/hello.wasm"]')"

# The port is the image's default; a pod (or `ctr run --env`) may set another address.
http_ref="$(oci_image wasm-http wasm-http \
  --file "$work/http.wasm=/http.wasm:0644" --entrypoint '["/http.wasm"]' \
  --env "WASI_TCP_LISTEN=0.0.0.0:$http_port")"

cat >"$out/wasm.env" <<ENV
WASMTIME_PAYLOAD_IMAGE=$payload_ref
WASM_HELLO_IMAGE=$hello_ref
WASM_HTTP_IMAGE=$http_ref
WASM_HTTP_PORT=$http_port
ENV
log "images in $out: $payload_ref $hello_ref $http_ref"
