# The two set-up commands of the README:
#   make demo   installs awarl into .venv and runs the offline demo (CPU, < 10 minutes)
#   make test   installs awarl with its test extras into .venv and runs the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch first: a bare `torch` requirement would pull a multi-GB CUDA build; 2.13.0 is the release that
# trl's [vllm] extra (vllm <= 0.31) needs, so the same pin serves CPU tests and GPU runs.
TORCH  ?= torch==2.13.0

.PHONY: install install-dev demo test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dense]"

install-dev: $(PY)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dense,dev]"

demo: install
	$(VENV)/bin/awarl demo --out runs/demo

test: install-dev
	$(VENV)/bin/ruff check awarl tests benchmarks scripts
	$(PY) -m pytest tests

bench: install-dev
	$(PY) benchmarks/retrieval_bench.py --out docs/benchmarks.md

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
