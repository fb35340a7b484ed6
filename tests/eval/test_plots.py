"""Plots render offline to real PNG / SVG files."""

from __future__ import annotations

import pytest
from PIL import Image

from factrl.eval import plots
from factrl.eval.plots import accuracy_per_hop_spec, render, reward_curve_spec

ROWS = [
    {"dataset": "hover", "num_hops": h, "system": s, "metric": "accuracy", "value": v, "ci_low": v - 0.04,
     "ci_high": v + 0.04}
    for h in (2, 3, 4) for s, v in (("HARIS r1", 0.61), ("RAG", 0.55))
] + [{"dataset": "checkwhy", "num_hops": None, "system": "RAG", "metric": "accuracy", "value": 0.5}]


def test_accuracy_per_hop_png(tmp_path):
    spec = accuracy_per_hop_spec(ROWS)
    assert {v["setting"] for v in spec["data"]["values"]} == {"hover 2-hop", "hover 3-hop", "hover 4-hop", "checkwhy"}
    out = render(spec, tmp_path / "accuracy.png")
    with Image.open(out) as img:
        assert img.format == "PNG" and img.width > 300 and img.height > 200
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20)) > 10  # bars, text: not blank


def test_reward_curves_png_and_svg(tmp_path):
    points = [{"agent": a, "round": r, "step": s, "reward": 0.1 + 0.05 * s + 0.1 * r}
              for a in ("search", "reasoning") for r in (1, 2) for s in range(6)]
    spec = reward_curve_spec(points)
    assert len({v["series"] for v in spec["data"]["values"]}) == 4
    png = render(spec, tmp_path / "rewards.png")
    assert png.stat().st_size > 5000
    svg = render(spec, tmp_path / "rewards.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "reasoning r2" in svg


def test_bad_inputs():
    with pytest.raises(ValueError, match="no 'f1_weighted' rows"):
        accuracy_per_hop_spec(ROWS, metric="f1_weighted")
    with pytest.raises(ValueError, match="unsupported plot format"):
        render(reward_curve_spec([{"agent": "a", "round": 1, "step": 0, "reward": 1}]), "x.gif")


def test_reliability_diagram_renders_raw_and_calibrated_bins(tmp_path):
    from factrl.eval.calibration import calibration_metrics

    m = calibration_metrics([0.95, 0.9, 0.6, 0.55], [0.7, 0.65, 0.5, 0.45], [1, 0, 1, 0])
    spec = plots.reliability_spec({"demo": {"HARIS (base)": {"all": m}}})
    points = spec["layer"][1]["data"]["values"]
    assert {p["kind"] for p in points} == {"raw", "calibrated"} and sum(p["count"] for p in points) == 8
    assert plots.render(spec, tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="no reliability bins"):
        plots.reliability_spec({"demo": {"HARIS (base)": {}}})
