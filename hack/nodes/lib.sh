# Real nodes for the embedded shoot: systemd-nspawn machines booted from a Debian root file
# system, each with systemd, containerd, runc, the CNI plugins, crictl and a kubelet joined to the
# shoot API server. Sourced by hack/control-plane.sh (`--nodes`); uses its `dir`, `log`, `die`,
# `start`, `wait_for` and the tool paths of hack/tools/lib.sh.
#
# The machines share this machine's network namespace (that is what lets them reach the API
# servers); each has its own mount, PID, IPC and UTS namespace, its own systemd, containerd and
# kubelet, and its own cgroup root. So that pods, which get network namespaces of their own, can
# reach the shoot API server and the kubelets, the node network lives on addresses added to `lo`
# (never on an interface that leaves the machine):
#
#   NODE_NET_PREFIX.1          the shoot kube-apiserver (also its `kubernetes` Service endpoint)
#   NODE_NET_PREFIX.2          the OCI registry every node pulls its images from (NODE_REGISTRY)
#   NODE_NET_PREFIX.(10+i)     node i's kubelet (its InternalIP)
#   POD_NET_PREFIX.i.0/24      node i's pods, on the bridge cbr-i
#
# One kube-proxy (nftables mode) on this machine routes Service IPs for every node: the nodes
# share one network namespace, so one proxy programs it for all of them, as kube-proxy would on
# each node of a real cluster. Only one control plane with nodes can run on a machine at a time
# (the addresses and the proxy's tables are machine-wide); a lock file enforces it.

NODE_NET_PREFIX="10.255.255"
NODE_API_ADDRESS="$NODE_NET_PREFIX.1"
POD_NET_PREFIX="10.244"
CLUSTER_CIDR="$POD_NET_PREFIX.0.0/16"
SERVICE_CIDR="10.0.0.0/24"
NODES_LOCK="/run/containerd-shim-nodes.lock"
# The registry of the nodes' world, at a fixed address: the images hack/nodes/images.sh builds
# name it in their references before any control plane runs, and the lock above gives the
# address to one control plane at a time.
NODE_REGISTRY_ADDRESS="$NODE_NET_PREFIX.2"
NODE_REGISTRY="$NODE_REGISTRY_ADDRESS:5443"
# Where a node's containerd looks for per-registry hosts files (Gardener's path).
NODE_CERTS_D=/etc/containerd/certs.d

KUBELET="$KUBE_DIR/kubelet"
KUBE_SCHEDULER="$KUBE_DIR/kube-scheduler"
KUBE_PROXY="$KUBE_DIR/kube-proxy"
CRICTL="$CRICTL_DIR/crictl"

node_address() { echo "$NODE_NET_PREFIX.$((10 + $1))"; }
node_bridge() { echo "cbr-$1"; }

nodes_require_tools() {
  local b
  for b in "$KUBELET" "$KUBE_SCHEDULER" "$KUBE_PROXY" "$CRICTL" "$CONTAINERD_DIR/containerd" \
    "$CONTAINERD_DIR/containerd-shim-runc-v2" "$CONTAINERD_DIR/ctr"; do
    [[ -x "$b" ]] || die "$b is missing: build it with 'make tools' (hack/tools/build.sh)"
  done
  [[ -d "$ROOTFS_DIR" ]] || die "$ROOTFS_DIR is missing: build it with 'make tools' (hack/tools/build.sh rootfs)"
  local c
  for c in systemd-nspawn nsenter nft ip flock; do
    command -v "$c" >/dev/null || die "$c is required for real nodes: run 'make tools' (it installs systemd-container and nftables)"
  done
  [[ "$(id -u)" == 0 ]] || die "real nodes need root (systemd-nspawn, addresses on lo, nftables)"
  if [[ -n "$NODE_IMAGES" ]]; then
    [[ -f "$NODE_IMAGES/images.list" && -f "$NODE_IMAGES/images.env" ]] \
      || die "no images in $NODE_IMAGES: build them with hack/nodes/images.sh $NODE_IMAGES"
    [[ -x "$CRANE_DIR/crane" ]] || die "$CRANE_DIR/crane is missing: build it with 'make tools' (hack/tools/build.sh crane)"
  fi
}

