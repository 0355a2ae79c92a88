# conductor — build, run and test entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
BIN := bin/conductor
# VERSION is what conductor --version prints (and the image's tag): git
# describe of the checkout (the nearest tag with the commits since, else the
# commit; -dirty with uncommitted changes), "dev" outside a git checkout.
# GO_LDFLAGS stamps it into every conductor binary the Makefile builds.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO_LDFLAGS = -X main.version=$(VERSION)
FUZZTIME ?= 30s
FUZZ_SMOKE_TIME ?= 3s
BENCH ?= .
BENCHTIME ?= 1s
BENCH_BIN := bin/conductor-bench
# make bench-e2e: the Mooncake conversation trace (first BENCH_E2E_LIMIT
# records; 0 = all 12,031, about 4 minutes on 2 cores) through 8 simulated vLLM
# engines into a spawned conductor process.
BENCH_E2E_TRACE ?= ../shared/traces/mooncake_conversation_trace.jsonl
BENCH_E2E_LIMIT ?= 4000
BENCH_E2E_OUT ?= bench/results/e2e
BENCH_E2E_ARGS = -engines 8 -dialects vllm-map,vllm-array -trace $(BENCH_E2E_TRACE) -trace-limit $(BENCH_E2E_LIMIT) \
	-host 32768 -disk 65536 -store 131072 -verify -verify-every 1000 -query-only 5s \
	-sweep 1000,2000,4000,6000,8000,10000 -sweep-time 2s

.PHONY: all deps build install uninstall run test test-k8s docs-test test-faults vet fmt-check race unit fuzz fuzz-smoke python-test bench bench-report bench-build bench-smoke bench-e2e bench-tail bench-fleet bench-streams bench-cores e2e-trace e2e-faults bench-gaps clean

all: build

# deps installs what a fresh Debian machine lacks for cgo + libzmq: a C
# toolchain (cgo and -race need one), libzmq with pkg-config, and curl (the
# docs' examples use it); and python3 with its venv module (the Python
# client's tests install it into a fresh virtual environment).
APT_PKGS := libzmq3-dev pkg-config gcc libc6-dev curl
deps:
	@if ! command -v gcc >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libzmq || ! command -v curl >/dev/null 2>&1; then \
		echo "installing $(APT_PKGS) (apt-get)"; \
		SUDO=""; \
		if [ "$$(id -u)" -ne 0 ]; then \
			command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to apt-get install $(APT_PKGS)" >&2; exit 1; }; \
			SUDO=sudo; \
		fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(APT_PKGS) >/dev/null; \
	fi
	@pkg-config --exists libzmq || { echo "libzmq still missing after install" >&2; exit 1; }
	@if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then \
		echo "installing python3 and python3-venv (apt-get)"; \
		SUDO=""; \
		if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq python3 python3-venv >/dev/null; \
	fi

build: deps
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o $(BIN) ./cmd/conductor
	$(GO) build -o bin/fake-engine ./bench/cmd/fake-engine

# install puts conductor where a service manager finds it: the binary as
# $(PREFIX)/bin/conductor, the systemd unit (deploy/systemd/conductor.service.in,
# its ExecStart naming that binary) as $(PREFIX)/lib/systemd/system/conductor.service,
# and deploy/config.json as /etc/conductor/config.json unless that file
# exists. DESTDIR stages the tree under another root (packaging). $(BIN) is
# rebuilt only when a Go source or go.mod/go.sum is newer than it, so
# `make build && sudo make install` needs no Go toolchain as root.
# uninstall removes the binary and the unit; the configuration and the state
# in /var/lib/conductor stay.
PREFIX ?= /usr/local
DESTDIR ?=
UNITDIR = $(PREFIX)/lib/systemd/system
GO_SRCS := $(shell find . \( -path ./.git -o -path ./bin -o -path ./tools \) -prune -o -name '*.go' -print 2>/dev/null) go.mod go.sum

$(BIN): $(GO_SRCS)
	@$(MAKE) --no-print-directory deps
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o $@ ./cmd/conductor

