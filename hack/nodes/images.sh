#!/usr/bin/env bash
# Builds the images the real nodes run, as OCI image layouts (hack/nodes/oci-image.py: no
# container engine), pinned by digest, and pushes them to the control plane's registry, which
# the nodes' containerd pulls from:
#
#   hack/nodes/images.sh [--without-wasm] OUT_DIR
#       build every image into OUT_DIR/oci/<name> and write the files below
#   hack/nodes/images.sh push OUT_DIR REGISTRY CA_FILE
#       push every image of OUT_DIR to REGISTRY (host:port, TLS, trusted through CA_FILE) with
#       crane; hack/control-plane.sh runs it once its registry is up (--node-images OUT_DIR)
#
# The images:
#
#   installer       the installer image: the static containerd-shim-installer at
#                   /containerd-shim-installer, the same content hack/release.sh publishes
#                   (a debug build here: the tests want its line numbers, not its size)
#   pause           the pod sandbox image (busybox waiting for a signal)
#   workload        a test workload: Debian's busybox with all its applets
#   payload-crun    the crun payload: crun (hack/tools/build.sh crun, from Debian's source) at
#                   /payload/crun, for linux/amd64 and linux/arm64
#   payload-broken  shim binaries that cannot run here (for tests of a failing rollout)
#   payload-gvisor  the gvisor payload: runsc and containerd-shim-runsc-v1 (hack/tools/build.sh
#                   gvisor) under /payload/, for linux/amd64 and linux/arm64
#   payload-wasmtime, wasm-hello, wasm-http  the catalog's Wasm payload (built from
#                   hack/images/payloads/wasm) and two Wasm workloads (hack/nodes/wasm-images.sh)
#
#   installer-previous  the installer of the previous release (hack/previous-release.env), for
#                   the extension-upgrade test; hack/nodes/previous-release.sh builds it and
#                   writes images-overwrite-previous.yaml and previous-release.env
#
# --without-wasm leaves out the Wasm shim and workloads (the playground does not use them, and
# the shim's first build is the longest item of a cold run); --without-previous-release leaves
# out the previous release (only the extension-upgrade test uses it). Payload images are image indexes
# (one manifest per platform; linux/amd64 here), as the product's multi-arch payloads are; the
# others are single manifests.
#
# The images are content-addressed and reproducible, and named by digest in the registry the
# nodes pull from (NODE_REGISTRY in hack/nodes/lib.sh): a changed build is a new reference, and
# no tag decides what a node runs. OUT_DIR also gets images.list (what `push` pushes),
# images.env (the references, for tests and scripts; PAUSE_IMAGE is the nodes' sandbox image),
# images-overwrite.yaml: the IMAGEVECTOR_OVERWRITE file that points the controller at these
# images (`tag: sha256:...`) instead of the published ones, and catalog-overlay.yaml: the
# SHIM_CATALOG_OVERLAY (the payloads are the catalog's own; it only adds test versions). `make images`
# (hack/release.sh) builds the published images with the same builder.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/hack/tools/versions.env"
source "$repo/hack/tools/lib.sh"
# NODE_REGISTRY: the registry the nodes pull from.
source "$repo/hack/nodes/lib.sh"

log() { printf '[images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# push OUT_DIR REGISTRY CA_FILE: every image of images.list, with its human tag, checked to land
# under the digest it was built with.
push() {
  local out="$1" registry="$2" ca="$3"
  local crane="$CRANE_DIR/crane"
  [[ -x "$crane" ]] || die "$crane is missing: build it with 'make tools' (hack/tools/build.sh crane)"
  [[ -f "$out/images.list" && -f "$out/images.env" ]] \
    || die "no images in $out: build them with hack/nodes/images.sh $out"
  local built_for
  built_for="$(sed -n 's/^REGISTRY=//p' "$out/images.env")"
  [[ "$built_for" == "$registry" ]] \
    || die "the images in $out name the registry '$built_for', not $registry: rebuild them with hack/nodes/images.sh $out"
  local name repository digest pushed started=$SECONDS count=0
  while read -r name repository digest; do
    [[ -d "$out/oci/$name" ]] || die "$out/oci/$name is missing: rebuild the images with hack/nodes/images.sh $out"
    # crane trusts the system's roots only; SSL_CERT_FILE makes it trust the control plane's CA
    # (and nothing else).
    pushed="$(SSL_CERT_FILE="$ca" "$crane" push "$out/oci/$name" "$registry/$repository:id-${digest:7:12}" 2>"$out/push.log")" \
      || die "pushing $name to $registry failed: $(cat "$out/push.log")"
    [[ "$pushed" == "$registry/$repository@$digest" ]] \
      || die "pushing $name: the registry has it as $pushed, built as $digest"
    count=$((count + 1))
  done <"$out/images.list"
  log "pushed $count images to $registry in $((SECONDS - started)) s"
}

if [[ "${1:-}" == push ]]; then
  [[ $# == 4 ]] || die "usage: $0 push OUT_DIR REGISTRY CA_FILE"
  push "$(cd "$2" && pwd)" "$3" "$4"
  exit 0
fi

with_wasm=1
with_previous=1
while [[ "${1:-}" == --* ]]; do
  case "$1" in
    --without-wasm) with_wasm=0 ;;
    --without-previous-release) with_previous=0 ;;
    *) die "unknown option $1" ;;
  esac
  shift
