# kernelforge: `make demo` runs the main job, `make test` the tests. `make help` lists the rest.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# The CPU build of torch. On a GPU machine install the CUDA build of torch (and cupy) into the venv
# first, or point VENV at an environment that has them: setup leaves an existing torch alone.
TORCH_SPEC ?= torch==2.13.0
# Options for `make suite` (bench/suite.py --help; a later option wins), e.g. SUITE_ARGS="--only softmax --budget-s 450".
SUITE_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-gpu lint format doctor suite clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev,ray,kernelbench]'
	touch $@

setup: $(VENV)/.installed ## create the virtualenv and install kernelforge into it

demo: setup ## run the builtin offline team, 3 rounds, on the default problem (GPU if present, else its CPU twin)
	$(VENV)/bin/kforge demo

test: setup ## lint and run the test suite on two workers (GPU tests skip without a GPU)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup

test-gpu: setup ## run only the tests that need a CUDA GPU
	$(VENV)/bin/pytest -q -m gpu

lint: setup ## ruff check
	$(VENV)/bin/ruff check .

format: setup ## ruff format and fix imports
	$(VENV)/bin/ruff check --fix --select I .
	$(VENV)/bin/ruff format .

doctor: setup ## report GPU, CUDA, NVRTC, compiler, Docker and provider keys
	$(VENV)/bin/kforge doctor

suite: setup ## run the builtin team on every problems/suite problem (resumable); table in runs/suite/suite.md
	$(PY) bench/suite.py problems/suite --device cuda --runs-dir runs/suite $(SUITE_ARGS)

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
