"""Greedy M2R rollouts (format 2) of a model on the first six training questions of each curriculum
half (bench/m2r.py's world and training claims, the split `by_hops` made before 2026-11-25: stage 1
the 2-hop half, stage 2 the 3-hop half), printed with the gold answers.

Usage, from the repository root: python docs/runs/m2r-2026-11-25/hop_probe.py MODEL_DIR
"""
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import m2r as bench  # noqa: E402
from factrl.agents.m2r import MacroTool, run_m2r  # noqa: E402
from factrl.config import M2RParams, from_dict, read_params  # noqa: E402
from factrl.data.curriculum import split_m2r  # noqa: E402
from factrl.data.multihop import world_items  # noqa: E402
from factrl.llm.local import LocalLLM  # noqa: E402
from factrl.recipes import m2r as recipe  # noqa: E402
from factrl.agents.haris import prompt_style  # noqa: E402
from factrl.retrieval.index import Retriever  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="m2rdiag-"))
claims, index = bench.world(work / "world")
retriever = Retriever(index, mode="bm25")
held, train_claims = bench.split_world(claims, 24)
st = {n: world_items(t) for n, t in split_m2r(train_claims, 0.5, seed=11, how="by_hops").items()}
p = from_dict(M2RParams, read_params("params.yaml")["m2r"], "m2r")
p = dataclasses.replace(p, retrieval_mode="bm25")
llm = LocalLLM(sys.argv[1], precision=p.precision)
params = recipe.rollout_params(p, temperature=0.0)
tool = MacroTool(retriever, k=p.top_k)
for seg in ("m2r_stage1", "m2r_stage2"):
    items = st[seg][:6]
    print("=====", seg, len(st[seg]), {k: v for k, v in items[0].items() if k != "question"})
    res = run_m2r(llm, [it["question"] for it in items], tool, params, stage=2, style=prompt_style(llm))
    for it, r in zip(items, res):
        print("-----Q:", it["question"], "| gold:", it["answers"], "| pred:", r.answer, "| valid",
              r.parse.format_valid, r.parse.error)
        print(r.trajectory.response_text[-1500:])
