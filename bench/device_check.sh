#!/usr/bin/env bash
# What a lent GPU machine runs in one call (see docs/runs/gpu-check-2026-11-27): the `gpu`-marked tests
# that need only torch and transformers, and bench/grpo_device.py (GRPO steps of SmolLM2-135M's
# architecture on CUDA against that machine's CPU). Such a machine has CUDA torch and transformers but
# none of factrl's other dependencies and no network (the code path needs none: tests/test_gpu_path.py),
# so the call carries `.gpu/` (ignored), made here by:
#   mkdir -p .gpu/whl .gpu/cache/models/smollm2-135m
#   cp .cache/factrl/models/smollm2-135m/{*.json,*.jinja} .gpu/cache/models/smollm2-135m/   # tokenizer + config
#   python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .gpu/whl transformers==5.23.0    # factrl's pinned version
# Results land in $OUT (the device tool's folder; a local dry run: OUT=/tmp/out DEVICES=cpu bash bench/device_check.sh).
set -uo pipefail
: "${OUT:?set OUT to a folder for the results}"
DEVICES=${DEVICES:-cuda cpu}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false FACTRL_CACHE=$PWD/.gpu/cache
PY=${PY:-python3}
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src:$PWD
else
  export PYTHONPATH=$PWD/src:$PWD
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PY -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__,
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA', torch.backends.cpu.get_cpu_capability())"
# `make test-gpu-bare`'s tests (the real-SmolLM2 rollout test skips, saying why: its 0.5 GB weights cannot
# travel), and the check that the GPU-path modules import with torch, transformers, numpy and pyarrow alone
timeout 180 $PY -m pytest -p no:cacheprovider -o addopts="" -q -rs -m gpu \
  tests/rl/test_engine_trainer.py tests/agents/test_rollout.py 2>&1 | tee "$OUT/pytest_gpu.log"
timeout 120 $PY -m pytest -p no:cacheprovider -o addopts="" -q -rs tests/test_gpu_path.py 2>&1 | tee -a "$OUT/pytest_gpu.log"
# the trainer's CPU tests on this machine's Python and pinned transformers
timeout 120 $PY -m pytest -p no:cacheprovider -o addopts="" -q -m "not gpu" tests/rl/test_engine_trainer.py 2>&1 | tail -3
timeout "${BENCH_TIMEOUT:-330}" $PY -m bench.grpo_device --devices $DEVICES --weights random ${BENCH_ARGS:-} \
  --out "$OUT/grpo_device.json" 2>&1 | tee "$OUT/grpo_device.log"
