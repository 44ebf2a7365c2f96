# ingestq: CI (.ci/run) runs `make test`, `make race` and `make lint`;
# `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Every module of the workspace (go.work), as absolute directories.
MODULES := $(shell go list -m -f '{{.Dir}}')
SERVICES := batcher estimator provisioner downloader processor recorder notifier console
BIN := $(CURDIR)/bin

# Code generators, pinned; `make proto` installs them into ./bin.
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
BUF := $(BIN)/.tools/buf@$(BUF_VERSION)
PROTOC_GEN_GO := $(BIN)/.tools/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
PROTOC_GEN_GO_GRPC := $(BIN)/.tools/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN)/.tools/staticcheck@$(STATICCHECK_VERSION)
# Renders deploy/k8s for e2e/deploy. Debian's kubectl (1.20) is too old for
# the kustomize features deploy/k8s uses (components, replacements).
KUSTOMIZE_VERSION := v5.8.2
KUSTOMIZE := $(BIN)/.tools/kustomize@$(KUSTOMIZE_VERSION)
# The S3-compatible server the object store's tests run against (package
# shared/s3test starts it on loopback); pinned, from the Go module proxy.
VERSITYGW_VERSION := v1.8.0
VERSITYGW := $(BIN)/.tools/versitygw@$(VERSITYGW_VERSION)
# The failpoint tool of the robustness build (go.etcd.io/gofail).
GOFAIL_VERSION := v0.2.0
GOFAIL := $(BIN)/.tools/gofail@$(GOFAIL_VERSION)

.PHONY: help deps stack-deps versitygw test race chaos robustness bench demo up proto proto-check lint build build-failpoints config-table

help:
	@echo "make demo          run the whole pipeline on one machine on the example deposit, print the report"
	@echo "make up            start ZooKeeper, the seven services and the console, and keep them running (Ctrl-C stops)"
	@echo "                   (demo and up with STORE=s3 store into a bucket of a versitygw server they start;"
	@echo "                   with STORE=merritt into a node of a stand-in for Merritt's storage service they start)"
	@echo "make test          install test dependencies, then test and vet every module"
	@echo "make race          the tests of shared/ and of every service under the race detector"
	@echo "make chaos         the chaos suite in full: each scenario with 500 jobs (CHAOS_RUN=<regexp> picks scenarios)"
	@echo "make robustness    the robustness suite in full: fixed seeds, every failpoint and fault, broken builds, mixed versions"
	@echo "                   (ROBUSTNESS_SEED=<n> replays one seed); prints the failpoints reached"
	@echo "make build         build the service binaries and ingestq-backup into ./bin"
	@echo "make build-failpoints  build the services with their failpoints into ./bin/failpoints (the robustness build)"
	@echo "make lint          buf lint, gofmt, go vet, staticcheck, and a check that proto/'s generated code is current"
	@echo "make proto         regenerate the Go code of proto/ with pinned generators"
	@echo "make bench         benchmarks"
	@echo "make config-table  print the environment variables as a Markdown table (docs/configuration.md)"
	@echo "make deps          install ZooKeeper, Java, Chromium, git, python3, promtool (Debian) and kustomize (./bin) for the tests"
	@echo "make stack-deps    install only what make demo and make up run on: ZooKeeper and Java"
	@echo "make versitygw     install the S3-compatible server the object store's tests use into bin/.tools"

deps: $(KUSTOMIZE)
	@scripts/install-deps.sh

# What make demo and make up run on, and no more: ZooKeeper and Java.
stack-deps:
	@scripts/install-deps.sh stack

versitygw: $(VERSITYGW)

# Files tests keep for people to look at (the console's browser test writes
# its screenshots there); set it to keep them elsewhere.
export INGESTQ_ARTIFACTS_DIR ?= $(CURDIR)/run/artifacts

# Each module must also build on its own (GOWORK=off), as it will when
# built or released alone.
# A test binary's time limit: e2e's chaos package runs every scenario's
# short run in one binary, longer than go test's default 10 minutes allows
# on a busy machine.
TEST_TIMEOUT ?= 30m
# The tests of these modules build and run programs of other modules (the
# services, the backup tool) and read the repository's files outside their
# own module; Go's test cache sees neither, so it would report a result kept
# from before a change to them. Their tests always run.
UNCACHED_MODULES := $(CURDIR)/e2e $(CURDIR)/examples/inventory
test: deps $(VERSITYGW)
	@for m in $(MODULES); do \
		echo "== $${m#$(CURDIR)/} (GOWORK=off build and vet)"; \
		(cd "$$m" && GOWORK=off go build -o /dev/null ./... && GOWORK=off go vet ./...); \
	done
	@failed=""; for m in $(MODULES); do \
		echo "== $${m#$(CURDIR)/} (test)"; \
		count=""; case " $(UNCACHED_MODULES) " in *" $$m "*) count=-count=1;; esac; \
		(cd "$$m" && go test $$count -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...) || failed="$$failed $${m#$(CURDIR)/}"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: tests failed in:$$failed"; exit 1; fi

