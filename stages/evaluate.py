"""Stage `evaluate`: HARIS checkpoints against the baselines on every eval set (the paper's Table 1).

    python -m stages.evaluate [params.yaml]           # the stage: evaluate.sets (+ real_sets if evaluate.real)
    python -m stages.evaluate [params.yaml] --real    # make eval-real: evaluate.real_sets alone, *_real outputs

Inputs: the eval sets of params `evaluate.sets` (the demo world's data/claims/eval.parquet) and, when
switched on, `evaluate.real_sets` (the HARIS eval files of ../shared/data/haris_eval when present,
each searched over its own passages),
index/ for sets without their own passages, the HARIS checkpoints of `evaluate.checkpoints` (by
default base, warm and trained: params `model.base`, models/*_0 and the last round's models/*_<r>).
Outputs: metrics/eval.json (DVC metrics: dataset -> hop -> system -> metric), reports/eval.md
(Table 1 layout with the paper's numbers as reference rows), plots/eval/accuracy.png (and
plots/eval/reward_curves.png when training metrics exist under metrics/train/), reports/traces.html.
The SC-MAKS systems (consensus/predictions.parquet of stage fit_consensus) are scored as dataset
``demo_debate``.
"""

from __future__ import annotations

import csv
import functools
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from factrl.config import ConfigError, EvalSetParams, EvaluateParams, load_section, resolve_model
from factrl.eval import runner
from factrl.eval.stats import consensus_rows
from factrl.hardware import resolve_device, resolve_precision

log = logging.getLogger("stages.evaluate")

TRAIN_METRICS = Path("metrics/train")
CONSENSUS_PREDICTIONS = Path("consensus/predictions.parquet")
# metrics/train/reason_r2.csv, metrics/train/search_3/metrics.csv, ...: agent and round from the path
_TRAIN_FILE = re.compile(r"(reason|search)\w*?_r?(\d+)")


def resolve_checkpoints(params: EvaluateParams, params_file: str | Path = "params.yaml"
                        ) -> list[tuple[str, str, str]]:
    """(name, reason model, search model) per checkpoint of ``evaluate.checkpoints``, symbolic names
    (``base``, ``warm``, ``last``, ``r<id>``) resolved by :func:`factrl.config.resolve_model`. A model
    directory must exist; an endpoint (``openai:MODEL@URL``) is taken as given."""
    from factrl.llm.backends import parse_spec

    if "haris" in params.systems and not params.checkpoints:
        raise ConfigError(f"{params_file}:evaluate.checkpoints: empty, but systems has haris "
                          "(list e.g. {name: HARIS (trained), reason: last, search: last}, or drop haris)")
    resolved = []
    for i, c in enumerate(params.checkpoints):
        pair = []
        for agent, spec in (("reason", c.reason), ("search", c.search)):
            where = f"evaluate.checkpoints[{i}].{agent}"
            model = resolve_model(spec, agent, where=where, params_file=params_file)
            if parse_spec(model).backend == "local" and "/" in model and not Path(model).exists():
                named = spec if spec == model else f"{spec} = {model}"
                raise FileNotFoundError(f"{params_file}: {where}: {named} does not exist "
                                        "(train that round first, or list an existing checkpoint)")
            pair.append(model)
        resolved.append((c.name, *pair))
    return resolved


def chosen_sets(params: EvaluateParams, real_only: bool = False) -> list[tuple[str, EvalSetParams]]:
    """``(params key, spec)`` of every set to evaluate: ``sets`` (and ``real_sets`` when ``real`` is
    on), or ``real_sets`` alone for ``make eval-real``."""
    demo = [] if real_only else [(f"evaluate.sets[{i}]", s) for i, s in enumerate(params.sets)]
    real = [(f"evaluate.real_sets[{i}]", s) for i, s in enumerate(params.real_sets)] if real_only or params.real else []
    return demo + real


def load_sets(params: EvaluateParams, index_dir: Path = Path("index"), real_only: bool = False
              ) -> tuple[list[runner.EvalSet], list[str]]:
    """The eval sets with their retrievers, and a note per skipped optional set."""
    from factrl.data.sources import load_hub_claims, read_claims
    from factrl.llm.models import cache_dir
    from factrl.retrieval.index import Retriever

    sets, skipped = [], []
    retrievers: dict[str, Any] = {}

    def retriever(spec: EvalSetParams):
        key = spec.passages or spec.index or str(index_dir)
        if key not in retrievers:
            if spec.passages:
                retrievers[key] = Retriever(runner.passages_index(spec.passages, cache_dir() / "eval_index"), mode="bm25")
            else:  # the pipeline's index/, or a set's own index built the same way: the same search
                retrievers[key] = Retriever(Path(spec.index) if spec.index else index_dir, mode=params.retrieval_mode)
        return retrievers[key]

    for key, spec in chosen_sets(params, real_only):
        where = f"params.yaml: {key} ({spec.name})"
        if bool(spec.path) == bool(spec.hub):
            raise ValueError(f"{where}: set exactly one of path and hub")
        if spec.passages and spec.index:
            raise ValueError(f"{where}: set at most one of passages (searched with BM25) and index")
        missing = [p for p in (spec.path, spec.passages, spec.index) if p and not Path(p).exists()]
        if missing:
            if not spec.optional:
                raise FileNotFoundError(f"{where}: {missing[0]} does not exist")
            msg = f"{spec.name}: skipped, {missing[0]} not found"
            log.info("evaluate: %s", msg)
            skipped.append(msg)
            continue
        claims = read_claims(spec.path) if spec.path else load_hub_claims(spec.hub, spec.split)
        sets.append(runner.EvalSet(spec.name, claims, retriever(spec)))
    return sets, skipped


