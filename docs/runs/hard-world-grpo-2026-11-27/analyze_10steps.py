"""The hard world's lr 5e-6 GRPO round at 5 and 10 steps, paired with the warm pair over the same eval
claims (/work/run-hard: warm + 6-step lr 2e-6; /work/hard-b-step5: step 5; /work/run-hard-b: step 10)."""
import json
import sys

sys.path[:0] = ["/work/main/bench", "/work/main/src", "/work/main"]
import pyarrow.parquet as pq  # noqa: E402

from factrl.config import read_params  # noqa: E402
from factrl.eval.runner import paired_gains  # noqa: E402
from learning_hard import _right, accuracy_cells, variant_accuracy, world_of  # noqa: E402

old = pq.read_table("/work/run-hard/metrics/predictions.parquet").to_pylist()
s5 = pq.read_table("/work/hard-b-step5/metrics/predictions.parquet").to_pylist()
s10 = pq.read_table("/work/run-hard-b/metrics/predictions.parquet").to_pylist()
for p in old:
    if p["system"] == "HARIS (trained)":
        p["system"] = "lr 2e-6, 6 steps"
for p in s5:
    p["system"] = "lr 5e-6, 5 steps"
for p in s10:
    p["system"] = "lr 5e-6, 10 steps"
preds = old + s5 + s10
params = read_params("/work/run-hard/params.yaml")
out = {"accuracy": {}, "by_variant": {}, "gains": {}}
for ds in sorted({p["dataset"] for p in preds}):
    for system in sorted({p["system"] for p in preds if p["dataset"] == ds}):
        cells = accuracy_cells([_right(preds, ds, system)])
        out["accuracy"].setdefault(ds, {})[system] = {
            h: {"mean": round(c["mean"], 4), "ci95": [round(x, 4) for x in c["ci95"]]} for h, c in cells.items()}
    out["by_variant"][ds] = variant_accuracy([p for p in preds if p["dataset"] == ds], world_of(params), ds)
    rows = [p for p in preds if p["dataset"] == ds]
    have = {p["system"] for p in rows}
    pairs = [(a, "HARIS (warm)") for a in ("lr 5e-6, 10 steps", "lr 5e-6, 5 steps", "lr 2e-6, 6 steps") if a in have]
    pairs += [("lr 5e-6, 10 steps", "lr 5e-6, 5 steps")] if {"lr 5e-6, 10 steps", "lr 5e-6, 5 steps"} <= have else []
    if "HARIS (warm)" in have:
        out["gains"][ds] = paired_gains(rows, pairs)
print(json.dumps(out, indent=1))
