"""Pairs the longer GRPO run's trained pair (/work/run-hard-b) with the warm pair and the 6-step
pair of docs/runs/hard-world-2026-11-27 (/work/run-hard), over the same eval claims: accuracy per
hop with bootstrap intervals, paired gains, and accuracy per claim variant. Prints JSON."""
import json
import sys

sys.path[:0] = ["/work/main/bench", "/work/main/src", "/work/main"]
import pyarrow.parquet as pq  # noqa: E402

from factrl.config import read_params  # noqa: E402
from factrl.eval.runner import paired_gains  # noqa: E402
from learning_hard import _right, accuracy_cells, variant_accuracy, world_of  # noqa: E402

old = pq.read_table("/work/run-hard/metrics/predictions.parquet").to_pylist()
new = pq.read_table("/work/run-hard-b/metrics/predictions.parquet").to_pylist()
label = sys.argv[1] if len(sys.argv) > 1 else "HARIS (trained, 10 steps lr 5e-6)"
for p in old:
    if p["system"] == "HARIS (trained)":
        p["system"] = "HARIS (trained, 6 steps lr 2e-6)"
for p in new:
    p["system"] = label
preds = old + new
params = read_params("/work/run-hard/params.yaml")
out = {"accuracy": {}, "by_variant": {}, "gains": {}}
for ds in sorted({p["dataset"] for p in preds}):
    for system in sorted({p["system"] for p in preds if p["dataset"] == ds}):
        cells = accuracy_cells([_right(preds, ds, system)])
        out["accuracy"].setdefault(ds, {})[system] = {
            h: {"mean": round(c["mean"], 4), "ci95": [round(x, 4) for x in c["ci95"]]} for h, c in cells.items()}
    out["by_variant"][ds] = variant_accuracy([p for p in preds if p["dataset"] == ds], world_of(params), ds)
    rows = [p for p in preds if p["dataset"] == ds]
    out["gains"][ds] = paired_gains(rows, [(label, "HARIS (warm)"), ("HARIS (trained, 6 steps lr 2e-6)", "HARIS (warm)")])
print(json.dumps(out, indent=1))
