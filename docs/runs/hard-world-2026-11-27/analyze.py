import json, sys
sys.path.insert(0, '/work/main/bench'); sys.path.insert(0, '/work/main/src'); sys.path.insert(0, '/work/main')
import pyarrow.parquet as pq
from factrl.config import read_params
from learning_hard import variant_accuracy, world_of, accuracy_cells, _right
params = read_params('/work/run-hard/params.yaml')
preds = pq.read_table('/work/run-hard/metrics/predictions.parquet').to_pylist()
out = {"accuracy": {}, "by_variant": {}}
for ds in sorted({p['dataset'] for p in preds}):
    for system in sorted({p['system'] for p in preds if p['dataset'] == ds}):
        cells = accuracy_cells([_right(preds, ds, system)])
        out["accuracy"].setdefault(ds, {})[system] = {h: {"mean": round(c["mean"], 4), "ci95": [round(x, 4) for x in c["ci95"]]} for h, c in cells.items()}
    out["by_variant"][ds] = variant_accuracy(preds, world_of(params), ds)
out["gains"] = json.load(open('/work/run-hard/metrics/gains.json'))
print(json.dumps(out, indent=1))
