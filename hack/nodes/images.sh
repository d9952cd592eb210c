#!/usr/bin/env bash
# Builds the images the real nodes run, as image archives that `ctr images import` reads (no
# registry, no container engine), into OUT_DIR:
#
#   installer.tar   the installer image: the static containerd-shim-installer at
#                   /containerd-shim-installer, the same content hack/images/Dockerfile builds
#                   (a debug build here: the tests want its line numbers, not its size)
#   pause.tar       the pod sandbox image (busybox waiting for a signal)
#   workload.tar    a test workload: Debian's busybox with all its applets
#   payload-crun.tar  the crun payload: crun (built from Debian's source) at /payload/crun
#   payload-broken.tar  shim binaries that cannot run here (for tests of a failing rollout)
#   payload-gvisor.tar  the gvisor payload: runsc and containerd-shim-runsc-v1 (hack/tools/build.sh
#                   gvisor) under /payload/
#   payload-wasmtime.tar, wasm-hello.tar, wasm-http.tar  the Wasm shim and two Wasm
#                   workloads (hack/nodes/wasm-images.sh)
#
#   hack/nodes/images.sh [--without-wasm] OUT_DIR
#
# --without-wasm leaves out the Wasm shim and workloads (the playground does not use them, and
# the shim's first build is the longest item of a cold run).
#
# Every image is tagged by its content, so a changed build is a new reference. OUT_DIR also gets
# images.env (the references, for tests and scripts), pause.ref (imported under each node's
# sandbox image name), images-overwrite.yaml: the IMAGEVECTOR_OVERWRITE file that points the
# controller at these images instead of the published ones, and catalog-overlay.yaml: the
# SHIM_CATALOG_OVERLAY that offers these payloads as catalog versions. `make images` builds the published
# images with docker instead; this needs neither docker nor a registry.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/hack/tools/versions.env"
source "$repo/hack/tools/lib.sh"
with_wasm=1
if [[ "${1:-}" == "--without-wasm" ]]; then
  with_wasm=0
  shift
fi
out="${1:?usage: $0 [--without-wasm] OUT_DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

log() { printf '[images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

archive="$repo/hack/nodes/image-archive.py"
debs="$IMAGE_DEBS_DIR/root"
[[ -x "$debs/bin/busybox" ]] \
  || die "$IMAGE_DEBS_DIR is missing: build it with 'make tools' (hack/tools/build.sh image-debs)"
[[ -x "$CRUN_DIR/crun" ]] || die "$CRUN_DIR/crun is missing: build it with 'make tools' (hack/tools/build.sh crun)"

# The installer must be static: init containers copy it into payload images of any
# distribution and run it there. The crate's musl build (hack/images/Dockerfile) needs a musl
# toolchain; glibc with a static C runtime gives the same kind of binary from the host target.
host="$(rustc -vV | sed -n 's/^host: //p')"
log "building the static installer for $host"
(cd "$repo" && RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --locked --target "$host" --bin containerd-shim-installer)
installer_bin="$repo/target/$host/debug/containerd-shim-installer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Line tables stay (panics and logs name lines); the rest of the debug info goes.
objcopy --strip-debug --keep-section=.debug_line "$installer_bin" "$work/containerd-shim-installer" 2>/dev/null \
  || cp "$installer_bin" "$work/containerd-shim-installer"

installer_ref="$("$archive" --tag local.test/containerd-shim-installer --out "$out/installer.tar" \
  --file "$work/containerd-shim-installer=/containerd-shim-installer:0755" \
  --entrypoint '["/containerd-shim-installer"]')"

# busybox applets as symlinks, so images have sh, sleep, cat, httpd, ...
busybox_links=()
while read -r applet; do
  [[ -n "$applet" && "$applet" != busybox ]] && busybox_links+=(--symlink "/bin/$applet=busybox")
done < <("$debs/bin/busybox" --list)

# The sandbox: sleeps until told to stop. Its shell is PID 1 of the pod, so it reaps orphans
# and exits 0 on SIGTERM/SIGINT like the pause binary.
pause_ref="$("$archive" --tag local.test/pause --out "$out/pause.tar" \
  --file "$debs/bin/busybox=/bin/busybox:0755" --symlink /bin/sh=busybox --symlink /bin/sleep=busybox \
  --entrypoint '["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]')"

workload_ref="$("$archive" --tag local.test/busybox --out "$out/workload.tar" \
  --file "$debs/bin/busybox=/bin/busybox:0755" "${busybox_links[@]}" --dir /tmp --dir /var/www \
  --entrypoint '["/bin/sh"]')"

crun_ref="$("$archive" --tag local.test/containerd-shim-payload/crun --out "$out/payload-crun.tar" \
  --file "$CRUN_DIR/crun=/payload/crun:0755")"

