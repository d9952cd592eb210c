# Gardener-shaped real nodes (`hack/control-plane.sh --node-agent`): each node runs
# gardener-node-agent (the build of hack/tools, the Gardener version of versions.env) as a
# systemd unit, laid out as gardener-node-init leaves a Gardener node, and from the first
# OperatingSystemConfig it applies on, the agent owns containerd's config. Sourced by
# hack/control-plane.sh after hack/nodes/lib.sh; uses their `dir`, `die`, node helpers and tool
# paths.
#
# How the test world stands in for Gardener:
#   identity   the agent's client certificate, CN `gardener.cloud:node-agent:machine:<node>`,
#              O `gardener.cloud:node-agents`, signed by the control plane's CA, in
#              /var/lib/gardener-node-agent/credentials/kubeconfig (what the agent's bootstrap
#              leaves there after its CSR). The machine name is the node name, as on nodes
#              without machine-controller-manager.
#   permission gardener-resource-manager's node-agent-authorizer webhook, the one Gardener's
#              shoot API servers consult: the shoot API server authorizes with Node, RBAC,
#              then that webhook for the node-agents group only (failure policy Deny), so an
#              agent may read exactly its pool's OSC Secret, its own Node, Lease and pods.
#   OSC        the Secret `NODE_AGENT_SECRET` in the shoot's kube-system, which the tests write
#              the way gardenlet does (test/support/osc.rs); the kubelets register with the
#              pool's `worker.gardener.cloud/gardener-node-agent-secret-name` label, which the
#              authorizer and the agent read.
#   CNI        the agent sets containerd's CNI directory to /opt/cni/bin, where Gardener nodes
#              keep the plugins: it links to Debian's /usr/lib/cni.
#   kubelet    the agent probes the kubelet at 127.0.0.1:10248 and restarts a kubelet that
#              fails that for a minute. The nodes share one network namespace, so only one
#              kubelet can serve that address: the first node's. Every agent's probe reaches it.

GARDENER_NODE_AGENT="$GARDENER_DIR/gardener-node-agent"
NODE_AGENT_DIR=/var/lib/gardener-node-agent
NODE_AGENT_USER_PREFIX="gardener.cloud:node-agent:machine:"
NODE_AGENT_GROUP="gardener.cloud:node-agents"
# The agent's own probes and metrics, on each node's address (the default binds every address,
# and the nodes share one network namespace).
NODE_AGENT_HEALTH_PORT=2751
NODE_AGENT_METRICS_PORT=2752

node_agent_require_tools() {
  [[ -x "$GARDENER_NODE_AGENT" ]] || die "$GARDENER_NODE_AGENT is missing: build it with 'make tools' (hack/tools/build.sh gardener)"
}

# The OSC Secret's name, shaped like gardenlet's key (`gardener-node-agent-<pool>-<16 hex>`);
# gardenlet hashes the pool's settings, this world has only the pool and the Kubernetes minor.
node_agent_secret_name() {
  local minor
  minor="$(sed -E 's/^v?([0-9]+\.[0-9]+).*/\1/' <<<"$KUBERNETES_VERSION")"
  echo "gardener-node-agent-$NODE_POOL-$(printf '%s' "$minor/$NODE_POOL" | sha256sum | cut -c1-16)"
}

# The label the kubelet registers with, in addition to the pool's.
node_agent_node_labels() {
  echo "worker.gardener.cloud/gardener-node-agent-secret-name=$(node_agent_secret_name)"
}

# Arguments of the shoot API server with the agent's authorizer in place of
# `--authorization-mode` (the structured configuration Gardener gives shoot API servers:
# Node, RBAC, then the node-agent-authorizer webhook served by gardener-resource-manager).
node_agent_apiserver_authorization_args() { # grm-webhook-port
  cat >"$dir/node-agent-authorizer.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: authorization-webhook
  cluster:
    server: https://127.0.0.1:$1/webhooks/auth/nodeagent
    certificate-authority: $dir/pki/ca.crt
users:
- name: authorization-webhook
  user: {}
contexts:
- name: authorization-webhook
  context:
    cluster: authorization-webhook
    user: authorization-webhook
current-context: authorization-webhook
KUBECONFIG
  cat >"$dir/authorization-config.yaml" <<CONFIG
apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Node
  name: node
- type: RBAC
  name: rbac
- type: Webhook
  name: node-agent-authorizer
  webhook:
    authorizedTTL: 1ns
    unauthorizedTTL: 1ns
    timeout: 10s
    failurePolicy: Deny
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: $dir/node-agent-authorizer.kubeconfig
    matchConditions:
    - expression: "'$NODE_AGENT_GROUP' in request.groups"
CONFIG
  echo --authorization-config="$dir/authorization-config.yaml"
}

