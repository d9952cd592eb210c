#!/usr/bin/env bash
# Builds everything a release publishes and pushes it to a registry: the controller and
# installer images, the payload images of the built-in catalog, the seed chart (an OCI
# artifact) and the ControllerRegistration that points at it. `make release REGISTRY=…` runs
# it; the tests run it against the control plane's registry.
#
#   hack/release.sh [--no-push] REGISTRY [OUT_DIR]
#
# REGISTRY replaces the published prefix europe-docker.pkg.dev/gardener-project/public of every
# repository in charts/images.yaml and of the chart's repository: with that prefix itself,
# everything lands where the image vector and the registration say; with another (a mirror, a
# test registry such as 127.0.0.1:5000/x) the same paths land under it. OUT_DIR (default
# .local/release) receives the OCI image layouts (oci/<name>), the packaged chart,
# controller-registration.yaml (the chart pinned by digest), images-overwrite.yaml (every
# image by digest, for imageVectorOverwrite) and release.env (the references).
#
# One builder for all images, the one the tests use: hack/nodes/oci-image.py writes
# content-addressed OCI image layouts, crane pushes them, helm pushes the chart; no container
# engine. Platforms: each payload for the platforms its build offers (crun and gVisor
# linux/amd64 and linux/arm64, Wasmtime linux/amd64: hack/images/payloads/README.md), each
# image an image index. The controller and installer are linux/<this machine> only: no Rust
# standard library for another target can be had from the registries this build uses.
#
# Environment: RELEASE_CA_FILE, a CA bundle that the registry's TLS certificate is checked
# against instead of the system's roots; RELEASE_PROFILE, the Cargo profile of the controller
# and installer (default release; the tests use dev, which the other tests have built).
# --no-push builds everything into OUT_DIR only (`make images`).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source hack/tools/versions.env
source hack/tools/lib.sh

log() { printf '[release %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

push=1
if [[ "${1:-}" == --no-push ]]; then
  push=0
  shift
fi
registry="${1:?usage: $0 [--no-push] REGISTRY [OUT_DIR]}"
registry="${registry%/}"
out="${2:-$repo/.local/release}"
profile="${RELEASE_PROFILE:-release}"
ca="${RELEASE_CA_FILE:-}"
published=europe-docker.pkg.dev/gardener-project/public

crane="$CRANE_DIR/crane"
helm="$HELM_DIR/helm"
for tool in "$crane" "$helm"; do
  [[ -x "$tool" ]] || die "$tool is missing: build it with 'make tools'"
done
[[ -z "$ca" || -f "$ca" ]] || die "RELEASE_CA_FILE=$ca does not exist"

mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -rf "$out/oci" "$out/images.list" "$out"/*.tgz
IMAGE_REGISTRY="$registry/gardener/extensions"
source hack/nodes/oci.sh

# vector_field <name> <field>: a field of an image-vector entry, unquoted.
vector_field() {
  awk -v name="$1" -v field="$2:" '
    $1 == "-" && $2 == "name:" { current = $3; next }
    $1 == "-" { current = "" }
    current == name && $1 == field { sub(/^[^:]*:[ ]*/, ""); gsub(/"/, ""); print; exit }
  ' charts/images.yaml
}

# repository <name>: the entry's repository below REGISTRY/gardener/extensions/.
repository() {
  local full
  full="$(vector_field "$1" repository)"
  [[ "$full" == "$published/gardener/extensions/"* ]] \
    || die "charts/images.yaml: $1 is not under $published/gardener/extensions/ ($full)"
  echo "${full#"$published/gardener/extensions/"}"
}

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
[[ -n "$version" ]] || die "no version in Cargo.toml"
# A release to the published registry is tagged v<version> on the commit it is built from: the
# tag is what a later release's upgrade test starts from (hack/previous-release.env). So such a
# release is built from a clean work tree, and a version is released from one commit only.
release_tag="v$version"
tag_release=0
if ((push)) && [[ "$registry" == "$published" ]]; then
  tag_release=1
  [[ -z "$(git status --porcelain)" ]] || die "the work tree has changes: a release is built from a commit"
  if tagged="$(git rev-parse -q --verify "refs/tags/$release_tag^{commit}")"; then
    [[ "$tagged" == "$(git rev-parse HEAD)" ]] \
      || die "$release_tag is already tagged on $tagged: raise the version in Cargo.toml"
  fi
