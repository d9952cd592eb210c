#!/usr/bin/env bash
# Builds the real components the tests and the local playground run, from upstream Go modules,
# into a version-keyed cache outside the repository. Every step is skipped when its output
# exists, so a warm run costs nothing and a version bump rebuilds exactly one tool.
#
#   hack/tools/build.sh            build everything
#   hack/tools/build.sh --print    print the cache directory and exit
#   hack/tools/build.sh kube etcd  build only some (kube kube129 etcd gardener crds containerd containerd17 helm containerd1
#                                  crictl registry crane rootfs image-debs crun gvisor)
#
# A cold build takes tens of minutes on two cores; the Go build cache makes a rebuild fast. The
# real nodes' root file system (mmdebstrap) and crun (from source) add a minute or two; gVisor
# (two binaries for two architectures) adds about 5 minutes of CPU.
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
    k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
}

# Only the API server of 1.29, for the admission policies a 1.29 shoot gets.
build_kube129() {
  local minor="${KUBERNETES129_VERSION#v1.}"
  minor="${minor%%.*}"
  build_into "$KUBE129_DIR" kube129 "-s -w \
    -X k8s.io/component-base/version.gitVersion=$KUBERNETES129_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$minor" \
    k8s.io/kubernetes/cmd/kube-apiserver
}

build_etcd() {
  # The wrapper module's own main package is the etcd server.
  build_into "$ETCD_DIR" etcd "-s -w" .
}

build_gardener() {
  build_into "$GARDENER_DIR" gardener \
    "-s -w -X k8s.io/component-base/version.gitVersion=$GARDENER_VERSION" \
    github.com/gardener/gardener/cmd/gardener-resource-manager \
    github.com/gardener/gardener/cmd/gardener-node-agent \
    github.com/gardener/gardener/cmd/gardener-apiserver
}

# The Gardener CRDs come from the same gardener module version as gardener-resource-manager,
# read from the module cache: never hand-written copies.
build_crds() {
  if [[ -d "$CRDS_DIR" ]]; then log "up to date: $CRDS_DIR"; return 0; fi
  local src
  src="$(cd "$here/gardener" && go mod download -json github.com/gardener/gardener | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$src" ]] || { log "could not locate github.com/gardener/gardener in the module cache"; return 1; }
  local tmp="$CRDS_DIR.partial.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  local f
  for f in 10-crd-extensions.gardener.cloud_extensions.yaml \
           10-crd-extensions.gardener.cloud_clusters.yaml \
           10-crd-extensions.gardener.cloud_operatingsystemconfigs.yaml \
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
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
}

# containerd 1.7, the release most Gardener nodes run, for the third real-node flavour.
build_containerd17() {
  build_into "$CONTAINERD17_DIR" containerd17 \
    "-s -w -X github.com/containerd/containerd/version.Version=$CONTAINERD17_VERSION" \
    github.com/containerd/containerd/cmd/containerd \
    github.com/containerd/containerd/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/cmd/ctr
}

build_crictl() {
  build_into "$CRICTL_DIR" crictl \
    "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    sigs.k8s.io/cri-tools/cmd/crictl
}

build_helm() {
  build_into "$HELM_DIR" helm "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    helm.sh/helm/v3/cmd/helm
}

# The registry of the test world (hack/control-plane.sh serves it over TLS next to the API
# servers; the nodes' containerd pulls every test image from it) and the client that pushes the
# images (hack/nodes/images.sh). crane, not a Rust crate: it is go-containerregistry's own
# command line, the client behind ko and many Gardener tools, built from the same Go module
# proxy as every other tool here, and it pushes an OCI image layout (index, manifests, blobs)
# as it is, so the digests the builder computed are the digests in the registry.
build_registry() {
  build_into "$REGISTRY_DIR" registry \
    "-s -w -X github.com/distribution/distribution/v3/version.version=$DISTRIBUTION_VERSION" \
    github.com/distribution/distribution/v3/cmd/registry
}

build_crane() {
  build_into "$CRANE_DIR" crane \
    "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$CRANE_VERSION" \
    github.com/google/go-containerregistry/cmd/crane
}

