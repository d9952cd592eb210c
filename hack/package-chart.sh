#!/usr/bin/env bash
# Packages the seed chart for release, and pushes it when asked:
#
#   hack/package-chart.sh [--push] [--dir DIR]
#
# The chart's version is Cargo.toml's version and its appVersion v<version> (the controller
# image tag), exactly what Chart.yaml says (a test keeps them in step). images.yaml in the
# chart is a link to charts/images.yaml, the one image vector; `helm package` stores its
# content, so the packaged chart finds the controller image without the repository.
# --push uploads the package to oci://$CHART_REPOSITORY, the repository the generated
# ControllerDeployment (example/controller-registration.yaml) refers to, and prints helm's
# report (`Pushed: …`, `Digest: sha256:…`); CHART_CA_FILE names a CA bundle the registry's
# certificate is checked against (helm push --ca-file).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
set -a
source <("$repo/hack/tools/env.sh")
set +a

out="$repo/.local/chart"
push=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --push) push=1; shift ;;
    --dir) out="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ -x "$HELM_BIN" ]] || { echo "$HELM_BIN is missing: build it with 'make tools'" >&2; exit 1; }
chart_repository="${CHART_REPOSITORY:-europe-docker.pkg.dev/gardener-project/public/charts/gardener/extensions}"

chart="$repo/charts/gardener-extension-containerd-shim"
mkdir -p "$out"
"$HELM_BIN" lint --strict "$chart"
package="$("$HELM_BIN" package "$chart" --destination "$out" | sed -n 's/^Successfully packaged chart and saved it to: //p')"
[[ -f "$package" ]] || { echo "helm package did not report a package" >&2; exit 1; }
echo "$package"
if ((push)); then
  ca_args=()
  [[ -z "${CHART_CA_FILE:-}" ]] || ca_args=(--ca-file "$CHART_CA_FILE")
  "$HELM_BIN" push "$package" "oci://$chart_repository" "${ca_args[@]}" 2>&1
fi
