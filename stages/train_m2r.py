"""Stage `train_m2r@<id>`: GRPO of the M2R agent on one curriculum stage's multi-hop questions.

    python -m stages.train_m2r <stage id> [params.yaml]      # DVC: train_m2r@<id>

Stage ``<id>`` of params ``m2r_stages`` (empty by default: M2R training is off) trains
m2r/model_<prev> (stage 0: ``m2r.base_model``, first warm-started on reference M2R trajectories
of the demo world's gold chains when ``m2r.warm_start``) on the questions of
segments/<segment>.parquet, with the reward ``m2r.reward`` checking the stage's format
(``factrl.recipes.m2r``). Outputs: m2r/model_<id>; metrics/train/m2r_r<id>/ (DVCLive: DVC plots and metrics);
metrics/m2r/train_r<id>.json (steps, final reward, format failures by reason, the warm start's
figures, wall time and peak memory); checkpoints/m2r_r<id> (DVC ``persist``) to resume after a kill.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.data.multihop import world_items
from factrl.data.schemas import CLAIMS, validate
from factrl.hardware import peak_rss_mib
from factrl.io import write_json
from factrl.model_names import resolve_model
from factrl.recipes import m2r as recipe
from factrl.recipes.m2r_params import M2RParams, M2RStageParams, M2RStagesParams

SEGMENTS = Path("segments")
WARM_SEGMENT = "all"  # the warm start's references come from every training claim, whatever the stage


def train_m2r(claims: pa.Table, warm_claims: pa.Table | None, retriever, params: M2RParams, stage: M2RStageParams, *,
              init_model: str, state_dir: Path, out_model: Path, curves_dir: Path, results_path: Path,
              model_tokenizer: tuple | None = None) -> dict:
    """One M2R curriculum stage: warm start first when it starts from the base model and
    ``params.warm_start`` (references from ``warm_claims``), then GRPO on ``claims``; writes
    ``results_path`` and returns it."""
    start = time.perf_counter()
    recipe.reward_function(params.reward)  # a wrong name stops here, before any model loads
    items = world_items(claims)
    warm = None
    warm_dir = state_dir.parent / f"{state_dir.name}_warm"  # apart: a new GRPO run empties state_dir
    warm_dir.mkdir(parents=True, exist_ok=True)  # a DVC out, also when there is no warm start
    if stage.prev == 0 and params.warm_start:
        init_model = str(warm_dir / "model")
        warm = recipe.warm_start(world_items(warm_claims if warm_claims is not None else claims), params,
                                 recipe.m2r.MacroTool(retriever, k=params.top_k), state_dir=warm_dir / "sft",
                                 out_model=Path(init_model), curves_dir=warm_dir / "loss",
                                 model_tokenizer=model_tokenizer)
        model_tokenizer = None  # the warm start trained those weights; GRPO loads the saved model
    run, record = recipe.train_stage(items, init_model, retriever, params, stage, state_dir=state_dir,
                                     out_model=out_model, curves_dir=curves_dir, model_tokenizer=model_tokenizer)
    result = {**record, "init_model": init_model, "warm_start": warm, "wall_s": time.perf_counter() - start,
              "peak_rss_mib": peak_rss_mib()}
    write_json(result, results_path)
    print(f"train_m2r@{stage.id}: {record['steps']} steps on {record['prompts']} questions, "
          f"format failures {record['format_failures']}/{record['rollouts']}, {result['wall_s']:.0f}s, "
          f"peak {result['peak_rss_mib']:.0f} MiB", flush=True)
    return result


def main(stage_id: str, params_file: str = "params.yaml") -> dict:
    from factrl.retrieval.index import Retriever

    stage = recipe.find_stage(load_section(M2RStagesParams, params_file).stages, int(stage_id))
    params: M2RParams = load_section(M2RParams, params_file)
    base = resolve_model(params.base_model, None, where="m2r.base_model", params_file=params_file)
    params = dataclasses.replace(params, base_model=base)
    recipe.reward_function(params.reward)
    claims_path = SEGMENTS / f"{stage.segment}.parquet"
    if not claims_path.exists():
        raise FileNotFoundError(f"{claims_path}: no such curriculum piece (m2r_stages.{stage.id}.segment is "
                                f"{stage.segment!r}; the curriculum stage writes m2r_stage1, m2r_stage2 and all)")
    claims = validate(pq.read_table(claims_path), CLAIMS, str(claims_path))
    warm_path = SEGMENTS / f"{WARM_SEGMENT}.parquet"
    warm_claims = validate(pq.read_table(warm_path), CLAIMS, str(warm_path)) if stage.prev == 0 else None
    init = params.base_model if stage.prev == 0 else str(recipe.checkpoint_of(stage.prev))
    return train_m2r(claims, warm_claims, Retriever("index", mode=params.retrieval_mode), params, stage,
                     init_model=init, state_dir=Path("checkpoints") / f"m2r_r{stage.id}",
                     out_model=recipe.checkpoint_of(stage.id),
                     curves_dir=Path("metrics") / "train" / f"m2r_r{stage.id}",
                     results_path=Path("metrics") / "m2r" / f"train_r{stage.id}.json")


if __name__ == "__main__":
    main(*sys.argv[1:3])
