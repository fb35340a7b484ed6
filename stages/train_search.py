"""Stage `train_search@r`: GRPO of the search agent on round r's pseudo-labelled questions.

    python -m stages.train_search <round id> [params.yaml]      # DVC: train_search@<id>

L_prev (models/search_<prev>) answers each question of qa/qa_r<id>.parquet by searching index/
(<search> -> top-k passages -> <report>); the reward is ``haris_search`` with the judge named in
params ``train.search.judge`` (``rule`` by default) comparing the report to the teacher's answer.
``train.backend: verl`` trains the same rows on verl instead (``factrl.recipes.verl_rounds``).
Outputs: models/search_<id> (Hugging Face format), metrics/train/search_r<id>/ (DVCLive: one
TSV per curve, a row per step, DVC plots; metrics.json, DVC metrics). Checkpoints go to checkpoints/search_r<id> (DVC ``persist``), so a killed run
resumes where its last checkpoint left it. The recipe is
:func:`factrl.recipes.haris_train.run_train_search` (also ``factrl train --stage train_search@<id>``).
"""

from __future__ import annotations

import sys

from factrl.recipes.haris_train import RunResult, run_train_search


def main(round_id: str, params_file: str = "params.yaml", backend: str | None = None) -> RunResult:
    return run_train_search(int(round_id), params_file, backend)


if __name__ == "__main__":
    main(*sys.argv[1:3])
