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

import sys
from pathlib import Path

from factrl.data.schemas import REFERENCES, REFERENCES_REJECTED
from factrl.io import write_json, write_parquet
from factrl.model_names import load_with_base_model
from factrl.recipes import warmup as recipe
from factrl.recipes.warmup_params import WarmupParams

OUT = Path("warmup")


def main(params_file: str = "params.yaml", out: Path = OUT) -> dict:
    # `base` (the default base_model) is params model.base: the one place the base policy is named
    params: WarmupParams = load_with_base_model(WarmupParams, params_file)
    kept, rejected, summary = recipe.run(params, claims_file=Path("data/claims/warm.parquet"),
                                         index_dir=Path("index"), state_dir=Path("checkpoints") / "warmup",
                                         models_dir=Path("models"), loss_dir=out)
    refs, rej = recipe.references_tables(kept, rejected)
    write_parquet(refs, out / "references.parquet", REFERENCES)
    write_parquet(rej, out / "rejected.parquet", REFERENCES_REJECTED)
    write_json(summary, out / "summary.json")
    return summary


if __name__ == "__main__":
    main(*sys.argv[1:2])
