#!/usr/bin/env bash
# Builds the real components the tests and the local playground run, from upstream Go modules,
# into a version-keyed cache outside the repository. Every step is skipped when its output
# exists, so a warm run costs nothing and a version bump rebuilds exactly one tool.
#
#   hack/tools/build.sh            build everything
#   hack/tools/build.sh --print    print the cache directory and exit
#   hack/tools/build.sh kube etcd  build only some (kube etcd grm crds containerd helm containerd1)
#
# A cold build takes tens of minutes on two cores; the Go build cache makes a rebuild fast.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
source "$here/lib.sh"

export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

if [[ "${1:-}" == "--print" ]]; then
  echo "$TOOLS_CACHE"
  exit 0
fi

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# build_into <dir> <module dir> <ldflags> <package>...: go build each package whose binary is
# missing from <dir>. Each binary is written under a temporary name and renamed into place, so
# an interrupted build never leaves a half-written binary in the cache.
build_into() {
  local out="$1" mod="$2" ldflags="$3"
  shift 3
  mkdir -p "$out"
  local pkg name started
  for pkg in "$@"; do
    name="${pkg##*/}"
    [[ "$pkg" == . ]] && name="$(basename "$mod")"
    if [[ -x "$out/$name" ]]; then
      log "up to date: $out/$name"
      continue
    fi
    started=$SECONDS
    log "building $name from the $(basename "$mod") wrapper module (many minutes on a cold Go cache)"
    (cd "$here/$mod" && go build -trimpath -ldflags "$ldflags" -o "$out/.$name.partial" "$pkg")
    mv "$out/.$name.partial" "$out/$name"
    log "built $name in $((SECONDS - started)) s"
  done
}

build_kube() {
  local minor="${KUBERNETES_VERSION#v1.}"
  minor="${minor%%.*}"
  local ldflags="-s -w \
    -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  build_into "$KUBE_DIR" kube "$ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  # The wrapper module's own main package is the etcd server.
  build_into "$ETCD_DIR" etcd "-s -w" .
}

build_grm() {
  build_into "$GRM_DIR" grm \
    "-s -w -X github.com/gardener/gardener/pkg/version.gitVersion=$GARDENER_VERSION" \
    github.com/gardener/gardener/cmd/gardener-resource-manager
}

# The Gardener CRDs come from the same gardener module version as gardener-resource-manager,
# read from the module cache: never hand-written copies.
build_crds() {
  if [[ -d "$CRDS_DIR" ]]; then log "up to date: $CRDS_DIR"; return 0; fi
  local src
  src="$(cd "$here/grm" && go mod download -json github.com/gardener/gardener | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$src" ]] || { log "could not locate github.com/gardener/gardener in the module cache"; return 1; }
  local tmp="$CRDS_DIR.partial.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  local f
  for f in 10-crd-extensions.gardener.cloud_extensions.yaml \
           10-crd-extensions.gardener.cloud_clusters.yaml \
           10-crd-resources.gardener.cloud_managedresources.yaml; do
    cp "$src/example/seed-crds/$f" "$tmp/$f"
  done
  chmod 0644 "$tmp"/*
  mv "$tmp" "$CRDS_DIR"
  log "copied Gardener CRDs from $src"
}

build_containerd() {
  build_into "$CONTAINERD_DIR" containerd \
    "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    github.com/containerd/containerd/v2/cmd/containerd
}

build_helm() {
  build_into "$HELM_DIR" helm "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    helm.sh/helm/v3/cmd/helm
}

# containerd 1.x is not built: Debian's package is the real 1.x that nodes run.
install_containerd1() {
  if [[ -x "$CONTAINERD1_BIN" ]]; then log "up to date: $CONTAINERD1_BIN"; return 0; fi
  command -v apt-get >/dev/null || { log "containerd 1.x is missing and apt-get is not available; install Debian's 'containerd' package"; return 1; }
  local sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  log "installing Debian's containerd (1.x) with apt-get"
  # policy-rc.d keeps the package from starting a containerd daemon on this machine.
  $sudo sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends containerd >&2 \
    || { $sudo apt-get update >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends containerd >&2; }
  $sudo rm -f /usr/sbin/policy-rc.d
}

all=(kube etcd grm crds containerd helm containerd1)
selected=("$@")
[[ ${#selected[@]} -gt 0 ]] || selected=("${all[@]}")
mkdir -p "$TOOLS_CACHE"
start=$SECONDS
for t in "${selected[@]}"; do
  case "$t" in
    kube) build_kube ;;
    etcd) build_etcd ;;
    grm) build_grm ;;
    crds) build_crds ;;
    containerd) build_containerd ;;
    helm) build_helm ;;
    containerd1) install_containerd1 ;;
    *) log "unknown tool '$t' (known: ${all[*]})"; exit 2 ;;
  esac
done
log "tools ready in $TOOLS_CACHE ($((SECONDS - start)) s)"
