# Image URL to use for building and pushing the manager image.
IMG ?= ghcr.io/kaddons/kaddons:latest
# GO_BUILD_TAGS leave out KDP's kubectl-based appliers, which kaddons never uses: a smaller
# binary and less memory.
GO_BUILD_TAGS ?= without_exec_applier,without_direct_applier

# Get the currently used golang install path (in GOPATH/bin, unless GOBIN is set).
ifeq (,$(shell go env GOBIN))
GOBIN=$(shell go env GOPATH)/bin
else
GOBIN=$(shell go env GOBIN)
endif

# CONTAINER_TOOL defines the container tool to be used for building images.
CONTAINER_TOOL ?= docker

# Setting SHELL to bash allows bash commands to be executed by recipes.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# The checksum database does not know KDP; go.sum pins it.
export GONOSUMDB = sigs.k8s.io/kubebuilder-declarative-pattern
# The Go toolchain is pinned for every recipe, as in go.mod: with an older go installed, the
# go command fetches go1.27.3 from the module proxy.
export GOTOOLCHAIN = go1.27.3

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and the ClusterRole from the API types and RBAC markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:maxDescLen=512 paths="./api/..." paths="./controllers/..." paths="./internal/engine/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

## NAME is the kind `make addon` scaffolds (ExternalDNS); ADDON_COMPONENT its package name.
ADDON_COMPONENT = $(shell printf '%s' '$(NAME)' | tr '[:upper:]' '[:lower:]')

.PHONY: addon
addon: ## Scaffold add-on kind NAME (make addon NAME=ExternalDNS): every file and list entry (docs/adding-an-addon.md), then regenerate.
	@[ -n "$(NAME)" ] || { echo "usage: make addon NAME=<Kind>, for example NAME=ExternalDNS" >&2; exit 2; }
	go run ./hack/addon -name '$(NAME)'
	$(MAKE) manifests generate build-installer helm kops-channel
	hack/toolchain.sh build etcd kube-apiserver
	KUBEBUILDER_ASSETS="$$(hack/toolchain.sh dir)" WRITE_GOLDEN_OUTPUT=1 \
		go test ./controllers -run '^TestAddonsGolden$$/^$(ADDON_COMPONENT)/' -count=1
	@echo "Scaffolded $(NAME). What is yours to fill in: docs/adding-an-addon.md."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code (the e2e suite included).
	go vet ./...
	go vet -tags e2e ./test/...
	go vet -tags e2e,faults ./test/e2e/...
	go vet -tags cosign ./internal/sources ./hack/release

.PHONY: verify
verify: manifests generate build-installer helm ## Fail when generated code, manifests, dist/ (installer, chart) are stale, or go.mod is untidy.
	go mod tidy
	cd test/chart && go mod tidy
	@if [ -n "$$(git status --porcelain -- api config dist go.mod go.sum test/chart/go.mod test/chart/go.sum)" ]; then \
		echo "Generated files are out of date; run 'make generate manifests build-installer helm' and 'go mod tidy', then commit:"; \
		git status --porcelain -- api config dist go.mod go.sum test/chart; git diff -- api config dist go.mod go.sum test/chart | head -50; exit 1; \
	fi
	@echo "Generated code and manifests are up to date."

.PHONY: toolchain
toolchain: ## Build the pinned Kubernetes binaries (kube-apiserver, etcd, kubectl, ...) from source into bin/k8s.
	hack/toolchain.sh build

.PHONY: kubeadm-manifests
kubeadm-manifests: ## Render kubeadm's CoreDNS objects into test/testdata/kubeadm (builds the pinned kubeadm, ~10 min the first time).
	hack/kubeadm-manifests.sh

.PHONY: verify-kubeadm-manifests
verify-kubeadm-manifests: ## Fail if test/testdata/kubeadm differs from what the pinned kubeadm renders.
	hack/kubeadm-manifests.sh --check

