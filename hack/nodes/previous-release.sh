#!/usr/bin/env bash
# Builds the previous release (hack/previous-release.env) for the extension-upgrade test and adds
# its installer image to a node image directory:
#
#   hack/nodes/previous-release.sh build       build the release's binaries (cached)
#   hack/nodes/previous-release.sh image OUT_DIR
#                                              build them if needed, write the image and files below
#
# hack/nodes/images.sh runs `build` before it builds the current installer (so the current build
# is the last one in the shared target directory) and `image` once its own files are written.
#
# The release's controller and installer are built from the pinned commit's own sources
# (`git archive`, so nothing of the work tree leaks in), with its own Cargo.lock, static like
# hack/release.sh builds them, and cached by commit in the tools cache
# (previous-release-<commit>/bin): a second run only writes the image. The build shares this
# repository's target directory, so the dependencies the current build compiled are reused
# (cargo keys them by version and flags, not by the workspace's path); the current build then
# recompiles this crate once, which it would do after any change.
#
# It writes into OUT_DIR (the directory hack/nodes/images.sh fills, IMAGE_REGISTRY set by it):
#   oci/installer-previous            the release's installer image, added to images.list
#   images-overwrite-previous.yaml    images-overwrite.yaml with the release's installer: what
#                                     the release's controller is started with
#   previous-release.env              PREVIOUS_RELEASE_COMMIT, PREVIOUS_CONTROLLER_BIN and
#                                     PREVIOUS_INSTALLER_IMAGE (also appended to images.env)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/hack/tools/versions.env"
source "$repo/hack/tools/lib.sh"
source "$repo/hack/previous-release.env"
log() { printf '[previous-release %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage="usage: $0 build | image OUT_DIR"
case "${1:-}" in
  build) [[ $# == 1 ]] || die "$usage" ;;
  image) [[ $# == 2 ]] || die "$usage" ;;
  *) die "$usage" ;;
esac

commit="$PREVIOUS_RELEASE_COMMIT"
[[ "$commit" =~ ^[0-9a-f]{40}$ ]] || die "hack/previous-release.env: PREVIOUS_RELEASE_COMMIT '$commit' is not a full commit id"
if [[ -n "$PREVIOUS_RELEASE_TAG" ]] && git -C "$repo" rev-parse -q --verify "refs/tags/$PREVIOUS_RELEASE_TAG" >/dev/null; then
  tagged="$(git -C "$repo" rev-parse "$PREVIOUS_RELEASE_TAG^{commit}")"
  [[ "$tagged" == "$commit" ]] \
    || die "tag $PREVIOUS_RELEASE_TAG is $tagged, hack/previous-release.env pins $commit"
fi

cache="$TOOLS_CACHE/previous-release-$commit"
bins=(gardener-extension-containerd-shim containerd-shim-installer)
if [[ ! -x "$cache/bin/gardener-extension-containerd-shim" || ! -x "$cache/bin/containerd-shim-installer" ]]; then
  git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null \
    || die "commit $commit (hack/previous-release.env) is not in this clone: fetch the history (git fetch --unshallow origin)"
  host="$(rustc -vV | sed -n 's/^host: //p')"
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  log "building the controller and installer of $commit (cached afterwards in $cache)"
  git -C "$repo" archive --format=tar "$commit" | tar -x -C "$src"
  (cd "$src" && CARGO_TARGET_DIR="$repo/target" RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --target "$host" --bin "${bins[0]}" --bin "${bins[1]}")
  rm -rf "$cache.partial"
  mkdir -p "$cache.partial/bin"
  for b in "${bins[@]}"; do
    built="$repo/target/$host/debug/$b"
    # Line tables stay (a panic names its line), the rest of the debug info goes.
    objcopy --strip-debug --keep-section=.debug_line "$built" "$cache.partial/bin/$b" 2>/dev/null \
      || cp "$built" "$cache.partial/bin/$b"
    "$cache.partial/bin/$b" --version >/dev/null || die "$b of $commit does not run"
  done
  echo "$commit" >"$cache.partial/COMMIT"
  rm -rf "$cache"
  mv "$cache.partial" "$cache"
fi
[[ "$1" == image ]] || exit 0

out="$(cd "$2" && pwd)"
[[ -n "${IMAGE_REGISTRY:-}" ]] || die "IMAGE_REGISTRY is not set (hack/nodes/images.sh sets it)"
[[ -f "$out/images-overwrite.yaml" ]] \
  || die "$out/images-overwrite.yaml is missing: run hack/nodes/images.sh $out"
source "$repo/hack/nodes/oci.sh"

installer_ref="$(oci_image installer-previous containerd-shim-installer \
  --file "$cache/bin/containerd-shim-installer=/containerd-shim-installer:0755" \
  --entrypoint '["/containerd-shim-installer"]')"

# The current overwrite with the release's installer in place of the current one.
awk -v ref="$installer_ref" '
  BEGIN { repository = ref; sub(/@.*/, "", repository); digest = ref; sub(/.*@/, "", digest) }
  /^  - name: / { current = $3 }
  current == "containerd-shim-installer" && /^    repository: / { print "    repository: " repository; next }
  current == "containerd-shim-installer" && /^    tag: / { print "    tag: \"" digest "\""; next }
  { print }
' "$out/images-overwrite.yaml" >"$out/images-overwrite-previous.yaml"
grep -qF "tag: \"${installer_ref##*@}\"" "$out/images-overwrite-previous.yaml" \
  || die "images-overwrite-previous.yaml does not name $installer_ref"

cat >"$out/previous-release.env" <<ENV
PREVIOUS_RELEASE_COMMIT=$commit
PREVIOUS_CONTROLLER_BIN=$cache/bin/gardener-extension-containerd-shim
PREVIOUS_INSTALLER_IMAGE=$installer_ref
ENV
cat "$out/previous-release.env" >>"$out/images.env"
log "previous release $commit: $installer_ref"
