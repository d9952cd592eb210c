#!/usr/bin/env bash
# The embedded control plane the tests and the local playground run against: real etcd,
# a "seed" and a "shoot" kube-apiserver, a kube-controller-manager for each, the Gardener
# CRDs, gardener-resource-manager applying ManagedResources from the seed into the shoot, and
# an OCI registry (CNCF Distribution, TLS with the control plane's CA).
#
#   hack/control-plane.sh run [--dir DIR] [NODE OPTIONS] -- CMD [ARGS...]
#       start everything, run CMD with the control plane's environment, stop everything;
#       exits with CMD's status.
#   hack/control-plane.sh up [--dir DIR] [NODE OPTIONS]
#       start everything and keep it running until Ctrl-C.
#   hack/control-plane.sh restart-seed-apiserver [--dir DIR]
#       stop and start the seed kube-apiserver of a running control plane (fault tests).
#   hack/control-plane.sh stop-registry [--dir DIR] / start-registry [--dir DIR]
#       stop the registry of a running control plane, and start it again with the same address
#       and storage (registry outage tests).
#   hack/control-plane.sh node-exec [--dir DIR] NODE -- CMD [ARGS...]
#       run a command inside a real node of a running control plane.
#
# NODE OPTIONS give the shoot real nodes (hack/nodes/lib.sh): kube-scheduler, kube-proxy and
# systemd-nspawn machines with containerd and a kubelet.
#   --nodes FLAVOURS       one node per comma-separated flavour: containerd1 (Debian's 1.6,
#                          config version 2), containerd17 (the built 1.7, config version 2)
#                          or containerd2 (the built 2.x, config version 3)
#   --node-images DIR      push every image of DIR to the registry before the nodes boot;
#                          the nodes pull them from there, their sandbox image included
#                          (hack/nodes/images.sh builds them)
#   --node-pool POOL       the nodes' worker pool label (default worker-a)
#   --node-prefix PREFIX   node names are PREFIX1, PREFIX2, ... (default node-)
#   --node-agent           Gardener-shaped nodes: gardener-node-agent runs on each node and owns
#                          containerd's config (hack/nodes/node-agent.sh); needs --node-images
#
# --garden adds a garden: gardener-apiserver with an etcd of its own, serving core.gardener.cloud
# (Shoots) behind the seed kube-apiserver (hack/garden.sh); DIR/env then has GARDEN_KUBECONFIG.
#
# Everything binds to 127.0.0.1, except, with nodes, the shoot API server, the registry and the
# kubelets, which bind to addresses on lo that pods and nodes reach. Every process started is
# recorded by PID in DIR/pids and is stopped on exit, on failure and on Ctrl-C. DIR/env holds
# the kubeconfig paths, the registry's address (REGISTRY) and CA (REGISTRY_CA) for clients; it
# exists only while the control plane is up. The registry stores its content in DIR/registry.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/hack/tools/versions.env"
source "$repo/hack/tools/lib.sh"

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
dir="$repo/.local/control-plane"
NODE_FLAVOURS=""
NODE_IMAGES=""
NODE_POOL="worker-a"
NODE_NAME_PREFIX="node-"
NODE_AGENT=""
exec_node=""
GARDEN=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --nodes) NODE_FLAVOURS="$2"; shift 2 ;;
    --node-images) NODE_IMAGES="$(cd "$2" && pwd)"; shift 2 ;;
    --node-pool) NODE_POOL="$2"; shift 2 ;;
    --node-prefix) NODE_NAME_PREFIX="$2"; shift 2 ;;
    --garden) GARDEN=1; shift ;;
    --node-agent) NODE_AGENT=1; shift ;;
    --) shift; break ;;
    -*) echo "unknown argument: $1" >&2; exit 2 ;;
    *)
      [[ "$cmd" == node-exec && -z "$exec_node" ]] || { echo "unknown argument: $1" >&2; exit 2; }
      exec_node="$1"; shift ;;
  esac
