#!/usr/bin/env bash
# The local playground behind `make local`. Runs inside the embedded control plane with real
# nodes (see the Makefile):
#
#   hack/control-plane.sh run --dir .local/playground --nodes containerd1,containerd2 \
#     --node-images .local/playground-images -- hack/local.sh
#
# (the control plane pushes the images of --node-images to its registry; the nodes pull every
# image from there, by digest)
#
# It grants the controller's seed identity (user containerd-shim-controller) exactly the
# chart's RBAC, applies the example Cluster (example/cluster.yaml) and the playground's Extension
# (hack/local-extension.yaml: shims whose payload images are in the registry) in the shoot
# namespace shoot--local--local with gardenlet's shoot-access secret, runs the controller binary
# with that identity and the registry's images (IMAGEVECTOR_OVERWRITE), shows progress until
# gardenlet would accept the Extension, the RuntimeClasses exist and every node is verified,
# runs a pod under an installed RuntimeClass, prints how to look around, and keeps running.
# Ctrl-C stops the controller; hack/control-plane.sh then stops the nodes and the control
# plane.
#
# CONTROLLER_BIN overrides the controller binary (default: the debug build of this checkout).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

log() { printf '[local %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ -n "${CONTROL_PLANE_DIR:-}" && -n "${SEED_CONTROLLER_KUBECONFIG:-}" ]] \
  || die "run me through the control plane: make local (hack/control-plane.sh run -- hack/local.sh)"
set -a
source <(hack/tools/env.sh)
set +a
[[ -x "$KUBECTL_BIN" && -x "$HELM_BIN" ]] || die "kubectl or helm is missing: build them with 'make tools'"
command -v python3 >/dev/null || die "python3 is required"

target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
bin="${CONTROLLER_BIN:-$target_dir/debug/gardener-extension-containerd-shim}"
[[ -x "$bin" ]] || die "$bin is missing: build it with 'cargo build --bin gardener-extension-containerd-shim' (make local does)"

release_ns=extension-containerd-shim
shoot_ns=shoot--local--local
controller_user=containerd-shim-controller
controller_log="$CONTROL_PLANE_DIR/logs/controller.log"

kseed() { "$KUBECTL_BIN" --kubeconfig "$SEED_KUBECONFIG" "$@"; }
kshoot() { "$KUBECTL_BIN" --kubeconfig "$SHOOT_KUBECONFIG" "$@"; }

controller_pid=""
stop_controller() {
  [[ -n "$controller_pid" ]] || return 0
  if kill -0 "$controller_pid" 2>/dev/null; then
    log "stopping the controller (pid $controller_pid)"
    kill -TERM "$controller_pid" 2>/dev/null || true
    local i
    for i in $(seq 1 150); do
      kill -0 "$controller_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$controller_pid" 2>/dev/null; then
      log "the controller did not stop within 15 s; killing it"
      kill -KILL "$controller_pid" 2>/dev/null || true
    fi
  fi
  wait "$controller_pid" 2>/dev/null || true
  controller_pid=""
}
trap stop_controller EXIT
# Ctrl-C is how the playground is meant to end: stop the controller while the control plane is
# still up (it releases its Lease and exits 0), then return cleanly to control-plane.sh, which
# stops the rest.
trap 'trap "" PIPE; stop_controller; log "stopped"; exit 0' INT
trap 'exit 143' TERM

free_port() {
  python3 "$repo/hack/free-port.py"
}

# --- 1. the chart's RBAC for the controller's identity ----------------------------------------
log "granting $controller_user the chart's RBAC (ClusterRole, and a Role in $release_ns)"
kseed create namespace "$release_ns" --dry-run=client -o yaml | kseed apply -f - >/dev/null
# Render the chart's RBAC and bind it to the user instead of the chart's ServiceAccount (the
# playground runs the binary outside the cluster, with the user's token).
"$HELM_BIN" template containerd-shim charts/gardener-extension-containerd-shim \
  --namespace "$release_ns" --show-only templates/rbac.yaml 2>/dev/null \
  | python3 -c '
import re, sys
text = sys.stdin.read()
subject = "  - apiGroup: rbac.authorization.k8s.io\n    kind: User\n    name: '"$controller_user"'\n"
text = re.sub(r"  - kind: ServiceAccount\n(    [^\n]*\n)+", subject, text)
sys.stdout.write(text)
' | kseed apply -f - >/dev/null
for check in "list extensions.extensions.gardener.cloud --all-namespaces" \
             "create leases.coordination.k8s.io -n $release_ns"; do
  deadline=$((SECONDS + 30))
  # shellcheck disable=SC2086 # the check is a list of words
  until [[ "$(kseed auth can-i $check --as "$controller_user" 2>/dev/null)" == yes ]]; do
    ((SECONDS < deadline)) || die "RBAC for $controller_user not effective: kubectl auth can-i $check"
    sleep 0.5
  done
done

# --- 2. the example shoot namespace, Cluster and Extension -------------------------------------
extension_file=hack/local-extension.yaml
log "applying the shoot namespace $shoot_ns, example/cluster.yaml and $extension_file"
kseed create namespace "$shoot_ns" --dry-run=client -o yaml | kseed apply -f - >/dev/null
kseed label namespace "$shoot_ns" gardener.cloud/role=shoot --overwrite >/dev/null
kseed apply -f example/cluster.yaml >/dev/null
# gardenlet's shoot-access secret: the health check counts verified nodes through it.
kseed -n "$shoot_ns" create secret generic gardener --from-file=kubeconfig="$SHOOT_KUBECONFIG" \
  --dry-run=client -o yaml | kseed apply -f - >/dev/null
kseed apply -f "$extension_file" >/dev/null

# --- 3. the controller --------------------------------------------------------------------------
health_port="$(free_port)"
metrics_port="$(free_port)"
log "starting the controller as $controller_user (log $controller_log)"
[[ -n "${NODE_IMAGES:-}" && -f "$NODE_IMAGES/images-overwrite.yaml" ]] \
  || die "the control plane has no node images: run me through 'make local'"
env -u KUBECONFIG -u LEADER_ELECTION_NAMESPACE -u HEARTBEAT_NAMESPACE POD_NAME=local-playground \
  IMAGEVECTOR_OVERWRITE="$NODE_IMAGES/images-overwrite.yaml" \
  SHIM_CATALOG_OVERLAY="$NODE_IMAGES/catalog-overlay.yaml" \
  setsid "$bin" run \
  --kubeconfig="$SEED_CONTROLLER_KUBECONFIG" \
  --leader-election-namespace="$release_ns" \
  --heartbeat-namespace="$release_ns" \
  --health-bind-address="127.0.0.1:$health_port" \
  --metrics-bind-address="127.0.0.1:$metrics_port" \
  --healthcheck-period=10s \
  --log-format=text \
  >"$controller_log" 2>&1 &
controller_pid=$!

controller_alive() {
  kill -0 "$controller_pid" 2>/dev/null \
    || die "the controller exited; the end of $controller_log:
$(tail -n 20 "$controller_log")"
}

# --- 4. progress until gardenlet would accept the Extension ------------------------------------
# gardenlet's readiness rules (health.CheckExtensionObject): no lastError, observedGeneration
# current, no operation annotation, lastOperation Succeeded. Prints one status line; exits 0
# when ready.
extension_status() {
  kseed get extension containerd-shim -n "$shoot_ns" -o json | python3 -c '
import json, sys
e = json.load(sys.stdin)
status = e.get("status") or {}
meta = e["metadata"]
op = status.get("lastOperation") or {}
err = status.get("lastError")
health = [c for c in status.get("conditions", []) if c.get("type") == "SystemComponentsHealthy"]
line = "%s %s %s%%: %s" % (op.get("type", "-"), op.get("state", "-"), op.get("progress", 0), op.get("description", "not reconciled yet"))
if err:
    line += " | lastError: %s %s" % (err.get("description"), err.get("codes", []))
if health:
    line += " | SystemComponentsHealthy=%s" % health[0].get("status")
print(line)
ready = (not err
         and status.get("observedGeneration") == meta.get("generation")
         and "gardener.cloud/operation" not in (meta.get("annotations") or {})
         and op.get("state") == "Succeeded")
sys.exit(0 if ready else 1)
'
}

expected_classes="$(bin_out="$("$bin" render -f "$extension_file" --cluster example/cluster.yaml)" \
  && printf '%s\n' "$bin_out" | python3 -c '
import sys
docs = sys.stdin.read().split("\n---")
names = []
for d in docs:
    lines = d.splitlines()
    if "kind: RuntimeClass" in lines:
        for l in lines:
            if l.startswith("  name: "):
                names.append(l.split(": ", 1)[1].strip())
                break
print(" ".join(sorted(names)))
')"
[[ -n "$expected_classes" ]] || die "the example Extension renders no RuntimeClass"

log "waiting for the Extension to be Succeeded and the RuntimeClasses ($expected_classes) to be in the shoot"
deadline=$((SECONDS + 300))
last=""
while true; do
  controller_alive
  ready=1
  line="$(extension_status 2>/dev/null)" || ready=0
  present="$(kshoot get runtimeclasses -o jsonpath='{.items[*].metadata.name}' 2>/dev/null || true)"
  missing=""
  for class in $expected_classes; do
    [[ " $present " == *" $class "* ]] || missing+=" $class"
  done
  current="Extension: ${line:-not readable yet} | RuntimeClasses missing:${missing:- none}"
  if [[ "$current" != "$last" ]]; then
    log "$current"
    last="$current"
  fi
  if ((ready)) && [[ -z "$missing" ]]; then
    break
  fi
  ((SECONDS < deadline)) || die "not ready after 300 s; see $controller_log"
  sleep 1
done

log "Extension $shoot_ns/containerd-shim is Succeeded and the shoot has the RuntimeClasses $expected_classes"

# --- 5. every node verified, and a pod under an installed RuntimeClass -------------------------
# The installers label a node only after containerd there started a pod sandbox with the
# handler; the DaemonSet rolls out node by node.
demo_class="$(tr ' ' '\n' <<<"$expected_classes" | head -n 1)"
demo_handler="$(kshoot get runtimeclass "$demo_class" -o jsonpath='{.handler}')"
IFS=, read -r -a nodes <<<"$NODES"
log "waiting for the installers to verify $demo_handler on ${nodes[*]} (each restarts containerd once, one node at a time)"
deadline=$((SECONDS + 600))
last=""
while true; do
  controller_alive
  labelled="$(kshoot get nodes -l "containerd-shim.extensions.gardener.cloud/$demo_handler=ready" -o name 2>/dev/null | wc -l)"
  pods="$(kshoot -n kube-system get pods -l app.kubernetes.io/name=containerd-shim-installer \
    -o jsonpath='{range .items[*]}{.spec.nodeName}={.status.phase}{" "}{end}' 2>/dev/null || true)"
  current="nodes verified for $demo_handler: $labelled/${#nodes[@]} | installer pods: ${pods:-none yet}"
  if [[ "$current" != "$last" ]]; then
    log "$current"
    last="$current"
  fi
  ((labelled == ${#nodes[@]})) && break
  ((SECONDS < deadline)) || die "the nodes are not verified after 600 s; see the installer pods' logs: $KUBECTL_BIN --kubeconfig $SHOOT_KUBECONFIG -n kube-system logs -l app.kubernetes.io/name=containerd-shim-installer"
  sleep 2
done

demo_pod="hello-$demo_class"
workload_image="$(sed -n 's/^WORKLOAD_IMAGE=//p' "$NODE_IMAGES/images.env")"
log "running pod default/$demo_pod with runtimeClassName: $demo_class"
kshoot delete pod "$demo_pod" --ignore-not-found --wait=true >/dev/null
kshoot apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $demo_pod
  namespace: default
spec:
  runtimeClassName: $demo_class
  automountServiceAccountToken: false
  containers:
    - name: hello
      image: $workload_image
      command: ["sh", "-c", "echo hello from a pod under the $demo_class RuntimeClass on \$(hostname); sleep 86400"]
YAML
kshoot wait --for=condition=Ready "pod/$demo_pod" --timeout=180s >/dev/null \
  || die "pod $demo_pod did not start; $KUBECTL_BIN --kubeconfig $SHOOT_KUBECONFIG describe pod $demo_pod"
demo_node="$(kshoot get pod "$demo_pod" -o jsonpath='{.spec.nodeName}')"
demo_container="$(kshoot get pod "$demo_pod" -o jsonpath='{.status.containerStatuses[0].containerID}')"
log "SUCCESS: pod default/$demo_pod runs under RuntimeClass $demo_class on node $demo_node (container ${demo_container#*://})"
cat >&2 <<EOF

Which runtime runs the container (the node's own state, entered with nsenter):

  # crun lists the container (and says it cannot read the state of the ones runc started); runc does not
  hack/control-plane.sh node-exec --dir $CONTROL_PLANE_DIR $demo_node -- \\
    /var/lib/containerd-shim-installer/current/$demo_class/bin/crun --root /run/containerd/runc/k8s.io list
  hack/control-plane.sh node-exec --dir $CONTROL_PLANE_DIR $demo_node -- runc --root /run/containerd/runc/k8s.io list
  # what the installer changed in containerd's configuration, and containerd's restarts
  hack/control-plane.sh node-exec --dir $CONTROL_PLANE_DIR $demo_node -- crictl info
  hack/control-plane.sh node-exec --dir $CONTROL_PLANE_DIR $demo_node -- journalctl -u containerd -g Started
  $KUBECTL_BIN --kubeconfig $SHOOT_KUBECONFIG logs $demo_pod

Look around (the controller keeps reconciling; its log is $controller_log):

  # seed: the Extension, its ManagedResource and the heartbeat
  $KUBECTL_BIN --kubeconfig $SEED_KUBECONFIG -n $shoot_ns get extension containerd-shim -o yaml
  $KUBECTL_BIN --kubeconfig $SEED_KUBECONFIG -n $shoot_ns get managedresource extension-containerd-shim -o yaml
  $KUBECTL_BIN --kubeconfig $SEED_KUBECONFIG -n $release_ns get lease

  # shoot: what gardener-resource-manager applied
  $KUBECTL_BIN --kubeconfig $SHOOT_KUBECONFIG get runtimeclasses
  $KUBECTL_BIN --kubeconfig $SHOOT_KUBECONFIG get nodes --show-labels
  $KUBECTL_BIN --kubeconfig $SHOOT_KUBECONFIG -n kube-system get daemonset,pods,configmaps -l app.kubernetes.io/name=containerd-shim-installer

  # change the configuration, then ask for a reconcile as gardenlet does
  $KUBECTL_BIN --kubeconfig $SEED_KUBECONFIG -n $shoot_ns edit extension containerd-shim
  $KUBECTL_BIN --kubeconfig $SEED_KUBECONFIG -n $shoot_ns annotate extension containerd-shim gardener.cloud/operation=reconcile

  # the controller's endpoints
  curl -s http://127.0.0.1:$health_port/readyz
  curl -s http://127.0.0.1:$metrics_port/metrics | grep gardener_extension_operations_total

Press Ctrl-C to stop the controller, the nodes and the control plane.
EOF

# --- 6. keep running ------------------------------------------------------------------------------
while true; do
  controller_alive
  sleep 2
done