# A payload that cannot run on these nodes, for the tests of a failing rollout: a shim binary
# for another architecture (an arm64 ELF header; execve refuses it with ENOEXEC) and one that
# exits non-zero.
python3 - "$work/containerd-shim-broken-v1" <<'PY'
import struct, sys
ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 0xB7, 1, 0x400000, 64, 0, 0, 64, 56, 1, 0, 0, 0)
with open(sys.argv[1], "wb") as f:
    f.write(header)
PY
printf '#!/bin/sh\necho "this shim always fails" >&2\nexit 1\n' >"$work/containerd-shim-fails-v1"
chmod 0755 "$work/containerd-shim-broken-v1" "$work/containerd-shim-fails-v1"
broken_ref="$("$archive" --tag local.test/containerd-shim-payload/broken --out "$out/payload-broken.tar" \
  --file "$work/containerd-shim-broken-v1=/payload/containerd-shim-broken-v1:0755" \
  --file "$work/containerd-shim-fails-v1=/payload/containerd-shim-fails-v1:0755")"

# The Wasm shim and workloads (hack/nodes/wasm-images.sh writes wasm.env).
if ((with_wasm)); then
  "$repo/hack/nodes/wasm-images.sh" "$out"
  # shellcheck source=/dev/null
  source "$out/wasm.env"
fi

printf '%s\n' "$pause_ref" >"$out/pause.ref"
cat >"$out/images.env" <<ENV
INSTALLER_IMAGE=$installer_ref
PAUSE_IMAGE=$pause_ref
WORKLOAD_IMAGE=$workload_ref
CRUN_PAYLOAD_IMAGE=$crun_ref
BROKEN_PAYLOAD_IMAGE=$broken_ref
ENV
if ((with_wasm)); then
  cat >>"$out/images.env" <<ENV
WASMTIME_PAYLOAD_IMAGE=$WASMTIME_PAYLOAD_IMAGE
WASM_HELLO_IMAGE=$WASM_HELLO_IMAGE
WASM_HTTP_IMAGE=$WASM_HTTP_IMAGE
WASM_HTTP_PORT=$WASM_HTTP_PORT
ENV
fi

# IMAGEVECTOR_OVERWRITE for the controller: the same names as charts/images.yaml.
cat >"$out/images-overwrite.yaml" <<YAML
# Written by hack/nodes/images.sh: the images imported into the real nodes.
images:
  - name: containerd-shim-installer
    repository: ${installer_ref%:*}
    tag: ${installer_ref##*:}
  - name: containerd-shim-crun-local
    repository: ${crun_ref%:*}
    tag: ${crun_ref##*:}
YAML
if ((with_wasm)); then
  cat >>"$out/images-overwrite.yaml" <<YAML
  - name: containerd-shim-wasmtime-local
    repository: ${WASMTIME_PAYLOAD_IMAGE%:*}
    tag: ${WASMTIME_PAYLOAD_IMAGE##*:}
YAML
fi

# SHIM_CATALOG_OVERLAY for the controller: the catalog's crun and wasmtime entries get the
# locally built payloads as a version of their own (and their default), the way an operator
# adds a build.
cat >"$out/catalog-overlay.yaml" <<YAML
# Written by hack/nodes/images.sh: the locally built crun and the Wasm test shim of
# test/wasm/shim as versions of the catalog's entries.
shims:
  crun:
    defaultVersion: local
    versions:
      local:
        image: containerd-shim-crun-local
YAML
if ((with_wasm)); then
  cat >>"$out/catalog-overlay.yaml" <<YAML
  wasmtime:
    defaultVersion: local
    versions:
      local:
        image: containerd-shim-wasmtime-local
YAML
fi
# --- gVisor: the catalog's gvisor payload as built by hack/tools/build.sh gvisor ---------------
# runsc and containerd-shim-runsc-v1 of the linux/amd64 tree at the paths the catalog names; the
# image vector's containerd-shim-gvisor points at it, so the catalog entry installs at its own
# version, without an overlay.
gvisor_tree="$GVISOR_DIR/linux-amd64"
[[ -x "$gvisor_tree/payload/runsc" && -x "$gvisor_tree/payload/containerd-shim-runsc-v1" ]] \
  || die "$gvisor_tree is missing: build it with 'make tools' (hack/tools/build.sh gvisor)"
gvisor_ref="$("$archive" --tag local.test/containerd-shim-payload/gvisor --out "$out/payload-gvisor.tar" \
  --file "$gvisor_tree/payload/runsc=/payload/runsc:0755" \
  --file "$gvisor_tree/payload/containerd-shim-runsc-v1=/payload/containerd-shim-runsc-v1:0755")"
echo "GVISOR_PAYLOAD_IMAGE=$gvisor_ref" >>"$out/images.env"
cat >>"$out/images-overwrite.yaml" <<YAML
  - name: containerd-shim-gvisor
    repository: ${gvisor_ref%:*}
    tag: ${gvisor_ref##*:}
YAML
# --- end gVisor ------------------------------------------------------------------------------

log "images in $out: $installer_ref $pause_ref $workload_ref $crun_ref $broken_ref"