# gardener-resource-manager's webhook block for the authorizer (no machine namespace: machine
# name = node name).
node_agent_grm_webhook() {
  cat <<YAML
  nodeAgentAuthorizer:
    enabled: true
    authorizeWithSelectors: true
YAML
}

node_agent_client_cert() { # name → DIR/pki/node-agent-<name>.{crt,key}
  local pki="$dir/pki" name="$1"
  openssl req -newkey rsa:2048 -nodes -subj "/O=$NODE_AGENT_GROUP/CN=$NODE_AGENT_USER_PREFIX$name" \
    -keyout "$pki/node-agent-$name.key" -out "$pki/node-agent-$name.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$pki/node-agent-client.ext"
  openssl x509 -req -in "$pki/node-agent-$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/node-agent-client.ext" -out "$pki/node-agent-$name.crt" 2>/dev/null
}

# The file name the agent reads its configuration from: `config-<its version>.yaml` in its
# directory, the version being the one its binary reports.
node_agent_config_file() {
  local version
  version="$("$GARDENER_NODE_AGENT" --version 2>/dev/null | awk '{print $NF}')"
  [[ -n "$version" ]] || die "$GARDENER_NODE_AGENT --version printed no version"
  echo "config-$version.yaml"
}

# prepare_node_agent <index> <rootfs> <flavour>: the agent's binary, configuration, credentials
# and unit on a prepared node.
prepare_node_agent() {
  local i="$1" root="$2" flavour="$3" name address
  name="$(node_name "$i")"
  address="$(node_address "$i")"
  node_agent_client_cert "$name"

  mkdir -p "$root/opt/bin" "$root$NODE_AGENT_DIR/credentials"
  install -m 0755 "$GARDENER_NODE_AGENT" "$root/opt/bin/gardener-node-agent"
  cp "$dir/pki/ca.crt" "$root$NODE_AGENT_DIR/cluster-ca.crt"
  echo "$name" >"$root$NODE_AGENT_DIR/machine-name"
  (
    umask 077
    cat >"$root$NODE_AGENT_DIR/credentials/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    server: https://$NODE_API_ADDRESS:$SHOOT_PORT
    certificate-authority-data: $(base64 -w0 <"$dir/pki/ca.crt")
users:
- name: default
  user:
    client-certificate-data: $(base64 -w0 <"$dir/pki/node-agent-$name.crt")
    client-key-data: $(base64 -w0 <"$dir/pki/node-agent-$name.key")
contexts:
- name: default
  context:
    cluster: default
    user: default
current-context: default
KUBECONFIG
    cat >"$root$NODE_AGENT_DIR/$(node_agent_config_file)" <<CONFIG
apiVersion: nodeagent.config.gardener.cloud/v1alpha1
kind: NodeAgentConfiguration
apiServer:
  server: https://$NODE_API_ADDRESS:$SHOOT_PORT
  caFile: $NODE_AGENT_DIR/cluster-ca.crt
server:
  healthProbes:
    bindAddress: $address
    port: $NODE_AGENT_HEALTH_PORT
  metrics:
    bindAddress: $address
    port: $NODE_AGENT_METRICS_PORT
controllers:
  operatingSystemConfig:
    secretName: $(node_agent_secret_name)
    kubernetesVersion: ${KUBERNETES_VERSION#v}
    # Gardener's default is 10 minutes; the tests watch a periodic reconcile happen.
    syncPeriod: ${NODE_AGENT_SYNC_PERIOD:-30s}
  token:
    syncPeriod: 12h
CONFIG
  )

  # The unit gardener-node-init installs, without `LimitMEMLOCK=infinity`: raising the hard
  # limit needs CAP_SYS_RESOURCE, which these machines lack, and systemd would refuse to start
  # the unit.
  cat >"$root/etc/systemd/system/gardener-node-agent.service" <<UNIT
[Unit]
Description=Gardener Node Agent
After=network-online.target

[Service]
ExecStart=/opt/bin/gardener-node-agent --config-dir=$NODE_AGENT_DIR
Restart=always
RestartSec=5
StandardOutput=journal+console
StandardError=journal

[Install]
WantedBy=multi-user.target
UNIT
  ln -sf /etc/systemd/system/gardener-node-agent.service \
    "$root/etc/systemd/system/multi-user.target.wants/gardener-node-agent.service"

  mkdir -p "$root/opt/cni"
  ln -sfn /usr/lib/cni "$root/opt/cni/bin"

  # A config of containerd 1.x that Gardener's agent finds on its nodes is `containerd config
  # default`'s, which spells out the runc runtime. The agent adds runtimes tables without it,
  # and containerd drops its implicit runc once any runtimes table exists.
  case "$flavour" in
    containerd1 | containerd17)
      cat >>"$root/etc/containerd/config.toml" <<'TOML'
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
TOML
      ;;
  esac

  # The agent's kubelet probe address (see the top of this file).
  if ((i == 1)); then
    sed -i 's/^healthzBindAddress: .*/healthzBindAddress: 127.0.0.1/' "$root/etc/kubernetes/kubelet.yaml"
  fi
}