install: $(BIN)
	install -d -m 0755 $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)/etc/conductor
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/conductor
	sed 's|@BINDIR@|$(PREFIX)/bin|g' deploy/systemd/conductor.service.in > $(DESTDIR)$(UNITDIR)/conductor.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/conductor.service
	@if [ -e $(DESTDIR)/etc/conductor/config.json ]; then \
		echo "kept the existing $(DESTDIR)/etc/conductor/config.json"; \
	else \
		echo "install -m 0644 deploy/config.json $(DESTDIR)/etc/conductor/config.json"; \
		install -m 0644 deploy/config.json $(DESTDIR)/etc/conductor/config.json; \
	fi
	@[ -n "$(DESTDIR)" ] || echo "next: systemctl daemon-reload && systemctl enable --now conductor"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/conductor $(DESTDIR)$(UNITDIR)/conductor.service
	@[ ! -e $(DESTDIR)/etc/conductor/config.json ] || echo "kept $(DESTDIR)/etc/conductor/config.json"

# run: `make run` builds both binaries and starts the live demo,
# bin/conductor-bench demo: a conductor on 127.0.0.1:13333 with no durable
# state and simulated engines publishing to it, a summary every second
# (docs/harness.md); Ctrl-C stops both. DEMO_ARGS adds demo flags, conductor's
# after -- (DEMO_ARGS="-http-port 0 -- --log-level WARN"). Setting RUN_ARGS (on
# the command line or in the environment) runs conductor as deployed instead,
# with those flags: make run RUN_ARGS="--config /etc/conductor.json"; RUN_ARGS=
# (empty) runs it with its defaults.
DEMO_ARGS ?=
run: $(if $(filter undefined,$(origin RUN_ARGS)),bench-build,build)
ifeq ($(origin RUN_ARGS),undefined)
	./$(BENCH_BIN) demo -conductor $(BIN) $(DEMO_ARGS)
else
	./$(BIN) $(RUN_ARGS)
endif

vet: deps
	$(GO) vet ./...

# staticcheck runs honnef.co/go/tools' staticcheck (its default checks, test
# files included) over ./... at the version pinned in tools/go.mod, a module of
# its own so that the server's go.mod does not carry it. The build needs the
# module proxy once, then only the module cache.
STATICCHECK := bin/staticcheck
.PHONY: staticcheck
staticcheck: deps
	cd tools && $(GO) build -o ../$(STATICCHECK) honnef.co/go/tools/cmd/staticcheck
	./$(STATICCHECK) ./...

# chart-check checks the Helm chart in deploy/helm/conductor offline with
# tools/chartcheck, built from the tools module (helm's lint and renderer and
# the Kubernetes API types, pinned in tools/go.mod): each ci/*-values.yaml set
# lints and renders, every object decodes strictly into its Kubernetes type and
# passes the checks the values schema cannot express, the value sets the chart
# must refuse fail with its message, and deploy/k8s/conductor.yaml equals a
# fresh render (bin/chartcheck -update rewrites it); -show works from any
# directory (run from /tmp). Then the tool's own tests.
# The first build compiles the Kubernetes API packages (about 260 CPU-seconds
# on the 2-core test machine); later ones only link.
CHARTCHECK := bin/chartcheck
.PHONY: chart-check
chart-check:
	cd tools && $(GO) build -o ../$(CHARTCHECK) ./chartcheck
	./$(CHARTCHECK)
	cd /tmp && $(CURDIR)/$(CHARTCHECK) -show $(CURDIR)/deploy/helm/conductor/ci/default-values.yaml >/dev/null 2>&1 || \
		{ echo "chartcheck -show fails outside the repository" >&2; exit 1; }
	cd tools && $(GO) test -count=1 -vet=off ./chartcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# race runs every test under the race detector. -timeout (here and in unit)
# is each package's bound for a hang: a loaded machine (make test under nice
# beside busy processes) takes several times the idle 4 minutes.
race: deps
	$(GO) test -race -count=1 -timeout 45m ./...

# unit runs without -race the packages whose tests the race build leaves out
# (//go:build !race: the zero-allocation proofs, whose counts are meaningless
# under the race detector); the race stage runs every test. UNIT_PKGS=./...
# runs the whole suite without -race.
UNIT_PKGS ?= $$($(GO) list -race -f '{{.ImportPath}} {{.IgnoredGoFiles}}' ./... | awk '/_test\.go/ {print $$1}')
unit: deps
	$(GO) test -count=1 -timeout 30m $(UNIT_PKGS)