.PHONY: test
test: manifests generate fmt vet ## Run unit and envtest tests against a real kube-apiserver and etcd.
	hack/toolchain.sh build etcd kube-apiserver kubectl
	KUBEBUILDER_ASSETS="$$(hack/toolchain.sh dir)" go test ./... -count=1 -timeout 20m
	cd test/chart && go test ./... -count=1
	go test -run '^$$' -fuzz '^FuzzParseChannel$$' -fuzztime $(TEST_FUZZTIME) $(FUZZ_FLAGS) ./internal/channels
	go test -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(TEST_FUZZTIME) $(FUZZ_FLAGS) ./internal/channels
	go test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(TEST_FUZZTIME) $(FUZZ_FLAGS) ./internal/config
	go test -run '^$$' -fuzz '^FuzzApplyPatches$$' -fuzztime $(TEST_FUZZTIME) $(FUZZ_FLAGS) ./internal/engine/patches

## How long `make fuzz` runs each fuzz target, and how long `make test` does. FUZZ_FLAGS go
## to every fuzz run: a new input is minimized for 3s at most (the default, 1m, would take
## FuzzRender's whole run, a package build being slow).
FUZZTIME ?= 1m
TEST_FUZZTIME ?= 5s
FUZZ_FLAGS ?= -fuzzminimizetime 3s

.PHONY: fuzz
fuzz: ## Fuzz channel files, package builds, the configuration file and spec.patches, FUZZTIME (1m) each; crashers land in testdata/fuzz.
	go test -run '^$$' -fuzz '^FuzzParseChannel$$' -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) ./internal/channels
	go test -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) ./internal/channels
	go test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) ./internal/config
	go test -run '^$$' -fuzz '^FuzzApplyPatches$$' -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) ./internal/engine/patches

.PHONY: test-cosign
test-cosign: ## Sign bundles with the real cosign v3 CLI (built by hack/cosign.sh, cached) and verify them with the fetcher, and verify a release's signatures with it (tag cosign).
	cosign="$$(hack/cosign.sh)" && KADDONS_COSIGN="$$cosign" go test -tags cosign ./internal/sources ./hack/release -run '^TestCosign' -count=1 -v

.PHONY: test-chart-helm
test-chart-helm: ## Compare each object the chart renderer (internal/channels/helm) renders with what the Helm CLI's `helm template` prints (CLI built by hack/helm.sh, cached).
	helm="$$(hack/helm.sh)" && KADDONS_HELM="$$helm" go test -tags helmcli ./internal/channels/helm -run '^TestHelmTemplate$$' -count=1 -v

.PHONY: test-alerts
test-alerts: ## Check the alerting rules (config/prometheus/alerts.yaml) and run promtool's unit tests of them (alerts_test.yaml); promtool is built by hack/tools/promtool/promtool.sh, cached.
	hack/tools/promtool/promtool.sh test-rules config/prometheus/alerts.yaml config/prometheus/alerts_test.yaml

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and fix what it can.
	$(GOLANGCI_LINT) run --fix

