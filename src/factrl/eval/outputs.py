"""The files an evaluation writes (shared by stage ``evaluate`` and ``factrl evaluate``).

:func:`write_outputs` turns an :class:`~factrl.eval.runner.EvalResult` into ``metrics/eval.json``
(dataset -> hop -> system -> metric), the markdown report (Table 1 layout, ``factrl.eval.report``)
with its plots, the trace page, and, when asked, every claim's prediction (Parquet), the paired gains
and the calibration measurements with their report section (``factrl.eval.calibration_run``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from factrl.eval.calibration_run import calibration_markdown
from factrl.eval.report import nested_metrics
from factrl.eval.runner import PREDICTIONS, EvalResult


def write_outputs(result: EvalResult, *, metrics_path: Path, report_path: Path, plots_dir: Path,
                  traces_path: Path, title: str, notes: Sequence[str] = (),
                  reward_points: Sequence[Mapping] = (), predictions_path: Path | None = None,
                  gains: Mapping | None = None, gains_path: Path | None = None,
                  calibration_path: Path | None = None, calibration_maps: Mapping | None = None,
                  abstain=None) -> dict[str, Path]:
    """metrics JSON, the markdown report (Table 1 layout), plots, and the trace page; with
    ``predictions_path`` every claim's verdict per system (Parquet), with ``gains_path`` the paired
    gains (:func:`factrl.eval.runner.paired_gains`); with ``calibration_path`` the calibration
    measurements of :func:`~factrl.eval.calibration_run.apply_calibration` (JSON: reliability bins and
    coverage curves per dataset, system and hop, and each map's method and size), a reliability plot
    and a report section; with ``abstain`` (``factrl.agents.abstain.AbstainParams``, the rules the
    predictions were decided with) a section on abstention: coverage and accuracy on the answered claims."""
    import os

    from factrl.eval import plots
    from factrl.eval.report import write_report
    from factrl.eval.traces import trace_page
    from factrl.io import write_json, write_text

    written = {}
    write_json(nested_metrics(result.rows), metrics_path)
    written["metrics"] = metrics_path
    if predictions_path is not None:  # written even when empty: the stage's DVC output must exist
        from factrl.io import write_parquet

        write_parquet(pa.Table.from_pylist(result.predictions, schema=PREDICTIONS), predictions_path)
        written["predictions"] = predictions_path
    if gains_path is not None:
        write_json(gains, gains_path)
        written["gains"] = gains_path
    images = []
    if any(r["metric"] == "accuracy" for r in result.rows):
        written["accuracy_plot"] = plots.render(plots.accuracy_per_hop_spec(result.rows),
                                                plots_dir / "accuracy.png")
        images.append(written["accuracy_plot"])
    if reward_points:
        written["reward_plot"] = plots.render(plots.reward_curve_spec(reward_points), plots_dir / "reward_curves.png")
        images.append(written["reward_plot"])
    sections = []
    if calibration_path is not None:
        maps = dict(calibration_maps or {})
        write_json({"maps": {name: cal.to_dict() for name, cal in maps.items()},
                    "measured": result.calibration}, calibration_path)
        written["calibration"] = calibration_path
        if result.calibration:
            written["reliability_plot"] = plots.render(plots.reliability_spec(result.calibration),
                                                       plots_dir / "reliability.png")
            images.append(written["reliability_plot"])
            sections.append(("Calibrated confidence", calibration_markdown(result.calibration, maps)))
    if abstain is not None and any(p.get("abstained") is not None for p in result.predictions):
        from factrl.eval.abstention import abstention_markdown

        sections.append(("Not enough evidence (abstention)", abstention_markdown(result.predictions, abstain)))
    rel = [os.path.relpath(p, report_path.parent) for p in images]
    written["report"] = write_report(result.rows, report_path, title=title, notes=notes, plots=rel,
                                     sections=sections)
    write_text(trace_page(result.trajectories, title=f"{title}: traces"), traces_path)
    written["traces"] = traces_path
    return written