# fuzz-smoke runs every fuzz target briefly (part of `make test`).
fuzz-smoke: deps
	@FUZZTIME=$(FUZZ_SMOKE_TIME) FUZZMINIMIZE=0 ./fuzz/run.sh

# fuzz runs every fuzz target for FUZZTIME each.
fuzz: deps
	@FUZZTIME=$(FUZZTIME) ./fuzz/run.sh

# python-test runs the Python client's unittest suite (python/tests) against
# freshly built conductor and fake-engine binaries on free loopback ports;
# tests/test_package.py installs the client as python/README.md says, in a
# fresh virtual environment, with pip barred from any package index.
python-test: deps
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o bin/conductor ./cmd/conductor
	$(GO) build -o bin/fake-engine ./bench/cmd/fake-engine
	cd python && CONDUCTOR_BIN=$(CURDIR)/bin/conductor FAKE_ENGINE_BIN=$(CURDIR)/bin/fake-engine \
		python3 -m unittest discover -s tests -t . -v

# test runs every stage even when one fails (.ci/stages), then prints one
# summary: each stage's status and time, and the failing tests. TEST_STAGES=
# runs some. A+B run at the same time: race+unit, whose many tests wait on
# child processes and sockets for much of their time, and fuzz-smoke+chart-check
# (the fuzz smoke runs for a fixed time whatever CPU it gets, the chart
# check's build is CPU-bound). On a machine that other work keeps busy a stage
# gets CPU in proportion to its runnable threads, so pairs finish well before
# the two stages would in turn.
TEST_STAGES ?= vet fmt-check staticcheck race+unit fuzz-smoke+chart-check python-test bench-smoke e2e-trace e2e-faults docs-test
test: deps
	@MAKE="$(MAKE)" ./.ci/stages $(TEST_STAGES)

# docs-test runs every block of README.md and docs/*.md marked runnable
# (cmd/conductor/docs_test.go states the convention: once, as a reader pastes
# it, no retries) against fresh processes of the binaries built here, with a
# real nats-server for the scale-out docs and bin/chartcheck for the
# deployment guide; then the README's quick start, the vLLM guide's example,
# the Python client's and the quick start again in one shell with the default
# state directory (TestDocsInOneShell).
docs-test: build
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2
	cd tools && $(GO) build -o ../$(CHARTCHECK) ./chartcheck
	CONDUCTOR_DOCS_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout 20m -run '^TestDocs(InOneShell)?$$' -v ./cmd/conductor

# test-k8s runs Kubernetes discovery against a real API server: etcd and
# kube-apiserver, which tools/kube/build.sh puts in bin/ the first time (the
# k8s.io/kubernetes module through the module proxy; a long build), conductor
# watching with an identity RBAC limits to its namespace's pods, real ZMQ
# publishers for the engines. `make test` runs the same discovery against
# client-go's fake API server; .ci/run adds this target when bin/ already
# holds both binaries.
test-k8s: deps
	./tools/kube/build.sh
	CONDUCTOR_K8S_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout 15m -run '^TestKubernetesDiscoveryAPIServer$$' -v ./cmd/conductor

# test-faults runs the fault suite at full size (its short form is part of
# `make test`): publisher restarts, floods, malformed frames, bad replay
# endpoints, SIGKILL during ingest, registration churn, disk full, fd exhaustion.
test-faults: deps
	CONDUCTOR_FAULTS=full $(GO) test -count=1 -timeout 20m -v -run 'TestFault|TestFDExhaustion|TestState' ./cmd/conductor

# bench-report regenerates BENCHMARKS.md's generated (in-process) tables
# with -count=$(COUNT) and benchstat; SUITES= picks some (hash core-apply
# core-query wire codec ingest-recv httpd footprint). It exits 1 when a
# median exceeds its ceiling in bench/limits.txt (heap bytes and allocations
# per stored block). Run it on a quiet machine: about 10 minutes at
# REPORT_BENCHTIME=300ms.
COUNT ?= 6
REPORT_BENCHTIME ?= 300ms
bench-report: deps
	COUNT=$(COUNT) BENCHTIME=$(REPORT_BENCHTIME) $(if $(SUITES),SUITES="$(SUITES)") ./bench/report.sh