# The race detector over shared/ and the services: the code that runs
# concurrently in production (the stage runner, the queue's consumers and
# sessions, the services' and the console's handlers). Each module is
# tested within the workspace (go.work), as make test does. -short leaves
# out the tests of sheer volume (tens of thousands of jobs), which make test
# runs and which the detector would slow tenfold without exercising more
# interleavings.
RACE_MODULES := $(CURDIR)/shared $(addprefix $(CURDIR)/services/,$(SERVICES))
race: deps $(VERSITYGW)
	@failed=""; for m in $(RACE_MODULES); do \
		echo "== $${m#$(CURDIR)/} (test -race)"; \
		(cd "$$m" && go test -race -short -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...) || failed="$$failed $${m#$(CURDIR)/}"; \
	done; \
	if [ -n "$$failed" ]; then echo "make race: tests failed in:$$failed"; exit 1; fi

# The chaos suite in full (docs/reliability.md): each scenario runs 500
# jobs through a three-server ZooKeeper ensemble and replicas of every
# service under its faults: replicas killed and restarted, the ZooKeeper
# leader killed, a replica frozen past its session timeout (two replicas
# of every service, and a lone one); the quorum lost; a downloader cut off
# by a network partition; every link to ZooKeeper slowed. Then every job,
# object, inventory row, report and lock is checked, and the figures
# printed. `make test` runs a short run of the same tests.
# CHAOS_RUN=<regexp> picks scenarios by test name (CHAOS_RUN=Quorum);
# INGESTQ_CHAOS_SEED=<n> replays a run's choices; INGESTQ_CHAOS_KEEP=1
# keeps its data and logs.
INGESTQ_CHAOS_JOBS ?= 500
CHAOS_RUN ?= .
chaos: deps
	cd e2e && INGESTQ_CHAOS_JOBS=$(INGESTQ_CHAOS_JOBS) go test -count=1 -v -timeout 90m \
		-run '$(CHAOS_RUN)' ./chaos/

# The robustness suite in full (docs/reliability.md): each seed of
# ROBUSTNESS_SEEDS runs the stack built with failpoints under traffic of
# every kind and a schedule of every failpoint (crash, stall, error) and
# fault (kill -9, SIGSTOP, leader and quorum loss, a partition, slow
# links), then the independent checker; then the deliberately broken
# builds, which the checker must catch, and a run of mixed versions rolled
# to the current one. It ends with the failpoints reached. About an
# hour on 2 cores. ROBUSTNESS_SEED=<n> runs (replays) one seed; `make
# test` runs one seed with part of the faults.
ROBUSTNESS_SEEDS ?= 1,2,3,4,5,6,7,8,9,10
robustness: deps $(GOFAIL)
	cd e2e && GOFAIL=$(GOFAIL) ROBUSTNESS_FULL=1 ROBUSTNESS_SEEDS=$(ROBUSTNESS_SEEDS) go test -count=1 -v -timeout 180m ./robustness/ | \
		grep -v -e '^=== \(RUN\|PAUSE\|CONT\)'

# The services with their failpoints compiled in, into bin/failpoints:
# scripts/build-failpoints.sh builds them from a copy of the tree, which
# `gofail enable` rewrites; the working tree is left as it is.
build-failpoints: $(GOFAIL)
	GOFAIL=$(GOFAIL) scripts/build-failpoints.sh $(BIN)/failpoints

$(GOFAIL):
	@mkdir -p $(@D)
	GOBIN=$(@D) go install go.etcd.io/gofail@$(GOFAIL_VERSION)
	mv $(@D)/gofail $@