node_agent_running() { # name
  node_exec "$1" systemctl is-active --quiet gardener-node-agent.service
}

# The agent has reached the shoot API server and holds its Lease (it starts the Lease
# controller once its Node exists).
node_agent_lease() { # name
  "$KUBE_DIR/kubectl" --kubeconfig "$dir/shoot-admin.kubeconfig" -n kube-system \
    get lease "gardener-node-agent-$1" >/dev/null 2>&1
}

wait_node_agents() {
  local i name
  for ((i = 1; i <= NODE_COUNT; i++)); do
    name="$(node_name "$i")"
    wait_for "gardener-node-agent on $name" 60 node_agent_running "$name"
    wait_for "gardener-node-agent's Lease of $name" 180 node_agent_lease "$name"
    log "gardener-node-agent runs on $name"
  done
}

# The pool's first OperatingSystemConfig, before any test writes one: containerd with the
# nodes' sandbox image and nothing else, in the shoot Secret shaped as gardenlet writes it (data
# key `osc.yaml`, the checksum annotation over exactly those bytes, the role and pool labels).
# The agent applies it once (it restarts containerd for a first OSC) and from then on owns
# containerd's config; without a Secret it would not even notice its Node registering.
write_node_agent_baseline_osc() {
  local secret osc checksum sandbox
  secret="$(node_agent_secret_name)"
  sandbox="$(node_sandbox_image)"
  [[ -n "$sandbox" ]] || die "--node-agent needs --node-images: the OSC names the nodes' sandbox image from the registry"
  osc="$(cat <<YAML
apiVersion: extensions.gardener.cloud/v1alpha1
kind: OperatingSystemConfig
metadata:
  creationTimestamp: null
spec:
  criConfig:
    containerd:
      sandboxImage: $sandbox
    name: containerd
  purpose: ""
  type: ""
status: {}
YAML
)"
  checksum="$(printf '%s\n' "$osc" | sha256sum | cut -d' ' -f1)"
  cat >"$dir/node-agent-osc-secret.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $secret
  namespace: kube-system
  annotations:
    checksum/data-script: $checksum
  labels:
    gardener.cloud/role: operating-system-config
    worker.gardener.cloud/pool: $NODE_POOL
data:
  osc.yaml: $(printf '%s\n' "$osc" | base64 -w0)
YAML
  "$KUBE_DIR/kubectl" --kubeconfig "$dir/shoot-admin.kubeconfig" create -f "$dir/node-agent-osc-secret.yaml" >/dev/null \
    || die "creating the OSC Secret $secret in the shoot failed"
}

# The OSC checksum a node's agent last applied (its Node annotation).
node_agent_applied() { # name checksum
  "$KUBE_DIR/kubectl" --kubeconfig "$dir/shoot-admin.kubeconfig" get node "$1" \
    -o jsonpath='{.metadata.annotations.checksum/cloud-config-data}' 2>/dev/null | grep -qx "$2"
}

start_node_agents() {
  local i name checksum
  write_node_agent_baseline_osc
  checksum="$(awk '/checksum\/data-script:/ {print $2}' "$dir/node-agent-osc-secret.yaml")"
  wait_node_agents
  for ((i = 1; i <= NODE_COUNT; i++)); do
    name="$(node_name "$i")"
    wait_for "gardener-node-agent to apply the first OSC on $name" 180 node_agent_applied "$name" "$checksum"
    wait_for "node $name to be Ready after the agent restarted containerd" 120 node_ready "$name"
  done
  log "gardener-node-agent applied the pool's first OperatingSystemConfig on every node"
}
