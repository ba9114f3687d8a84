# Petri's build. `make demo` runs Petri end to end on this machine; `make test`
# runs every check CI runs. Both build what they need from the Go module proxy.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

KUBERNETES_VERSION := v1.37.2
ETCD_VERSION       := v3.7.3
CONTROLLER_TOOLS_VERSION := v0.23.0

BIN := $(CURDIR)/bin
CACHE_ROOT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/petri
# The stamp names the build recipe too ("versioned": the binaries report their
# real version), so binaries built by an older recipe are rebuilt once.
CONTROLPLANE_STAMP := kubernetes-$(KUBERNETES_VERSION)-versioned-etcd-$(ETCD_VERSION)
CONTROLPLANE_CACHE := $(CACHE_ROOT)/controlplane/$(CONTROLPLANE_STAMP)
CONTROLPLANE_BINARIES := etcd kube-apiserver kube-controller-manager kubectl
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)

# Built from the module proxy, Kubernetes would report v0.0.0-master: stamp the
# version the way its own release build does, so /version, kubectl version and
# Helm's .Capabilities.KubeVersion are right (charts with kubeVersion install).
KUBE_VERSION_PARTS := $(subst ., ,$(patsubst v%,%,$(KUBERNETES_VERSION)))
KUBE_VERSION_LDFLAGS = $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
  -X $(pkg).gitVersion=$(KUBERNETES_VERSION) \
  -X $(pkg).gitMajor=$(word 1,$(KUBE_VERSION_PARTS)) \
  -X $(pkg).gitMinor=$(word 2,$(KUBE_VERSION_PARTS)) \
  -X $(pkg).gitTreeState=archive \
  -X $(pkg).buildDate=$(shell date -u +%Y-%m-%dT%H:%M:%SZ))

# Four test packages at a time, not one per core (go test's default): most
# of a package's time is spent waiting on the control planes, nodes and
# forges it starts (tests/realnode alone kept 0.44 of a core busy), so
# with two at a time two cores sat mostly idle. Measured on this 2-core
# machine: the whole suite in 9m31s with -p 4 (12m37s beside other work; 1.6 cores busy on
# average), against 17-20 minutes with two packages at a time.
TEST_PACKAGES_AT_ONCE ?= 4
GO_TEST_FLAGS ?= -timeout 20m -p $(TEST_PACKAGES_AT_ONCE)
# The slowest test packages (each several minutes, most of it waiting on
# the control planes they start) are named first so that go test starts
# them first; ./... after them adds the rest, each package once. Started
# last, two of them would run alone at the end on this 2-core machine.
SLOW_TEST_PACKAGES := ./controllers ./tests/forges ./tests/realnode ./tests/chaos

export KUBEBUILDER_ASSETS := $(BIN)

.PHONY: all
all: build

##@ Build

.PHONY: build
build: ## Build Petri's binaries (kubectl-petri too) and the example application into bin/.
	go build -o $(BIN)/ ./cmd/...
	go build -o $(BIN)/petri-example-app ./examples/app
	go build -o $(BIN)/ ./examples/postgres/cmd/...

.PHONY: controlplane
controlplane: $(BIN)/.controlplane-$(CONTROLPLANE_STAMP) ## Build etcd, kube-apiserver, kube-controller-manager and kubectl into bin/.

# The control plane is built from source once per version and kept in a
# per-user cache, so a fresh clone copies it instead of rebuilding (minutes).
$(BIN)/.controlplane-$(CONTROLPLANE_STAMP): hack/controlplane/go.mod hack/controlplane/go.sum
	@mkdir -p $(BIN) $(CONTROLPLANE_CACHE)
	@for b in $(CONTROLPLANE_BINARIES); do \
	  if [ ! -x "$(CONTROLPLANE_CACHE)/$$b" ]; then \
	    echo "building $$b (once per version; kube-apiserver takes about 10 minutes on 2 cores)"; \
	    case $$b in \
	      etcd) pkg=go.etcd.io/etcd/server/v3 ;; \
	      *) pkg=k8s.io/kubernetes/cmd/$$b ;; \
	    esac; \
	    (cd hack/controlplane && go build -ldflags "$(KUBE_VERSION_LDFLAGS)" -o "$(CONTROLPLANE_CACHE)/$$b.tmp" $$pkg); \
	    mv "$(CONTROLPLANE_CACHE)/$$b.tmp" "$(CONTROLPLANE_CACHE)/$$b"; \
	  fi; \
	  cp -f "$(CONTROLPLANE_CACHE)/$$b" "$(BIN)/$$b"; \
	done
	@rm -f $(BIN)/.controlplane-*
	@touch $@

