"""Evaluate one HARIS pair of a workspace on evaluate's own 180-claim sample (seed 0, 60 per hop, hybrid,
top-k 3, 64 new tokens, 5 turns) and compare it paired with a system of a reference predictions file."""
import sys, json, time
from pathlib import Path
import numpy as np
import polars as pl
import pyarrow.parquet as pq
from factrl.eval.runner import EvalSet, sample_set
from factrl.eval.systems import ModelSystem, load_llm, run_system
from factrl.retrieval.index import Retriever

ws, reason, search, ref, ref_system, out = sys.argv[1:7]
ws = Path(ws)
claims = sample_set(EvalSet("eval", pq.read_table(ws / "data/claims/eval.parquet"), None), 60, 0)
system = ModelSystem("HARIS (variant)", "haris", load_llm(str(ws / reason), device="cpu", precision="auto"),
                     load_llm(str(ws / search), device="cpu", precision="auto"), top_k=3, max_new_tokens=64, max_turns=5)
t0 = time.perf_counter()
runs = run_system(system, claims.column("claim").to_pylist(), Retriever(ws / "index", mode="hybrid"), 256)
secs = time.perf_counter() - t0
mine = pl.DataFrame({"claim_id": claims.column("id").to_pylist(), "num_hops": claims.column("num_hops").to_pylist(),
                     "label": claims.column("label").to_pylist(), "verdict": [r.verdict for r in runs],
                     "questions": [r.questions for r in runs]})
mine.write_parquet(out)
refp = pl.read_parquet(ref).filter(pl.col("system") == ref_system).select("claim_id", pl.col("verdict").alias("ref_verdict"))
j = mine.join(refp, on="claim_id", how="inner")
a = (j["verdict"] == j["label"]).fill_null(False).to_numpy().astype(float)
b = (j["ref_verdict"] == j["label"]).fill_null(False).to_numpy().astype(float)
rng = np.random.default_rng(0); d = a - b
boots = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(10000)]
res = {"n": len(j), "seconds": secs, "variant": a.mean(), "reference": b.mean(), "gain": d.mean(),
       "ci": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
       "per_hop": {int(h): {"variant": float(((g["verdict"] == g["label"]).fill_null(False)).mean()),
                            "reference": float(((g["ref_verdict"] == g["label"]).fill_null(False)).mean())}
                   for (h,), g in j.group_by("num_hops")},
       "by_label": {l: {"variant": float(((g["verdict"] == g["label"]).fill_null(False)).sum()),
                        "reference": float(((g["ref_verdict"] == g["label"]).fill_null(False)).sum()), "n": len(g)}
                    for (l,), g in j.group_by("label")},
       "no_verdict": int(j["verdict"].is_null().sum()), "questions": float(j["questions"].mean())}
print(json.dumps(res, indent=1))
