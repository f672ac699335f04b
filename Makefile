SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go
# FUZZTIME is how many inputs `make fuzz` tries per fuzz target (Nx: a
# count; see the fuzz target for why not a duration). make test does not
# fuzz: its go test runs every fuzz target's seed corpus, and building the
# fuzzing binaries instruments every package they reach (about 870 for
# internal/api), which cost more CPU than all the race detector's tests.
FUZZTIME ?= 200000x
# staticcheck 2025.1.1 is module version v0.6.1.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.6.1

# CHAOS_DURATION is how long `make chaos` runs load and faults (a dispatcher
# SIGKILLed and a Postgres restart per minute); CHAOS_REPORT gets its figures.
CHAOS_DURATION ?= 10m
CHAOS_REPORT ?= $(CURDIR)/chaos-report.json
# FLEET_DURATION is how long make chaos's long form of the fleet fault test
# (TestBreakerFleetUnderFaults) loads FLEET_ENDPOINTS endpoints, a third of
# them failing over the middle half; FLEET_REPORT gets its figures.
FLEET_DURATION ?= 8m
FLEET_ENDPOINTS ?= 300
FLEET_REPORT ?= $(CURDIR)/fleet-report.json

# VET_DONE is the go test flag of a target that has just run go vet over
# the same packages with every analyzer: go test's own vet (a subset) would
# only repeat it, and on an empty build cache it costs about 80 CPU-seconds
# of facts about every dependency, built again for the race detector.
VET_DONE = -vet=off
# TEST_LDFLAGS link make test's test binaries without DWARF (-w), which
# nothing in a test run reads (stack traces come from the binary's own
# tables): internal/api's race-detector test binary links in 4.6 s of CPU
# instead of 6.1, and make test links about 40 such binaries.
TEST_LDFLAGS = -ldflags=-w
# GOTESTSUM runs the tests of make test and make check: go test's output of
# each package and failure, and a JSON record of every test (TEST_REPORT)
# from which make test-report lists the slowest.
GOTESTSUM ?= gotest.tools/gotestsum@v1.13.0
TEST_REPORT ?= $(CURDIR)/.test-report.json
# TEST_PKGS are make test's race-detector packages, internal/e2e named
# first: go test starts packages in the order given, and the end-to-end
# tests, the longest package by far, then run beside all the others
# instead of after most of them. internal/deploycheck is left out: its
# tests are built without the race detector (DEPLOY_TEST_PKGS), so under
# it the package only compiled its parsers (Kubernetes, BuildKit,
# compose-go) again, 28 CPU-seconds on an empty cache, to run nothing.
TEST_PKGS = ./internal/e2e $$($(GO) list ./... | grep -v $(NOT_RACE_PKGS))
# NOT_RACE_PKGS are the grep patterns of the packages the race run leaves
# out (above).
NOT_RACE_PKGS = -e '/internal/deploycheck$$'
# RACE_BUILD_PKGS are TEST_PKGS' packages but the commands (which go
# build would link for nothing): make test compiles them with the race
# detector before its test lanes start (test-race-build).
RACE_BUILD_PKGS = $$($(GO) list -f '{{if and .GoFiles (ne .Name "main")}}{{.ImportPath}}{{end}}' ./... | grep -v $(NOT_RACE_PKGS))
# CHECK_PKGS are make check's packages: all but the end-to-end tests (real
# processes and a browser), the tour and the benchmark's scenarios.
CHECK_PKGS = $$($(GO) list ./... | grep -v -e /internal/e2e -e /internal/tour -e /internal/bench)
# CHECK_FLAGS are make check's extra go test flags: CHECK_FLAGS=-race adds
# the race detector, which make test always runs with (it doubles the api
# and store tests' time).
CHECK_FLAGS ?=

# DEPLOY_TEST_PKGS hold the tests of the deployment files (compose, the
# Dockerfile, deploy/k8s, the alert rules and dashboard), which read them
# with each tool's own parser (internal/deploycheck). Those test files are
# built without the race detector (//go:build !race): the parsers (the
# Kubernetes API types, PromQL, BuildKit, compose-go) take minutes of CPU
# to compile with it on an empty build cache and run none of hookd's
# concurrent code. make test runs them in a go test of their own.
DEPLOY_TEST_PKGS = ./internal/deploycheck ./cmd/...
# DEPLOY_REPORT is that go test's JSON record, added to TEST_REPORT.
DEPLOY_REPORT ?= $(CURDIR)/.test-report-deploy.json
# DEPLOY_VET is its vet flag: make test, which has vetted every package,
# gives VET_DONE.
DEPLOY_VET ?=

# PGSTATE_FILE holds what make test found of a local PostgreSQL server.
PGSTATE_FILE ?= $(CURDIR)/.pgstate.json

.PHONY: help build run test check test-report fuzz lint clean bench bench-month bench-weather bench-smoke soak chaos sdk sdk-test

## help: list the targets and what each does
help:
	@awk 'sub(/^## /, "") { split($$0, f, ": "); printf "  %-12s %s\n", f[1], substr($$0, length(f[1]) + 3) }' $(MAKEFILE_LIST)

