"""Evaluation plots as Vega-Lite specs, rendered offline to PNG or SVG with ``vl_convert``.

Three plots: accuracy per hop setting per system (grouped bars with the bootstrap interval as an error
bar), reward curves per training round (mean reward per step, one line per agent and round), and
reliability diagrams of the HARIS checkpoints' raw and calibrated confidence.
The specs are plain dicts, so the pipeline can also save them as JSON for DVC's plot viewer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import vl_convert as vlc

from factrl.io import atomic_path

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # an identifier only; nothing is fetched


def _setting(row: Mapping) -> str:
    hops = row.get("num_hops")
    return str(row["dataset"]) if hops is None else f"{row['dataset']} {int(hops)}-hop"


def accuracy_per_hop_spec(rows: Sequence[Mapping], metric: str = "accuracy") -> dict:
    """Grouped bars: x = dataset and hop setting, bars = systems, y = ``metric`` in percent, CI whiskers."""
    values = [
        {
            "setting": _setting(r),
            "system": r["system"],
            "value": 100 * r["value"],
            "low": 100 * r["ci_low"] if r.get("ci_low") is not None else 100 * r["value"],
            "high": 100 * r["ci_high"] if r.get("ci_high") is not None else 100 * r["value"],
        }
        for r in rows
        if r["metric"] == metric
    ]
    if not values:
        raise ValueError(f"no {metric!r} rows to plot")
    x = {"field": "setting", "type": "nominal", "title": None, "sort": None, "axis": {"labelAngle": 0}}
    return {
        "$schema": SCHEMA,
        "title": f"{metric} per dataset and hop",
        "data": {"values": values},
        "width": {"step": 18 * max(1, len({v['system'] for v in values}))},
        "height": 260,
        "encoding": {"x": x, "xOffset": {"field": "system"}, "color": {"field": "system", "title": "system"}},
        "layer": [
            {"mark": "bar", "encoding": {"y": {"field": "value", "type": "quantitative", "title": f"{metric} (%)",
                                               "scale": {"domain": [0, 100]}}}},
            {"mark": {"type": "rule", "color": "black"},
             # an explicit color beats the shared system color, so the whisker shows on the bar
             "encoding": {"y": {"field": "low", "type": "quantitative"}, "y2": {"field": "high"},
                          "color": {"value": "black"}}},
        ],
    }


def reward_curve_spec(points: Sequence[Mapping]) -> dict:
    """Lines of mean reward per training step; ``points``: dicts with agent, round, step, reward."""
    values = [
        {"series": f"{p['agent']} r{int(p['round'])}", "agent": p["agent"], "step": int(p["step"]),
         "reward": float(p["reward"])}
        for p in points
    ]
    if not values:
        raise ValueError("no reward points to plot")
    return {
        "$schema": SCHEMA,
        "title": "mean reward per step, by agent and round",
        "data": {"values": values},
        "width": 420,
        "height": 240,
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": {"field": "step", "type": "quantitative", "title": "training step",
                  "axis": {"tickMinStep": 1}},
            "y": {"field": "reward", "type": "quantitative", "title": "mean reward"},
            "color": {"field": "series", "type": "nominal", "title": "agent, round"},
        },
    }


def reliability_spec(calibration: Mapping) -> dict:
    """Reliability diagrams: accuracy against mean confidence per confidence bin (all hops), one line
    per system and confidence (raw, calibrated), point size the bin's claim count, and the diagonal
    of perfect calibration. ``calibration``: dataset -> system -> hop -> metrics, as
    ``factrl.eval.calibration_run.apply_calibration`` measures them (bins of ``reliability_raw`` /
    ``reliability_calibrated``)."""
    values = [
        {"system": system if len(calibration) == 1 else f"{dataset}: {system}", "kind": kind,
         "confidence": b["confidence"], "accuracy": b["accuracy"], "count": b["count"]}
        for dataset, by_system in calibration.items() for system, by_hop in by_system.items()
        for kind in ("raw", "calibrated") for b in by_hop.get("all", {}).get(f"reliability_{kind}", [])
    ]
    if not values:
        raise ValueError("no reliability bins to plot")
    unit = {"type": "quantitative", "scale": {"domain": [0, 1]}}
    xy = {"x": {"field": "confidence", **unit, "title": "mean confidence in bin"},
          "y": {"field": "accuracy", **unit, "title": "accuracy in bin"},
          "color": {"field": "system", "type": "nominal", "title": "system"}}
    return {
        "$schema": SCHEMA,
        "title": "reliability: accuracy per confidence bin (diagonal = calibrated)",
        "width": 320,
        "height": 320,
        "layer": [
            {"data": {"values": [{"x": 0, "y": 0}, {"x": 1, "y": 1}]},
             "mark": {"type": "line", "color": "gray", "strokeDash": [2, 2]},
             "encoding": {"x": {"field": "x", **unit}, "y": {"field": "y", **unit}}},
            {"data": {"values": values}, "mark": "line",
             "encoding": {**xy, "strokeDash": {"field": "kind", "type": "nominal", "title": "confidence"},
                          "detail": {"field": "kind"}, "order": {"field": "confidence", "type": "quantitative"}}},
            {"data": {"values": values}, "mark": {"type": "point", "filled": True},
             "encoding": {**xy, "shape": {"field": "kind", "type": "nominal", "title": "confidence"},
                          "size": {"field": "count", "type": "quantitative", "title": "claims in bin"}}},
        ],
    }


def render(spec: dict, path: str | Path, *, scale: float = 2.0) -> Path:
    """Render ``spec`` to ``path`` (.png or .svg, by suffix) without any network access; atomic write."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".png":
        data = vlc.vegalite_to_png(spec, scale=scale)
    elif suffix == ".svg":
        data = vlc.vegalite_to_svg(spec).encode("utf-8")
    else:
        raise ValueError(f"{path}: unsupported plot format {suffix!r}; use .png or .svg")
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path