# The real node (local/realnode): kubelet, kube-scheduler and kube-proxy from
# the control plane's Kubernetes version (hack/node), CoreDNS with the
# plugins cluster DNS uses (hack/coredns) and crictl, built once per version
# into the per-user cache like the control plane. The pause program is
# Petri's own (local/realnode/pause) and is rebuilt by go build's cache.
COREDNS_VERSION := v1.15.0
CRICTL_VERSION  := v1.37.0
NODE_STAMP      := kubernetes-$(KUBERNETES_VERSION)-versioned-coredns-$(COREDNS_VERSION)-crictl-$(CRICTL_VERSION)
NODE_CACHE      := $(CACHE_ROOT)/node/$(NODE_STAMP)
NODE_BINARIES   := kubelet kube-scheduler kube-proxy coredns crictl
NODE_PACKAGES   := containerd runc containernetworking-plugins iptables

.PHONY: node
node: node-packages $(BIN)/.node-$(NODE_STAMP) ## Build the real node's binaries into bin/ (kubelet, kube-scheduler, kube-proxy, CoreDNS, crictl) and install containerd, runc, the CNI plugins and iptables.
	@CGO_ENABLED=0 go build -o $(BIN)/petri-pause ./local/realnode/pause

$(BIN)/.node-$(NODE_STAMP): hack/node/go.mod hack/node/go.sum hack/coredns/go.mod hack/coredns/go.sum
	@mkdir -p $(BIN) $(NODE_CACHE)
	@for b in $(NODE_BINARIES); do \
	  if [ ! -x "$(NODE_CACHE)/$$b" ]; then \
	    echo "building $$b (once per version; about a minute each with a warm build cache on 2 cores)"; \
	    case $$b in \
	      coredns) (cd hack/coredns && CGO_ENABLED=0 go build -o "$(NODE_CACHE)/$$b.tmp" ./cmd/coredns) ;; \
	      crictl) GOBIN="$(NODE_CACHE)/.crictl" go install sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION) && mv "$(NODE_CACHE)/.crictl/crictl" "$(NODE_CACHE)/$$b.tmp" ;; \
	      *) (cd hack/node && go build -ldflags "$(KUBE_VERSION_LDFLAGS)" -o "$(NODE_CACHE)/$$b.tmp" k8s.io/kubernetes/cmd/$$b) ;; \
	    esac; \
	    mv "$(NODE_CACHE)/$$b.tmp" "$(NODE_CACHE)/$$b"; \
	  fi; \
	  cp -f "$(NODE_CACHE)/$$b" "$(BIN)/$$b"; \
	done
	@rm -f $(BIN)/.node-*
	@touch $@

# containerd, runc, the CNI plugins and iptables come from Debian's packages;
# as root make installs them, otherwise it says how.
.PHONY: node-packages
node-packages:
	@missing=; \
	for c in /usr/bin/containerd /usr/bin/ctr /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/sbin/iptables; do \
	  [ -x $$c ] || missing=1; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing the real node's system packages: apt-get install -y $(NODE_PACKAGES)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends $(NODE_PACKAGES) || { apt-get update && apt-get install -y --no-install-recommends $(NODE_PACKAGES); }; \
	else \
	  echo "the real node's tests (local/realnode) need containerd, runc, the CNI plugins and iptables, which are not all installed:"; \
	  echo "  sudo apt-get install -y $(NODE_PACKAGES)    (Debian, Ubuntu)"; \
	  echo "and they run as root (network namespace, cgroups, mounts)"; \
	  exit 1; \
	fi

# Gitea, the real forge the Gitea provider's tests and the demo talk to, is
# built from the module proxy once per version into the per-user cache, like
# the control plane. It reads its templates/ and options/ from disk at run
# time (STATIC_ROOT_PATH); they are copied from the module beside the binary.
GITEA_VERSION := v1.27.3
GITEA_TAGS    := sqlite sqlite_unlock_notify
GITEA_STAMP   := gitea-$(GITEA_VERSION)-versioned
GITEA_CACHE   := $(CACHE_ROOT)/gitea/$(GITEA_STAMP)

.PHONY: gitea
gitea: $(BIN)/.gitea-$(GITEA_STAMP) ## Build Gitea (with SQLite) into bin/gitea, its templates and options into bin/gitea-static/.