## build: build bin/api, bin/dispatcher and bin/hookd (the command line)
build:
	$(GO) build -o bin/ ./cmd/...

## run: run the API and the dispatcher against a local Postgres (deploy/run-local.sh)
run:
	./deploy/run-local.sh

## test: install missing test dependencies; vet beside the race detector's build; then four lanes at once: every test with the race detector (private PostgreSQL clusters), the bench's smoke form, the deployment files' tests (without it) and the SDKs' tests (each fuzz target's seed corpus runs as a test; make fuzz fuzzes); fails if a server at 127.0.0.1:5432 was not left as found
# pgstate records the server at 127.0.0.1:5432 (PGSTATE_URL), when one
# runs, before the tests and fails after them if they restarted, stopped or
# reconfigured it; test databases left on it are reported.
test:
	./deploy/test-deps.sh
	$(MAKE) --no-print-directory -j2 --output-sync=target test-vet test-race-build
	$(GO) run ./internal/pgcluster/pgstate record $(PGSTATE_FILE)
	$(MAKE) --no-print-directory -j4 --output-sync=target test-race bench-smoke test-deploy sdk-test DEPLOY_VET=$(VET_DONE)
	$(GO) run ./internal/pgcluster/pgstate check $(PGSTATE_FILE)
	rm -f $(PGSTATE_FILE)
	cat $(DEPLOY_REPORT) >>$(TEST_REPORT) && rm -f $(DEPLOY_REPORT)
	$(MAKE) --no-print-directory test-report

# make test builds first, in two lanes at once: go vet (which compiles
# every package plainly, as the deployment files' tests, the bench and the
# end-to-end tests' processes are built) beside the race detector's build
# of every package the race run tests (test-race-build). Then it runs
# four lanes at once, each one's output printed when it ends: the race
# run (test-race), bench-smoke, the deployment files' tests and the SDKs'
# tests, which now only link. The lanes wait on their processes' clocks
# (a breaker's open duration, a rescue, a bench scenario's fixed window)
# at different moments, so together they keep the cores busier than one
# after another; and on a machine where something else keeps a core
# busy, more of the suite's threads get more of the cores. Compiling is
# kept out of the lanes: it keeps both cores busy, and beside it
# bench-smoke's timed windows only stretched the run.
.PHONY: test-vet test-race-build test-race test-deploy
test-vet:
	$(GO) vet ./...

test-race-build:
	$(GO) build -race $(RACE_BUILD_PKGS)

test-race:
	$(GO) run $(GOTESTSUM) --format pkgname-and-test-fails --jsonfile $(TEST_REPORT) -- $(VET_DONE) $(TEST_LDFLAGS) -race -count=1 -timeout 25m $(TEST_PKGS)

## test-deploy: the deployment files' tests (compose, Dockerfile, deploy/k8s, alert rules, dashboard), without the race detector; make test runs them, make check too unless CHECK_FLAGS=-race
test-deploy:
	$(GO) run $(GOTESTSUM) --format pkgname-and-test-fails --jsonfile $(DEPLOY_REPORT) -- $(DEPLOY_VET) -count=1 -timeout 10m $(DEPLOY_TEST_PKGS)

## check: the quick inner loop: vet and the tests of every package but the end-to-end tests, the tour and the benchmark, without the race detector unless CHECK_FLAGS=-race; make test is the full suite CI runs
check:
	$(GO) vet ./...
	$(GO) run $(GOTESTSUM) --format pkgname-and-test-fails --jsonfile $(TEST_REPORT) -- $(VET_DONE) $(CHECK_FLAGS) -count=1 -timeout 10m $(CHECK_PKGS)
	$(MAKE) --no-print-directory test-report

## test-report: each package's time and the 30 slowest tests of the last make test or make check (from TEST_REPORT)
test-report:
	@echo "== each package's time, longest first ($(TEST_REPORT))"
	@if command -v jq >/dev/null; then \
		jq -r 'select(.Test == null and (.Action == "pass" or .Action == "fail") and .Elapsed != null) | "\(.Elapsed)s\t\(.Action)\t\(.Package)"' $(TEST_REPORT) | sort -rn; \
	else echo "(jq is not installed: deploy/test-deps.sh installs it)"; fi
	@echo "== the 30 slowest tests ($(TEST_REPORT))"
	@$(GO) run $(GOTESTSUM) tool slowest --jsonfile $(TEST_REPORT) --num 30 --threshold 0s

## sdk: regenerate the client libraries' generated code (sdk/go/api/api.gen.go, sdk/typescript/src/generated/schema.ts) from internal/api/openapi.json
sdk:
	cd sdk/go && $(GO) generate ./...
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run generate

## sdk-test: the client libraries' tests against a devserver of this checkout (internal/devserver): sdk/go's (vet, race detector) and sdk/typescript's (npm ci, tsc --noEmit, npm test); each fails when its generated code is stale
sdk-test:
	cd sdk/go && $(GO) vet ./... && $(GO) test $(VET_DONE) -race -count=1 -timeout 10m ./...
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run typecheck && npm test

