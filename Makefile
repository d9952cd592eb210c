# The two commands a new machine needs are `make local` and `make test` (see README.md).
SHELL := /usr/bin/env bash

.PHONY: local test tools tools-modules control-plane check generate bench fuzz images release chart clean

## local: the playground: control plane, two real nodes, the controller installing crun on them and a pod under it (Ctrl-C stops all).
local: tools
	@echo "make local: the first run builds the control-plane components, containerd, the nodes' root file system and the images (tens of minutes on two cores, cached afterwards); later runs have a pod running in under two minutes."
	cargo build --locked --bin gardener-extension-containerd-shim
	hack/nodes/images.sh --without-wasm --without-previous-release "$(CURDIR)/.local/playground-images"
	@# The playground is make's own child (exec) in make's process group: Ctrl-C reaches it and
	@# everything it runs, and it stops everything it started before make returns. If make
	@# itself dies first (of SIGPIPE, when its output went through a pipe whose reader is gone),
	@# the parent-death signal stops the playground too: nothing outlives the recipe.
	exec setpriv --pdeathsig TERM hack/control-plane.sh run --dir "$(CURDIR)/.local/playground" \
	  --nodes containerd1,containerd2 --node-images "$(CURDIR)/.local/playground-images" -- hack/local.sh

## test: build what is missing and run every check and test (what CI runs).
test:
	hack/test.sh

## tools: build the control-plane components, containerd and helm from Go modules (cached).
tools:
	hack/tools/build.sh

## tools-modules: regenerate hack/tools/*/go.mod and go.sum after changing hack/tools/versions.env.
tools-modules:
	hack/tools/update-modules.sh

## control-plane: start the embedded control plane for running tests by hand (Ctrl-C stops it).
control-plane: tools
	hack/control-plane.sh up

## check: formatting and lints only.
check:
	cargo fmt --all -- --check
	cargo clippy --all-targets --locked -- -D warnings

## bench: the fleet benchmark on a fresh control plane, the node-installer benchmark and the installer on real nodes (figures; not CI).
bench: tools
	hack/bench.sh

## fuzz: every cargo-fuzz target for FUZZ_SECONDS each (default 60; not CI).
fuzz:
	hack/fuzz.sh

## generate: rewrite every generated file (golden files, schema, registration) from the code.
generate:
	UPDATE_GOLDEN=1 cargo test --locked --lib
	hack/generate-controller-registration.sh example/controller-registration.yaml

## images: build every published image as OCI layouts into .local/release, without pushing (hack/release.sh --no-push).
images: tools
	hack/release.sh --no-push "$${REGISTRY:-europe-docker.pkg.dev/gardener-project/public}"

## release: build every image, the chart and the registration and push them to REGISTRY (hack/release.sh).
release: tools
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=<registry>[/<path>]" >&2; exit 2; }
	hack/release.sh "$(REGISTRY)"

## chart: lint and package the seed chart into .local/chart (hack/package-chart.sh).
chart: tools
	hack/package-chart.sh

clean:
	cargo clean
	rm -rf .local

help:
	@grep -E '^## ' Makefile | sed 's/^## //'
