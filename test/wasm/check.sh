#!/usr/bin/env bash
# Runs the WebAssembly test images on the wasmtime shim, without Kubernetes, on both containerd
# lines the nodes run: Debian's containerd 1.x and the built containerd 2.x. For each, a
# throw-away containerd (its own root, state, sockets and config, beside whatever else runs on
# this machine) registers the shim as the CRI runtime handler `wasmtime` the way the installer
# does (runtime_type io.containerd.wasmtime.v1, runtime_path = the shim from the payload image),
# and crictl runs two pods on that handler, sandbox included:
#
#   hello  the container prints "hello from wasm on containerd-shim" and exits 0
#   http   the server answers curl with "hello from wasm http on containerd-shim" on the port
#          its WASI_TCP_LISTEN names, and stops with 143 on SIGTERM, well before the kill
#
#   test/wasm/check.sh [IMAGES_DIR]
#
# IMAGES_DIR holds what hack/nodes/wasm-images.sh writes (without it, they are built into a
# temporary directory). Needs root. Every process and directory it starts or makes is removed on
# exit, failure included. Pods use the host's network namespace, so no CNI is involved.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/hack/tools/versions.env"
source "$repo/hack/tools/lib.sh"

log() { printf '[wasm-check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

HELLO_LINE="hello from wasm on containerd-shim"
HTTP_BODY="hello from wasm http on containerd-shim"
HTTP_READY_LINE="http: serving on the pre-opened listener (descriptor 3)"
HANDLER=wasmtime
# A race in the container library under the shim, youki's libcontainer 0.6 (which runwasi's shim
# library 1.0 requires): the container's init process may report ready before the intermediate
# process has reported the init's PID, and the start fails with this message (youki has since
# given the two reports separate channels). It is rare and needs a loaded machine; a
# kubelet retries a failed start, so this check tries such a start again, twice at most, and
# says so. Any other failure fails the check.
START_RACE="received unexpected message: InitReady, expected: IntermediateReady"
CRICTL="$CRICTL_DIR/crictl"

# Clean-up, newest first, on every exit: each step registers its undo as soon as there is
# something to undo.
cleanups=()
on_exit() {
  local status=$? i
  trap - EXIT
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do
    eval "${cleanups[i]}" || true
  done
  ((status == 0)) || log "see the messages above; every containerd this run started has been stopped"
  exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ "$(id -u)" == 0 ]] || die "needs root (it runs containerd)"
command -v curl >/dev/null || die "curl is missing: run 'apt-get install curl'"
command -v python3 >/dev/null || die "python3 is missing: run 'apt-get install python3'"
[[ -x "$CRICTL" ]] || die "$CRICTL is missing: build it with 'hack/tools/build.sh crictl'"
containerd1="$CONTAINERD1_BIN"
ctr1="$(dirname "$CONTAINERD1_BIN")/ctr"
[[ -x "$containerd1" && -x "$ctr1" ]] \
  || die "$containerd1 or $ctr1 is missing: install Debian's containerd with 'hack/tools/build.sh containerd1'"
containerd2="$CONTAINERD_DIR/containerd"
ctr2="$CONTAINERD_DIR/ctr"
[[ -x "$containerd2" && -x "$ctr2" ]] || die "$containerd2 is missing: build it with 'hack/tools/build.sh containerd'"
[[ -x "$IMAGE_DEBS_DIR/root/bin/busybox" ]] \
  || die "$IMAGE_DEBS_DIR is missing (busybox for the pod sandbox image): build it with 'hack/tools/build.sh image-debs'"

work="$(mktemp -d "${TMPDIR:-/tmp}/wasm-check.XXXXXX")"
cleanups+=("rm -rf '$work'")

images="${1:-}"
if [[ -z "$images" ]]; then
  images="$work/images"
  "$repo/hack/nodes/wasm-images.sh" "$images"
fi
[[ -f "$images/wasm.env" ]] || die "$images/wasm.env is missing: build the images with 'hack/nodes/wasm-images.sh $images'"
# shellcheck disable=SC1091
source "$images/wasm.env"
for v in WASMTIME_PAYLOAD_IMAGE WASM_HELLO_IMAGE WASM_HTTP_IMAGE; do
  [[ -n "${!v:-}" ]] || die "$images/wasm.env sets no $v: rebuild it with 'hack/nodes/wasm-images.sh $images'"
done

# The shim exactly as the payload image carries it: the file the installer would stage.
python3 - "$images/payload-wasmtime.tar" "$work/containerd-shim-wasmtime-v1" <<'PY'
import io, json, sys, tarfile
with tarfile.open(sys.argv[1]) as image:
    manifest = json.load(image.extractfile("manifest.json"))
    for layer in manifest[0]["Layers"]:
        with tarfile.open(fileobj=io.BytesIO(image.extractfile(layer).read())) as files:
            try:
                member = files.getmember("payload/containerd-shim-wasmtime-v1")
            except KeyError:
                continue
            with open(sys.argv[2], "wb") as out:
                out.write(files.extractfile(member).read())
            sys.exit(0)
