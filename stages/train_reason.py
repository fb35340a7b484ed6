"""Stage `train_reason@r`: GRPO of the reasoning agent on round r's claims, L_r serving searches.

    python -m stages.train_reason <round id> [params.yaml]      # DVC: train_reason@<id>

H_prev (models/reason_<prev>) verifies each claim of segments/<segment>.parquet, asking questions
that the just-trained search agent L_r (models/search_<id>) answers over index/: in-process by
default, or behind ``factrl serve-llm`` (params ``train.reasoning.search_backend: server``), as the
paper serves it. The reward is ``haris_reasoning`` (verdict against the gold label). Outputs:
models/reason_<id> (Hugging Face format), metrics/train/reason_r<id>/ (DVCLive: DVC plots and metrics); checkpoints
in checkpoints/reason_r<id> (DVC ``persist``) for resuming after a kill. ``train.backend: verl``
trains the same rows on verl instead, L_r behind ``vllm serve`` (``factrl.recipes.haris.verl_rounds``).
The recipe is :func:`factrl.recipes.haris.train.run_train` (also ``factrl train``).
"""

from __future__ import annotations

import sys

from factrl.recipes.haris.train import RunResult, run_train


def main(round_id: str, params_file: str = "params.yaml", backend: str | None = None) -> RunResult:
    return run_train("reason", int(round_id), params_file, backend)


if __name__ == "__main__":
    main(*sys.argv[1:3])