.PHONY: vuln
vuln: govulncheck ## Fail on any vulnerability the code reaches (govulncheck, offline database from golang.org/x/vulndb).
	@[ -f "$(VULNDB_DIR)/index/db.json" ] || $(MAKE) --no-print-directory vulndb
	@echo "govulncheck $(GOVULNCHECK_VERSION) ($$(go env GOVERSION)), database golang.org/x/vulndb@$(VULNDB_VERSION)," \
		"last modified $$(sed -n 's/.*"modified":"\([^"]*\)".*/\1/p' "$(VULNDB_DIR)/index/db.json")"
	$(GOVULNCHECK) -db file://$(VULNDB_DIR) ./...

.PHONY: vulndb
vulndb: indexdb ## Build the offline vulnerability database into VULNDB_DIR (kept across clones).
	hack/vulndb.sh $(INDEXDB) $(VULNDB_VERSION) $(VULNDB_DIR)

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary, the kubectl plugin (bin/kubectl-kaddons, with bin/kubectl_complete-kaddons) and the example extensions (bin/extensions/).
	go build -tags $(GO_BUILD_TAGS) -o bin/manager .
	go build -ldflags "-X github.com/kaddons/kaddons/internal/version.Version=$(VERSION) -X github.com/kaddons/kaddons/internal/version.Revision=$(REVISION)" \
		-o bin/kubectl-kaddons ./cmd/kubectl-kaddons
	install -m 0755 cmd/kubectl-kaddons/kubectl_complete-kaddons bin/kubectl_complete-kaddons
	go build -o bin/extensions/ ./examples/extensions/...

.PHONY: run
run: manifests generate fmt vet ## Run the manager from your host against the cluster in KUBECONFIG.
	go run . --channels=channels

## VERSION and REVISION label the image and are linked into the manager (internal/version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
## IMAGE_OUT is where `make image` puts the image: IMG, when given on the command line or in
## the environment, is pushed to; otherwise the OCI layout bin/image is written (IMG=oci:DIR too).
ifeq ($(origin IMG),file)
IMAGE_OUT ?= oci:bin/image
else
IMAGE_OUT ?= $(IMG)
endif

.PHONY: image
image: ## Build the multi-arch (IMAGE_PLATFORMS) manager image without a container engine: push IMG if given, else write bin/image.
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) go run ./hack/image -image $(IMAGE_OUT) \
		-platforms $(IMAGE_PLATFORMS) -tags $(GO_BUILD_TAGS) -version $(VERSION) -revision $(REVISION)

.PHONY: docker-build
docker-build: ## Build the manager image (needs a container engine).
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t ${IMG} .

.PHONY: docker-push
docker-push: ## Push the manager image.
	$(CONTAINER_TOOL) push ${IMG}

## INSTALLER is the file `make build-installer` writes.
INSTALLER ?= dist/install.yaml

.PHONY: build-installer
build-installer: manifests generate kubectl ## Write dist/install.yaml (INSTALLER): CRDs, RBAC and the operator's deployment (a PodDisruptionBudget only above one replica).
	mkdir -p $(dir $(INSTALLER))
	$(KUBECTL) kustomize config/default | sed 's|image: controller:latest|image: ${IMG}|' | go run ./hack/helmgen -installer > $(INSTALLER)
	@echo "Wrote $(INSTALLER) for image ${IMG}"

## CHART_VERSION is the version of the chart `make helm` writes.
CHART_VERSION ?= 0.1.0

.PHONY: helm
helm: manifests generate kubectl ## Write the Helm chart dist/chart from config/default (hack/helmgen), image IMG.
	$(KUBECTL) kustomize config/default | sed 's|image: controller:latest|image: ${IMG}|' | go run ./hack/helmgen -out dist/chart -chart-version $(CHART_VERSION)

.PHONY: kops-channel
kops-channel: kubectl ## Refresh examples/kops: the installer (from dist/install.yaml), the add-on resources and their manifestHash.
	@[ -f dist/install.yaml ] || $(MAKE) build-installer
	cp dist/install.yaml examples/kops/install.yaml
	$(KUBECTL) kustomize examples/kops/resources > examples/kops/addon-resources.yaml
	go run ./hack/kopschannel examples/kops/addons.yaml

##@ Release

## RELEASE_DIR holds one folder per release (never committed); RELEASE_IMAGE is the
## repository the installer and the chart name and release-push pushes to; SIGNING_KEY
## signs (a PEM private key, cosign's encrypted format with COSIGN_PASSWORD too);
## SIGNING_PUBLIC_KEY verifies. docs/release.md describes the artifacts.
RELEASE_DIR ?= dist/release
RELEASE_IMAGE ?= ghcr.io/kaddons/kaddons
PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64
SIGNING_KEY ?=
SIGNING_PUBLIC_KEY ?=

.PHONY: release
release: manifests generate kubectl ## Write the release VERSION (vX.Y.Z) into RELEASE_DIR/VERSION: image OCI tarball, pinned install.yaml, chart, plugin archives, krew manifest, signed checksums (SIGNING_KEY).
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) go run ./hack/release build -version $(VERSION) \
		-revision $(REVISION) -out $(RELEASE_DIR) -image $(RELEASE_IMAGE) -image-platforms $(IMAGE_PLATFORMS) \
		-plugin-platforms $(PLUGIN_PLATFORMS) -tags $(GO_BUILD_TAGS) -kubectl $(KUBECTL) -key "$(SIGNING_KEY)"

