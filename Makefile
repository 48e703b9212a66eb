# Targets the README names. `uv` manages the environment (uv.lock is committed).
.PHONY: help install install-local chat test test-fast lint typecheck format bench

UV ?= uv
# Test processes run side by side (pytest-xdist), each test file on one of them: 2 fits CI's
# two cores; PYTEST_WORKERS=0 runs everything in this process.
PYTEST_WORKERS ?= 2

help:
	@echo "make chat        - create an agent if none exists and chat with it (offline model by default)"
	@echo "make test        - the whole test suite: lint, types, unit, contract, e2e (builds llama.cpp once)"
	@echo "make test-fast   - tests without the local-model end-to-end tests"
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

test: install-local lint typecheck
	$(UV) run --frozen --extra local pytest -n $(PYTEST_WORKERS) --dist loadfile

test-fast: install
	$(UV) run --frozen pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not local_llm"

bench: install
	$(UV) run --frozen python bench/dispatch.py