bench: deps
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCHTIME) -benchmem ./...

bench-build: build
	$(GO) build -o $(BENCH_BIN) ./bench/cmd/conductor-bench

# bench-smoke: a few seconds of the harness in separate processes, verify on
# (part of `make test`): any answer that differs from the ground truth fails.
bench-smoke: bench-build
	./$(BENCH_BIN) -spawn $(BIN) -engines 4 -ranks 2 -requests 300 -device 512 -host 512 -disk 1024 -store 2048 -clear-every 40 \
		-verify -verify-every 100 -verify-sample 32 -query-only 1s -concurrency 2 -quiet >/dev/null

# e2e-trace (part of `make test`): the first 2,000 records of the Mooncake
# conversation trace (bench/testdata) through 8 simulated vLLM engines, map-
# and array-encoded, with host and disk tiers, evictions, and a shared
# Mooncake store master that flushes each request's stores and evictions as
# one message (about 158 of them above 1 MiB, the largest 4,025,189 bytes;
# -expect-large-store fails the run below 100), into a spawned conductor;
# answers checked against the ground truth at 4 quiescent points and through
# a query-only phase: any mismatch fails. E2E_CONDUCTOR runs another conductor
# binary, E2E_CONDUCTOR_ARGS adds its flags
# (E2E_CONDUCTOR_ARGS="--max-message-bytes 1048576").
E2E_TRACE ?= bench/testdata/mooncake_conversation_trace_head2000.jsonl
E2E_CONDUCTOR ?= $(BIN)
E2E_CONDUCTOR_ARGS ?=
E2E_RUN = ./$(BENCH_BIN) -spawn $(E2E_CONDUCTOR) $(if $(E2E_CONDUCTOR_ARGS),-spawn-args "$(E2E_CONDUCTOR_ARGS)") \
	-engines 8 -dialects vllm-map,vllm-array -trace $(E2E_TRACE) -host 32768 -disk 65536 -store 131072 -verify -quiet
e2e-trace: bench-build
	$(E2E_RUN) -trace-limit 2000 -verify-every 500 -query-only 2s -expect-large-store 100

# e2e-faults (part of `make test`): the first 1,000 records of the same trace
# and fleet, three runs, each checked at 5 quiescent points of 128 prompts and
# failing on accuracy outside its thresholds (docs/harness.md gives the
# measurements they come from). Routing is round-robin, so which messages are
# lost and what each point measures are fixed by the seeds.
#  1. engines registered without replay lose 0.2% of their messages, the store
#     master 0.5% of its, and 3 engine ranks restart (fault seed 1);
#  2. conductor SIGKILLed after 500 records and restarted on its state
#     directory, its snapshot written after 475 (-snapshot-at: a graceful
#     restart; no other snapshot; 25 records are about the default 10 s
#     snapshot interval on the trace's clock); engines keep rings of 128
#     messages, more than they publish in 25 records and fewer than in 500,
#     so the snapshot matters; the store master's 25 records are lost;
#  3. a query replica following a relay over NATS JetStream (bin/nats-server,
#     built from the module), 3 rank restarts: every answer exact.
# Every run uses conductor's default gap policy (keep). All three run even
# when one fails.
E2E_FAULTS_RUN = $(E2E_RUN) -trace-limit 1000 -verify-every 250 -verify-sample 128 -query-only 1s -policy round-robin
e2e-faults: bench-build
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2
	@rc=0; \
	echo "== e2e-faults 1/3: message loss without replay (engines 0.2%, store 0.5%) and 3 rank restarts"; \
	$(E2E_FAULTS_RUN) -fault-seed 1 -engine-replay=false -loss-engines 0.002 -loss-store 0.005 -restarts 3 \
		-min-exact-answers 0.97 -min-exact device=0.995,cpu_local=0.995,cpu_share=0.98,disk=0.98 \
		-max-over-tokens-mean device=1,cpu_local=1,cpu_share=33,disk=33 -max-under-tokens-mean 1 || rc=1; \
	echo "== e2e-faults 2/3: conductor SIGKILLed after 500 records and restarted from its state directory"; \
	$(E2E_FAULTS_RUN) -snapshot-at 475 -crash-at 500 -replay-ring 128 \
		-min-exact-answers 0.95 -min-exact device=1,cpu_local=1,cpu_share=0.97,disk=0.97 \
		-max-over-tokens-mean device=0,cpu_local=0,cpu_share=100,disk=90 \
		-max-under-tokens-mean device=0,cpu_local=0,cpu_share=110,disk=110 || rc=1; \
	echo "== e2e-faults 3/3: a query replica following a relay, 3 rank restarts"; \
	$(E2E_FAULTS_RUN) -replica -nats-server bin/nats-server -restarts 3 || rc=1; \
	exit $$rc