done
out="${1:?usage: $0 [--without-wasm] [--without-previous-release] OUT_DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
IMAGE_REGISTRY="$NODE_REGISTRY"
source "$repo/hack/nodes/oci.sh"
# What an earlier build left (also the image archives of before the registry).
rm -rf "$out/oci" "$out/images.list" "$out"/*.tar "$out/pause.ref" "$out/images-overwrite-previous.yaml" "$out/previous-release.env"

debs="$IMAGE_DEBS_DIR/root"
[[ -x "$debs/bin/busybox" ]] \
  || die "$IMAGE_DEBS_DIR is missing: build it with 'make tools' (hack/tools/build.sh image-debs)"

# The installer must be static: init containers copy it into payload images of any
# distribution and run it there. A musl build needs a Rust musl target this machine does not
# have; glibc with a static C runtime gives the same kind of binary from the host target (as
# hack/release.sh builds it).
host="$(rustc -vV | sed -n 's/^host: //p')"
if ((with_previous)); then
  # Before the current build: both share target/<host>, and the current one must be the last.
  "$repo/hack/nodes/previous-release.sh" build
fi
log "building the static installer for $host"
(cd "$repo" && RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --locked --target "$host" --bin containerd-shim-installer)
installer_bin="$repo/target/$host/debug/containerd-shim-installer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Line tables stay (panics and logs name lines); the rest of the debug info goes.
objcopy --strip-debug --keep-section=.debug_line "$installer_bin" "$work/containerd-shim-installer" 2>/dev/null \
  || cp "$installer_bin" "$work/containerd-shim-installer"

installer_ref="$(oci_image installer containerd-shim-installer \
  --file "$work/containerd-shim-installer=/containerd-shim-installer:0755" \
  --entrypoint '["/containerd-shim-installer"]')"

# busybox applets as symlinks, so images have sh, sleep, cat, httpd, ...
busybox_links=()
while read -r applet; do
  [[ -n "$applet" && "$applet" != busybox ]] && busybox_links+=(--symlink "/bin/$applet=busybox")
done < <("$debs/bin/busybox" --list)

# The sandbox: sleeps until told to stop. Its shell is PID 1 of the pod, so it reaps orphans
# and exits 0 on SIGTERM/SIGINT like the pause binary.
pause_ref="$(oci_image pause pause \
  --file "$debs/bin/busybox=/bin/busybox:0755" --symlink /bin/sh=busybox --symlink /bin/sleep=busybox \
  --entrypoint '["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]')"

workload_ref="$(oci_image workload busybox \
  --file "$debs/bin/busybox=/bin/busybox:0755" "${busybox_links[@]}" --dir /tmp --dir /var/www \
  --entrypoint '["/bin/sh"]')"

# Payloads are image indexes with one manifest per platform of their build, as the published
# ones are (hack/release.sh builds the same indexes).
rm -rf "$out/oci/payload-crun"
for arch in $CRUN_ARCHITECTURES; do
  [[ -x "$CRUN_DIR/linux-$arch/payload/crun" ]] \
    || die "$CRUN_DIR/linux-$arch is missing: build it with 'make tools' (hack/tools/build.sh crun)"
  crun_digest="$("$oci_image_py" --out "$out/oci/payload-crun" \
    --name "$IMAGE_REGISTRY/containerd-shim-payload/crun" --platform "linux/$arch" --index \
    --file "$CRUN_DIR/linux-$arch/payload/crun=/payload/crun:0755")" \
    || die "building image payload-crun for linux/$arch failed"
done
crun_ref="$(oci_record payload-crun containerd-shim-payload/crun "$crun_digest")"

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
broken_ref="$(oci_image payload-broken containerd-shim-payload/broken --index \
  --file "$work/containerd-shim-broken-v1=/payload/containerd-shim-broken-v1:0755" \
  --file "$work/containerd-shim-fails-v1=/payload/containerd-shim-fails-v1:0755" \
  --file "$work/containerd-shim-fails-v1=/payload/containerd-shim-wasmtime-v1:0755")"

# The Wasm shim and workloads (hack/nodes/wasm-images.sh adds them to images.list and writes
# wasm.env).
if ((with_wasm)); then
  IMAGE_REGISTRY="$IMAGE_REGISTRY" "$repo/hack/nodes/wasm-images.sh" "$out"
  # shellcheck source=/dev/null
  source "$out/wasm.env"
fi

cat >"$out/images.env" <<ENV
REGISTRY=$IMAGE_REGISTRY
INSTALLER_IMAGE=$installer_ref
PAUSE_IMAGE=$pause_ref
WORKLOAD_IMAGE=$workload_ref
CRUN_PAYLOAD_IMAGE=$crun_ref
BROKEN_PAYLOAD_IMAGE=$broken_ref
ENV
if ((with_wasm)); then
  cat "$out/wasm.env" >>"$out/images.env"
fi

# image_vector_entry <name> <pinned reference>: an IMAGEVECTOR_OVERWRITE entry in Gardener's
# digest form: the tag is the digest, and the controller writes repository@sha256:....
image_vector_entry() {
  printf '  - name: %s\n    repository: %s\n    tag: "%s"\n' "$1" "${2%@*}" "${2##*@}"
}

# IMAGEVECTOR_OVERWRITE for the controller: the same names as charts/images.yaml.
{
  echo "# Written by hack/nodes/images.sh: the images in the nodes' registry, by digest."
  echo "images:"
  image_vector_entry containerd-shim-installer "$installer_ref"
  image_vector_entry containerd-shim-crun "$crun_ref"
  if ((with_wasm)); then
    # The Wasm payloads are the catalog's own (hack/images/payloads/wasm), built here: the
    # catalog's image names point at these builds instead of the published images (the same
    # architectures as charts/images.yaml, so that the entry replaces the published one).
    image_vector_entry containerd-shim-wasmtime "$WASMTIME_PAYLOAD_IMAGE"
    echo "    architectures: [amd64]"
    # Two more versions of it for the upgrade tests (catalog-overlay.yaml): the same build
    # under another version (a new version directory on the node), and one whose shim cannot run.
    image_vector_entry containerd-shim-wasmtime-next "$WASMTIME_PAYLOAD_IMAGE"
    echo "    architectures: [amd64]"
    image_vector_entry containerd-shim-wasmtime-broken "$broken_ref"
    echo "    architectures: [amd64]"
  fi
} >"$out/images-overwrite.yaml"

# SHIM_CATALOG_OVERLAY for the controller: every payload built here is the catalog's own at its
# own version (the image vector entries above point at the builds); the overlay only adds
# versions for the tests that need more than one: two more of wasmtime for the upgrade tests
# (test/nodes/upgrade.rs).
if ((with_wasm)); then
  cat >"$out/catalog-overlay.yaml" <<YAML
# Written by hack/nodes/images.sh: more versions of the catalog's wasmtime entry.
shims:
  wasmtime:
    versions:
      next:
        image: containerd-shim-wasmtime-next
      broken:
        image: containerd-shim-wasmtime-broken
YAML
else
  cat >"$out/catalog-overlay.yaml" <<YAML
# Written by hack/nodes/images.sh: nothing to change; the catalog's entries install as they are.
shims: {}
YAML
fi
# --- gVisor: the catalog's gvisor payload as built by hack/tools/build.sh gvisor ---------------
# runsc and containerd-shim-runsc-v1 at the paths the catalog names, one manifest per platform of
# the build (linux/amd64 and linux/arm64) in one image index, as a published multi-arch payload
# is; the image vector's containerd-shim-gvisor points at it, so the catalog entry installs at
# its own version, without an overlay.
rm -rf "$out/oci/payload-gvisor"
for arch in $GVISOR_ARCHITECTURES; do
  gvisor_tree="$GVISOR_DIR/linux-$arch"
  [[ -x "$gvisor_tree/payload/runsc" && -x "$gvisor_tree/payload/containerd-shim-runsc-v1" ]] \
    || die "$gvisor_tree is missing: build it with 'make tools' (hack/tools/build.sh gvisor)"
  gvisor_digest="$("$oci_image_py" --out "$out/oci/payload-gvisor" \
    --name "$IMAGE_REGISTRY/containerd-shim-payload/gvisor" --platform "linux/$arch" --index \
    --file "$gvisor_tree/payload/runsc=/payload/runsc:0755" \
    --file "$gvisor_tree/payload/containerd-shim-runsc-v1=/payload/containerd-shim-runsc-v1:0755")" \
    || die "building image payload-gvisor for linux/$arch failed"
done
gvisor_ref="$(oci_record payload-gvisor containerd-shim-payload/gvisor "$gvisor_digest")"
echo "GVISOR_PAYLOAD_IMAGE=$gvisor_ref" >>"$out/images.env"
image_vector_entry containerd-shim-gvisor "$gvisor_ref" >>"$out/images-overwrite.yaml"
# --- end gVisor ------------------------------------------------------------------------------

if ((with_previous)); then
  IMAGE_REGISTRY="$IMAGE_REGISTRY" "$repo/hack/nodes/previous-release.sh" image "$out"
fi

log "images in $out: $installer_ref $pause_ref $workload_ref $crun_ref $broken_ref"