# Holds the machine-wide lock for this process's lifetime (fd 9); fails fast when another
# control plane with nodes runs.
nodes_lock() {
  exec 9>"$NODES_LOCK"
  flock -n 9 || die "another control plane with real nodes is running on this machine ($(cat "$NODES_LOCK.owner" 2>/dev/null)); stop it first"
  echo "$dir (pid $$)" >"$NODES_LOCK.owner"
}

# The addresses, forwarding and bridge netfilter the node network needs.
nodes_network_up() {
  local i
  ip addr replace "$NODE_API_ADDRESS/32" dev lo
  ip addr replace "$NODE_REGISTRY_ADDRESS/32" dev lo
  for ((i = 1; i <= NODE_COUNT; i++)); do
    ip addr replace "$(node_address "$i")/32" dev lo
  done
  sysctl -qw net.ipv4.ip_forward=1
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] && sysctl -qw net.bridge.bridge-nf-call-iptables=1
  true
}

# Undoes nodes_network_up and what the nodes and the proxy left in this network namespace, and
# the nodes' cgroups (the machines create them in this machine's hierarchies).
nodes_cleanup() {
  local i
  for ((i = 1; i <= ${NODE_COUNT:-0}; i++)); do
    ip link del "$(node_bridge "$i")" 2>/dev/null || true
    ip addr del "$(node_address "$i")/32" dev lo 2>/dev/null || true
  done
  ip addr del "$NODE_API_ADDRESS/32" dev lo 2>/dev/null || true
  ip addr del "$NODE_REGISTRY_ADDRESS/32" dev lo 2>/dev/null || true
  nft delete table ip kube-proxy 2>/dev/null || true
  nft delete table ip6 kube-proxy 2>/dev/null || true
  rm -f "$NODES_LOCK.owner"
  for ((i = 1; i <= ${NODE_COUNT:-0}; i++)); do
    find /sys/fs/cgroup/*/"$(node_name "$i")" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# node_exec <name> <command...>: run a command inside a node (its mount, UTS, IPC, network
# and PID namespaces), as `machinectl shell` would.
node_exec() {
  local name="$1"
  shift
  local leader
  leader="$(cat "$dir/nodes/$name/leader")"
  nsenter -t "$leader" -m -u -i -n -p -- "$@"
}

# The static tokens the node components authenticate with (appended to tokens.csv before the
# shoot API server starts).
nodes_tokens() {
  local i
  for ((i = 1; i <= NODE_COUNT; i++)); do
    echo "$(random_token),system:node:$(node_name "$i"),node-$i-uid,system:nodes"
  done
  echo "$(random_token),system:kube-scheduler,kube-scheduler-uid"
  echo "$(random_token),system:kube-proxy,kube-proxy-uid"
}

token_of() { awk -F, -v u="$1" '$2==u{print $1}' "$dir/tokens.csv"; }

node_name() { echo "$NODE_NAME_PREFIX$1"; }

# The certificate kube-apiserver presents to kubelets (for logs, exec and port-forward):
# system:masters, signed by the control plane's CA, which the kubelets trust.
gen_kubelet_client_cert() {
  local pki="$dir/pki"
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
    -keyout "$pki/kubelet-client.key" -out "$pki/kubelet-client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$pki/kubelet-client.ext"
  openssl x509 -req -in "$pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/kubelet-client.ext" -out "$pki/kubelet-client.crt" 2>/dev/null
}

# Arguments the shoot kube-apiserver needs to serve real nodes.
shoot_apiserver_node_args() {
  echo --endpoint-reconciler-type=lease \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-preferred-address-types=InternalIP \
    --kubelet-client-certificate="$dir/pki/kubelet-client.crt" \
    --kubelet-client-key="$dir/pki/kubelet-client.key"
}

# Controllers the shoot kube-controller-manager runs besides the workload ones: ServiceAccounts
# and the root CA ConfigMap that pods' token volumes need, EndpointSlices for Services, and the
# node lifecycle (it lifts the `not-ready` taint a kubelet registers with, and taints and
# evicts as on a real cluster when a node stops reporting).
shoot_kcm_node_args() {
  echo --controllers=garbage-collector-controller,namespace-controller,daemonset-controller,deployment-controller,replicaset-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,endpointslice-controller,node-lifecycle-controller \
    --root-ca-file="$dir/pki/ca.crt"
}

write_component_kubeconfig() { # file user
  write_kubeconfig "$1" "$SHOOT_PORT" "$(token_of "$2")" "$2" "$NODE_API_ADDRESS"
}

start_node_services() {
  write_component_kubeconfig "$dir/kube-scheduler.kubeconfig" system:kube-scheduler
  write_component_kubeconfig "$dir/kube-proxy.kubeconfig" system:kube-proxy
  start kube-scheduler "$KUBE_SCHEDULER" --kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --leader-elect=false --secure-port=0
  cat >"$dir/kube-proxy.yaml" <<CONFIG
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $dir/kube-proxy.kubeconfig
mode: nftables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $(node_name 1)
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$(free_port)
metricsBindAddress: 127.0.0.1:$(free_port)
conntrack:
  maxPerCore: 0
CONFIG
  start kube-proxy "$KUBE_PROXY" --config="$dir/kube-proxy.yaml"
}

# The node's sandbox (pause) image: the one pushed to the registry when the control plane has
# images, else the containerd default (which these machines cannot pull).
node_sandbox_image() {
  if [[ -n "$NODE_IMAGES" ]]; then
    sed -n 's/^PAUSE_IMAGE=//p' "$NODE_IMAGES/images.env"
  fi
}

# The containerd configuration a node starts with: what the installer finds. Both carry
# `restrict_oom_score_adj`, which this machine needs (runc runs without CAP_SYS_RESOURCE and
# cannot lower oom_score_adj), and the registry set-up a Gardener node has: `config_path` for
# per-registry hosts files (node_registry_hosts) and the sandbox image from the registry.
# Nothing here is the installer's.
write_containerd1_config() { # rootfs
  # Debian's packaged file, as it is, plus those keys: no runtime is defined, so containerd
  # fills in its default `runc` (the case the installer must keep working).
  local sandbox
  sandbox="$(node_sandbox_image)"
  {
    cat <<TOML
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
TOML
    [[ -z "$sandbox" ]] || echo "    sandbox_image = \"$sandbox\""
    cat <<TOML
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$NODE_CERTS_D"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
TOML
  } >"$1/etc/containerd/config.toml"
}

write_containerd2_config() { # rootfs
  # Shaped like a Gardener node's: version 3, drop-ins imported from conf.d, runc explicit.
  local sandbox
  sandbox="$(node_sandbox_image)"
  mkdir -p "$1/etc/containerd/conf.d"
  {
    cat <<TOML
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins]
  [plugins."io.containerd.cri.v1.images"]
TOML
    if [[ -n "$sandbox" ]]; then
      cat <<TOML
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$sandbox"
TOML
    fi
    cat <<TOML
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "$NODE_CERTS_D"
  [plugins."io.containerd.cri.v1.runtime"]
    restrict_oom_score_adj = true
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
TOML
  } >"$1/etc/containerd/config.toml"
}

# node_registry_hosts <rootfs>: the hosts file through which containerd reaches the registry,
# as Gardener writes one per registry: HTTPS only, trusting the control plane's CA.
node_registry_hosts() {
  local d="$1$NODE_CERTS_D/$NODE_REGISTRY"
  mkdir -p "$d"
  cp "$dir/pki/ca.crt" "$d/ca.crt"
  cat >"$d/hosts.toml" <<TOML
server = "https://$NODE_REGISTRY"

[host."https://$NODE_REGISTRY"]
  capabilities = ["pull", "resolve"]
  ca = "$NODE_CERTS_D/$NODE_REGISTRY/ca.crt"
TOML
}

# replace_node_containerd <rootfs> <dir>: a built containerd (containerd, its runc shim, ctr from
# <dir>) in place of Debian's packaged one, started by the packaged unit.
replace_node_containerd() {
  local root="$1" from="$2"
  rm -f "$root/usr/bin/containerd" "$root/usr/bin/containerd-shim-runc-v2" "$root/usr/bin/ctr" \
    "$root/usr/bin/containerd-shim" "$root/usr/bin/containerd-shim-runc-v1" "$root/usr/bin/containerd-stress"
  install -m 0755 "$from/containerd" "$from/containerd-shim-runc-v2" "$from/ctr" "$root/usr/local/bin/"
  sed 's|^ExecStart=.*|ExecStart=/usr/local/bin/containerd|' \
    "$root/lib/systemd/system/containerd.service" >"$root/etc/systemd/system/containerd.service"
}

# prepare_node <index> <flavour>: the node's root file system, a copy of the shared one with its
# identity, containerd flavour, kubelet, CNI and the cgroup set-up.
prepare_node() {
  local i="$1" flavour="$2"
  local name root address bridge
  name="$(node_name "$i")"
  root="$dir/nodes/$name/rootfs"
  address="$(node_address "$i")"
  bridge="$(node_bridge "$i")"
  mkdir -p "$dir/nodes/$name"
  cp -a "$ROOTFS_DIR" "$root"
  echo "$name" >"$root/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name" >"$root/etc/hosts"
  echo "$flavour" >"$dir/nodes/$name/flavour"

  case "$flavour" in
    containerd1) write_containerd1_config "$root" ;;
    containerd2)
      # The built containerd 2.x replaces Debian's 1.x binaries on this node.
      replace_node_containerd "$root" "$CONTAINERD_DIR"
      write_containerd2_config "$root"
      ;;
    containerd17)
      # The built containerd 1.7 replaces Debian's 1.6 binaries; its config is 1.x's (version 2).
      replace_node_containerd "$root" "$CONTAINERD17_DIR"
      write_containerd1_config "$root"
      ;;
    *) die "unknown node flavour '$flavour' (known: containerd1 containerd17 containerd2)" ;;
  esac
  node_registry_hosts "$root"

  install -m 0755 "$KUBELET" "$CRICTL" "$root/usr/local/bin/"
  printf 'runtime-endpoint: unix:///run/containerd/containerd.sock\nimage-endpoint: unix:///run/containerd/containerd.sock\ntimeout: 10\n' \
    >"$root/etc/crictl.yaml"

  mkdir -p "$root/etc/cni/net.d"
  cat >"$root/etc/cni/net.d/10-bridge.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_NET_PREFIX.$i.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI

  mkdir -p "$root/etc/kubernetes/pki" "$root/usr/local/lib/node"
  cp "$dir/pki/ca.crt" "$root/etc/kubernetes/pki/ca.crt"
  write_kubeconfig "$root/etc/kubernetes/kubelet.kubeconfig" "$SHOOT_PORT" \
    "$(token_of "system:node:$name")" "system:node:$name" "$NODE_API_ADDRESS" /etc/kubernetes/pki/ca.crt
  cat >"$root/etc/kubernetes/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $address
port: 10250
readOnlyPort: 0
healthzBindAddress: $address
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
# The nodes share this machine's cgroup hierarchies: each kubelet gets a root of its own, or
# one would clean up the other's pod cgroups as orphans.
cgroupRoot: /$name
failCgroupV1: false
failSwapOn: false
enforceNodeAllocatable: []
evictionHard: {}
localStorageCapacityIsolation: false
protectKernelDefaults: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
serializeImagePulls: false
YAML
  # nspawn mounts the cgroup v1 controllers read-only, and runc and the kubelet create cgroups:
  # remount what is read-only, and create the kubelet's cgroup root in every controller (the
  # kubelet refuses a root that does not exist; a new cpuset needs its parent's CPUs and memory
  # nodes).
  cat >"$root/usr/local/lib/node/cgroups-writable.sh" <<SH
#!/bin/sh
set -e
mount -o remount,rw /sys/fs/cgroup
for d in /sys/fs/cgroup/*; do
  [ -L "\$d" ] && continue
  if mkdir "\$d/.probe" 2>/dev/null; then
    rmdir "\$d/.probe"
  else
    umount "\$d"
    mount -t cgroup -o "\${d##*/}" cgroup "\$d"
  fi
  mkdir -p "\$d/$name"
