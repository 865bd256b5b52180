# rekey: see README.md. Every target works from a clean checkout.
SHELL := /usr/bin/env bash
GO ?= go
BIN := _output/bin
DATA_DIR ?= .rekey
PORT ?= 8443
GOTEST_FLAGS ?=

.PHONY: all build image run stop test test-unit test-integration test-e2e test-install test-fault test-long verify verify-gofmt verify-vet verify-tidy verify-codegen verify-lint verify-imports update update-gofmt update-tidy update-codegen update-lint fuzz bench tools clean

all: build

## build: compile rekey-apiserver, rekey-agent and kubectl-rekey into
## _output/bin, stamped with VERSION and the git commit (--version), with
## kubectl_complete-rekey (kubectl's shell completion of the plugin)
build:
	$(GO) build -ldflags "$$(hack/version-ldflags.sh)" -o $(BIN)/ ./cmd/...
	install -m 0755 cmd/kubectl-rekey/kubectl_complete-rekey $(BIN)/

## image: container image tarballs of rekey-apiserver and rekey-agent in
## _output/images (static, no PKCS#11; docs/install.md), without a daemon
image:
	hack/build-images.sh

## run: standalone server with embedded etcd, in the background; returns
## once it is ready. Admin kubeconfig in $(DATA_DIR)/admin.kubeconfig, log in
## $(DATA_DIR)/rekey-apiserver.log; ARGS='...' adds flags, FOREGROUND=1
## keeps it in the foreground; make stop stops it.
ARGS ?=
run: build
	DATA_DIR='$(DATA_DIR)' PORT='$(PORT)' BIN='$(BIN)' ARGS='$(ARGS)' hack/run.sh

## stop: stop the server make run started
stop:
	DATA_DIR='$(DATA_DIR)' hack/stop.sh

## test: everything: static checks, unit tests (race), integration and
## end-to-end tests, the install test and a short fault run
test: verify test-unit test-integration test-e2e test-install test-fault

test-unit:
	$(GO) test -race -count=1 $(GOTEST_FLAGS) ./pkg/... ./cmd/...
	# The crash points as the test binaries build them (-tags rekeytest).
	$(GO) test -race -count=1 -tags rekeytest ./pkg/crashpoint/...
	cd hack/image && $(GO) test -count=1 ./...
	# The container image's static build (no cgo, so no PKCS#11).
	CGO_ENABLED=0 $(GO) test -count=1 $(GOTEST_FLAGS) ./pkg/signing/...
	# make run / make stop never signal a process a stale pid file names.
	hack/test-run-stop.sh

test-integration:
	hack/install-test-deps.sh
	# Most tests start a server of their own and spend their time waiting
	# on it, so four at a time beat the default (GOMAXPROCS) on 2 cores.
	$(GO) test -count=1 -timeout 20m -parallel 4 $(GOTEST_FLAGS) ./test/integration/...

test-e2e:
	hack/install-test-deps.sh
	$(GO) test -count=1 -timeout 40m $(GOTEST_FLAGS) ./test/e2e/...

## test-install: make image's tarballs installed with kubectl apply -k into a
## real one-node cluster (kube-scheduler, a kubelet on containerd)
test-install:
	hack/install-test-deps.sh
	$(GO) test -count=1 -timeout 30m $(GOTEST_FLAGS) ./test/install/...

## test-fault: three replicas on a three-member etcd under a mixed load
## while faults are injected (etcd and rekey leaders killed, the rekey
## leader paused past its lease, an etcd member partitioned or its disk
## full, rolling restarts), then the history checker (docs/reliability.md).
## FAULT_DURATION (default 4m, what make test runs; 30m or more by hand),
## FAULT_SEED replays a run (its seed is printed), FAULT_REPORT=FILE writes
## the figures as Markdown, FAULT_RATE paces the load (request lifetimes
## per second; a long run wants about 40), FAULT_TIMEOUT must exceed the
## duration by about 15 minutes. As root the etcd members' disks are tmpfs
## (for the disk-full fault); without root that fault is left out, and the
## run says so. A long run: make test-fault FAULT_DURATION=30m FAULT_RATE=40
## FAULT_TIMEOUT=50m
FAULT_DURATION ?= 4m
FAULT_TIMEOUT ?= 20m
FAULT_SEED ?=
FAULT_REPORT ?=
FAULT_RATE ?=
# FAULT_KINDS=etcd-leader-sigkill,... runs those faults only; FAULT_HISTORY=FILE
# writes every operation and fault as JSON.
FAULT_KINDS ?=
FAULT_HISTORY ?=
test-fault:
	hack/install-test-deps.sh
	# The checker's own tests, and the etcd cluster and peer proxy it runs on.
	$(GO) test -count=1 -race ./test/fault/history/... ./test/framework/...
	REKEY_FAULT_DURATION='$(FAULT_DURATION)' REKEY_FAULT_SEED='$(FAULT_SEED)' REKEY_FAULT_REPORT='$(FAULT_REPORT)' REKEY_FAULT_RATE='$(FAULT_RATE)' \
		REKEY_FAULT_KINDS='$(FAULT_KINDS)' REKEY_FAULT_HISTORY='$(FAULT_HISTORY)' \
		$(GO) test -count=1 -v -run '^TestFaultsUnderLoad$$' -timeout $(FAULT_TIMEOUT) $(GOTEST_FLAGS) ./test/fault/