## chaos: the long forms of the chaos test (TestChaosNothingLost: CHAOS_DURATION, figures in CHAOS_REPORT) and then of the fleet fault test (TestBreakerFleetUnderFaults: FLEET_DURATION, figures in FLEET_REPORT)
chaos:
	HOOKD_CHAOS_DURATION=$(CHAOS_DURATION) HOOKD_CHAOS_REPORT=$(CHAOS_REPORT) \
		$(GO) test -count=1 -timeout 60m -run '^TestChaosNothingLost$$' -v ./internal/e2e/
	HOOKD_FLEET_DURATION=$(FLEET_DURATION) HOOKD_FLEET_ENDPOINTS=$(FLEET_ENDPOINTS) HOOKD_FLEET_REPORT=$(FLEET_REPORT) \
		$(GO) test -count=1 -timeout 60m -run '^TestBreakerFleetUnderFaults$$' -v ./internal/e2e/

## fuzz: run every Fuzz* target in the module for FUZZTIME executions each (a count, not a duration)
# The packages are those whose test files declare a Fuzz function. Each
# one's test binary is built once with the fuzzing instrumentation, lists
# its own targets (-test.list, so nothing is built twice) and runs each in
# the package's directory (where testdata/fuzz holds the seeds and any
# reproducer it writes), with go test's own corpus cache. A count budget
# has no deadline for Go 1.26's fuzzing coordinator to race (a duration
# budget fails at random on a busy machine with "context deadline
# exceeded" and no input).
fuzz:
	@pkgs=$$($(GO) list -f '{{.ImportPath}}{{range .TestGoFiles}} {{$$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$$.Dir}}/{{.}}{{end}}' ./... | \
		while read -r pkg files; do if [ -n "$$files" ] && grep -qs '^func Fuzz' $$files; then echo "$$pkg"; fi; done); \
	if [ -z "$$pkgs" ]; then echo "== fuzz: no fuzz targets found"; exit 0; fi; \
	bindir=$$(mktemp -d); trap 'rm -rf "$$bindir"' EXIT; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	count=0; \
	for pkg in $$pkgs; do \
		dir=$$($(GO) list -f '{{.Dir}}' "$$pkg"); \
		bin="$$bindir/$$count.test"; \
		echo "== fuzz: building $$pkg"; \
		$(GO) test -c -fuzz . -o "$$bin" "$$pkg"; \
		names=$$(cd "$$dir" && "$$bin" -test.list '^Fuzz'); \
		for name in $$names; do \
			echo "== fuzz $$name in $$pkg for $(FUZZTIME)"; \
			(cd "$$dir" && "$$bin" -test.run '^$$' -test.fuzz "^$$name\$$" -test.fuzztime $(FUZZTIME) -test.fuzzcachedir "$$cache/$$pkg"); \
			count=$$((count + 1)); \
		done; \
	done; \
	if [ "$$count" -eq 0 ]; then echo "== fuzz: no fuzz targets found"; exit 1; fi; \
	echo "== fuzz: $$count targets ran for $(FUZZTIME) each"

## bench: run every benchmark scenario against a private Postgres (about 38 minutes on 2 cores, S7 alone takes 12) and write bench-results.json; refuses to start on a busy machine (BENCH_FLAGS=-busy-ok)
# BENCH_FLAGS are make bench's extra flags: BENCH_FLAGS=-busy-ok runs on a
# machine busy at the start (its figures then not comparable).
BENCH_FLAGS ?=
bench:
	$(GO) run ./internal/bench $(BENCH_FLAGS)

## bench-month: S1 on an empty database, then S8: 30 days of history (100 million attempts, about 50 GiB; fewer with MONTH_ATTEMPTS=n) under S1's load, and a tuning pass over every class by the dispatcher's tuning leader; writes bench-month-results.json
bench-month:
	$(GO) run ./internal/bench -only s1,s8 $(if $(MONTH_ATTEMPTS),-month-attempts $(MONTH_ATTEMPTS)) -out $(CURDIR)/bench-month-results.json

## soak: 30 minutes at 20 messages/s with RETENTION=5m, PARTITION_INTERVAL=1m; prints per-minute RSS, goroutines, table sizes and p99 and whether each is flat; writes soak-results.json
soak:
	$(GO) run ./internal/bench -only soak -out $(CURDIR)/soak-results.json

## bench-weather: S13: S1rate's load at 1,000 messages/s behind a transaction held open 10 minutes (as a pg_dump holds one), against the same without it (about 25 minutes); writes bench-weather-results.json
bench-weather:
	$(GO) run ./internal/bench -only s13 -out $(CURDIR)/bench-weather-results.json

## bench-smoke: every benchmark scenario in a tiny form (under a minute); writes no bench-results.json
bench-smoke:
	$(GO) run ./internal/bench -smoke

## lint: gofmt, go vet and staticcheck (of the server, sdk/go and examples/go)
lint:
	@unformatted=$$(gofmt -l $$(find . \( -path ./.git -o -path ./.data -o -path ./bin \) -prune -o -name '*.go' -print)); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l reports:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd sdk/go && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd examples/go && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

## clean: remove built binaries (a private cluster under .data/ is kept)
clean:
	rm -rf bin/