done
cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$name/cpuset.cpus
cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$name/cpuset.mems
SH
  chmod 0755 "$root/usr/local/lib/node/cgroups-writable.sh"
  cat >"$root/etc/systemd/system/node-cgroups.service" <<'UNIT'
[Unit]
Description=Make the cgroup controllers writable for runc and the kubelet
DefaultDependencies=no
Before=containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/lib/node/cgroups-writable.sh

[Install]
WantedBy=multi-user.target
UNIT
  cat >"$root/etc/systemd/system/kubelet.service" <<UNIT
[Unit]
Description=kubelet
After=containerd.service node-cgroups.service
Wants=containerd.service
Requires=node-cgroups.service

[Service]
ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml \\
  --kubeconfig=/etc/kubernetes/kubelet.kubeconfig --hostname-override=$name --node-ip=$address \\
  --node-labels=$NODE_LABELS
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
UNIT
  local wants="$root/etc/systemd/system/multi-user.target.wants"
  mkdir -p "$wants"
  ln -sf /etc/systemd/system/kubelet.service "$wants/kubelet.service"
  ln -sf /etc/systemd/system/node-cgroups.service "$wants/node-cgroups.service"
  # Nothing on a node needs these, and they slow the boot.
  ln -sf /dev/null "$root/etc/systemd/system/systemd-networkd-wait-online.service"
}