# bench-gaps: the measurements behind a gap policy: for each policy of
# GAPS_POLICIES (conductor's --gap-policy; clear runs on a conductor without
# that flag; expire with --gap-expire-after GAPS_EXPIRE_AFTER, on the wall
# clock, while the harness replays 400 records, ~2 minutes of the trace's
# clock, in a few seconds) and each loss rate of GAPS_RATES, GAPS_LIMIT trace records with
# that fraction of the store master's messages lost, then of the engines'
# (registered without replay), accuracy per tier over GAPS_SEEDS fault seeds
# (at 0.1% a 400-record run loses 0.4 store messages on average); then, for
# each snapshot interval of GAPS_INTERVALS, a SIGKILL after GAPS_CRASH_LIMIT−100 records
# with the last snapshot that long before on the trace's clock: what the
# restarted index lacks. The tables go to stdout and bench/results/gaps.md
# (git-ignored).
GAPS_POLICIES ?= keep,clear,expire
GAPS_EXPIRE_AFTER ?= 3s
GAPS_RATES ?= 0.001,0.01,0.1
GAPS_SEEDS ?= 3
GAPS_INTERVALS ?= 5m,1m,30s,10s,1s
GAPS_LIMIT ?= 400
GAPS_CRASH_LIMIT ?= 1200
GAPS_TRACE ?= $(E2E_TRACE)
bench-gaps: bench-build
	@mkdir -p bench/results
	./$(BENCH_BIN) gaps -conductor $(BIN) -trace $(GAPS_TRACE) -trace-limit $(GAPS_LIMIT) -policies $(GAPS_POLICIES) -expire-after $(GAPS_EXPIRE_AFTER) \
		-rates $(GAPS_RATES) -seeds $(GAPS_SEEDS) -snapshot-intervals $(GAPS_INTERVALS) -crash-limit $(GAPS_CRASH_LIMIT) -md bench/results/gaps.md

# bench-tail: query tail latency while one publisher ingests flat out
# (BENCHMARKS.md, "Query tail latency under full ingest"): prints one table
# (query p50/p99/p999/max, ingest blocks/s and server CPU per block, grow and
# steady, with and without queries, RSS, and the handler's own p99/max).
# TAIL_BLOCKS / TAIL_STEADY_BLOCKS size the runs (default 10M); TAIL_ARGS adds
# conductor flags, BENCH_CONDUCTOR_BIN runs a prebuilt binary,
# TAIL_PUBLISHER=inproc runs the publisher in the test process,
# TAIL_PUBLISHER_NICE=N runs its process niced.
TAIL_BLOCKS ?= 10000000
TAIL_STEADY_BLOCKS ?= 10000000
bench-tail: deps
	TAIL_BLOCKS=$(TAIL_BLOCKS) TAIL_STEADY_BLOCKS=$(TAIL_STEADY_BLOCKS) \
		$(GO) test -run '^$$' -bench BenchmarkTailUnderIngest -benchtime 1x -timeout 60m ./bench/

