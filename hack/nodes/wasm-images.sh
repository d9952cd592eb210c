#!/usr/bin/env bash
# Builds the WebAssembly payload images of the built-in catalog and the Wasm test workloads, as
# OCI image layouts pinned by digest (hack/nodes/oci.sh; `hack/nodes/images.sh push` pushes them
# with the others), into OUT_DIR:
#
#   oci/payload-<engine>  the catalog entry <engine>'s payload (an image index): the shim of
#                         hack/images/payloads/wasm/<engine> (runwasi's shim library on that
#                         engine) at /payload/containerd-shim-<engine>-v1, for every engine of
#                         ENGINES below (wasmtime)
#   oci/wasm-hello        test/wasm/workloads/hello.wat as /hello.wasm, the entrypoint: prints
#                         "hello from wasm on containerd-shim" and exits 0
#   oci/wasm-http         test/wasm/workloads/http.wat as /http.wasm, the entrypoint, with
#                         WASI_TCP_LISTEN=0.0.0.0:8080: answers every HTTP request on port 8080
#                         with "hello from wasm http on containerd-shim"
#   wasm.env              the references: <ENGINE>_PAYLOAD_IMAGE and <ENGINE>_PAYLOAD_VERSION
#                         (the catalog version, the package's version) per engine,
#                         WASM_HELLO_IMAGE, WASM_HTTP_IMAGE (and WASM_HTTP_PORT)
#
#   hack/nodes/wasm-images.sh OUT_DIR
#
# The references name the registry IMAGE_REGISTRY (default: the nodes' registry, NODE_REGISTRY
# of hack/nodes/lib.sh), and each image is added to OUT_DIR/images.list.
#
# Each shim is built once per content of its package (its directory, the workspace's Cargo.toml
# and Cargo.lock), Rust toolchain and build flags, into the tools cache
# (wasm-containerd-shim-<engine>-<hash>), so a second run only assembles the workloads and
# writes the images. A cold build takes minutes (hack/images/payloads/wasm/README.md).
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
workspace="$repo/hack/images/payloads/wasm"
workloads="$repo/test/wasm/workloads"
http_port=8080
# The engines whose shims the workspace builds: each the directory <engine> of the package
# containerd-shim-<engine> with the binary containerd-shim-<engine>-v1, for the catalog entry
# <engine>. (Why WasmEdge, Wasmer and
# WAMR are not among them: hack/images/payloads/wasm/README.md.)
ENGINES=(wasmtime)

# The shims are static for the same reason as the installer (hack/nodes/images.sh): they run on
# whatever libc the node has. glibc with a static C runtime, from the host target, needs no
# extra Rust target; libseccomp (youki's libcontainer uses it) is linked statically too. Why not
# musl: hack/images/payloads/wasm/README.md.
command -v cargo >/dev/null && command -v rustc >/dev/null \
  || die "cargo and rustc are missing: install Rust with rustup (https://rustup.rs)"
host="$(rustc -vV | sed -n 's/^host: //p')"
rustflags="-C target-feature=+crt-static"
profile=payload

