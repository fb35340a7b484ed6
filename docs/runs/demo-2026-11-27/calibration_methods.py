"""Which calibration map suits the demo: run each HARIS checkpoint of a finished `make demo` checkout
on all of its dev claims once (the raw confidence and whether the verdict was right), then fit every
method of ``factrl.eval.calibration.METHODS`` on the 10-per-hop sample ``evaluate`` uses and on all
dev claims, and score each map on the run's eval predictions (metrics/predictions.parquet, the
stage's own raw confidences): ECE and Brier per checkpoint, pooled over hops and per hop.

    cd <make demo checkout> && PYTHONPATH=src:. python <this file> > calibration_methods.json

Ran at 8061071 (the demo checkout's code); the imports below are that commit's.
"""

from __future__ import annotations

import functools
import json
import sys
import time

import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.eval import runner
from factrl.eval.calibration import METHODS, Calibrator, brier, ece
from factrl.eval.params import EvaluateParams
from factrl.model_names import resolve_model
from stages.evaluate import load_dev_set, load_sets, resolve_checkpoints


def main() -> dict:
    params = load_section(EvaluateParams, "params.yaml")
    sets, _ = load_sets(params)
    checkpoints = resolve_checkpoints(params, "params.yaml")
    base_model = resolve_model(params.base_model, None, where="evaluate.base_model", params_file="params.yaml")
    systems = [s for s in runner.build_systems(
        params.systems, checkpoints, base_model,
        load_llm=functools.partial(runner.load_llm, device="cpu", precision=params.precision),
        top_k=params.top_k, max_new_tokens=params.max_new_tokens, max_turns=params.max_turns)
        if isinstance(s, runner.HarisSystem)]
    dev = load_dev_set(params, sets)
    every = runner.sample_set(dev, 0, params.seed)  # all dev claims, in the sampler's order
    small_ids = set(runner.sample_set(dev, params.calibration.dev_per_hop, params.seed).column("id").to_pylist())
    preds = pq.read_table("metrics/predictions.parquet").to_pylist()
    out: dict = {"dev_claims": every.num_rows, "dev_per_hop_sample": params.calibration.dev_per_hop, "systems": {}}
    for system in systems:
        t0 = time.perf_counter()
        runs = runner.run_system(system, every.column("claim").to_pylist(), dev.retriever, params.batch_size)
        runner.free_engine_memory(system)
        raw = [r.raw_confidence for r in runs]
        right = [r.verdict == y for r, y in zip(runs, every.column("label").to_pylist())]
        small = [i for i, cid in enumerate(every.column("id").to_pylist()) if cid in small_ids]
        mine = [p for p in preds if p["system"] == system.name]
        eval_raw, eval_right = [p["raw_confidence"] for p in mine], [p["verdict"] == p["label"] for p in mine]
        hops = sorted({p["num_hops"] for p in mine})
        entry = {"dev_seconds": round(time.perf_counter() - t0, 1), "dev_accuracy": sum(right) / len(right),
                 "eval_n": len(mine), "raw": {"ece": ece(eval_raw, eval_right), "brier": brier(eval_raw, eval_right)}}
        for method in METHODS:
            for label, idx in (("dev_sample", small), ("dev_all", list(range(len(raw))))):
                cal = Calibrator(method).fit([raw[i] for i in idx], [right[i] for i in idx])
                conf = cal.predict(eval_raw)
                per_hop = {}
                for h in hops:
                    ix = [i for i, p in enumerate(mine) if p["num_hops"] == h]
                    per_hop[h] = round(ece([conf[i] for i in ix], [eval_right[i] for i in ix]), 4)
                entry[f"{method}/{label}"] = {"n_fit": len(idx), "ece": ece(conf, eval_right),
                                              "brier": brier(conf, eval_right), "ece_per_hop": per_hop,
                                              "parameters": cal.parameters if method == "temperature" else None}
        out["systems"][system.name] = entry
        print(system.name, json.dumps(entry), file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
