"""Stage `fit_consensus`: SC-MAKS's reward model and PPO-trained aggregator, fitted on the debate.

Input: debate/transcripts.parquet. Outputs in consensus/: features.parquet (CONSENSUS_FEATURES),
reward_model.pt, aggregator.pt, predictions.parquet (CONSENSUS_PREDICTIONS: SC-MAKS, majority vote,
uniform vote and the best single member on the debated eval claims; stage `evaluate` scores them)
and metrics.json (DVC metrics: the eval-split scores, and the paper's cross-validation: mean, std,
95% interval per system and metric, paired t-test and Wilcoxon of SC-MAKS against each baseline).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.consensus.params import FitConsensusParams
from factrl.data.schemas import CONSENSUS_FEATURES, CONSENSUS_PREDICTIONS, DEBATE_TURNS, validate
from factrl.io import write_json, write_parquet
from factrl.recipes import scmaks


def main(params_file: str = "params.yaml", transcripts: Path = Path("debate/transcripts.parquet"),
         out: Path = Path("consensus")) -> dict:
    params: FitConsensusParams = load_section(FitConsensusParams, params_file)
    scmaks.consensus_plan(params)  # a wrong ablation name stops the stage before any work
    turns = validate(pq.read_table(transcripts), DEBATE_TURNS, str(transcripts))
    result = scmaks.fit_consensus(turns, params)
    write_parquet(result.features, out / "features.parquet", CONSENSUS_FEATURES)
    write_parquet(result.predictions, out / "predictions.parquet", CONSENSUS_PREDICTIONS)
    result.fit.reward_model.save(out / "reward_model.pt")
    result.fit.aggregator.save(out / "aggregator.pt")
    write_json(result.metrics, out / "metrics.json")
    test = result.metrics["test"]
    print("fit_consensus: eval accuracy " + ", ".join(f"{s} {m['accuracy']:.3f}" for s, m in test.items())
          + f"; cv runs {result.metrics['cv']['runs']}")
    return result.metrics


if __name__ == "__main__":
    main(*sys.argv[1:2])