# bench-fleet: the fleet cost curves and the side-by-side goals table, in
# separate processes (bench/fleet_test.go): ingest CPU and RSS per block
# against index size, in 16- and 64-block batches; cold /query server CPU
# against prompt length (1k to 1M tokens) on each full index and against the
# number of instances holding the prompt (FLEET_HOLDERS, default 1 10 100
# 1000); query tails while FLEET_TAIL_BLOCKS (default 10M) fresh blocks
# stream in. FLEET_SIZES sizes it (default 1M and 10M blocks, about 6 minutes
# for conductor; 100000000 more needs about 7 GB free and 10 minutes);
# FLEET_BATCHES, FLEET_TOKENS and FLEET_ARGS (conductor flags, default
# --hash-memo-bytes 0) pass through. CPP_CONDUCTOR names a C++ Mooncake
# conductor binary (built outside this repository, see BENCHMARKS.md) to run
# on every axis beside conductor; without it the C++ columns are left out.
# The report goes to bench/results/fleet/ (git-ignored), then replaces
# BENCHMARKS.md's fleet block, its SVGs copied to bench/curves/ (SPLICE=0
# skips that).
FLEET_SIZES ?= 1000000 10000000
bench-fleet: deps
	BENCH_CPP_CONDUCTOR="$(CPP_CONDUCTOR)" FLEET_SIZES="$(FLEET_SIZES)" FLEET_OUT=$(CURDIR)/bench/results/fleet \
		$(GO) test -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 3h ./bench/
	FLEET_CMD="$(strip $(if $(CPP_CONDUCTOR),BENCH_CPP_CONDUCTOR=<mooncake_conductor>) FLEET_SIZES='$(FLEET_SIZES)' $(foreach v,FLEET_BATCHES FLEET_TOKENS FLEET_ARGS FLEET_HOLDERS FLEET_TAIL_BLOCKS,$(if $($(v)),$(v)='$($(v))'))) go test -run '^\$$' -bench BenchmarkFleet -benchtime 1x ./bench/" \
		./bench/report.sh fleet bench/results/fleet/fleet.md

# bench-streams: the streams axis in separate processes
# (bench/streams_test.go): for each K in STREAMS_COUNTS a fresh server, pinned
# with taskset to STREAMS_CORES CPUs of its own (default 1), ingests from K
# publishers at once, each its own registration, in publisher processes pinned
# to the other CPUs: 64-block batches of fresh blocks, max(STREAMS_MIN_BATCHES,
# STREAMS_BLOCKS ÷ (64 K)) per stream (defaults 32 and 1310720: 1.31M blocks,
# 2.05M at 1,000 streams; about 20 seconds for conductor on the 2-vCPU
# machine), lossless. A row gives the aggregate blocks/s, the server CPU per
# stored block (/proc), how busy the server's and the harness's CPUs were, and
# the server's threads and RSS with every stream registered. STREAMS_ARGS
# passes conductor flags; STREAMS_LIMIT (seconds, default 200) bounds a point,
# reported as not finished past it. CPP_CONDUCTOR runs the C++ Mooncake
# conductor (see bench-fleet) on every point beside conductor. The report goes
# to bench/results/streams/ (git-ignored), then replaces BENCHMARKS.md's
# streams block, its SVGs copied to bench/curves/ (SPLICE=0 skips that).
STREAMS_COUNTS ?= 1 16 64 256 1000
bench-streams: deps
	BENCH_CPP_CONDUCTOR="$(CPP_CONDUCTOR)" STREAMS_COUNTS="$(STREAMS_COUNTS)" STREAMS_OUT=$(CURDIR)/bench/results/streams \
		$(GO) test -run '^$$' -bench BenchmarkStreams -benchtime 1x -timeout 3h ./bench/
	STREAMS_CMD="$(strip $(if $(CPP_CONDUCTOR),BENCH_CPP_CONDUCTOR=<mooncake_conductor>) STREAMS_COUNTS='$(STREAMS_COUNTS)' $(foreach v,STREAMS_BLOCKS STREAMS_MIN_BATCHES STREAMS_CORES STREAMS_ARGS STREAMS_LIMIT,$(if $($(v)),$(v)='$($(v))'))) go test -run '^\$$' -bench BenchmarkStreams -benchtime 1x ./bench/" \
		./bench/report.sh streams bench/results/streams/streams.md

