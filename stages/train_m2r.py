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

import sys
from pathlib import Path

import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.data.schemas import CLAIMS, validate
from factrl.io import write_json
from factrl.model_names import load_with_base_model
from factrl.recipes import m2r as recipe
from factrl.recipes.m2r_params import M2RParams, M2RStagesParams

SEGMENTS = Path("segments")
WARM_SEGMENT = "all"  # the warm start's references come from every training claim, whatever the stage


def main(stage_id: str, params_file: str = "params.yaml") -> dict:
    from factrl.retrieval.index import Retriever

    stage = recipe.find_stage(load_section(M2RStagesParams, params_file).stages, int(stage_id))
    params: M2RParams = load_with_base_model(M2RParams, params_file)
    recipe.reward_function(params.reward)
    claims_path = SEGMENTS / f"{stage.segment}.parquet"
    if not claims_path.exists():
        raise FileNotFoundError(f"{claims_path}: no such curriculum piece (m2r_stages.{stage.id}.segment is "
                                f"{stage.segment!r}; the curriculum stage writes m2r_stage1, m2r_stage2 and all)")
    claims = validate(pq.read_table(claims_path), CLAIMS, str(claims_path))
    warm_path = SEGMENTS / f"{WARM_SEGMENT}.parquet"
    warm_claims = validate(pq.read_table(warm_path), CLAIMS, str(warm_path)) if stage.prev == 0 else None
    init = params.base_model if stage.prev == 0 else str(recipe.checkpoint_of(stage.prev))
    result = recipe.run_stage(claims, warm_claims, Retriever("index", mode=params.retrieval_mode), params, stage,
                              init_model=init, state_dir=Path("checkpoints") / f"m2r_r{stage.id}",
                              out_model=recipe.checkpoint_of(stage.id),
                              curves_dir=Path("metrics") / "train" / f"m2r_r{stage.id}")
    write_json(result, Path("metrics") / "m2r" / f"train_r{stage.id}.json")
    print(f"train_m2r@{stage.id}: {result['steps']} steps on {result['prompts']} questions, "
          f"format failures {result['format_failures']}/{result['rollouts']}, {result['wall_s']:.0f}s, "
          f"peak {result['peak_rss_mib']:.0f} MiB", flush=True)
    return result


if __name__ == "__main__":
    main(*sys.argv[1:3])
