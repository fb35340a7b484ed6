"""Training curves through DVCLive, DVC's own logger: one directory per training run.

A run's curves live in a DVCLive directory (``metrics/train/reason_r1``, ``warmup/loss_search``):

- ``plots/metrics/<name>.tsv``: one file per metric, a row per step (``step``, value), the files
  ``dvc plots`` draws (dvc.yaml declares ``<dir>/plots/metrics`` with ``x: step``);
- ``metrics.json``: each metric's latest value and the last ``step``, what ``dvc metrics show`` and
  ``dvc exp show`` list.

:class:`StepLog` writes rows (a GRPO step's row: :func:`factrl.rl.sampling.step_row`). It rebuilds the
directory from the history it is given (the rows a checkpoint restored) and then appends one row per
step, so after a kill and a rerun the files hold exactly the rows of an uninterrupted run: steps done
after the last checkpoint are dropped with the rebuild and written again when the rerun redoes them
(Live's own ``resume=True`` would go on after the last step logged, keeping those rows twice). :func:`write_history` writes a whole history
at once (verl's metrics, a run with no steps) and :func:`read_history` reads a directory back as
rows (``factrl train-summary``, evaluate's reward curves, tests).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dvclive import Live
from dvclive.plots import Metric

STEP = "step"  # the x axis: the run's optimizer step, 1-based
SUMMARY_FILE = "metrics.json"  # Live.metrics_file's name
PLOTS_SUBDIR = Path("plots") / "metrics"  # Live.plots_dir / Metric.subfolder, relative to the run's directory


class _RunLive(Live):
    """A :class:`dvclive.Live` that opens no DVC repository.

    ``dvc repro`` records the stage's outputs itself, so the logger needs no repository. Live's own
    lookup (dvclive.dvc.get_dvc_repo) would ``dvc init`` an enclosing git repository that has no
    DVC and draw a random experiment name on every start, for ``save_dvc_exp`` which is off here.
    """

    def _init_dvc(self) -> None:
        self._dvc_file = "dvc.yaml"  # what Live._init_dvc sets; unused with dvcyaml=None


class StepLog:
    """One run's per-step curves in the DVCLive directory ``live_dir``.

    ``history``: the rows already done (``{"step": int, name: value, ...}``, e.g. restored from a
    checkpoint); the directory is emptied of earlier curves and rebuilt from them.
    """

    def __init__(self, live_dir: str | Path, history: Iterable[Mapping[str, Any]] = ()):
        self.dir = Path(live_dir)
        self.live = _RunLive(str(self.dir), resume=False, save_dvc_exp=False, dvcyaml=None, report=None)
        (self.dir / PLOTS_SUBDIR).mkdir(parents=True, exist_ok=True)  # a DVC out even before the first step
        for row in history:
            self._add(row)
        self.live.make_summary()

    def log(self, row: Mapping[str, Any]) -> None:
        """Append one step's row (its ``step`` is the x value; ``None`` values are left out) and
        rewrite ``metrics.json``."""
        self._add(row)
        self.live.make_summary()

    def _add(self, row: Mapping[str, Any]) -> None:
        if STEP not in row:
            raise ValueError(f"{self.dir}: a curve row needs a '{STEP}' field, got {sorted(row)}")
        self.live.step = int(row[STEP])
        for name, value in row.items():
            if name == STEP or value is None:
                continue
            # numpy and Python scalars pass as they are (their text is what the CSV writer wrote);
            # anything else numeric (a 0-d tensor) as a float
            self.live.log_metric(name, value if Metric.could_log(value) else float(value))


def write_history(rows: Iterable[Mapping[str, Any]], live_dir: str | Path) -> None:
    """Write a whole run's rows to ``live_dir`` at once (an empty history: no curve yet, an empty
    plots folder and ``{}`` summary, still valid DVC outputs)."""
    StepLog(live_dir, rows)


def read_history(live_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a DVCLive directory, one dict per step in step order (``step`` an int, values
    floats, or strings where a value was not a number); a metric absent at a step is absent from
    its row. Raises ``FileNotFoundError`` naming the directory when it holds no curves folder."""
    plots = Path(live_dir) / PLOTS_SUBDIR
    if not plots.is_dir():
        raise FileNotFoundError(f"{live_dir}: no DVCLive curves ({PLOTS_SUBDIR} missing)")
    by_step: dict[int, dict[str, Any]] = {}
    for tsv in sorted(plots.rglob("*.tsv")):
        name = tsv.relative_to(plots).with_suffix("").as_posix()  # "a/b" for a metric logged as "a/b"
        column = tsv.stem
        with tsv.open(encoding="utf-8", newline="") as f:
            for line, rec in enumerate(csv.DictReader(f, delimiter="\t"), start=2):
                try:
                    step = int(rec[STEP])
                    text = rec[column]
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{tsv}: row {line}: bad '{STEP}' or '{column}' field ({exc})") from exc
                by_step.setdefault(step, {STEP: step})[name] = _number(text)
    return [by_step[s] for s in sorted(by_step)]


def curve_dirs(root: str | Path) -> list[Path]:
    """The run directories directly under ``root`` that hold DVCLive curves, by name (none when
    ``root`` does not exist)."""
    root = Path(root)
    return sorted(p for p in root.iterdir() if (p / PLOTS_SUBDIR).is_dir()) if root.is_dir() else []


def read_summary(live_dir: str | Path) -> dict[str, Any]:
    """A run's ``metrics.json`` (latest value of each metric, and ``step``); ``{}`` when absent."""
    path = Path(live_dir) / SUMMARY_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text