## test-long: test-install with REKEY_LONG=1, which adds what waits for real
## time to pass: a kubelet renewing its certificate across a CA rotation
## (about 9 minutes), a pod certificate's refresh (about 35 minutes: half
## of the shortest lifetime kube-apiserver allows, 1h, plus the kubelet's
## jitter). Not part of `make test`.
test-long:
	hack/install-test-deps.sh
	REKEY_LONG=1 $(GO) test -count=1 -timeout 90m $(GOTEST_FLAGS) ./test/install/...

## verify: formatting, vet, go.mod tidiness, generated code, golangci-lint,
## logcheck and import layering. Each verify-X has an update-X that fixes
## what it can (vet and imports have nothing to fix automatically).
verify: verify-gofmt verify-vet verify-tidy verify-codegen verify-lint verify-imports

## update: every fix the verify targets can make
update: update-gofmt update-tidy update-codegen update-lint

GO_FILES = $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')

verify-gofmt:
	@out=$$(gofmt -l $(GO_FILES)); \
	if [[ -n "$$out" ]]; then echo "gofmt needed on (make update-gofmt):"; echo "$$out"; exit 1; fi

update-gofmt:
	gofmt -w $(GO_FILES)

verify-vet:
	$(GO) vet ./...
	$(GO) vet -tags rekeytest ./...

verify-tidy:
	hack/verify-tidy.sh

update-tidy:
	hack/update-tidy.sh

verify-codegen:
	hack/install-packages.sh protobuf-compiler
	hack/verify-codegen.sh

update-codegen:
	hack/install-packages.sh protobuf-compiler
	hack/update-codegen.sh

verify-lint:
	hack/verify-lint.sh

update-lint:
	hack/update-lint.sh

verify-imports:
	hack/verify-imports.sh

## fuzz: run each parser (and the certificate encoder) fuzz target for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./pkg/apis/certificates/validation -run '^$$' -fuzz '^FuzzParseCSR$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/apis/certificates/validation -run '^$$' -fuzz '^FuzzParseCertificateChain$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/apiserver -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/attest -run '^$$' -fuzz '^FuzzParseAK$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/attest -run '^$$' -fuzz '^FuzzVerifyQuote$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/attest -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/attest -run '^$$' -fuzz '^FuzzParseEKPublic$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/signing -run '^$$' -fuzz '^FuzzCreateCertificate$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/attest -run '^$$' -fuzz '^FuzzParseEKCertificate$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/strictpem -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)

## bench: Go benchmarks of the hot paths, then the issuance load generator
## (rekey direct, aggregated, native kube-apiserver + kube-controller-manager,
## 5,000-node bootstrap burst, 5,000-node renewal storm after a rotation's
## Prepared, 5,000-consumer trust gate, 1,000 pods' PodCertificateRequests
## beside native CSRs, 100 revocations to kube-apiserver's 403 and its reads
## with and without rekey's webhook, service-account tokens through
## rekey-agent jwt-signer beside kube-apiserver's key files); the report goes
## to _output/benchmarks.md
BENCH_ISSUANCES ?= 10000
BENCH_BURST ?= 5000
BENCH_STORM ?= 5000
BENCH_RENEWAL_WINDOW ?= 60s
BENCH_GATE ?= 5000
BENCH_PCR ?= 1000
BENCH_SATOKENS ?= true
bench:
	hack/install-test-deps.sh
	$(GO) build -o /dev/null ./test/bench
	hack/build-tools.sh kube-controller-manager >/dev/null
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/apis/certificates/validation ./pkg/policy ./pkg/signing ./pkg/admission/signerapproval ./pkg/attest ./pkg/revocation ./pkg/crl ./pkg/jwtkey ./pkg/externaljwt
	mkdir -p _output
	$(GO) run ./test/bench -issuances $(BENCH_ISSUANCES) -burst-nodes $(BENCH_BURST) \
		-renewal-storm-nodes $(BENCH_STORM) -renewal-window $(BENCH_RENEWAL_WINDOW) -gate-consumers $(BENCH_GATE) \
		-pcr-pods $(BENCH_PCR) -satokens=$(BENCH_SATOKENS) -out _output/benchmarks.md

## tools: build kube-apiserver, kubectl and etcd into the cache (hack/build-tools.sh)
tools:
	hack/build-tools.sh etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet

clean:
	rm -rf _output
