"""Stage `train_march@<seed>`: MARCH's solver, proposer and blinded checker, one policy trained jointly.

    python -m stages.train_march <seed> [params.yaml]      # DVC: train_march@<seed>

Off by default: DVC makes one stage per entry of ``train_march.seeds`` (empty in params.yaml), so the
demo does not run it; ``dvc exp run -S 'train_march.seeds=[0]'`` switches it on. The run
(``factrl.recipes.march``) draws numeric questions from a small demo world, warm-starts the base model
on reference episodes (``train_march.warmup``), evaluates on held-out questions, trains with GRPO on
the solver's and checker's trajectories (reward ``train_march.reward``) and evaluates again.

Outputs: march/model_s<seed> (Hugging Face format); march/results_s<seed>.json (DVC metrics: before /
after hallucination rate, accuracy, proposals per answer, format failures by role, per-step curves,
wall time, peak memory); metrics/train/march_s<seed>/ (DVCLive: DVC plots and metrics); checkpoints/march_s<seed> (DVC
``persist``) for resuming after a kill.
"""

from __future__ import annotations

import sys
from pathlib import Path

from factrl.config import ConfigError
from factrl.model_names import load_with_base_model
from factrl.recipes import march
from factrl.recipes.march_params import TrainMarchParams


def train_march(params: TrainMarchParams, seed: int, root: Path = Path("."), **kw) -> dict:
    """The run with ``seed``; writes the model, the results file and the metrics plot under ``root``."""
    root = Path(root)
    results = march.run(march.run_params(params, seed), state_dir=root / "checkpoints" / f"march_s{seed}",
                        out_model=root / "march" / f"model_s{seed}",
                        curves_dir=root / "metrics" / "train" / f"march_s{seed}", **kw)
    march.write_results(results, root / "march" / f"results_s{seed}.json")
    return results


def main(seed: str, params_file: str = "params.yaml") -> dict:
    params: TrainMarchParams = load_with_base_model(TrainMarchParams, params_file)
    if not seed.lstrip("-").isdigit() or int(seed) not in params.seeds:
        raise ConfigError(f"{params_file}:train_march.seeds: no run with seed {seed!r} (seeds: {list(params.seeds)})")
    march.check_params(params, f"{params_file}:train_march")
    results = train_march(params, int(seed))
    print(f"train_march@{seed}: hallucination {results['before']['hallucination_rate']:.2f} -> "
          f"{results['after']['hallucination_rate']:.2f}, accuracy {results['before']['accuracy']:.2f} -> "
          f"{results['after']['accuracy']:.2f}, {results['wall_seconds']:.0f} s, peak {results['peak_rss_mib']:.0f} MiB")
    return results


if __name__ == "__main__":
    main(*sys.argv[1:3])