# start_node <index>: boot the machine and record the PID of its init (its "leader").
start_node() {
  local i="$1" name
  name="$(node_name "$i")"
  SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=0 \
    start "node-$name" systemd-nspawn -D "$dir/nodes/$name/rootfs" --boot \
    --register=no --keep-unit --capability=all \
    --system-call-filter='add_key keyctl bpf @mount @module @raw-io @swap @clock @cpu-emulation @obsolete' \
    --bind=/dev/kmsg --console=pipe -M "$name"
  local pid leader="" deadline=$((SECONDS + 30))
  pid="$(pid_of "node-$name")"
  until [[ -n "$leader" ]]; do
    ((SECONDS < deadline)) || die "node $name did not start; see $dir/logs/node-$name.log"
    check_alive
    sleep 0.2
    leader="$(machine_init "$pid")"
  done
  echo "$leader" >"$dir/nodes/$name/leader"
}

# machine_init <nspawn pid>: the machine's init, the child of nspawn that runs in a PID
# namespace of its own (nspawn first forks a helper that stays in ours and exits soon).
machine_init() {
  local child own
  own="$(readlink /proc/self/ns/pid)"
  for child in $(pgrep -P "$1" 2>/dev/null); do
    if [[ "$(readlink "/proc/$child/ns/pid" 2>/dev/null)" != "$own" ]]; then
      echo "$child"
      return 0
    fi
  done
}

