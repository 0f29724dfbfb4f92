# pulsar-grpc: every target installs what it needs first, so a fresh machine needs only
# Python 3.11, Java 17, Node 20 and the base tools.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Two install levels in one venv: RUN_STAMP is what running the broker and the SDK needs
# (`pip install -e .`); STAMP adds the development extras on top (`.[dev]`: test, lint and type
# tools, pyspark, the storage-benchmark engines, matplotlib).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-dev
PROTO_SRC := $(wildcard protos/pulsargrpc/v1/*.proto)

.PHONY: run test proto proto-check lint typecheck unit e2e node-deps bench clean

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

## proto: regenerate the Python code for protos/ (committed; CI checks it is fresh)
proto: $(STAMP)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -Iprotos --python_out=protos --grpc_python_out=protos \
	  --mypy_out=protos $(PROTO_SRC)

proto-check: $(STAMP)
	@tmp=$$(mktemp -d); \
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -Iprotos --python_out=$$tmp --grpc_python_out=$$tmp \
	  --mypy_out=$$tmp $(PROTO_SRC); \
	for f in $$(cd $$tmp && find . -name '*.py' -o -name '*.pyi'); do \
	  cmp -s $$tmp/$$f protos/$$f || { echo "protos/$$f is stale: run 'make proto'"; rm -rf $$tmp; exit 1; }; \
	done; rm -rf $$tmp; echo "generated protobuf code is fresh"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy pulsar_grpc

node-deps:
	cd tests/node && npm ci --no-audit --no-fund --silent

## test: install the runtime and the development extras and run the whole suite (lint, types, generated code, unit and e2e)
test: $(STAMP) node-deps proto-check lint typecheck
	$(VENV)/bin/pytest -q

## bench: produce/consume throughput and latency against a fresh standalone broker, in both
## durability modes (page cache, then journalSyncData=true), as docs/benchmarks.md records them
bench: $(RUN_STAMP)
	$(VENV)/bin/pulsar-grpc perf all --sync

clean:
	rm -rf $(VENV) tests/node/node_modules data