fi
host="$(rustc -vV | sed -n 's/^host: //p')"
case "$host" in
  x86_64-*) host_arch=amd64 ;;
  aarch64-*) host_arch=arm64 ;;
  *) die "no image platform for the Rust host $host" ;;
esac

# --- the controller and the installer ---------------------------------------------------------
# Static, like the images' users need: glibc with a static C runtime from the host target (the
# build hack/nodes/images.sh makes of the installer, so the tests share it).
log "building the controller and the installer ($profile, $host)"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --profile "$profile" --target "$host" \
  --bin gardener-extension-containerd-shim --bin containerd-shim-installer
profile_dir="$profile"
[[ "$profile" == dev ]] && profile_dir=debug
bin="$repo/target/$host/$profile_dir"
for b in gardener-extension-containerd-shim containerd-shim-installer; do
  if readelf -l "$bin/$b" | grep -q 'program interpreter'; then
    die "$bin/$b is dynamically linked; it must be static"
  fi
  "$bin/$b" --version >/dev/null || die "$bin/$b --version failed"
done

# The roots the binaries trust (rustls-native-certs reads /etc/ssl/certs): Debian's
# ca-certificates, checked by apt's signatures like the other packages of the images.
certs="$IMAGE_DEBS_DIR/root/usr/share/ca-certificates/mozilla"
[[ -d "$certs" ]] || die "$certs is missing: build it with 'make tools' (hack/tools/build.sh image-debs)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
find "$certs" -name '*.crt' -print0 | LC_ALL=C sort -z | xargs -0 cat >"$work/ca-certificates.crt"

tag="v$version"
controller_ref="$(oci_image controller "$(repository gardener-extension-containerd-shim)" \
  --platform "linux/$host_arch" --index \
  --file "$bin/gardener-extension-containerd-shim=/gardener-extension-containerd-shim:0755" \
  --file "$work/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt:0644" \
  --entrypoint '["/gardener-extension-containerd-shim"]' --cmd '["run"]' --user 65532:65532)"
installer_ref="$(oci_image installer "$(repository containerd-shim-installer)" \
  --platform "linux/$host_arch" --index \
  --file "$bin/containerd-shim-installer=/containerd-shim-installer:0755" \
  --file "$work/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt:0644" \
  --entrypoint '["/containerd-shim-installer"]' --user 0:0)"
tags=("controller $tag" "installer $tag")

# --- the payloads of the built-in catalog ------------------------------------------------------
# payload_image <name> <vector name> <tree dir> <architectures> <binary>...: one manifest per
# architecture from <tree dir>/linux-<arch>/payload/<binary>, in one image index.
payload_image() {
  local name="$1" vector="$2" trees="$3" archs="$4" arch b digest files
  shift 4
  rm -rf "$out/oci/$name"
  for arch in $archs; do
    files=()
    for b in "$@"; do
      [[ -x "$trees/linux-$arch/payload/$b" ]] \
        || die "$trees/linux-$arch/payload/$b is missing: build it with 'make tools'"
      files+=(--file "$trees/linux-$arch/payload/$b=/payload/$b:0755")
    done
    digest="$("$oci_image_py" --out "$out/oci/$name" --name "$IMAGE_REGISTRY/$(repository "$vector")" \
      --platform "linux/$arch" --index "${files[@]}")" || die "building $name for linux/$arch failed"
  done
  oci_record "$name" "$(repository "$vector")" "$digest" >/dev/null
  tags+=("$name $(vector_field "$vector" tag)")
}
payload_image payload-crun containerd-shim-crun "$CRUN_DIR" "$CRUN_ARCHITECTURES" crun
payload_image payload-gvisor containerd-shim-gvisor "$GVISOR_DIR" "$GVISOR_ARCHITECTURES" \
  runsc containerd-shim-runsc-v1