done
NODE_COUNT=0
[[ -n "$NODE_FLAVOURS" ]] && NODE_COUNT="$(tr ',' '\n' <<<"$NODE_FLAVOURS" | grep -c .)"
NODE_LABELS="worker.gardener.cloud/pool=$NODE_POOL"
# Kubeconfigs name files by absolute path, and the processes run from other directories.
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

log() { printf '[control-plane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=nodes/lib.sh
source "$repo/hack/nodes/lib.sh"
# shellcheck source=garden.sh
source "$repo/hack/garden.sh"
# shellcheck source=nodes/node-agent.sh
source "$repo/hack/nodes/node-agent.sh"
[[ -z "$NODE_AGENT" ]] || NODE_LABELS="$NODE_LABELS,$(node_agent_node_labels)"

KUBE_APISERVER="$KUBE_DIR/kube-apiserver"
KUBE_CONTROLLER_MANAGER="$KUBE_DIR/kube-controller-manager"
ETCD="$ETCD_DIR/etcd"
GRM="$GARDENER_DIR/gardener-resource-manager"
REGISTRY_BIN="$REGISTRY_DIR/registry"

require_tools() {
  local b
  for b in "$KUBE_APISERVER" "$KUBE_CONTROLLER_MANAGER" "$ETCD" "$GRM" "$REGISTRY_BIN"; do
    [[ -x "$b" ]] || die "$b is missing: build it with 'make tools' (hack/tools/build.sh)"
  done
  [[ -d "$CRDS_DIR" ]] || die "$CRDS_DIR is missing: build it with 'make tools' (hack/tools/build.sh crds)"
  command -v openssl >/dev/null || die "openssl is required to generate the control plane's certificates"
  command -v curl >/dev/null || die "curl is required to probe the control plane"
}

# A port below the ephemeral range, never handed out twice to this control plane (see the script).
free_port() {
  python3 "$repo/hack/free-port.py" "$dir/ports-handed-out"
}

# start <name> <binary> <args...>: run in the background with output in DIR/logs/<name>.log
# and record "<name> <pid>" in DIR/pids.
start() {
  local name="$1"
  shift
  # fd 9 is the machine-wide nodes lock: it belongs to this script, not to what it starts.
  # A session of its own: Ctrl-C reaches this script and the command it runs, never a component
  # directly, so stop_all stops them in order (clients first, etcd last) instead of etcd dying
  # under the API servers and the controller failing to release its Lease.
  setsid "$@" 9>&- >>"$dir/logs/$name.log" 2>&1 &
  local pid=$!
  echo "$name $pid" >>"$dir/pids"
  log "started $name (pid $pid, log $dir/logs/$name.log)"
}

pid_of() { awk -v n="$1" '$1==n {p=$2} END {print p}' "$dir/pids"; }

stop_pid() { # name pid
  local name="$1" pid="$2" i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$name (pid $pid) did not stop within 5 s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
}

stop_all() {
  # Clean-up must go on past any failure, also past a closed output: when the reader of a pipe
  # we log into is gone (`make local | tee`, then Ctrl-C), a log line must not kill the clean-up.
  trap '' PIPE
  set +e
  [[ -f "$dir/pids" ]] || return 0
  rm -f "$dir/env"
  # Reverse start order: clients first, etcd last.
  local line name pid
  tac "$dir/pids" | while read -r name pid; do
    case "$name" in
      node-*) stop_node "$name" "$pid" ;;
      *) stop_pid "$name" "$pid" ;;
    esac
  done
  rm -f "$dir/pids"
  ((NODE_COUNT == 0)) || nodes_cleanup
  log "stopped"
}

# wait_for <what> <deadline seconds> <command...>: poll until the command succeeds.
wait_for() {
  local what="$1" timeout="$2" deadline=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      die "$what not ready after $timeout s; see the logs in $dir/logs"
    fi
    check_alive
    sleep 0.5
  done
}