.PHONY: release-push
release-push: ## Push the image of the release VERSION to RELEASE_IMAGE:VERSION and sign it there (SIGNING_KEY).
	go run ./hack/release push -dir $(RELEASE_DIR)/$(VERSION) -image $(RELEASE_IMAGE) -key "$(SIGNING_KEY)"

.PHONY: release-verify
release-verify: ## Verify the release folder RELEASE_DIR/VERSION: signature, checksums, pinned digests (SIGNING_PUBLIC_KEY).
	go run ./hack/release verify -dir $(RELEASE_DIR)/$(VERSION) -key "$(SIGNING_PUBLIC_KEY)"

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kubectl ## Install the CRDs into the cluster in KUBECONFIG.
	$(KUBECTL) kustomize config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kubectl ## Remove the CRDs from the cluster in KUBECONFIG.
	$(KUBECTL) kustomize config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kubectl ## Deploy the operator (image IMG) to the cluster in KUBECONFIG.
	$(KUBECTL) kustomize config/default | sed 's|image: controller:latest|image: ${IMG}|' | go run ./hack/helmgen -installer | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kubectl ## Remove the operator from the cluster in KUBECONFIG.
	$(KUBECTL) kustomize config/default | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

##@ Dependencies

## Location to install dependencies to
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

## Tool binaries
TOOLCHAIN_DIR ?= $(shell hack/toolchain.sh dir)
## KUBECTL_PINNED is the pinned kubectl (Kubernetes v1.37.2, hack/tools/kube), built from source.
KUBECTL_PINNED = $(TOOLCHAIN_DIR)/kubectl
## KUBECTL is the kubectl the recipes run: the one on PATH when its version is within one
## minor of the pinned one (1.36 to 1.38), else KUBECTL_PINNED, which `make kubectl` builds.
## Worked out once, when a recipe first needs it; KUBECTL=path on the command line wins.
KUBECTL ?= $(eval KUBECTL := $(or $(kubectl-on-path),$(KUBECTL_PINNED)))$(KUBECTL)
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
GOVULNCHECK ?= $(LOCALBIN)/govulncheck
INDEXDB ?= $(LOCALBIN)/indexdb

## Tool versions
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
GOVULNCHECK_VERSION ?= v1.9.0
## The golang.org/x/vulndb snapshot `make vuln` checks against (its commit date is the database date).
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
VULNDB_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kaddons/vulndb/$(VULNDB_VERSION)

.PHONY: kubectl
kubectl: ## Provide KUBECTL (it also provides kustomize): a kubectl on PATH within one minor of the pinned v1.37.2, else the pinned one, built from source into bin/k8s.
	@if [ "$(KUBECTL)" = "$(KUBECTL_PINNED)" ]; then hack/toolchain.sh build kubectl; \
	else echo "Using $(KUBECTL): $$($(KUBECTL) version --client | head -n 1)"; fi

# kubectl-on-path expands to the kubectl on PATH when its client is v1.N with N within one
# of the pinned minor (read from TOOLCHAIN_DIR, k8s-v1.37.2_...), and to nothing otherwise.
kubectl-on-path = $(shell k="$$(command -v kubectl)" || exit 0; \
	pinned="$$(basename "$(TOOLCHAIN_DIR)" | sed -n 's/^k8s-v1\.\([0-9][0-9]*\)\..*/\1/p')"; \
	minor="$$("$$k" version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"v1\.\([0-9][0-9]*\)\..*/\1/p')"; \
	if [ -n "$$pinned" ] && [ -n "$$minor" ] && [ "$$minor" -ge "$$((pinned - 1))" ] && [ "$$minor" -le "$$((pinned + 1))" ]; then echo "$$k"; fi)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen into bin/.
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build golangci-lint into bin/.
$(GOLANGCI_LINT): $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: govulncheck
govulncheck: $(GOVULNCHECK) ## Build govulncheck into bin/.
$(GOVULNCHECK): $(LOCALBIN)
	$(call go-install-tool,$(GOVULNCHECK),golang.org/x/vuln/cmd/govulncheck,$(GOVULNCHECK_VERSION))

.PHONY: indexdb
indexdb: $(INDEXDB) ## Build golang.org/x/vulndb's indexdb (it writes the vulnerability database) into bin/.
$(INDEXDB): $(LOCALBIN)
	$(call go-install-tool,$(INDEXDB),golang.org/x/vulndb/cmd/indexdb,$(VULNDB_VERSION))

# go-install-tool will 'go install' any package with custom target and name of binary, if it doesn't exist
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f $(1) ;\
GOBIN=$(LOCALBIN) go install $${package} ;\
mv $(1) $(1)-$(3) ;\
} ;\
ln -sf $$(realpath $(1)-$(3)) $(1)
endef