sys.exit("the payload image has no /payload/containerd-shim-wasmtime-v1")
PY
chmod 0755 "$work/containerd-shim-wasmtime-v1"
shim="$work/containerd-shim-wasmtime-v1"
# containerd 1.6 (Debian's 1.6.20, observed) takes runtime_path into its CRI config and then
# ignores it: it starts the shim found by name, containerd-shim-wasmtime-v1, on its PATH. So the
# 1.x containerd also gets the shim on its PATH; the 2.x one gets it only through runtime_path,
# which its run therefore proves.
mkdir -p "$work/bin"
ln -s "$shim" "$work/bin/containerd-shim-wasmtime-v1"
"$shim" -v >/dev/null || die "$shim -v failed"

# The pod sandbox: busybox waiting for a signal (hack/nodes/images.sh makes the nodes' one the
# same way). The wasmtime handler runs it too: runwasi's shim runs a Linux program as one.
pause_ref="$("$repo/hack/nodes/image-archive.py" --tag local.test/pause --out "$work/pause.tar" \
  --file "$IMAGE_DEBS_DIR/root/bin/busybox=/bin/busybox:0755" --symlink /bin/sh=busybox --symlink /bin/sleep=busybox \
  --entrypoint '["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]')"

# free_port: a TCP port nothing listens on now (the kernel's choice, released at once).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# write_config <kind> <dir>: the containerd config, in the schema of its line. Everything a
# containerd writes goes under <dir>; the plugins that would reach shared places (NRI's socket,
# the opt directory) are kept off or pointed there too.
write_config() {
  local kind="$1" dir="$2"
  if [[ "$kind" == 1 ]]; then
    cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_ref"
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".cni]
  conf_dir = "$dir/cni"
# containerd 1.x drops its implicit runc once any runtime is configured: name it.
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$HANDLER]
  runtime_type = "io.containerd.wasmtime.v1"
  runtime_path = "$shim"
# No options table: containerd 1.6 (Debian's 1.6.20, observed) hands a runwasi shim its options
# with an empty body, which the shim library rejects ("missing field systemd_cgroup"), so every
# pod on the handler fails. Without the table the shim gets no options and uses cgroupfs.
TOML
  else
    cat >"$dir/config.toml" <<TOML
version = 3
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$pause_ref"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".cni]
  conf_dir = "$dir/cni"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.$HANDLER]
  runtime_type = "io.containerd.wasmtime.v1"
  runtime_path = "$shim"
# The shim's runtime options, as the installer writes them (runwasi reads SystemdCgroup from
# them); this machine has no systemd, so cgroupfs.
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.$HANDLER.options]
  SystemdCgroup = false
TOML
  fi
}

# our_shims <dir>: the PIDs of the shims the containerd in <dir> started: an argument of theirs
# is its socket. (The pattern is a regular expression, so that it does not match grep's own
# argument.)
our_shims() {
  local socket="$1/containerd.sock"
  grep -lsxz -- "${socket//./\\.}" /proc/[0-9]*/cmdline | cut -d/ -f3
}

# stop_containerd <dir> <pid>: ends what the containerd in <dir> runs, then containerd itself.
# Pods first, then containerd (SIGTERM, SIGKILL after a deadline). Its shims exit by themselves
# once their pods are gone and remove their sockets; any still there after a deadline are killed,
# with whatever still runs in the pods' cgroups (cgroupfs, under a parent named after <dir>).
# Then the mounts under <dir>, those cgroups, the shim sockets and the shim's container state
# (youki's root) that the pods' IDs name.
stop_containerd() {
  local dir="$1" pid="$2" base p deadline
  base="$(basename "$dir")"
  if kill -0 "$pid" 2>/dev/null; then
    "$CRICTL" --config "$dir/crictl.yaml" rmp --force --all >/dev/null 2>&1 || true
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 10))
  while [[ -n "$(our_shims "$dir")" ]] && ((SECONDS < deadline)); do sleep 0.2; done
  for p in $(our_shims "$dir") $(cat /sys/fs/cgroup/*/"$base"/cgroup.procs /sys/fs/cgroup/*/"$base"/*/cgroup.procs 2>/dev/null); do
    kill -KILL "$p" 2>/dev/null
  done
  grep -o " $dir/[^ ]*" /proc/mounts | sort -r | while read -r p; do umount -l "$p" || true; done
  # A killed process leaves its cgroup only once it is gone.
  deadline=$((SECONDS + 10))
  for p in /sys/fs/cgroup/*/"$base"; do
    while [[ -d "$p" ]] && ! find "$p" -depth -type d -exec rmdir {} + 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.2
    done
  done
  while read -r p; do
    [[ "$p" =~ ^[0-9a-f]+$ ]] || continue
    rm -rf "${youki_root:?}/k8s.io/$p"
    rm -f "/run/containerd/s/$(printf '%s' "$dir/containerd.sock/k8s.io/$p" | sha256sum | cut -d' ' -f1)"
  done < <(cat "$dir/ids" 2>/dev/null)
  return 0
}

