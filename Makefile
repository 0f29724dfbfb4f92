# pulsar-grpc: every target installs what it needs first, so a fresh machine needs only
# Python 3.11, Java 17, Node 20 and the base tools (and, for `make test`, apt-get: the Go
# client's Debian packages are installed by go-deps, PostgreSQL and ZooKeeper by cluster-deps).
# The interpreter the venv is made with: the first Python 3.11+ found (override: make run PYTHON=...).
PYTHON ?= $(firstword $(shell command -v python3.11 python3.12 python3.13 2>/dev/null) python3)
VENV := .venv
PY := $(VENV)/bin/python
# Two install levels in one venv: RUN_STAMP is what running the broker and the SDK needs
# (`pip install -e .`); STAMP adds the development extras on top (`.[dev]`: test, lint and type
# tools, pyspark, the storage-benchmark engines, matplotlib).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-dev
PROTO_SRC := $(wildcard protos/pulsargrpc/v1/*.proto protos/pulsargrpc/internal/v1/*.proto)
BUF := tests/node/node_modules/.bin/buf
# What builds the Go end-to-end client offline (Debian/Ubuntu packages; GOPATH mode).
GO_DEBS := golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev \
  golang-google-genproto-dev golang-github-golang-protobuf-1-5-dev
# What `make cluster` and the cluster tests start as real servers (Debian packages; started as
# child processes by pulsar_grpc.cli.local_servers, never as system services): PostgreSQL for
# the shared ledger store, ZooKeeper for the metadata; and what reads the managed-ledger metadata
# with Java classes generated from Pulsar's MLDataFormats (tests/e2e/test_ml_data_formats.py):
# protoc and protobuf-java; and the Prometheus that runs the Grafana dashboards' queries against
# a live broker (tests/e2e/test_dashboards.py); and the headless Chromium that Playwright drives
# to test the console page (tests/e2e/test_console.py).
CLUSTER_DEBS := postgresql zookeeper protobuf-compiler libprotobuf-java prometheus chromium

# $(call apt_install,TARGET,PACKAGES,WHAT): install the missing Debian packages (apt-get, with
# sudo when not root), or name them and fail where there is no apt-get.
define apt_install
	@missing=""; for p in $(2); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  command -v apt-get >/dev/null || { echo "$(1): apt-get is not available; install these" \
	    "Debian packages (or their equivalents) $(3):$$missing" >&2; exit 1; }; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  echo "$(1): installing$$missing"; \
	  $$sudo apt-get update -q && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q$$missing; \
	fi
endef

.PHONY: run cluster test proto proto-check proto-lint lint typecheck unit e2e node-deps go-deps cluster-deps go-client bench clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

## run: install the runtime (no development extras) and start the standalone broker
## (gRPC 127.0.0.1:50051, HTTP 127.0.0.1:8080)
run: $(RUN_STAMP)
	$(VENV)/bin/pulsar-grpc standalone

## cluster: a fresh three-broker cluster on this machine until Ctrl-C, for trying it out
## (installs the runtime and, if missing, the Debian packages zookeeper and postgresql):
## ZooKeeper 127.0.0.1:2181, PostgreSQL 127.0.0.1:5433, broker i serving gRPC 665i and HTTP
## 818i on 127.0.0.1 (listener internal) and 127.0.0.2 (listener external); files in .cluster/
cluster: $(RUN_STAMP) cluster-deps
	$(VENV)/bin/pulsar-grpc cluster

## proto: regenerate the Python code for protos/ (committed; CI checks it is fresh)
proto: $(STAMP)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -Iprotos --python_out=protos --grpc_python_out=protos \
	  --mypy_out=protos $(PROTO_SRC)

proto-check: $(STAMP)
	@tmp=$$(mktemp -d); \
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -Iprotos --python_out=$$tmp --grpc_python_out=$$tmp \
	  --mypy_out=$$tmp $(PROTO_SRC) || { echo "protoc failed"; rm -rf $$tmp; exit 1; }; \
	for f in $$(cd $$tmp && find . -name '*.py' -o -name '*.pyi'); do \
	  cmp -s $$tmp/$$f protos/$$f || { echo "protos/$$f is stale: run 'make proto'"; rm -rf $$tmp; exit 1; }; \
	done; rm -rf $$tmp; echo "generated protobuf code is fresh"

## proto-lint: buf lint over protos/ (rules and deliberate exceptions in buf.yaml)
proto-lint: node-deps
	$(BUF) lint

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy pulsar_grpc

node-deps:
	cd tests/node && npm ci --no-audit --no-fund --silent

## go-deps: install the Debian packages the Go client needs (apt-get, with sudo when not root)
go-deps:
	$(call apt_install,go-deps,$(GO_DEBS),to build the Go client)

## cluster-deps: install the Debian packages of the servers `make cluster` and the cluster tests
## start (PostgreSQL, ZooKeeper, Prometheus) and the console test's browser (Chromium)
cluster-deps:
	$(call apt_install,cluster-deps,$(CLUSTER_DEBS),for the cluster)

## go-client: build the Go end-to-end client from protos/ (tests/go/build/produce_consume)
go-client: go-deps
	tests/go/build.sh

## test: install the runtime and the development extras and run the whole suite (lint, types,
## generated code, wire lint, unit and e2e, the Node.js and Go clients)
test: $(STAMP) node-deps go-client cluster-deps proto-check proto-lint lint typecheck
	$(VENV)/bin/pytest -q --durations=30

## bench: produce/consume throughput and latency against a fresh standalone broker, in both
## durability modes (page cache, then journalSyncData=true), as docs/benchmarks.md records them
bench: $(RUN_STAMP)
	$(VENV)/bin/pulsar-grpc perf all --sync

clean:
	rm -rf $(VENV) tests/node/node_modules tests/go/build data .cluster