# bench-cores: the core axis in separate processes (bench/cores_test.go): for
# each count c in CORES_COUNTS a fresh server pinned with taskset to c CPUs,
# the harness to at least c others, ingests from CORES_STREAMS streams (default
# 64; CORES_BLOCKS blocks, default 1310720) and then answers cold queries of a
# 1k-token prompt (full hit) from CORES_CONNS keep-alive connections (default
# 64; CORES_QUERIES per server core, default 50000; CORES_ARGS, default
# --hash-memo-bytes 0). Each row says how busy the server's and the harness's
# CPUs were and which limited the rate. A count the machine cannot hold (2c
# free CPUs) is not measured and the report says so. CPP_CONDUCTOR as
# bench-streams. The report goes to bench/results/cores/, then replaces
# BENCHMARKS.md's cores block, its SVGs copied to bench/curves/ (SPLICE=0 skips
# that).
CORES_COUNTS ?= 1 2 4 8
bench-cores: deps
	BENCH_CPP_CONDUCTOR="$(CPP_CONDUCTOR)" CORES_COUNTS="$(CORES_COUNTS)" CORES_OUT=$(CURDIR)/bench/results/cores \
		$(GO) test -run '^$$' -bench BenchmarkCores -benchtime 1x -timeout 3h ./bench/
	CORES_CMD="$(strip $(if $(CPP_CONDUCTOR),BENCH_CPP_CONDUCTOR=<mooncake_conductor>) CORES_COUNTS='$(CORES_COUNTS)' $(foreach v,CORES_STREAMS CORES_BLOCKS CORES_QUERIES CORES_CONNS CORES_ARGS CORES_LIMIT,$(if $($(v)),$(v)='$($(v))'))) go test -run '^\$$' -bench BenchmarkCores -benchtime 1x ./bench/" \
		./bench/report.sh cores bench/results/cores/cores.md

# bench-e2e: the harness in separate processes (BENCH_E2E_ARGS above). The
# report goes to BENCH_E2E_OUT (git-ignored): e2e.json, e2e.md and the
# latency/throughput plot e2e-latency.svg; e2e.md then replaces BENCHMARKS.md's
# end-to-end block, with the command, machine and date (SPLICE=0 skips that).
bench-e2e: bench-build
	@test -r $(BENCH_E2E_TRACE) || { echo "trace $(BENCH_E2E_TRACE) not found (set BENCH_E2E_TRACE)" >&2; exit 1; }
	@mkdir -p $(BENCH_E2E_OUT)
	./$(BENCH_BIN) -spawn $(BIN) $(BENCH_E2E_ARGS) \
		-json $(BENCH_E2E_OUT)/e2e.json -md $(BENCH_E2E_OUT)/e2e.md -svg $(BENCH_E2E_OUT)/e2e-latency.svg
	E2E_CMD="$(strip $(BENCH_BIN) -spawn $(BIN) $(BENCH_E2E_ARGS))" ./bench/report.sh e2e $(BENCH_E2E_OUT)/e2e.md


# image builds the container image (deploy/container/Containerfile) with
# podman (in docker format, which keeps the HEALTHCHECK), else docker, tagged $(IMAGE). IMAGE_BUILD_ARGS adds build flags,
# e.g. --build-arg GO_IMAGE=... --build-arg RUNTIME_IMAGE=... for a
# registry of your own. image-test builds it against base images assembled
# on this machine (deploy/container/test.sh: a debootstrap'd Debian under
# the base images' names, the Go toolchain copied in), runs it non-root with
# a read-only root filesystem, and checks /health, the HEALTHCHECK and a real
# hit from a fake engine.
CONTAINER ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
IMAGE ?= conductor:$(VERSION)
.PHONY: image image-test
image:
	@[ -n "$(CONTAINER)" ] || { echo "make image needs podman or docker" >&2; exit 1; }
	$(CONTAINER) build -f deploy/container/Containerfile -t $(IMAGE) $(if $(findstring podman,$(CONTAINER)),--format docker) \
		--build-arg VERSION=$(VERSION) $(IMAGE_BUILD_ARGS) .

image-test: build
	IMAGE=$(IMAGE) ./deploy/container/test.sh

clean:
	rm -rf bin