##@ Local cluster

.PHONY: demo
demo: ## Run kaddons on a local cluster (hack/local-cluster.sh): install, start the operator, apply the samples.
	hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop the demo's operator and local cluster and delete their state.
	hack/demo.sh down

.PHONY: node-up
node-up: ## Join a REAL node (containerd, runc, a kubelet built from source) to the local cluster, on the bridge address 10.254.254.1 (hack/node.sh; root).
	hack/node.sh up

.PHONY: node-down
node-down: ## Stop the real node and undo its changes to the host, checked against a snapshot from before it (hack/node.sh down).
	hack/node.sh down

.PHONY: node-images
node-images: ## Build the add-on images (CoreDNS, metrics-server, kube-proxy, kube-router, pause) from the Go module proxy and Debian packages and import them into the real node's containerd (hack/node.sh images).
	hack/node.sh images

.PHONY: node-smoke
node-smoke: ## Smoke-check a real node: a cluster of its own, the node, a temporary bridge CNI config, a pause Pod Running on it; then everything torn down and the host checked.
	hack/toolchain.sh build
	hack/toolchain.sh build kubelet
	hack/node.sh smoke

.PHONY: test-e2e
test-e2e: ## Run the end-to-end suite against a local cluster of its own (test/e2e).
	hack/toolchain.sh build
	go test -tags e2e ./test/e2e/... -count=1 -timeout 30m -v

.PHONY: test-faults
test-faults: ## Run the fault suite on a local cluster of its own: control-plane restarts, API errors and cut watches, manager crashes, leader failover, stuck finalizers (test/e2e, tag faults).
	hack/toolchain.sh build
	go test -tags e2e,faults ./test/e2e/... -run '^TestFault' -count=1 -timeout 30m -v

.PHONY: test-node
test-node: ## Run kaddons on a REAL node (root): bootstrap its network, DNS answers, drift, a crashing upgrade rolled back, metrics (test/e2e, tag node).
	hack/toolchain.sh build
	hack/toolchain.sh build kubelet
	go test -tags e2e,node ./test/e2e/... -run '^TestRealNode' -count=1 -timeout 40m -v

.PHONY: test-bootstrap
test-bootstrap: ## Drive the real bootstrap tools against local clusters: Cluster API's ClusterResourceSet and Flux (test/e2e, tag bootstrap).
	hack/toolchain.sh build
	hack/toolchain.sh build capi flux
	go test -tags e2e,bootstrap ./test/e2e/... -run '^TestBootstrap' -count=1 -timeout 30m -v

##@ Benchmarks

## Sizes and unrelated objects `make bench` measures; BENCH_FLAGS passes more flags (see `go run ./test/bench -h`).
## kaddons runs at every size; stock KDP only up to N=500 (-stock-max-n), and the unrelated
## and OCI runs at the largest size up to N=1000 (-extra-max-n).
BENCH_SIZES ?= 1,50,200,500,1000
BENCH_UNRELATED ?= 5000
BENCH_FLAGS ?=

.PHONY: bench
bench: $(LOCALBIN) ## Measure kaddons against stock KDP and Flux on a real kube-apiserver and etcd; writes docs/performance.md (at most 45 minutes).
	hack/toolchain.sh build etcd kube-apiserver flux
	go build -o $(LOCALBIN)/bench ./test/bench
	KUBEBUILDER_ASSETS="$$(hack/toolchain.sh dir)" $(LOCALBIN)/bench -repo . -n $(BENCH_SIZES) -unrelated $(BENCH_UNRELATED) \
		-out docs/performance.md $(BENCH_FLAGS)
