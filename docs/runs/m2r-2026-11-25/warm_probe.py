"""M2R warm start with more SFT, then the greedy held-out format / EM of the warm model (bench/m2r.py's world).

Usage, from the repository root: python docs/runs/m2r-2026-11-25/warm_probe.py ITEMS STEPS BATCH (96 36 4 here)."""
import dataclasses, sys, tempfile, time
from collections import Counter
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import m2r as bench
from factrl.config import M2RParams, SFTParams, from_dict, read_params, resolve_model
from factrl.agents.m2r import MacroTool
from factrl.data.multihop import world_items
from factrl.recipes import m2r as recipe
from factrl.retrieval.index import Retriever
from factrl.llm.local import LocalLLM
items_n, steps, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
work = Path(tempfile.mkdtemp(prefix="m2rwarm-"))
claims, index = bench.world(work / "world")
retriever = Retriever(index, mode="bm25")
held, train_claims = bench.split_world(claims, 24)
p = from_dict(M2RParams, read_params("params.yaml")["m2r"], "m2r")
p = dataclasses.replace(p, retrieval_mode="bm25", warm_max_items=items_n, base_model=resolve_model(p.base_model, None, where="m2r.base_model", params_file=Path("params.yaml")),
                        sft=dataclasses.replace(p.sft, max_steps=steps, batch_size=batch))
all_items = world_items(train_claims)
print("train items", len(all_items), flush=True)
t = time.time()
warm = recipe.warm_start(all_items, p, MacroTool(retriever, k=p.top_k), state_dir=work / "sft", out_model=work / "model", loss_path=work / "loss.csv")
print("warm", {k: warm[k] for k in warm if k in ("references", "rejected", "steps", "first_loss", "final_loss", "wall_s")}, round(time.time() - t), flush=True)
llm = LocalLLM(str(work / "model"), precision=p.precision)
for fmt in (1, 2):
    r = recipe.evaluate_qa("m2r", llm, held, MacroTool(retriever, k=p.top_k), params=recipe.rollout_params(p, temperature=0.0), fmt=fmt)
    print("format", fmt, {k: r[k] for k in ("em", "f1", "format_failures", "format_failures_by_reason")}, flush=True)
print("work", work)
