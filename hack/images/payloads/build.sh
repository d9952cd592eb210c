#!/usr/bin/env bash
# Builds the payload images of the built-in catalog entries whose payload is ours, from
# hack/images/payloads/<entry>/Dockerfile, with docker buildx for every platform the image
# serves (see README.md in this directory).
#
#   hack/images/payloads/build.sh [--push] [ENTRY...]     no ENTRY: all of them
#
# Repository and tag come from the image vector (charts/images.yaml): the entry's image name
# below, its `tag` (the catalog version) and its `architectures` (default amd64 and arm64).
# Without --push the images are only built (buildx keeps them in its cache), which checks
# that the Dockerfiles and their pinned checksums work.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"

# Catalog entry -> image-vector name (the `image` of the entry's version in
# src/shim/config/catalog.yaml; a unit test keeps the two in step). The Wasm shims' payloads
# are built from source by hack/nodes/wasm-images.sh instead (hack/images/payloads/wasm).
declare -A image_of=(
  [crun]=containerd-shim-crun
  [gvisor]=containerd-shim-gvisor
  [kata-qemu]=containerd-shim-kata
)

push=0
entries=()
for arg in "$@"; do
  case "$arg" in
    --push) push=1 ;;
    -*) echo "unknown option: $arg" >&2; exit 2 ;;
    *)
      [[ -n "${image_of[$arg]:-}" ]] || {
        echo "no payload of ours for the catalog entry '$arg' (known: ${!image_of[*]})" >&2
        exit 2
      }
      entries+=("$arg")
      ;;
  esac
done
((${#entries[@]})) || entries=(crun gvisor kata-qemu)
command -v docker >/dev/null || { echo "docker (with buildx) is required to build images" >&2; exit 1; }

# A field of an image-vector entry: the value of `<field>:` after `- name: <name>`, unquoted.
vector_field() { # name field
  awk -v name="$1" -v field="$2:" '
    $1 == "-" && $2 == "name:" { current = $3; next }
    $1 == "-" { current = "" }
    current == name && $1 == field { sub(/^[^:]*:[ ]*/, ""); gsub(/"/, ""); print; exit }
  ' "$repo/charts/images.yaml"
}

for entry in "${entries[@]}"; do
  name="${image_of[$entry]}"
  repository="$(vector_field "$name" repository)"
  tag="$(vector_field "$name" tag)"
  [[ -n "$repository" && -n "$tag" ]] \
    || { echo "charts/images.yaml has no repository and tag for $name" >&2; exit 1; }
  architectures="$(vector_field "$name" architectures | tr -d '[] ')"
  platforms=""
  IFS=, read -r -a archs <<<"${architectures:-amd64,arm64}"
  for arch in "${archs[@]}"; do platforms+="${platforms:+,}linux/$arch"; done

  echo "==> $repository:$tag ($entry, $platforms)" >&2
  args=(buildx build --platform "$platforms" -f "$here/$entry/Dockerfile" -t "$repository:$tag")
  ((push)) && args+=(--push)
  docker "${args[@]}" "$here"
done