# gVisor's runsc and containerd shim for the gvisor payload image, cross-built for every
# architecture the catalog entry offers (pure Go, CGO_ENABLED=0: static binaries), into one file
# tree per platform: $GVISOR_DIR/linux-<arch>/payload/{runsc,containerd-shim-runsc-v1}, the
# paths the catalog names. A platform's tree appears only when both of its binaries are built.
build_gvisor() {
  local arch tree started
  for arch in $GVISOR_ARCHITECTURES; do
    tree="$GVISOR_DIR/linux-$arch"
    if [[ -x "$tree/payload/runsc" && -x "$tree/payload/containerd-shim-runsc-v1" ]]; then
      log "up to date: $tree"
      continue
    fi
    started=$SECONDS
    log "building gVisor $GVISOR_VERSION for linux/$arch (minutes on a cold Go cache)"
    rm -rf "$tree.partial"
    mkdir -p "$tree.partial/payload"
    (
      cd "$here/gvisor"
      GOOS=linux GOARCH="$arch" go build -trimpath \
        -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" \
        -o "$tree.partial/payload/runsc" gvisor.dev/gvisor/runsc
      GOOS=linux GOARCH="$arch" go build -trimpath -ldflags "-s -w" \
        -o "$tree.partial/payload/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim
    )
    rm -rf "$tree"
    mv "$tree.partial" "$tree"
    log "built $tree in $((SECONDS - started)) s"
  done
}

# apt_install <package>...: Debian packages this machine needs, installed when missing. The
# policy-rc.d keeps packages from starting daemons (containerd) on this machine.
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} > 0)) || return 0
  command -v apt-get >/dev/null || { log "missing Debian packages (${missing[*]}) and apt-get is not available; install them"; return 1; }
  local sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  log "installing Debian packages with apt-get: ${missing[*]}"
  $sudo sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
    || { $sudo apt-get update >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
  $sudo rm -f /usr/sbin/policy-rc.d
}

# containerd 1.x is not built: Debian's package is the real 1.x that nodes run.
install_containerd1() {
  if [[ -x "$CONTAINERD1_BIN" ]]; then log "up to date: $CONTAINERD1_BIN"; return 0; fi
  apt_install containerd
}

# The root file system of the real nodes (hack/nodes): Debian with systemd, containerd 1.x, runc
# and the CNI plugins, built once by mmdebstrap and shared read-only by every node (each node
# boots from a copy). Also the host packages the nodes need: systemd-nspawn, and nftables for
# kube-proxy's Service routing.
build_rootfs() {
  apt_install mmdebstrap systemd-container nftables
  if [[ -d "$ROOTFS_DIR" ]]; then log "up to date: $ROOTFS_DIR"; return 0; fi
  local tmp="$ROOTFS_DIR.partial.$$" started=$SECONDS
  rm -rf "$tmp"
  log "building the node root file system with mmdebstrap ($NODE_DEBIAN_SUITE: $NODE_PACKAGES)"
  mmdebstrap --variant=minbase --include="$NODE_PACKAGES" "$NODE_DEBIAN_SUITE" "$tmp" >"$TOOLS_CACHE/.rootfs.log" 2>&1 \
    || { log "mmdebstrap failed; the end of $TOOLS_CACHE/.rootfs.log:"; tail -n 20 "$TOOLS_CACHE/.rootfs.log" >&2; rm -rf "$tmp"; return 1; }
  mv "$tmp" "$ROOTFS_DIR"
  log "built $ROOTFS_DIR in $((SECONDS - started)) s"
}

