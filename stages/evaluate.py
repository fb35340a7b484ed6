"""Stage `evaluate`: HARIS checkpoints against the baselines on every eval set (the paper's Table 1).

    python -m stages.evaluate [params.yaml]           # the stage: evaluate.sets (+ real_sets if evaluate.real)
    python -m stages.evaluate [params.yaml] --real    # make eval-real: evaluate.real_sets alone, *_real outputs

The run is the recipe :func:`factrl.recipes.evaluate.run_evaluate` (which sets, checkpoints, systems,
the calibration maps it fits and saves to metrics/calibration/); this stage reads params ``evaluate``,
calls it and writes its outputs: metrics/eval.json (DVC metrics: dataset -> hop -> system -> metric,
with ECE and Brier before and after calibration), metrics/predictions.parquet, metrics/gains.json,
metrics/calibration.json (reliability diagrams, coverage-accuracy curves), reports/eval.md (Table 1
layout with the paper's numbers as reference rows), plots/eval/ (accuracy.png, reliability.png and
reward_curves.png when training metrics exist under metrics/train/), reports/traces.html; with
``--real`` the same names with ``_real``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from factrl.config import load_section
from factrl.eval import outputs
from factrl.eval.params import EvaluateParams
from factrl.recipes.evaluate import run_evaluate


def main(params_file: str = "params.yaml", *, real_only: bool = False,
         llm_loader: Callable[[str], Any] | None = None) -> dict:
    """The stage (``sets``, plus ``real_sets`` when ``real`` is on); ``real_only``: ``make eval-real``,
    the ``real_sets`` alone into outputs of their own (``*_real``), beside the stage's."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    params: EvaluateParams = load_section(EvaluateParams, params_file)
    run = run_evaluate(params, params_file, real_only=real_only, llm_loader=llm_loader)
    tag = "_real" if real_only else ""
    written = outputs.write_outputs(run.result, metrics_path=Path(f"metrics/eval{tag}.json"),
                                    predictions_path=Path(f"metrics/predictions{tag}.parquet"),
                                    gains=run.gains, gains_path=Path(f"metrics/gains{tag}.json"),
                                    report_path=Path(f"reports/eval{tag}.md"), plots_dir=Path(f"plots/eval{tag}"),
                                    traces_path=Path(f"reports/traces{tag}.html"),
                                    title="Evaluation on the real claim sets" if real_only else "Evaluation",
                                    notes=run.notes, reward_points=run.reward_points,
                                    calibration_path=Path(f"metrics/calibration{tag}.json"), calibration_maps=run.maps,
                                    abstain=run.abstain)
    for kind, path in written.items():
        print(f"evaluate: {kind} -> {path}")
    return {k: str(v) for k, v in written.items()}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--real"]
    main(*args[:1], real_only="--real" in sys.argv)
