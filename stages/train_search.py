"""Stage `train_search@r`: GRPO of the search agent on round r's pseudo-labelled questions.

    python -m stages.train_search <round id> [params.yaml]      # DVC: train_search@<id>

L_prev (models/search_<prev>) answers each question of qa/qa_r<id>.parquet by searching index/
(<search> -> top-k passages -> <report>); the reward is ``haris_search`` with the judge named in
params ``train.search.judge`` (``rule`` by default) comparing the report to the teacher's answer.
``train.backend: verl`` trains the same rows on verl instead (``factrl.recipes.haris.verl_rounds``).
Outputs: models/search_<id> (Hugging Face format), metrics/train/search_r<id>/ (DVCLive: one
TSV per curve, a row per step, DVC plots; metrics.json, DVC metrics). Checkpoints go to checkpoints/search_r<id> (DVC ``persist``), so a killed run
resumes where its last checkpoint left it. The recipe is
:func:`factrl.recipes.haris.train.run_train` (also ``factrl train --stage train_search@<id>``).
"""

from __future__ import annotations

import sys

from factrl.recipes.haris.train import RunResult, run_train


def main(round_id: str, params_file: str = "params.yaml", backend: str | None = None) -> RunResult:
    return run_train("search", int(round_id), params_file, backend)


if __name__ == "__main__":
    main(*sys.argv[1:3])