node_booted() { # name
  local state
  state="$(node_exec "$1" systemctl is-system-running 2>/dev/null)"
  [[ "$state" == running || "$state" == degraded ]]
}

containerd_serving() { node_exec "$1" ctr version; }

node_ready() { # name
  "$KUBE_DIR/kubectl" --kubeconfig "$dir/shoot-admin.kubeconfig" get node "$1" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

# start_nodes: prepare and boot every node and wait until each is Ready (the kubelets pull the
# pause image from the registry for their first pods).
start_nodes() {
  local i name
  local flavours=(${NODE_FLAVOURS//,/ })
  for ((i = 1; i <= NODE_COUNT; i++)); do
    prepare_node "$i" "${flavours[$((i - 1))]}"
    [[ -z "$NODE_AGENT" ]] || prepare_node_agent "$i" "$dir/nodes/$(node_name "$i")/rootfs" "${flavours[$((i - 1))]}"
    start_node "$i"
  done
  for ((i = 1; i <= NODE_COUNT; i++)); do
    name="$(node_name "$i")"
    wait_for "node $name to boot" 120 node_booted "$name"
    wait_for "containerd on $name" 60 containerd_serving "$name"
  done
  for ((i = 1; i <= NODE_COUNT; i++)); do
    name="$(node_name "$i")"
    wait_for "node $name to be Ready" 180 node_ready "$name"
    log "node $name is Ready ($(cat "$dir/nodes/$name/flavour"), InternalIP $(node_address "$i"))"
  done
}

# Stopping a node: the machine is thrown away, so nothing needs a graceful halt (systemd would
# wait up to 90 s for pod processes that ignore SIGTERM). Killing its init ends the machine's PID
# namespace, and with it every process of the node and of its pods; their mounts and network
# namespaces go with the machine's mount namespace.
stop_node() { # name pid
  local name="$1" pid="$2" leader i
  leader="$(machine_init "$pid")"
  if [[ -n "$leader" ]]; then
    kill -KILL "$leader" 2>/dev/null || true
  fi
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$name (pid $pid) did not exit within 10 s of its init being killed; killing it"
  kill -KILL "$pid" 2>/dev/null || true
}
