# Where each tool lives in the cache. Sourced by build.sh, the control-plane launcher and
# the Makefile (through `hack/tools/paths.sh`), after versions.env.
TOOLS_CACHE="${CONTAINERD_SHIM_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-containerd-shim/tools}"
KUBE_DIR="$TOOLS_CACHE/kubernetes-$KUBERNETES_VERSION"
# Only its kube-apiserver: the v1beta1 admission policies of 1.29 shoots.
KUBE129_DIR="$TOOLS_CACHE/kubernetes-$KUBERNETES129_VERSION"
ETCD_DIR="$TOOLS_CACHE/etcd-$ETCD_VERSION"
# gardener-resource-manager, gardener-node-agent (the real nodes' unit) and gardener-apiserver
# (the garden's API for Shoots), all from the one Gardener module version.
GARDENER_DIR="$TOOLS_CACHE/gardener-$GARDENER_VERSION"
CRDS_DIR="$TOOLS_CACHE/gardener-crds-$GARDENER_VERSION"
CONTAINERD_DIR="$TOOLS_CACHE/containerd-$CONTAINERD_VERSION"
CONTAINERD17_DIR="$TOOLS_CACHE/containerd-$CONTAINERD17_VERSION"
HELM_DIR="$TOOLS_CACHE/helm-$HELM_VERSION"
CRICTL_DIR="$TOOLS_CACHE/crictl-$CRICTL_VERSION"
REGISTRY_DIR="$TOOLS_CACHE/registry-$DISTRIBUTION_VERSION"
CRANE_DIR="$TOOLS_CACHE/crane-$CRANE_VERSION"
# The gvisor payload's file tree per platform: $GVISOR_DIR/linux-<arch>/payload/<binary>.
GVISOR_DIR="$TOOLS_CACHE/gvisor-$GVISOR_VERSION"
GVISOR_ARCHITECTURES="amd64 arm64"
# Keyed by the Debian release and the package lists: a changed list builds anew.
ROOTFS_DIR="$TOOLS_CACHE/node-rootfs-$NODE_DEBIAN_SUITE-$(printf '%s' "$NODE_PACKAGES" | sha256sum | cut -c1-12)"
# The crun payload's file tree per platform: $CRUN_DIR/linux-<arch>/payload/crun.
CRUN_DIR="$TOOLS_CACHE/crun-$CRUN_VERSION-payload"
CRUN_ARCHITECTURES="amd64 arm64"
IMAGE_DEBS_DIR="$TOOLS_CACHE/image-debs-$NODE_DEBIAN_SUITE-$(printf '%s' "$IMAGE_PACKAGES" | sha256sum | cut -c1-12)"
CONTAINERD1_BIN="${CONTAINERD1_BIN:-/usr/bin/containerd}"