$(BIN)/.gitea-$(GITEA_STAMP): hack/gitea/go.mod hack/gitea/go.sum
	@mkdir -p $(BIN) $(GITEA_CACHE)
	@if [ ! -x "$(GITEA_CACHE)/gitea" ]; then \
	  echo "building gitea (once per version; about 6 minutes on 2 cores)"; \
	  (cd hack/gitea && CGO_ENABLED=1 go build -tags "$(GITEA_TAGS)" \
	    -ldflags '-s -w -X main.Version=$(patsubst v%,%,$(GITEA_VERSION)) -X "main.Tags=$(GITEA_TAGS)"' \
	    -o "$(GITEA_CACHE)/gitea.tmp" gitea.dev); \
	  mv "$(GITEA_CACHE)/gitea.tmp" "$(GITEA_CACHE)/gitea"; \
	fi
	@if [ ! -d "$(GITEA_CACHE)/static" ]; then \
	  src=$$(cd hack/gitea && go list -m -f '{{.Dir}}' gitea.dev); \
	  rm -rf "$(GITEA_CACHE)/static.tmp"; mkdir -p "$(GITEA_CACHE)/static.tmp"; \
	  cp -r "$$src/templates" "$$src/options" "$(GITEA_CACHE)/static.tmp/"; \
	  chmod -R u+w "$(GITEA_CACHE)/static.tmp"; \
	  mv "$(GITEA_CACHE)/static.tmp" "$(GITEA_CACHE)/static"; \
	fi
	@cp -f "$(GITEA_CACHE)/gitea" "$(BIN)/gitea"
	@rm -rf "$(BIN)/gitea-static" && cp -r "$(GITEA_CACHE)/static" "$(BIN)/gitea-static"
	@rm -f $(BIN)/.gitea-*
	@touch $@

##@ Generate

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN)/.controller-gen go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(BIN)/.controller-gen/controller-gen $@

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs, RBAC and the API reference from the Go types and markers.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=petri-operator paths=./controllers/... output:rbac:artifacts:config=config/rbac/generated
	go run ./hack/apidocs -crds config/crd/bases -out docs/api-reference.md
	$(MAKE) -s chart-copies