# Fails when any component has exited. A restarted component appears twice in DIR/pids; only
# its latest PID counts, and a component stopped on purpose (stop-registry) has `-` there.
check_alive() {
  local name pid
  while read -r name pid; do
    [[ "$pid" == - ]] && continue
    kill -0 "$pid" 2>/dev/null || die "$name (pid $pid) exited; the end of $dir/logs/$name.log: $(tail -n 5 "$dir/logs/$name.log" 2>/dev/null)"
  done < <(awk '{last[$1]=$2} END {for (n in last) print n, last[n]}' "$dir/pids")
}

gen_certs() {
  local pki="$dir/pki"
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=containerd-shim-test-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$pki/serving.key" -out "$pki/serving.csr" 2>/dev/null
  # With real nodes, the shoot API server is also reached on the node network address and, from
  # pods, on the `kubernetes` Service's IP.
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:%s,IP:10.0.0.1\nextendedKeyUsage=serverAuth\n' \
    "$NODE_API_ADDRESS" >"$pki/serving.ext"
  openssl x509 -req -in "$pki/serving.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/serving.ext" -out "$pki/serving.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  # gardener-resource-manager's webhook server wants tls.crt/tls.key in one directory.
  mkdir -p "$pki/grm"
  cp "$pki/serving.crt" "$pki/grm/tls.crt"
  cp "$pki/serving.key" "$pki/grm/tls.key"
  # The registry's own serving certificate, for the address it binds.
  openssl req -newkey rsa:2048 -nodes -subj "/CN=containerd-shim-test-registry" \
    -keyout "$pki/registry.key" -out "$pki/registry.csr" 2>/dev/null
  printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "${REGISTRY_ADDRESS%:*}" >"$pki/registry.ext"
  openssl x509 -req -in "$pki/registry.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/registry.ext" -out "$pki/registry.crt" 2>/dev/null
}

random_token() { openssl rand -hex 24; }

# The OCI registry: CNCF Distribution with filesystem storage in DIR/registry, TLS only, no
# authentication (as a mirror inside a seed's network would be), an access log in its log.
write_registry_config() {
  cat >"$dir/registry.yaml" <<CONFIG
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: $dir/registry
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $REGISTRY_ADDRESS
  # Stopped within stop_pid's grace period.
  draintimeout: 2s
  tls:
    certificate: $dir/pki/registry.crt
    key: $dir/pki/registry.key
health:
  storagedriver:
    enabled: false
CONFIG
}

# Its traces would go to an OTLP collector on localhost:4318 by default; there is none.
start_registry() {
  OTEL_TRACES_EXPORTER=none start registry "$REGISTRY_BIN" serve "$dir/registry.yaml"
  wait_for "the registry" 60 registry_ready
}

registry_ready() { curl -fsS --cacert "$dir/pki/ca.crt" "https://$REGISTRY_ADDRESS/v2/"; }

write_kubeconfig() { # file port token user [host] [ca file]
  cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://${5:-127.0.0.1}:$2
    certificate-authority: ${6:-$dir/pki/ca.crt}
users:
- name: $4
  user:
    token: $3
contexts:
- name: local
  context:
    cluster: local
    user: $4
current-context: local
KUBECONFIG
}

# The seed API server records, at metadata level, every request of the extension controller's
# own identity, so tests can compare the calls it really makes with the chart's RBAC. With
# CONTROL_PLANE_AUDIT_ALL=1 (the fleet benchmark) it records every client's requests, which the
# benchmark tells apart by User-Agent.
write_audit_policy() {
  local others=None
  [[ "${CONTROL_PLANE_AUDIT_ALL:-}" == 1 ]] && others=Metadata
  cat >"$dir/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["containerd-shim-controller"]
- level: $others
POLICY
}

