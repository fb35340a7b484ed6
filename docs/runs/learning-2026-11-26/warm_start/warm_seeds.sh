#!/bin/bash
# usage: warm_seeds.sh EXPDIR TAG "seed..." [extra dvc -S args]
# For each seed: dvc repro warmup with warmup.seed=s (params edited in place), then the warm pair's traces.
set -e
EXP=$1; TAG=$2; SEEDS=$3; shift 3
OUT=${OUT:-.}
# the environment of `make demo` over EXP's code: a venv on PATH, HF_HUB_OFFLINE=1, FACTRL_CACHE=$EXP/.cache/factrl,
# PYTHONPATH=$EXP/src:$EXP
REPO=$EXP; source "${ENV_SH:?set ENV_SH to a file exporting the above}"
cd $EXP
for s in $SEEDS; do
  python - "$s" "$@" <<'PY'
import sys, yaml
from factrl.profiles import write_params
from factrl.config import read_params
p = read_params("params.yaml")
p["warmup"]["seed"] = int(sys.argv[1])
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1); d = p; *path, last = k.split(".")
    for x in path: d = d[x]
    d[last] = yaml.safe_load(v)
write_params(p, "params.yaml")
PY
  start=$(date +%s)
  dvc repro warmup > $OUT/${TAG}_s${s}_warmup.log 2>&1
  echo "seed $s warmup $(( $(date +%s) - start )) s"
  python "$(dirname "$0")/trace_eval.py" $EXP models/reason_0 models/search_0 $OUT/trace_${TAG}_s${s}.jsonl 2>&1 | grep -v "Loading\|Warn" | tail -2
  cp warmup/summary.json $OUT/${TAG}_s${s}_summary.json
done