# cache_key <package dir>: everything that decides the package's binaries: its sources, the
# workspace's manifest and lock file (the registry checksums pin every crate), the toolchain and
# the build recipe, so a changed flag is a new build rather than a stale hit.
cache_key() {
  {
    (cd "$workspace" && sha256sum Cargo.toml Cargo.lock)
    (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    rustc -vV
    printf 'target=%s profile=%s rustflags=%s\n' "$host" "$profile" "$rustflags"
  } | sha256sum | cut -c1-12
}

# package_version <package dir>: the `version` of its Cargo.toml, the payload's catalog version.
package_version() {
  sed -n 's/^version = "\(.*\)"$/\1/p' "$1/Cargo.toml" | head -n 1
}

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

# build_package <package> <key> <cache dir> <binary>...: builds the workspace's <package> and
# puts its <binary>s, checked to be static and to start, into <cache dir>.
build_package() {
  local package="$1" key="$2" dir="$3"
  shift 3
  # protoc: the containerd API bindings of the shim library are generated at build time.
  # libseccomp-dev: the static libseccomp.
  apt_install protobuf-compiler libseccomp-dev
  local libdir
  # The machine's own architecture's package: the crun payload's cross build may have added
  # another architecture's libseccomp-dev beside it.
  libdir="$(dirname "$(dpkg -L "libseccomp-dev:$(dpkg --print-architecture)" | grep '/libseccomp\.a$' | head -n 1)")"
  [[ -f "$libdir/libseccomp.a" ]] || die "libseccomp.a not found: run 'apt-get install libseccomp-dev'"

  local target_dir="$repo/target/wasm-payloads" started=$SECONDS
  log "building $package for $host (cache key $key; minutes when cold)"
  (cd "$workspace" && \
    CARGO_TARGET_DIR="$target_dir" RUSTFLAGS="$rustflags" \
    LIBSECCOMP_LINK_TYPE=static LIBSECCOMP_LIB_PATH="$libdir" WASM_SHIM_SOURCE_HASH="$key" \
    cargo build --locked --profile "$profile" --target "$host" --package "$package")
  local bin="$target_dir/$host/$profile" b

  # Into the cache under a temporary name, then renamed: an interrupted run never leaves a
  # half-filled entry that a later run would take for a hit.
  local tmp="$dir.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for b in "$@"; do
    # A dynamic loader in the binary would tie it to this machine's glibc.
    if readelf -l "$bin/$b" | grep -q 'program interpreter'; then
      die "$bin/$b is dynamically linked; it must be static"
    fi
    cp "$bin/$b" "$tmp/"
  done
  mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp" # another run may have filled it meanwhile
  log "built $package in $((SECONDS - started)) s: $dir"
}

# cached_package <directory> <package> <binary>...: prints the cache directory holding the
# binaries of the workspace's <package> (in <directory>), building them first unless a run
# before did.
cached_package() {
  local package="$2" key dir b
  key="$(cache_key "$workspace/$1")"
  shift 2
  dir="$TOOLS_CACHE/wasm-$package-$key"
  for b in "$@"; do
    [[ -x "$dir/$b" ]] || { build_package "$package" "$key" "$dir" "$@"; break; }
  done
  for b in "$@"; do
    [[ -x "$dir/$b" ]] || die "$dir/$b is missing after the build"
  done
  log "up to date: $dir"
  printf '%s\n' "$dir"
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
env_lines=()
for engine in "${ENGINES[@]}"; do
  shim="containerd-shim-$engine-v1"
  dir="$(cached_package "$engine" "containerd-shim-$engine" "$shim")"
  "$dir/$shim" -v >/dev/null || die "$dir/$shim -v failed"
  version="$(package_version "$workspace/$engine")"
  [[ -n "$version" ]] || die "$workspace/$engine/Cargo.toml has no version"
  ref="$(oci_image "payload-$engine" "containerd-shim-payload/$engine" --index \
    --file "$dir/$shim=/payload/$shim:0755")"
  upper="$(printf '%s' "$engine" | tr '[:lower:]-' '[:upper:]_')"
  env_lines+=("${upper}_PAYLOAD_IMAGE=$ref" "${upper}_PAYLOAD_VERSION=$version")
done

tools="$(cached_package wat2wasm wat2wasm wat2wasm)"
"$tools/wat2wasm" "$workloads/hello.wat" "$work/hello.wasm"
"$tools/wat2wasm" "$workloads/http.wat" "$work/http.wasm"

# The classic layout runwasi runs: an ordinary layer holding the module and an entrypoint naming
# it. The module is not executable, so runwasi never takes it for a Linux program.
hello_ref="$(oci_image wasm-hello wasm-hello \
  --file "$work/hello.wasm=/hello.wasm:0644" --entrypoint '["/hello.wasm"]')"

# The port is the image's default; a pod (or `ctr run --env`) may set another address.
http_ref="$(oci_image wasm-http wasm-http \
  --file "$work/http.wasm=/http.wasm:0644" --entrypoint '["/http.wasm"]' \
  --env "WASI_TCP_LISTEN=0.0.0.0:$http_port")"

{ printf '%s\n' "${env_lines[@]}"; cat <<ENV; } >"$out/wasm.env"
WASM_HELLO_IMAGE=$hello_ref
WASM_HTTP_IMAGE=$http_ref
WASM_HTTP_PORT=$http_port
ENV
log "images in $out: ${env_lines[*]} $hello_ref $http_ref"