start_apiserver() { # name port etcd-prefix address extra-args...
  local name="$1" port="$2" prefix="$3" address="$4"
  shift 4
  start "$name" "$KUBE_APISERVER" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-prefix="$prefix" \
    --bind-address="$address" --advertise-address="$address" --secure-port="$port" \
    --tls-cert-file="$dir/pki/serving.crt" --tls-private-key-file="$dir/pki/serving.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --token-auth-file="$dir/tokens.csv" \
    --service-account-issuer="https://127.0.0.1:$port" \
    --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true --profiling=false \
    "$@"
}

# An API server without nodes: no ServiceAccount admission (no controller creates the default
# ServiceAccounts), no `kubernetes` Service endpoints.
plain_apiserver_args() {
  echo --authorization-mode=RBAC --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none
}

seed_apiserver_args() {
  plain_apiserver_args
  echo --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/logs/seed-audit.log" \
    --audit-log-format=json --audit-log-maxsize=0
}

apiserver_ready() { # port token [host]
  curl -fsS --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $2" "https://${3:-127.0.0.1}:$1/readyz"
}

kubectl_get() { # port token path
  curl -fsS --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $2" "https://127.0.0.1:$1$3"
}

# apply_crd <port> <token> <file>: create the CRD from its YAML file (the API server accepts
# YAML request bodies).
apply_crd() {
  local port="$1" token="$2" file="$3"
  local code
  code="$(curl -sS -o "$dir/logs/crd-apply.out" -w '%{http_code}' --cacert "$dir/pki/ca.crt" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/yaml' \
    -X POST --data-binary "@$file" \
    "https://127.0.0.1:$port/apis/apiextensions.k8s.io/v1/customresourcedefinitions")"
  [[ "$code" == 201 || "$code" == 409 ]] || die "creating CRD from $file failed with HTTP $code: $(cat "$dir/logs/crd-apply.out")"
}

crd_established() { # port token name
  kubectl_get "$1" "$2" "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$3" \
    | python3 -c 'import json,sys; c=json.load(sys.stdin); sys.exit(0 if any(x["type"]=="Established" and x["status"]=="True" for x in c.get("status",{}).get("conditions",[])) else 1)'
}

write_grm_config() {
  cat >"$dir/grm-config.yaml" <<CONFIG
apiVersion: resourcemanager.config.gardener.cloud/v1alpha1
kind: ResourceManagerConfiguration
sourceClientConnection:
  qps: 100
  burst: 130
  kubeconfig: $dir/seed-admin.kubeconfig
targetClientConnection:
  qps: 100
  burst: 130
  kubeconfig: $dir/shoot-admin.kubeconfig
leaderElection:
  leaderElect: false
  resourceLock: leases
  resourceName: gardener-resource-manager
  resourceNamespace: default
logLevel: info
logFormat: json
server:
  webhooks:
    bindAddress: 127.0.0.1
    port: $GRM_WEBHOOK_PORT
    tls:
      serverCertDir: $dir/pki/grm
  healthProbes:
    bindAddress: 127.0.0.1
    port: $GRM_HEALTH_PORT
  metrics:
    bindAddress: 127.0.0.1
    port: $(free_port)
controllers:
  # As in a shoot: immutable, content-named ConfigMaps (the installer's desired sets) dropped
  # from a bundle stay until no workload refers to them, then this collector deletes them.
  garbageCollector:
    enabled: true
    syncPeriod: 15s
  health:
    concurrentSyncs: 5
    syncPeriod: 15s
  csrApprover:
    enabled: false
  managedResource:
    concurrentSyncs: 5
    syncPeriod: 1m
    alwaysUpdate: false
    managedByLabelValue: gardener
  networkPolicy:
    enabled: false
  nodeCriticalComponents:
    enabled: false
  nodeAgentReconciliationDelay:
    enabled: false
  tokenRequestor:
    enabled: false
webhooks:
$(if [[ -n "$NODE_AGENT" ]]; then node_agent_grm_webhook; else printf '  nodeAgentAuthorizer:\n    enabled: false\n'; fi)
  crdDeletionProtection:
    enabled: false
  endpointSliceHints:
    enabled: false
  extensionValidation:
    enabled: false
  highAvailabilityConfig:
    enabled: false
  kubernetesServiceHost:
    enabled: false
  systemComponentsConfig:
    enabled: false
  podKubeAPIServerLoadBalancing:
    enabled: false
  podSchedulerName:
    enabled: false
  podTopologySpreadConstraints:
    enabled: false
  projectedTokenMount:
    enabled: false
  seccompProfile:
    enabled: false
  vpaInPlaceUpdates:
    enabled: false
CONFIG
}

