#!/usr/bin/env bash
# Prints the environment (KEY=value lines) that points tests and scripts at the built tools.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/versions.env"
source "$here/lib.sh"
cat <<ENV
TOOLS_CACHE=$TOOLS_CACHE
KUBECTL_BIN=$KUBE_DIR/kubectl
KUBE_APISERVER_1_29_BIN=$KUBE129_DIR/kube-apiserver
HELM_BIN=$HELM_DIR/helm
CRANE_BIN=$CRANE_DIR/crane
CONTAINERD1_BIN=$CONTAINERD1_BIN
CONTAINERD17_BIN=$CONTAINERD17_DIR/containerd
CONTAINERD2_BIN=$CONTAINERD_DIR/containerd
ENV
