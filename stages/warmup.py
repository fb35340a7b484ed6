"""Stage `warmup`: H_0 and L_0 (models/reason_0, models/search_0), the agents round 1 starts from.

    python -m stages.warmup [params.yaml]      # DVC: warmup

With ``warmup.enabled: false`` (the paper's recipe) both are the base model as it is (``warmup.base_model``,
default ``base``: params ``model.base``). With
``true`` (the demo and long profiles) each agent is first fine-tuned on reference trajectories of
its role (``factrl.recipes.warmup``): built from the demo world's gold chains over index/
(``source: world``) or written by an LLM teacher on the training claims and kept when the verdict is
right (``source: teacher``).

Outputs: models/reason_0, models/search_0; warmup/references.parquet (REFERENCES, what was trained
on), warmup/rejected.parquet (REFERENCES_REJECTED, with the reason); warmup/summary.json (DVC
metrics: references per agent, rejections by reason, and per agent the examples, optimizer steps,
tokens, tokens/s, first and final loss, wall time, precision); warmup/loss_<agent>/ (each agent's
DVCLive directory: plots/metrics/{loss,lr,grad_norm}.tsv, DVC plots; metrics.json, the last values);
checkpoints/warmup (DVC ``persist``), which a killed run resumes from.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.rl.step_log import write_history
from factrl.data import reference
from factrl.data.schemas import CLAIMS, REFERENCES, REFERENCES_REJECTED, validate
from factrl.data.splits import balanced_subset
from factrl.io import atomic_path, write_json, write_parquet
from factrl.model_names import resolve_model
from factrl.recipes import warmup as recipe
from factrl.recipes.warmup_params import WarmupParams

OUT = Path("warmup")


def build_references(claims: pa.Table, params: WarmupParams, retriever_tool, *, teacher=None,
                     work_dir: Path | None = None) -> tuple[list[dict], list[dict]]:
    """``(kept, rejected)`` reference rows of both agents on ``claims`` from ``params.source``."""
    records = claims.to_pylist()
    if params.source == "world":
        return reference.world_references(records, retriever_tool, max_searches=params.search_max_turns)
    if teacher is None or work_dir is None:
        raise ValueError("source 'teacher' needs a teacher LLM and a work directory")
    return recipe.teacher_references_resumable(records, teacher, retriever_tool, params, work_dir)


def _write_outputs(kept: list[dict], rejected: list[dict], summary: dict, out: Path) -> None:
    refs, rej = recipe.references_tables(kept, rejected)
    write_parquet(refs, out / "references.parquet", REFERENCES)
    write_parquet(rej, out / "rejected.parquet", REFERENCES_REJECTED)
    write_json(summary, out / "summary.json")


def main(params_file: str = "params.yaml", out: Path = OUT) -> dict:
    from factrl.hardware import hardware_record
    from factrl.recipes.teacher import open_teacher
    from factrl.llm.models import cache_dir

    params: WarmupParams = load_section(WarmupParams, params_file)
    # `base` (the default) is params model.base: the one place the base policy is named
    base_model = resolve_model(params.base_model, None, where="warmup.base_model", params_file=params_file)
    params = dataclasses.replace(params, base_model=base_model)
    start = time.perf_counter()
    summary = {"enabled": params.enabled, "base_model": params.base_model}
    models_dir = Path("models")
    state_dir = Path("checkpoints") / "warmup"
    state_dir.mkdir(parents=True, exist_ok=True)  # a DVC out, also when nothing trains
    if not params.enabled:
        recipe.save_base_agents(params.base_model, models_dir)
        for agent in recipe.AGENTS:  # the DVC plots and metrics outs exist, empty: nothing was trained
            write_history([], out / f"loss_{agent}")
        _write_outputs([], [], summary | {"wall_s": time.perf_counter() - start}, out)
        print(f"warmup: off; models/reason_0 = models/search_0 = {params.base_model}")
        return summary
    from factrl.agents.tools import RetrieverTool
    from factrl.retrieval.index import Retriever

    # what prepare says the warm start may see: all training claims, or a hard world's clean ones
    claims_file = Path("data/claims/warm.parquet")
    claims = balanced_subset(validate(pq.read_table(claims_file), CLAIMS, str(claims_file)), params.max_claims)
    retriever_tool = RetrieverTool(Retriever("index", mode=params.retrieval_mode), k=params.top_k)
    if params.source == "teacher":
        with open_teacher(params.teacher) as teacher:
            kept, rejected = build_references(claims, params, retriever_tool, teacher=teacher,
                                              work_dir=cache_dir() / "warmup")
    else:
        kept, rejected = build_references(claims, params, retriever_tool)
    reference.validate_references(kept, str(out / "references.parquet"))
    counts = recipe.reference_counts(kept, rejected)
    missing = [agent for agent, n in counts["references"].items() if n == 0]
    if missing:
        raise ValueError(f"warmup: source {params.source!r} gave no {' or '.join(missing)} reference from "
                         f"{claims.num_rows} claims of {claims_file} (rejected: {counts['rejected']['by_reason']}); "
                         "source 'world' needs the demo world's claims, use 'teacher' for other data")
    print(f"warmup: {counts['references']} references from {claims.num_rows} claims ({params.source}); "
          f"rejected {counts['rejected']['by_reason']}", flush=True)
    sft = recipe.warm_start(kept, params, state_dir=state_dir, models_dir=models_dir, loss_dir=out)
    summary |= {"source": params.source, "prompt": params.prompt, "claims": claims.num_rows, **counts, "sft": sft,
                "wall_s": time.perf_counter() - start,
                "hardware": hardware_record(params.precision)}
    _write_outputs(kept, rejected, summary, out)
    return summary


if __name__ == "__main__":
    main(*sys.argv[1:2])