# The Wasm shims: built and assembled by the script the tests use (it adds the workloads of the
# tests too, which are not published).
IMAGE_REGISTRY="$IMAGE_REGISTRY" hack/nodes/wasm-images.sh "$out" >&2
tags+=("payload-wasmtime $(vector_field containerd-shim-wasmtime tag)")

# --- push ---------------------------------------------------------------------------------------
chart_repository="$registry/charts/gardener/extensions"
if ((push)); then
  env_ca=()
  [[ -n "$ca" ]] && env_ca=(SSL_CERT_FILE="$ca")
  for entry in "${tags[@]}"; do
    read -r name image_tag <<<"$entry"
    line="$(awk -v n="$name" '$1 == n' "$out/images.list")"
    read -r _ image_repository digest <<<"$line"
    [[ -n "$digest" ]] || die "$name is not in $out/images.list"
    pushed="$(env "${env_ca[@]}" "$crane" push "$out/oci/$name" "$IMAGE_REGISTRY/$image_repository:$image_tag" 2>"$work/push.log")" \
      || die "pushing $name failed: $(cat "$work/push.log")"
    [[ "$pushed" == "$IMAGE_REGISTRY/$image_repository@$digest" ]] \
      || die "pushing $name: the registry has it as $pushed, built as $digest"
    log "pushed $IMAGE_REGISTRY/$image_repository:$image_tag ($digest)"
  done
fi

# --- the chart and the registration --------------------------------------------------------------
package_args=(--dir "$out")
((push)) && package_args+=(--push)
chart_output="$(CHART_REPOSITORY="$chart_repository" CHART_CA_FILE="$ca" hack/package-chart.sh "${package_args[@]}")"
chart_digest="$(sed -n 's/^Digest: //p' <<<"$chart_output")"
((push == 0)) || [[ "$chart_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "helm push reported no digest: $chart_output"
CHART_REPOSITORY="$chart_repository" CHART_DIGEST="$chart_digest" \
  hack/generate-controller-registration.sh "$out/controller-registration.yaml"

# What landed, by digest: release.env for scripts and tests, images-overwrite.yaml for an
# operator's imageVectorOverwrite.
{
  echo "REGISTRY=$registry"
  echo "CHART=$chart_repository/gardener-extension-containerd-shim:$version"
  echo "CHART_DIGEST=$chart_digest"
  while read -r name image_repository digest; do
    upper="$(printf '%s' "$name" | tr '[:lower:]-' '[:upper:]_')"
    echo "${upper}_IMAGE=$IMAGE_REGISTRY/$image_repository@$digest"
  done <"$out/images.list"
} >"$out/release.env"
{
  echo "# Written by hack/release.sh: the released images, by digest."
  echo "images:"
  for entry in "controller gardener-extension-containerd-shim" "installer containerd-shim-installer" \
    "payload-crun containerd-shim-crun" "payload-gvisor containerd-shim-gvisor" \
    "payload-wasmtime containerd-shim-wasmtime"; do
    read -r name vector <<<"$entry"
    read -r _ image_repository digest <<<"$(awk -v n="$name" '$1 == n' "$out/images.list")"
    printf '  - name: %s\n    repository: %s\n    tag: "%s"\n' "$vector" "$IMAGE_REGISTRY/$image_repository" "$digest"
    architectures="$(vector_field "$vector" architectures)"
    [[ -z "$architectures" ]] || echo "    architectures: $architectures"
  done
} >"$out/images-overwrite.yaml"
if ((push)); then
  log "released $version to $registry: $out/release.env"
  if ((tag_release)) && ! git rev-parse -q --verify "refs/tags/$release_tag" >/dev/null; then
    git tag -a "$release_tag" -m "Release $version"
    log "tagged $release_tag on $(git rev-parse --short HEAD); publish it with: git push origin $release_tag"
  fi
else
  log "built $version into $out (not pushed)"
fi
