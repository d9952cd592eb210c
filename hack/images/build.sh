#!/usr/bin/env bash
# Builds the controller and installer images with docker (BuildKit) from hack/images/Dockerfile.
#
#   hack/images/build.sh [--push]
#
# Repositories come from the image vector (charts/images.yaml, entries
# gardener-extension-containerd-shim and containerd-shim-installer) and the tag is
# v<Cargo.toml version>, which is what the chart and the controller use by default.
# CONTROLLER_REPOSITORY, INSTALLER_REPOSITORY and IMAGE_TAG override them. With PLATFORMS
# (e.g. linux/amd64,linux/arm64) the build uses `docker buildx` for every platform and needs
# --push (a multi-platform image cannot be loaded into the local engine).
#
# The payload images of the built-in catalog's shims are built by hack/images/payloads/build.sh
# (see hack/images/payloads/README.md).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

push=0
case "${1:-}" in
  --push) push=1 ;;
  "") ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac
command -v docker >/dev/null || { echo "docker is required to build images" >&2; exit 1; }

# The repository of an image-vector entry: the `repository:` line after `- name: <name>`.
vector_repository() {
  awk -v name="$1" '
    $1 == "-" && $2 == "name:" { current = $3 }
    $1 == "repository:" && current == name { print $2; exit }
  ' charts/images.yaml
}

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
tag="${IMAGE_TAG:-v$version}"
controller="${CONTROLLER_REPOSITORY:-$(vector_repository gardener-extension-containerd-shim)}"
installer="${INSTALLER_REPOSITORY:-$(vector_repository containerd-shim-installer)}"
[[ -n "$controller" && -n "$installer" ]] || { echo "no repositories in charts/images.yaml" >&2; exit 1; }

build() { # target image
  local target="$1" image="$2"
  echo "==> $image ($target)" >&2
  if [[ -n "${PLATFORMS:-}" ]]; then
    ((push)) || { echo "PLATFORMS needs --push" >&2; exit 2; }
    docker buildx build --platform "$PLATFORMS" --push \
      -f hack/images/Dockerfile --target "$target" --build-arg VERSION="$tag" -t "$image" .
  else
    DOCKER_BUILDKIT=1 docker build \
      -f hack/images/Dockerfile --target "$target" --build-arg VERSION="$tag" -t "$image" .
    if ((push)); then
      docker push "$image"
    fi
  fi
}

build controller "$controller:$tag"
build installer "$installer:$tag"
