"""The curriculum's two GRPO stages from a warm-started M2R model, at a chosen lr, each followed by the
greedy held-out demo evaluation (bench/m2r.py's world, split and stage split).

Usage, from the repository root:
    python docs/runs/m2r-2026-11-25/stage_probe.py WARM_MODEL_DIR LR [STEPS] [dynamic]
"""
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import m2r as bench  # noqa: E402

from factrl.agents.m2r import MacroTool  # noqa: E402
from factrl.config import M2RParams, M2RStageParams, from_dict, read_params  # noqa: E402
from factrl.data.curriculum import split_m2r  # noqa: E402
from factrl.data.multihop import world_items  # noqa: E402
from factrl.llm.local import LocalLLM  # noqa: E402
from factrl.recipes import m2r as recipe  # noqa: E402
from factrl.retrieval.index import Retriever  # noqa: E402

warm, lr = sys.argv[1], float(sys.argv[2])
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 0
dynamic = len(sys.argv) > 4 and sys.argv[4] == "dynamic"  # DAPO's dynamic sampling, 4 prompts per draw, <= 3 draws
work = Path(tempfile.mkdtemp(prefix="m2rstage-"))
claims, index = bench.world(work / "world")
retriever = Retriever(index, mode="bm25")
held, train_claims = bench.split_world(claims, 24)
stage_items = {name: world_items(t) for name, t in split_m2r(train_claims, 0.5, seed=11).items()}
p = from_dict(M2RParams, read_params("params.yaml")["m2r"], "m2r")
p = dataclasses.replace(p, retrieval_mode="bm25", lr=lr, steps=steps or p.steps)
if dynamic:
    p = dataclasses.replace(p, dynamic_sampling=True, max_sampling_draws=3, prompts_per_step=4)
tool = MacroTool(retriever, k=p.top_k)
eval_params = recipe.rollout_params(p, temperature=0.0)
stages = [(M2RStageParams(id=1, prev=0, segment="m2r_stage1", format=1), "m2r_stage1"),
          (M2RStageParams(id=2, prev=1, segment="m2r_stage2", format=2, start="m2r/model_1"), "m2r_stage2")]
init = warm
for stage, segment in stages:
    _, record = recipe.train_stage(stage_items[segment], init, retriever, p, stage, state_dir=work / f"ck{stage.id}",
                                   out_model=work / f"model{stage.id}", metrics_path=work / f"stage{stage.id}.csv")
    init = str(work / f"model{stage.id}")
    scores = recipe.evaluate_qa("m2r", LocalLLM(init, precision=p.precision), held, tool, params=eval_params,
                                fmt=stage.format)
    print(f"after stage {stage.id} (lr {lr}, {p.steps} steps, dynamic sampling {p.dynamic_sampling}): EM {scores['em']:.3f} F1 {scores['f1']:.3f} "
          f"malformed {scores['format_failures']} {scores['format_failures_by_reason']}; "
          f"training format failures {record['format_failures']} of {record['rollouts']}", flush=True)
print("work", work)