# charts/petri installs what config/ installs: its CRDs, the operator's RBAC,
# sync's Roles, the admission fences and the FlowSchemas are copies of config/
# (tests/chart proves the rest renders the same objects).
.PHONY: chart-copies
chart-copies:
	@rm -rf charts/petri/crds charts/petri/files
	@mkdir -p charts/petri/crds charts/petri/files/fences charts/petri/files/flowcontrol charts/petri/files/sync
	@cp config/crd/bases/*.yaml charts/petri/crds/
	@cp config/rbac/generated/role.yaml charts/petri/files/operator-rbac.yaml
	@cp $(filter-out %/kustomization.yaml,$(wildcard config/fences/*.yaml)) charts/petri/files/fences/
	@cp $(wildcard config/sync/*role*.yaml) charts/petri/files/sync/
	@cp config/flowcontrol/flowschemas.yaml charts/petri/files/flowcontrol/

.PHONY: docs
docs: ## Regenerate docs/api-reference.md from the CRDs (make generate does it too).
	go run ./hack/apidocs -crds config/crd/bases -out docs/api-reference.md

GENERATED := api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/generated docs/api-reference.md charts/petri/crds charts/petri/files

.PHONY: verify-generated
verify-generated: ## Fail when generated files are stale.
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for p in $(GENERATED); do mkdir -p $$tmp/$$(dirname $$p); cp -r $$p $$tmp/$$p; done; \
	$(MAKE) -s generate; \
	for p in $(GENERATED); do \
	  if ! diff -r $$tmp/$$p $$p >/dev/null; then \
	    echo "generated file $$p is stale: run 'make generate' and commit the result"; diff -r $$tmp/$$p $$p | head -20; exit 1; \
	  fi; \
	done

.PHONY: flags
flags: controlplane ## Rewrite internal/docscheck/flags from each binary's real flags (after adding or renaming a flag; the docs test reads them).
	PETRI_UPDATE_FLAGS=1 go test ./cmd/... -run 'TestFlags' -count=1

##@ Test

.PHONY: fmt-check
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet:
	go vet ./...

# The web page's browser tests (sync/ui) drive headless Chromium; they are
# never skipped, so make test installs Debian's package when it can.
CHROMIUM_NAMES := chromium chromium-browser google-chrome google-chrome-stable

.PHONY: postgres
postgres: ## Make sure PostgreSQL's server binaries are installed (apt-get install -y postgresql when run as root).
	@if command -v postgres >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing PostgreSQL for the PostgreSQL shared workload's end-to-end test: apt-get install -y postgresql"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends postgresql || { apt-get update && apt-get install -y --no-install-recommends postgresql; }; \
	else \
	  echo "the PostgreSQL shared workload's end-to-end test (tests/postgres) needs PostgreSQL's server binaries, which are not installed:"; \
	  echo "  sudo apt-get install -y postgresql    (Debian, Ubuntu; or put postgres and initdb on PATH)"; \
	  exit 1; \
	fi

.PHONY: chromium
chromium: ## Make sure headless Chromium is installed (apt-get install -y chromium when run as root).
	@for b in $(CHROMIUM_NAMES); do if command -v $$b >/dev/null 2>&1; then exit 0; fi; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Chromium for the web page's browser tests: apt-get install -y chromium"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends chromium || { apt-get update && apt-get install -y --no-install-recommends chromium; }; \
	else \
	  echo "the web page's browser tests need headless Chromium, which is not installed:"; \
	  echo "  sudo apt-get install -y chromium    (Debian, Ubuntu; or put chromium or google-chrome on PATH)"; \
	  exit 1; \
	fi

.PHONY: test
test: verify-generated fmt-check vet controlplane node gitea chromium postgres images-compile ## Everything CI checks: generated code, gofmt, vet, the control plane, go test.
	go test $(GO_TEST_FLAGS) $(SLOW_TEST_PACKAGES) ./...

# The inner loop: the tests of every package that needs neither the control
# plane nor a Gitea server (hack/testfast/packages.sh lists them), with gofmt
# and vet. make test runs them too, with everything else.
.PHONY: test-fast
test-fast: fmt-check vet ## The pure and fake-backed tests only (no control plane, no Gitea): the inner loop, about a minute.
	go test $(GO_TEST_FLAGS) $$(hack/testfast/packages.sh)

# Each fuzz target runs for FUZZTIME; make test runs their seed corpora.
# New inputs are minimized for FUZZMINIMIZETIME (200 runs): minimizing
# every new ~25 KiB webhook payload by time would take the whole budget.
FUZZTIME ?= 30s
FUZZMINIMIZETIME ?= 200x
FUZZ_TARGETS := ./sync/webhook:FuzzDelivery ./sync/config:FuzzLoad \
  ./controllers/internal/graph:FuzzGraph ./controllers/internal/naming:FuzzNames

.PHONY: fuzz
fuzz: ## Fuzz webhook and config parsing, the deploy graph and naming, FUZZTIME (30s) each.
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
	  go test "$${t%%:*}" -run '^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME); \
	done

.PHONY: ui-screenshots
ui-screenshots: controlplane chromium ## Retake docs/ui-desktop.png and docs/ui-phone.png (sync/ui's browser test).
	PETRI_UPDATE_DOCS=1 go test -count=1 -run TestBrowserScreenshots ./sync/ui/

.PHONY: security-docs
security-docs: controlplane ## Rewrite docs/security.md's table from the API server's answers (tests/security).
	PETRI_UPDATE_DOCS=1 go test -count=1 ./tests/security/

# CHAOS_FLAGS passes flags to petri-chaos (bin/petri-chaos -h), e.g.
# CHAOS_FLAGS="-seed 42 -scenarios 1,4".
.PHONY: chaos
chaos: controlplane build ## Inject faults into Petri on this machine at full size (local/chaos) and write docs/reliability.md.
	$(BIN)/petri-chaos -size full -out docs/reliability.md $(CHAOS_FLAGS)

##@ Run

# DEMO_FLAGS and RUN_FLAGS pass flags to petri-local (bin/petri-local demo -h).
# FORGE=gitea plays the demo's pull request on a real Gitea server instead of
# the GitHub stand-in (make gitea builds Gitea first, once per version).
# NODE=real plays it on the real node (kubelet, containerd, Petri's images;
# make node builds and installs it, as root) instead of the process node.
FORGE ?= github
NODE ?= process

.PHONY: demo
demo: controlplane build $(if $(filter gitea,$(FORGE)),gitea) $(if $(filter real,$(NODE)),node) ## Run Petri end to end on this machine: one pull request's life, every step checked (FORGE=gitea: on a real Gitea; NODE=real: in real containers).
	$(BIN)/petri-local demo $(if $(filter-out github,$(FORGE)),-forge $(FORGE)) $(if $(filter-out process,$(NODE)),-node $(NODE)) $(if $(filter-out 1,$(CLUSTERS)),--clusters $(CLUSTERS)) $(DEMO_FLAGS)

.PHONY: run
run: controlplane build $(if $(filter real,$(NODE)),node) ## Start Petri on this machine and keep it running (kubectl, webhooks, pull requests; NODE=real: in real containers).
	$(BIN)/petri-local run $(if $(filter-out process,$(NODE)),-node $(NODE)) $(RUN_FLAGS)

# BENCH_FLAGS passes flags to petri-bench (go run ./cmd/petri-bench -h), e.g.
# BENCH_FLAGS="-only scale -scale-noop 1000 -scale-real=" or
# BENCH_FLAGS="-only atrest -atrest-environments 500". The full run takes
# about an hour and a quarter on 2 cores (at rest: about 14 minutes for each
# of the two operators); -smoke runs every measurement at a tiny size.
.PHONY: bench
bench: controlplane ## Measure sync, the operator's overhead, the deployer, 100 to 1,000 environments and 1,000 at rest (before and after 8bc6e04) on the local control plane; print a table and rewrite docs/benchmarks.md.
	go run ./cmd/petri-bench -write docs/benchmarks.md $(BENCH_FLAGS)

# make bench-peers runs Argo CD's ApplicationSet pull-request generator beside
# Petri on the same control plane and node (local/peers). Argo CD is built
# from the module proxy once per version into the per-user cache, like the
# control plane, with the Go toolchain its go.mod asks for (GOTOOLCHAIN, for
# that build only), and the Helm CLI its repo-server runs from the Helm
# version of Petri's go.mod (hack/argocd/build.sh). Its repo-server also runs
# git, and its caches live in Redis: Debian's git and redis-server, installed
# as root when missing. BENCH_PEERS_FLAGS passes flags to petri-bench-peers
# (go run ./cmd/petri-bench-peers -h), e.g. BENCH_PEERS_FLAGS="-sizes 10".
# Not part of make test: its own code's tests (local/peers) are.
ARGOCD_VERSION   := v3.6.1
ARGOCD_TOOLCHAIN := go1.27.3
HELM_VERSION     := $(shell go list -m -f '{{.Version}}' helm.sh/helm/v3 2>/dev/null)
PEERS_PACKAGES   := git redis-server
BENCH_PEERS_FLAGS ?=

.PHONY: bench-peers
bench-peers: controlplane build ## Measure Argo CD's ApplicationSet pull-request generator beside Petri (10 and 100 pull requests opened, pushed, closed) on the local control plane; print a table and write docs/benchmarks.md's section.
	@missing=; for c in git redis-server; do command -v $$c >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing what Argo CD's components run: apt-get install -y $(PEERS_PACKAGES)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y --no-install-recommends $(PEERS_PACKAGES) || { apt-get update && apt-get install -y --no-install-recommends $(PEERS_PACKAGES); }; \
	  else \
	    echo "make bench-peers runs Argo CD's repo-server (git) and Redis, which are not both installed:"; \
	    echo "  sudo apt-get install -y $(PEERS_PACKAGES)    (Debian, Ubuntu)"; \
	    exit 1; \
	  fi; \
	fi
	@hack/argocd/build.sh $(ARGOCD_VERSION) $(ARGOCD_TOOLCHAIN) $(HELM_VERSION) $(CACHE_ROOT) $(BIN)
	go run ./cmd/petri-bench-peers -bin $(BIN) -write docs/benchmarks.md $(BENCH_PEERS_FLAGS)

##@ Images

# The images come from one recipe, hack/images (cmd/petri-images): static Go
# programs on an empty base, run as 65532:65532, built with the Go toolchain
# alone (no Docker engine, no base image). docs/images.md says what each holds.
IMAGE_REGISTRY ?= ghcr.io/petri-dev
IMAGE_TAG      ?= v0.1.0
IMAGES_FLAGS   ?=

.PHONY: images
images: ## Build Petri's images (operator, sync, deployer, example application, pause) into bin/images (an OCI layout) and bin/images.tar (docker load).
	@rm -rf $(BIN)/images
	go run ./cmd/petri-images -registry $(IMAGE_REGISTRY) -tag $(IMAGE_TAG) -o $(BIN)/images -tar $(BIN)/images.tar $(IMAGES_FLAGS)

# The tests that build Petri's images (tests/realnode, hack/images) find
# every package compiled: from a cold build cache the compile took over 11
# minutes on 2 cores beside the other test packages, inside one test's
# time limit. Compiled here, before the tests, it takes its time once.
.PHONY: images-compile
images-compile: ## Compile the images' Go packages as the image build does (static, -trimpath), filling Go's build cache; writes no image.
	go run ./cmd/petri-images -compile

.PHONY: images-push
images-push: ## Build the images and push them to IMAGE_REGISTRY with IMAGE_TAG (credentials from docker login; IMAGES_FLAGS=-insecure for plain HTTP).
	go run ./cmd/petri-images -push $(IMAGE_REGISTRY) -tag $(IMAGE_TAG) $(IMAGES_FLAGS)

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'