write_env() {
  local names=() i
  for ((i = 1; i <= NODE_COUNT; i++)); do names+=("$(node_name "$i")"); done
  cat >"$dir/env.partial" <<ENV
CONTROL_PLANE_DIR=$dir
REGISTRY=$REGISTRY_ADDRESS
REGISTRY_CA=$dir/pki/ca.crt
SEED_KUBECONFIG=$dir/seed-admin.kubeconfig
SHOOT_KUBECONFIG=$dir/shoot-admin.kubeconfig
SEED_CONTROLLER_KUBECONFIG=$dir/seed-controller.kubeconfig
SEED_AUDIT_LOG=$dir/logs/seed-audit.log
SEED_APISERVER_PORT=$SEED_PORT
SHOOT_APISERVER_PORT=$SHOOT_PORT
ETCD_ENDPOINT=http://127.0.0.1:$ETCD_PORT
NODES=$(IFS=,; echo "${names[*]}")
NODE_POOL=$NODE_POOL
NODE_IMAGES=$NODE_IMAGES
NODE_AGENT_SECRET=$([[ -z "$NODE_AGENT" ]] || node_agent_secret_name)
ENV
  [[ ! -f "$dir/garden.env" ]] || cat "$dir/garden.env" >>"$dir/env.partial"
  mv "$dir/env.partial" "$dir/env"
}

