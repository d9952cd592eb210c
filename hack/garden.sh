# The garden part of the embedded control plane (hack/control-plane.sh --garden): Gardener's
# own API server, gardener-apiserver, with an etcd of its own, behind the seed kube-apiserver's
# aggregation layer as Gardener runs it: APIServices for its group versions, pointing at a
# Service, and the kube-apiserver proxying each request with the caller's identity in
# front-proxy headers signed by a client certificate the aggregated server trusts. Shoots,
# Projects, CloudProfiles and the rest of core.gardener.cloud are then served at the seed
# API server's address, and gardener-apiserver calls the admission webhooks registered there.
# Sourced by hack/control-plane.sh; uses its start, wait_for, free_port, log and die.

GARDENER_APISERVER="$GARDENER_DIR/gardener-apiserver"

# The group versions gardener-apiserver serves, each registered as an APIService.
GARDEN_API_VERSIONS="v1beta1.core.gardener.cloud v1.core.gardener.cloud v1alpha1.security.gardener.cloud v1alpha1.seedmanagement.gardener.cloud v1alpha1.operations.gardener.cloud"

garden_require_tools() {
  [[ -x "$GARDENER_APISERVER" ]] || die "$GARDENER_APISERVER is missing: build it with 'make tools' (hack/tools/build.sh)"
}

# Front-proxy CA and client certificate (the kube-apiserver's identity towards aggregated
# servers), gardener-apiserver's serving certificate for the name the aggregator verifies
# (<service>.<namespace>.svc), and the key it signs workload identity tokens with.
garden_certs() {
  local pki="$dir/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=front-proxy-ca" \
    -keyout "$pki/front-proxy-ca.key" -out "$pki/front-proxy-ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=front-proxy-client" \
    -keyout "$pki/front-proxy-client.key" -out "$pki/front-proxy-client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$pki/front-proxy-client.ext"
  openssl x509 -req -in "$pki/front-proxy-client.csr" -CA "$pki/front-proxy-ca.crt" \
    -CAkey "$pki/front-proxy-ca.key" -CAcreateserial -days 2 -extfile "$pki/front-proxy-client.ext" \
    -out "$pki/front-proxy-client.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=gardener-apiserver" \
    -keyout "$pki/gardener-apiserver.key" -out "$pki/gardener-apiserver.csr" 2>/dev/null
  printf 'subjectAltName=DNS:gardener-apiserver.kube-system.svc,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
    >"$pki/gardener-apiserver.ext"
  openssl x509 -req -in "$pki/gardener-apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$pki/gardener-apiserver.ext" -out "$pki/gardener-apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/workload-identity.key" 2048 2>/dev/null
}

# The seed kube-apiserver's aggregation layer flags.
garden_seed_apiserver_args() {
  local pki="$dir/pki"
  echo --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key"
}

garden_post() { # path yaml-file: create, 409 (exists) is fine
  local code
  code="$(curl -sS -o "$dir/logs/garden-post.out" -w '%{http_code}' --cacert "$dir/pki/ca.crt" \
    -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/yaml' \
    -X POST --data-binary "@$2" "https://127.0.0.1:$SEED_PORT$1")"
  [[ "$code" == 201 || "$code" == 409 ]] || die "POST $1 failed with HTTP $code: $(cat "$dir/logs/garden-post.out")"
}

garden_api_available() { # APIService name
  kubectl_get "$SEED_PORT" "$ADMIN_TOKEN" "/apis/apiregistration.k8s.io/v1/apiservices/$1" \
    | python3 -c 'import json,sys; a=json.load(sys.stdin); sys.exit(0 if any(c["type"]=="Available" and c["status"]=="True" for c in a.get("status",{}).get("conditions",[])) else 1)'
}

garden_up() {
  local etcd_port peer
  etcd_port="$(free_port)"
  peer="$(free_port)"
  GARDENER_APISERVER_PORT="$(free_port)"
  mkdir -p "$dir/garden-etcd"
  start garden-etcd "$ETCD" --name=garden --data-dir="$dir/garden-etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="garden=http://127.0.0.1:$peer" --unsafe-no-fsync --log-level=warn
  wait_for "garden etcd" 60 curl -fsS "http://127.0.0.1:$etcd_port/health"

  # The admin kubeconfig: for delegated authentication and authorization (TokenReviews,
  # SubjectAccessReviews) and the informers of the kube-apiserver's objects its admission
  # plugins and webhooks need.
  start gardener-apiserver "$GARDENER_APISERVER" \
    --bind-address=127.0.0.1 --secure-port="$GARDENER_APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --tls-cert-file="$dir/pki/gardener-apiserver.crt" --tls-private-key-file="$dir/pki/gardener-apiserver.key" \
    --kubeconfig="$dir/seed-admin.kubeconfig" \
    --authentication-kubeconfig="$dir/seed-admin.kubeconfig" \
    --authorization-kubeconfig="$dir/seed-admin.kubeconfig" \
    --authorization-always-allow-paths=/healthz,/readyz,/livez \
    --cluster-identity=garden-local \
    --workload-identity-token-issuer=https://garden.local \
    --workload-identity-signing-key-file="$dir/pki/workload-identity.key"
  wait_for "gardener-apiserver" 120 curl -fsS --cacert "$dir/pki/ca.crt" "https://127.0.0.1:$GARDENER_APISERVER_PORT/healthz"

  cat >"$dir/garden-service.yaml" <<YAML
apiVersion: v1
kind: Service
metadata:
  name: gardener-apiserver
  namespace: kube-system
spec:
  type: ExternalName
  externalName: localhost
YAML
  garden_post /api/v1/namespaces/kube-system/services "$dir/garden-service.yaml"
  local name version group ca
  ca="$(base64 -w0 <"$dir/pki/ca.crt")"
  for name in $GARDEN_API_VERSIONS; do
    version="${name%%.*}"
    group="${name#*.}"
    cat >"$dir/garden-apiservice.yaml" <<YAML
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: $name
spec:
  group: $group
  version: $version
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: $ca
  service:
    name: gardener-apiserver
    namespace: kube-system
    port: $GARDENER_APISERVER_PORT
YAML
    garden_post /apis/apiregistration.k8s.io/v1/apiservices "$dir/garden-apiservice.yaml"
  done
  for name in $GARDEN_API_VERSIONS; do
    wait_for "APIService $name" 120 garden_api_available "$name"
  done
  # Projects live in namespaces named by the Project; the namespace `garden` holds Gardener's own.
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: garden\n' >"$dir/garden-namespace.yaml"
  garden_post /api/v1/namespaces "$dir/garden-namespace.yaml"
  echo "GARDENER_APISERVER_PORT=$GARDENER_APISERVER_PORT" >"$dir/garden.env"
  echo "GARDEN_KUBECONFIG=$dir/seed-admin.kubeconfig" >>"$dir/garden.env"
  log "gardener-apiserver serves core.gardener.cloud behind the seed kube-apiserver"
}