# crun, the crun catalog entry's payload, from Debian's source tarball (checksum pinned in
# versions.env), for every architecture in CRUN_ARCHITECTURES (arm64 with Debian's cross
# compiler and its arm64 libraries). libseccomp, libcap and yajl are linked in statically;
# glibc and libsystemd stay shared: Debian ships no static libsystemd, and crun needs it for
# the systemd cgroup driver Gardener's nodes use (hack/images/payloads/README.md says why this
# is the payload, and what it asks of a node).
build_crun() {
  local arch triplet host lib tree work src started
  local packages=(gcc make gperf pkgconf python3 libcap-dev libseccomp-dev libsystemd-dev)
  for arch in $CRUN_ARCHITECTURES; do
    [[ "$arch" == amd64 ]] && continue
    dpkg --print-foreign-architectures | grep -qx "$arch" || {
      log "adding the Debian architecture $arch (its libraries for the cross build of crun)"
      local sudo=""
      [[ "$(id -u)" == 0 ]] || sudo="sudo"
      $sudo dpkg --add-architecture "$arch" && $sudo apt-get update >&2
    }
    triplet="$(crun_triplet "$arch")" || return 1
    packages+=("gcc-$triplet" "libc6-dev-$arch-cross" "libcap-dev:$arch" "libseccomp-dev:$arch" "libsystemd-dev:$arch")
  done
  for arch in $CRUN_ARCHITECTURES; do
    tree="$CRUN_DIR/linux-$arch"
    if [[ -x "$tree/payload/crun" ]]; then log "up to date: $tree"; continue; fi
    apt_install "${packages[@]}"
    started=$SECONDS
    work="$tree.partial.$$"
    rm -rf "$work"; mkdir -p "$work/payload"
    log "building crun $CRUN_VERSION for linux/$arch from $CRUN_SOURCE_URL"
    curl -fsSL -o "$work/source.tar.gz" "$CRUN_SOURCE_URL" || { log "downloading $CRUN_SOURCE_URL failed"; return 1; }
    echo "$CRUN_SOURCE_SHA256  $work/source.tar.gz" | sha256sum -c --quiet - \
      || { log "$CRUN_SOURCE_URL does not have the sha256 in versions.env"; return 1; }
    tar -xzf "$work/source.tar.gz" -C "$work"
    src="$work/crun-$CRUN_VERSION"
    triplet="$(crun_triplet "$arch")" || return 1
    lib="/usr/lib/$triplet"
    host=()
    [[ "$arch" == amd64 ]] || host=(--host="$triplet")
    # The ac_cv_search_* answers make configure link the static archives instead of -lcap and
    # -lseccomp.
    (
      cd "$src" \
        && ./configure "${host[@]}" --disable-criu --enable-embedded-yajl --disable-shared \
          ac_cv_search_cap_from_name="$lib/libcap.a" \
          ac_cv_search_seccomp_rule_add="$lib/libseccomp.a" \
          ac_cv_search_seccomp_arch_resolve_name="$lib/libseccomp.a" \
          PKG_CONFIG_LIBDIR="$lib/pkgconfig:/usr/share/pkgconfig" >"$work/build.log" 2>&1 \
        && make git-version.h >>"$work/build.log" 2>&1 \
        && make -j"$(nproc)" >>"$work/build.log" 2>&1
    ) || { log "building crun for linux/$arch failed; the end of its log:"; tail -n 20 "$work/build.log" >&2; return 1; }
    "$triplet-strip" -o "$work/payload/crun" "$src/crun" 2>/dev/null || strip -o "$work/payload/crun" "$src/crun"
    chmod 0755 "$work/payload/crun"
    rm -rf "$tree" "$work/source.tar.gz" "$src"
    mv "$work" "$tree"
    log "built $tree/payload/crun in $((SECONDS - started)) s"
  done
}

# crun_triplet <arch>: the GNU triplet of a Debian architecture crun is built for.
crun_triplet() {
  case "$1" in
    amd64) echo x86_64-linux-gnu ;;
    arm64) echo aarch64-linux-gnu ;;
    *) log "crun: no cross build for the architecture '$1' (amd64, arm64)"; return 1 ;;
  esac
}

# The Debian packages whose binaries the test images carry (busybox for the pause and workload
# images), downloaded and unpacked. Debian's own signatures checked
# by apt are the provenance.
build_image_debs() {
  if [[ -d "$IMAGE_DEBS_DIR" ]]; then log "up to date: $IMAGE_DEBS_DIR"; return 0; fi
  local tmp="$IMAGE_DEBS_DIR.partial.$$" p deb
  rm -rf "$tmp"; mkdir -p "$tmp/debs" "$tmp/root"
  for p in ${IMAGE_PACKAGES//,/ }; do
    (cd "$tmp/debs" && apt-get download "$p" >/dev/null 2>&1) \
      || (cd "$tmp/debs" && apt-get update >/dev/null && apt-get download "$p" >&2) \
      || { log "apt-get download $p failed"; return 1; }
  done
  for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  mv "$tmp" "$IMAGE_DEBS_DIR"
  log "unpacked $IMAGE_PACKAGES into $IMAGE_DEBS_DIR/root"
}

all=(kube kube129 etcd gardener crds containerd containerd17 helm containerd1 crictl registry crane rootfs image-debs crun gvisor)
selected=("$@")
[[ ${#selected[@]} -gt 0 ]] || selected=("${all[@]}")
mkdir -p "$TOOLS_CACHE"
start=$SECONDS
for t in "${selected[@]}"; do
  case "$t" in
    kube) build_kube ;;
    kube129) build_kube129 ;;
    etcd) build_etcd ;;
    gardener) build_gardener ;;
    crds) build_crds ;;
    containerd) build_containerd ;;
    containerd17) build_containerd17 ;;
    helm) build_helm ;;
    crictl) build_crictl ;;
    registry) build_registry ;;
    crane) build_crane ;;
    rootfs) build_rootfs ;;
    image-debs) build_image_debs ;;
    crun) build_crun ;;
    gvisor) build_gvisor ;;
    containerd1) install_containerd1 ;;
    *) log "unknown tool '$t' (known: ${all[*]})"; exit 2 ;;
  esac
done
log "tools ready in $TOOLS_CACHE ($((SECONDS - start)) s)"