up() {
  require_tools
  ((GARDEN == 0)) || garden_require_tools
  if ((NODE_COUNT > 0)); then
    nodes_require_tools
    [[ -z "$NODE_AGENT" ]] || node_agent_require_tools
    nodes_lock
  fi
  if [[ -f "$dir/pids" ]]; then
    local name pid alive=0
    while read -r name pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$dir/pids"
    ((alive == 0)) || die "a control plane is already running from $dir (see $dir/pids); stop it first"
  fi
  rm -rf "$dir"
  mkdir -p "$dir/logs" "$dir/etcd" "$dir/registry"
  : >"$dir/pids"
  # With nodes, the registry has the fixed address the node images name (hack/nodes/lib.sh);
  # without, a free port on loopback like everything else.
  if ((NODE_COUNT > 0)); then
    REGISTRY_ADDRESS="$NODE_REGISTRY"
  else
    [[ -z "$NODE_IMAGES" ]] || die "--node-images needs --nodes: the images name the nodes' registry"
    REGISTRY_ADDRESS="127.0.0.1:$(free_port)"
  fi
  gen_certs
  ((GARDEN == 0)) || garden_certs
  write_audit_policy
  ADMIN_TOKEN="$(random_token)"
  CONTROLLER_TOKEN="$(random_token)"
  {
    echo "$ADMIN_TOKEN,admin,admin-uid,system:masters"
    echo "$CONTROLLER_TOKEN,containerd-shim-controller,containerd-shim-controller-uid"
    ((NODE_COUNT == 0)) || nodes_tokens
  } >"$dir/tokens.csv"
  ETCD_PORT="$(free_port)"
  SEED_PORT="$(free_port)"
  SHOOT_PORT="$(free_port)"
  GRM_HEALTH_PORT="$(free_port)"
  GRM_WEBHOOK_PORT="$(free_port)"
  write_kubeconfig "$dir/seed-admin.kubeconfig" "$SEED_PORT" "$ADMIN_TOKEN" admin
  local shoot_host=127.0.0.1
  ((NODE_COUNT == 0)) || shoot_host="$NODE_API_ADDRESS"
  write_kubeconfig "$dir/shoot-admin.kubeconfig" "$SHOOT_PORT" "$ADMIN_TOKEN" admin "$shoot_host"
  write_kubeconfig "$dir/seed-controller.kubeconfig" "$SEED_PORT" "$CONTROLLER_TOKEN" containerd-shim-controller
  echo "ETCD_PORT=$ETCD_PORT SEED_PORT=$SEED_PORT SHOOT_PORT=$SHOOT_PORT REGISTRY_ADDRESS=$REGISTRY_ADDRESS" >"$dir/ports"

  local peer
  peer="$(free_port)"
  start etcd "$ETCD" --name=default --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="default=http://127.0.0.1:$peer" --unsafe-no-fsync --log-level=warn
  wait_for "etcd" 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  local shoot_args kcm_args=()
  read -r -a shoot_args <<<"$(plain_apiserver_args)"
  if ((NODE_COUNT > 0)); then
    nodes_network_up
    gen_kubelet_client_cert
    read -r -a shoot_args <<<"$(shoot_apiserver_node_args)"
    if [[ -n "$NODE_AGENT" ]]; then
      # Authorization comes from the structured configuration with the agent's authorizer.
      local authz
      authz="$(node_agent_apiserver_authorization_args "$GRM_WEBHOOK_PORT")"
      read -r -a shoot_args <<<"$(printf '%s\n' "${shoot_args[@]}" | sed "s|^--authorization-mode=.*|$authz|" | tr '\n' ' ')"
    fi
    read -r -a kcm_args <<<"$(shoot_kcm_node_args)"
  fi
  # shellcheck disable=SC2046
  start_apiserver seed-apiserver "$SEED_PORT" /seed 127.0.0.1 $(seed_apiserver_args) \
    $( ((GARDEN == 0)) || garden_seed_apiserver_args)
  start_apiserver shoot-apiserver "$SHOOT_PORT" /shoot "$shoot_host" "${shoot_args[@]}"
  write_registry_config
  start_registry
  if [[ -n "$NODE_IMAGES" ]]; then
    "$repo/hack/nodes/images.sh" push "$NODE_IMAGES" "$REGISTRY_ADDRESS" "$dir/pki/ca.crt" \
      || die "pushing the images of $NODE_IMAGES to the registry failed"
  fi
  wait_for "seed kube-apiserver" 120 apiserver_ready "$SEED_PORT" "$ADMIN_TOKEN"
  wait_for "shoot kube-apiserver" 120 apiserver_ready "$SHOOT_PORT" "$ADMIN_TOKEN" "$shoot_host"

  local which
  for which in seed shoot; do
    local extra=()
    local controllers=--controllers=garbage-collector-controller,namespace-controller,daemonset-controller,deployment-controller,replicaset-controller
    if [[ "$which" == shoot && ${#kcm_args[@]} -gt 0 ]]; then
      controllers="${kcm_args[0]}"
      extra=("${kcm_args[@]:1}")
    fi
    start "$which-controller-manager" "$KUBE_CONTROLLER_MANAGER" \
      --kubeconfig="$dir/$which-admin.kubeconfig" "$controllers" \
      --secure-port=0 --leader-elect=false --use-service-account-credentials=false "${extra[@]}"
  done

  local f
  for f in "$CRDS_DIR"/*.yaml; do
    apply_crd "$SEED_PORT" "$ADMIN_TOKEN" "$f"
  done
  for f in extensions.extensions.gardener.cloud clusters.extensions.gardener.cloud managedresources.resources.gardener.cloud; do
    wait_for "CRD $f" 60 crd_established "$SEED_PORT" "$ADMIN_TOKEN" "$f"
  done
  log "Gardener CRDs from $CRDS_DIR established in the seed"
  ((GARDEN == 0)) || garden_up

  write_grm_config
  start gardener-resource-manager "$GRM" --config="$dir/grm-config.yaml"
  wait_for "gardener-resource-manager" 120 curl -fsS "http://127.0.0.1:$GRM_HEALTH_PORT/readyz"
  if ((NODE_COUNT > 0)); then
    start_node_services
    start_nodes
    [[ -z "$NODE_AGENT" ]] || start_node_agents
  fi
  check_alive
  write_env
  log "ready: seed https://127.0.0.1:$SEED_PORT, shoot https://127.0.0.1:$SHOOT_PORT, registry https://$REGISTRY_ADDRESS"
  log "  export KUBECONFIG=$dir/seed-admin.kubeconfig   # seed"
  log "  export KUBECONFIG=$dir/shoot-admin.kubeconfig  # shoot"
}

case "$cmd" in
  run)
    [[ $# -gt 0 ]] || die "usage: $0 run [--dir DIR] -- CMD [ARGS...]"
    trap stop_all EXIT
    # Ctrl-C before the command runs stops what was started; while it runs, the command gets
    # the same interrupt and ends itself, and a command that ended cleanly (0, or 130: stopped
    # by the interrupt it was meant to obey) makes this a clean stop too.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    up
    interrupted=0
    trap 'interrupted=1; trap "" PIPE' INT
    # A TERM (a service manager, or the parent-death signal `make local` sets) is passed on to
    # the command, which ends itself before this script stops the rest.
    trap 'trap "" PIPE; kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM
    set +e
    # The command runs in the background so that this script can act on signals while it waits
    # (bash runs traps only between commands); it stays in the same process group, so Ctrl-C
    # reaches it too, once it no longer ignores SIGINT as bash makes background commands do.
    (
      trap - INT QUIT
      set -a
      source "$dir/env"
      set +a
      exec "$@"
    ) &
    child=$!
    # `wait` returns early when a trapped signal arrives; the command's status is that of the
    # wait that sees it end.
    while :; do
      wait "$child"
      status=$?
      kill -0 "$child" 2>/dev/null || break
    done
    set -e
    if ((interrupted)) && ((status == 0 || status == 130)); then
      log "interrupted: stopping"
      exit 0
    fi
    check_alive || status=1
    exit "$status"
    ;;
  up)
    trap stop_all EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    up
    log "press Ctrl-C to stop"
    trap 'log "interrupted: stopping"; exit 0' INT
    while true; do
      check_alive
      sleep 2
    done
    ;;
  restart-seed-apiserver)
    [[ -f "$dir/pids" && -f "$dir/ports" ]] || die "no control plane is running from $dir"
    source "$dir/ports"
    ADMIN_TOKEN="$(awk -F, '$2=="admin"{print $1}' "$dir/tokens.csv")"
    old="$(pid_of seed-apiserver)"
    stop_pid seed-apiserver "$old"
    start_apiserver seed-apiserver "$SEED_PORT" /seed 127.0.0.1 $(seed_apiserver_args)
    wait_for "seed kube-apiserver" 120 apiserver_ready "$SEED_PORT" "$ADMIN_TOKEN"
    ;;
  stop-registry)
    [[ -f "$dir/pids" && -f "$dir/ports" ]] || die "no control plane is running from $dir"
    stop_pid registry "$(pid_of registry)"
    # `-`: stopped on purpose; check_alive does not count it as a failure.
    echo "registry -" >>"$dir/pids"
    log "stopped the registry"
    ;;
  start-registry)
    [[ -f "$dir/pids" && -f "$dir/ports" ]] || die "no control plane is running from $dir"
    source "$dir/ports"
    [[ "$(pid_of registry)" == - ]] || die "the registry of $dir is running (pid $(pid_of registry)); stop it first"
    start_registry
    ;;
  node-exec)
    [[ -n "$exec_node" && $# -gt 0 ]] || die "usage: $0 node-exec [--dir DIR] NODE -- CMD [ARGS...]"
    [[ -f "$dir/nodes/$exec_node/leader" ]] || die "no node $exec_node in $dir"
    node_exec "$exec_node" "$@"
    ;;
  *)
    sed -n '2,37p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