def reward_points(train_dir: Path = TRAIN_METRICS) -> list[dict]:
    """Mean reward per step of every training run under ``train_dir`` (the trainer's metrics.csv
    rows; agent and round read from the file's path, e.g. reason_r2.csv or search_3/metrics.csv)."""
    points = []
    for path in sorted(train_dir.rglob("*.csv")) if train_dir.is_dir() else []:
        rel = str(path.relative_to(train_dir))
        m = _TRAIN_FILE.search(rel)
        if m is None:
            continue
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row.get("step") and row.get("reward_mean"):
                    points.append({"agent": m.group(1), "round": int(m.group(2)), "step": int(float(row["step"])),
                                   "reward": float(row["reward_mean"])})
    return points


def main(params_file: str = "params.yaml", *, real_only: bool = False,
         llm_loader: Callable[[str], Any] | None = None) -> dict:
    """The stage (``sets``, plus ``real_sets`` when ``real`` is on); ``real_only``: ``make eval-real``,
    the ``real_sets`` alone into outputs of their own (``*_real``), beside the stage's."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    params: EvaluateParams = load_section("evaluate", params_file)
    sets, skipped = load_sets(params, real_only=real_only)
    if not sets:
        raise FileNotFoundError("evaluate: no eval set to run" + (f" ({'; '.join(skipped)})" if skipped else ""))
    checkpoints = resolve_checkpoints(params, params_file)
    base_model = resolve_model(params.base_model, None, where="evaluate.base_model", params_file=params_file)
    device = resolve_device(params.device, key="evaluate.device")
    systems = runner.build_systems(params.systems, checkpoints, base_model,
                                   load_llm=llm_loader or functools.partial(
                                       runner.load_llm, device=device, precision=params.precision),
                                   top_k=params.top_k,
                                   max_new_tokens=params.max_new_tokens, max_turns=params.max_turns)
    result = runner.evaluate(sets, systems, per_hop=params.per_hop, seed=params.seed,
                             batch_size=params.batch_size, n_boot=params.n_boot, trace_claims=params.trace_claims)
    # SC-MAKS, majority vote, uniform vote, best single member: stage fit_consensus's eval-split verdicts
    result.rows += consensus_rows(CONSENSUS_PREDICTIONS, n_boot=params.n_boot, seed=params.seed)
    notes = [
        f"eval sets: {', '.join(s.name for s in sets)}" + (f" (skipped: {'; '.join(skipped)})" if skipped else ""),
        f"sample: up to {params.per_hop or 'all'} claims per hop, balanced labels, seed {params.seed}; "
        f"bootstrap {params.n_boot} resamples",
        "HARIS checkpoints: " + ", ".join(f"{n} = {r} / {s}" for n, r, s in checkpoints),
        f"baselines on {base_model}; top-{params.top_k} retrieval ({params.retrieval_mode} over index/, "
        "BM25 over a set's own passages, or over a set's own index as over index/); "
        f"{params.max_new_tokens} new tokens per turn, up to {params.max_turns} questions / searches",
        f"local models on {device} in {resolve_precision(params.precision, device)} "
        f"(precision: {params.precision})",
        f"wall time: {sum(result.seconds.values()):.0f} s",
    ]
    # what each HARIS checkpoint adds to the one before it (base -> warm -> trained), paired over
    # the same claims: the figure that shows what a stage of training did
    names = [n for n, _, _ in checkpoints]
    gains = runner.paired_gains(result.predictions, list(zip(names[1:], names[:-1])), n_boot=params.n_boot,
                                seed=params.seed)
    for dataset, by_pair in gains.items():
        for pair, cells in by_pair.items():
            pooled = cells["pooled"]
            notes.append(f"{dataset}: {pair}, paired over the same {pooled['n']} claims: "
                         f"{100 * pooled['mean']:+.1f} points [{100 * pooled['ci95'][0]:+.1f}, "
                         f"{100 * pooled['ci95'][1]:+.1f}]")
    tag = "_real" if real_only else ""
    written = runner.write_outputs(result, metrics_path=Path(f"metrics/eval{tag}.json"),
                                   predictions_path=Path(f"metrics/predictions{tag}.parquet"),
                                   gains=gains, gains_path=Path(f"metrics/gains{tag}.json"),
                                   report_path=Path(f"reports/eval{tag}.md"), plots_dir=Path(f"plots/eval{tag}"),
                                   traces_path=Path(f"reports/traces{tag}.html"),
                                   title="Evaluation on the real claim sets" if real_only else "Evaluation",
                                   notes=notes, reward_points=reward_points())
    for kind, path in written.items():
        print(f"evaluate: {kind} -> {path}")
    return {k: str(v) for k, v in written.items()}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--real"]
    main(*args[:1], real_only="--real" in sys.argv)