# Two places outside the temporary directories are fixed, whatever the config says: the shims'
# sockets in /run/containerd/s (the shim library puts them there) and its container state in
# /run/containerd/wasmtime/<namespace> (a node's shim uses the same). What of them this run
# creates is removed at the end, once empty (parents first here, so last there).
youki_root="/run/containerd/$HANDLER"
for p in /run/containerd /run/containerd/s "$youki_root" "$youki_root/k8s.io"; do
  [[ -e "$p" ]] || cleanups+=("rmdir '$p' 2>/dev/null")
done

# check_on <name> <kind> <containerd> <ctr>: the two pods on a throw-away containerd.
check_on() {
  local name="$1" kind="$2" containerd="$3" ctr="$4"
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/wasm-check-$name.XXXXXX")"
  cleanups+=("rm -rf '$dir'")
  mkdir -p "$dir/cni" "$dir/logs"
  write_config "$kind" "$dir"
  cat >"$dir/crictl.yaml" <<YAML
runtime-endpoint: unix://$dir/containerd.sock
image-endpoint: unix://$dir/containerd.sock
timeout: 30
YAML

  # cri <args...>: crictl on this containerd; its warnings (cgroup v1 deprecation, ...) go to a
  # log that a failure shows.
  cri() { "$CRICTL" --config "$dir/crictl.yaml" "$@" 2>>"$dir/client.log"; }
  # fail <message>: dies with the end of containerd's and the clients' logs.
  fail() {
    log "$name: the end of $dir/containerd.log:"
    tail -n 25 "$dir/containerd.log" >&2 || true
    log "$name: the end of $dir/client.log:"
    tail -n 10 "$dir/client.log" >&2 || true
    die "$name: $*"
  }
  # cri_last <args...>: cri, with its errors also in $dir/last.err for start_race_or_fail.
  cri_last() {
    local status=0
    "$CRICTL" --config "$dir/crictl.yaml" "$@" 2>"$dir/last.err" || status=$?
    cat "$dir/last.err" >>"$dir/client.log"
    return "$status"
  }
  # start_race_or_fail <attempt> <message>: returns when the failed start (its error in
  # $dir/last.err) was START_RACE and attempts remain, so the caller tries again as kubelet
  # would; fails otherwise.
  start_race_or_fail() {
    if (($1 < 3)) && grep -qF "$START_RACE" "$dir/last.err"; then
      log "$name: a start hit the race of youki's libcontainer 0.6 (attempt $1 of 3); trying again"
      return 0
    fi
    fail "$2: $(tail -n 1 "$dir/last.err")"
  }
  container_state() { cri inspect -o go-template --template '{{.status.state}} {{.status.exitCode}}' "$1"; }

  log "$name: starting containerd $("$containerd" --version | cut -d' ' -f3) in $dir"
  local path="$PATH"
  if [[ "$kind" == 1 ]]; then
    path="$work/bin:$PATH"
  elif PATH="$path" command -v containerd-shim-wasmtime-v1 >/dev/null; then
    fail "a containerd-shim-wasmtime-v1 on PATH ($(PATH="$path" command -v containerd-shim-wasmtime-v1)) would hide whether runtime_path works"
  fi
  PATH="$path" "$containerd" --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
  local pid=$!
  cleanups+=("stop_containerd '$dir' $pid")
  local deadline=$((SECONDS + 30))
  until cri info >/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "containerd exited"
    ((SECONDS < deadline)) || fail "the CRI did not answer within 30 s"
    sleep 0.2
  done
  # The handler as the CRI plugin took it from the config: our shim at runtime_path.
  cri info | grep -q "\"runtimePath\": \"$shim\"" \
    || fail "the CRI runtime config has no handler $HANDLER with runtime_path $shim"

  local tar
  for tar in "$work/pause.tar" "$images/wasm-hello.tar" "$images/wasm-http.tar"; do
    "$ctr" -a "$dir/containerd.sock" -n k8s.io images import "$tar" >/dev/null 2>>"$dir/client.log" \
      || fail "importing $tar failed"
  done

  # run_pod <pod> <image> [KEY=VALUE...]: a pod on the handler, in this machine's network
  # namespace, with one container of <image> and these environment variables; prints the
  # container's ID.
  run_pod() {
    local pod="$1" image="$2" envs
    shift 2
    envs="$(python3 -c 'import json, sys; print(json.dumps([dict(zip(("key", "value"), a.split("=", 1))) for a in sys.argv[1:]]))' "$@")"
    cat >"$dir/$pod-pod.json" <<JSON
{"metadata": {"name": "$pod", "namespace": "default", "uid": "$pod-$(basename "$dir")"},
 "log_directory": "$dir/logs/$pod",
 "linux": {"cgroup_parent": "/$(basename "$dir")",
           "security_context": {"namespace_options": {"network": 2}}}}
JSON
    cat >"$dir/$pod-container.json" <<JSON
{"metadata": {"name": "$pod"}, "image": {"image": "$image"}, "log_path": "$pod.log", "envs": $envs}
JSON
    local n sandbox container
    for n in 1 2 3; do
      sandbox="$(cri_last runp --runtime "$HANDLER" "$dir/$pod-pod.json")" && break
      start_race_or_fail "$n" "the $pod pod's sandbox did not start on handler $HANDLER"
    done
    echo "$sandbox" >>"$dir/ids"
    for n in 1 2 3; do
      container="$(cri create "$sandbox" "$dir/$pod-container.json" "$dir/$pod-pod.json")" \
        || fail "creating the $pod container failed"
      echo "$container" >>"$dir/ids"
      cri_last start "$container" >/dev/null && break
      start_race_or_fail "$n" "starting the $pod container failed"
      cri rm "$container" >/dev/null || fail "removing the $pod container that did not start failed"
    done
    echo "$container"
  }

  # hello: runs to completion with the line on stdout.
  local hello state out
  hello="$(run_pod hello "$WASM_HELLO_IMAGE")"
  deadline=$((SECONDS + 60))
  until state="$(container_state "$hello")" && [[ "$state" == CONTAINER_EXITED* ]]; do
    ((SECONDS < deadline)) || fail "hello is still '$state' after 60 s"
    sleep 0.2
  done
  out="$(cri logs "$hello" 2>&1)"
  [[ "$state" == "CONTAINER_EXITED 0" && "$out" == "$HELLO_LINE" ]] \
    || fail "hello ended as '$state' with output '$out'; expected exit code 0 and '$HELLO_LINE'"
  log "$name: hello printed '$out' and exited 0"

  # http: serves on the port its WASI_TCP_LISTEN names (a free one here, instead of the image's
  # 8080: the pod shares this machine's network), until SIGTERM.
  local port http body
  port="$(free_port)"
  http="$(run_pod http "$WASM_HTTP_IMAGE" "WASI_TCP_LISTEN=127.0.0.1:$port")"
  deadline=$((SECONDS + 60))
  until body="$(curl -fsS --max-time 5 "http://127.0.0.1:$port/any/path" 2>/dev/null)"; do
    state="$(container_state "$http")"
    [[ "$state" == CONTAINER_RUNNING* ]] \
      || fail "http is '$state' before it answered; its output: $(cri logs "$http" 2>&1)"
    ((SECONDS < deadline)) || fail "http did not answer on port $port within 60 s"
    sleep 0.2
  done
  [[ "$body" == "$HTTP_BODY" ]] || fail "http answered '$body'; expected '$HTTP_BODY'"
  body="$(curl -fsS --max-time 5 --data 'x=1' "http://127.0.0.1:$port/")" \
    || fail "http did not answer a second request (a POST)"
  [[ "$body" == "$HTTP_BODY" ]] || fail "http answered '$body' to a POST; expected '$HTTP_BODY'"
  out="$(cri logs "$http" 2>&1)"
  [[ "$out" == "$HTTP_READY_LINE" ]] || fail "http logged '$out'; expected '$HTTP_READY_LINE'"
  log "$name: http answered '$body' on port $port"

  # SIGTERM ends it at once with 128 + 15, long before crictl's kill after 30 s would (137).
  cri stop --timeout 30 "$http" >/dev/null || fail "stopping http failed"
  state="$(container_state "$http")"
  [[ "$state" == "CONTAINER_EXITED 143" ]] || fail "http stopped as '$state'; expected exit code 143 (SIGTERM)"
  log "$name: http stopped on SIGTERM with exit code 143"

  cri rmp --force --all >/dev/null || fail "removing the pods failed"
}

check_on containerd1 1 "$containerd1" "$ctr1"
check_on containerd2 2 "$containerd2" "$ctr2"
log "passed: the wasmtime shim ran hello and http on containerd $("$containerd1" --version | cut -d' ' -f3) and $("$containerd2" --version | cut -d' ' -f3)"