# The benchmarks: storing into S3 against the AWS SDK's own uploads to the
# same server; then, in one run against a ZooKeeper they start themselves,
# the queue library (create, lifecycle, pick-up, depth, cleanup), the seven
# services end to end (storing into a folder, then into S3) and the
# server's ceiling, measured on the same server; then ZooKeeper's heap per
# job, on a server of its own; then big deposits (an object of 100,000
# files, into a folder and into S3; a zip of 4.5 GiB; a tar.gz holding a
# file of 8.5 GiB), each on a stack of its own. Each part ends with a
# machine-readable line (BENCH ...); see BENCHMARKS.md.
BENCH_FILTER := grep -v '^\(goos\|goarch\|pkg\|cpu\|PASS\|ok\|Benchmark\)'
bench: deps $(VERSITYGW)
	cd services/processor && go test -run '^$$' -bench 'BenchmarkDeposits$$' -benchtime 1x -timeout 30m ./internal/store/ | $(BENCH_FILTER)
	cd e2e && go test -run '^$$' -bench 'BenchmarkPipeline$$|BenchmarkServerHeap$$|BenchmarkBigFile$$' -benchtime 1x -timeout 90m ./bench/ | $(BENCH_FILTER)
	cd e2e && go test -run '^$$' -bench 'BenchmarkBigDeposits$$' -benchtime 1x -timeout 60m ./bench/ | $(BENCH_FILTER)

# The whole pipeline on this machine: ZooKeeper, the seven services and the
# console (http://127.0.0.1:8401/) as separate processes, the example
# deposit submitted, progress, the report, then everything stopped. Data
# and logs stay under run/.
# STORE=s3 stores into a bucket of a versitygw server of the run (the
# S3-compatible server the tests use) instead of a folder (docs/s3.md);
# STORE=merritt into a node of a stand-in for Merritt's storage service
# the run starts (the one the tests use; docs/merritt.md).
STORE ?= local
STORE_DEPS := $(if $(filter s3,$(STORE)),$(VERSITYGW))
demo: stack-deps build $(STORE_DEPS)
	@go build -o $(BIN)/ingestq-demo ./e2e/cmd/demo
	@$(BIN)/ingestq-demo -bin $(BIN) -examples examples -run run -store $(STORE)

# The same stack, kept running until Ctrl-C.
# Built, not `go run`: go run would answer Ctrl-C with exit status 1.
up: stack-deps build $(STORE_DEPS)
	@go build -o $(BIN)/ingestq-demo ./e2e/cmd/demo
	@$(BIN)/ingestq-demo -up -bin $(BIN) -examples examples -run run -store $(STORE)

$(BUF):
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@mkdir -p $(@D) && touch $@

$(PROTOC_GEN_GO):
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@mkdir -p $(@D) && touch $@

$(STATICCHECK):
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mkdir -p $(@D) && touch $@

$(KUSTOMIZE):
	GOBIN=$(BIN) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	@mkdir -p $(@D) && touch $@

# Installed under its versioned name, the binary itself: shared/s3test
# finds it there.
$(VERSITYGW):
	@mkdir -p $(@D)
	GOBIN=$(@D) go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv $(@D)/versitygw $@

$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@mkdir -p $(@D) && touch $@

proto: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	PATH="$(BIN):$$PATH" $(BIN)/buf generate

lint: $(BUF) $(STATICCHECK) proto-check
	$(BIN)/buf lint
	@unformatted=$$(gofmt -l $(MODULES)); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@for m in $(MODULES); do (cd "$$m" && go vet ./... && $(BIN)/staticcheck ./...); done

# The generated code is what the pinned generators make of proto/ now:
# regenerate into a scratch copy, its generated files removed first (so a
# file left from a .proto since removed shows too), and compare.
proto-check: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	@scratch=$$(mktemp -d); trap 'rm -rf "$$scratch"' EXIT; \
	cp -r proto buf.yaml buf.gen.yaml "$$scratch"/; \
	find "$$scratch/proto" -name '*.pb.go' -delete; \
	(cd "$$scratch" && PATH="$(BIN):$$PATH" $(BIN)/buf generate); \
	if ! diff -r -q proto "$$scratch/proto" >/dev/null; then \
		echo "proto/: the generated code differs from what make proto makes now:"; \
		diff -r -q proto "$$scratch/proto" || true; exit 1; \
	fi; echo "proto/: generated code up to date"

build:
	@mkdir -p $(BIN)
	@for s in $(SERVICES); do (cd services/$$s && go build -o $(BIN)/$$s .); done
	@cd tools/ingestq-backup && go build -o $(BIN)/ingestq-backup .

# Every service's variables in one table, the console's last: rows are kept
# the first time a variable appears, so listen addresses show the batcher's
# defaults.
config-table: build
	@for s in $(SERVICES); do $(BIN)/$$s -print-env-table; done | \
		awk -F'|' '/^\| Variable |^\|---/ { if (!seen[$$0]++) print; next } !seen[$$2]++'
