"""The report renders the Table 1 layout from a tiny metrics set, with the paper's numbers as reference."""

from __future__ import annotations

from factrl.eval.metrics import bootstrap_ci, classification_metrics
from factrl.eval.report import PAPER_TABLE1, TABLE1_COLUMNS, render_report, table1_markdown, write_report


def _rows() -> list[dict]:
    """Metric rows of a tiny run: two systems on HOVER 2-hop and CHECKWHY, one on a demo set."""
    preds = {
        "HARIS r1": (["SUPPORTS", "REFUTES", "REFUTES", "SUPPORTS"], ["SUPPORTS", "REFUTES", "SUPPORTS", "SUPPORTS"]),
        "RAG": (["SUPPORTS", "REFUTES", "REFUTES", "SUPPORTS"], ["REFUTES", "REFUTES", "SUPPORTS", "SUPPORTS"]),
    }
    rows = []
    for system, (y_true, y_pred) in preds.items():
        m = classification_metrics(y_true, y_pred)
        for dataset, hops in (("hover_2hop", 2), ("checkwhy", None)):
            for metric in ("accuracy", "f1_weighted"):
                low, high = bootstrap_ci(y_true, y_pred, metric, n_boot=200, seed=0)
                rows.append({"dataset": dataset, "system": system, "num_hops": hops, "metric": metric,
                             "value": m[metric], "ci_low": low, "ci_high": high, "n": m["n"]})
    rows.append({"dataset": "demo", "system": "HARIS r1", "num_hops": 3, "metric": "accuracy", "value": 0.5,
                 "ci_low": None, "ci_high": None, "n": 4})
    return rows


def _table_lines(md: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("|")]


def test_table1_layout_and_values():
    lines = _table_lines(table1_markdown(_rows()))
    header, body = lines[0], lines[2:]
    assert header == ["System", *(label for *_, label in TABLE1_COLUMNS)]
    assert header[1:3] == ["HOVER 2-hop F1", "HOVER 2-hop Acc"] and header[-1] == "CHECKWHY Acc"
    haris = body[0]
    assert haris[0] == "HARIS r1"
    assert haris[2] == "75.00" and haris[-1] == "75.00"  # 3 of 4 right on HOVER 2-hop and CHECKWHY
    assert haris[3] == "–"  # HOVER 3-hop not measured
    rag = body[1]
    assert rag[2] == "50.00"
    # the paper's reference rows follow, with its exact numbers
    ref = {row[0]: row[1:] for row in body[2:]}
    assert len(ref) == len(PAPER_TABLE1)
    assert ref["HARIS (paper)"] == ["69.31", "69.40", "62.33", "62.80", "59.84", "61.00",
                                    "80.12", "80.20", "73.93", "74.20", "60.80"]
    assert ref["RAG (paper)"][-1] == "56.40" and ref["Single agent (RL) (paper)"][-1] == "–"


def test_full_report_has_other_datasets_intervals_and_plots(tmp_path):
    path = write_report(_rows(), tmp_path / "reports" / "eval.md", title="Tiny run",
                        notes=["sample: 4 claims per set"], plots=["plots/accuracy.png"])
    md = path.read_text(encoding="utf-8")
    assert md.startswith("# Tiny run\n\n- sample: 4 claims per set")
    assert "## Table 1 layout (percent)" in md
    assert "## Other datasets (percent)" in md and "| demo 3-hop F1 | demo 3-hop Acc |" in md
    assert "| HARIS r1 | – | 50.00 |" in md
    assert "## Bootstrap 95% intervals" in md
    ci_lines = [row for row in _table_lines(md) if row[:4] == ["HARIS r1", "hover_2hop", "2", "accuracy"]]
    assert len(ci_lines) == 1 and ci_lines[0][4] == "75.00" and ci_lines[0][6] == "4"
    low, high = (float(x) for x in ci_lines[0][5].strip("[]").split(","))
    assert low <= 75.0 <= high
    assert "![accuracy](plots/accuracy.png)" in md


def test_empty_run_still_shows_the_reference_rows():
    md = render_report([])
    assert "HARIS (paper) | 69.31" in md and "Bootstrap" not in md


def test_hop_accuracy_table_of_the_metrics_file(tmp_path, capsys):
    """The per-hop table `make demo` prints (factrl eval-table): every system, its accuracy with the
    interval per hop, questions per claim; read from metrics/eval.json's nested layout."""
    import json

    from factrl.eval.report import hop_accuracy_markdown, main, nested_metrics

    rows = []
    for system, acc, q in (("HARIS (trained)", 0.8, 2.5), ("RAG", 0.5, 0.0)):
        for hops in (2, 3):
            rows.append({"dataset": "demo", "system": system, "num_hops": hops, "metric": "accuracy", "value": acc,
                         "ci_low": acc - 0.1, "ci_high": acc + 0.1, "n": 60})
            rows.append({"dataset": "demo", "system": system, "num_hops": hops, "metric": "avg_questions",
                         "value": q, "ci_low": None, "ci_high": None, "n": 60})
    nested = nested_metrics(rows)
    lines = _table_lines(hop_accuracy_markdown(nested, "demo"))
    assert lines[0][:3] == ["System", "2hop acc (95% CI)", "3hop acc (95% CI)"]
    assert lines[2] == ["HARIS (trained)", "80.00 [70.00, 90.00]", "80.00 [70.00, 90.00]", "2.50 / 2.50", "60"]
    assert lines[3][0] == "RAG" and lines[3][3] == "0.00 / 0.00"
    assert hop_accuracy_markdown(nested, "hover") is None
    assert "## demo: accuracy per hop" in render_report(rows)
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(nested))
    assert main([str(path)]) == 0
    assert "HARIS (trained) | 80.00 [70.00, 90.00]" in capsys.readouterr().out


def test_eval_table_prints_the_grpo_gain_line_from_the_paired_gains(tmp_path, capsys):
    """`make demo`'s last line: what the GRPO round added over the warm start, from metrics/gains.json
    (factrl.eval.runner.paired_gains over the same claims), pooled with its interval and per hop."""
    import json

    from factrl.eval.report import gain_line, main, nested_metrics

    gains = {"demo": {"HARIS (warm) - HARIS (base)": {"pooled": {"mean": 0.2, "ci95": [0.1, 0.3], "n": 180}},
                      "HARIS (trained) - HARIS (warm)": {
                          "2hop": {"mean": 0.1, "ci95": [0.0, 0.2], "n": 60},
                          "3hop": {"mean": 0.05, "ci95": [-0.05, 0.15], "n": 60},
                          "pooled": {"mean": 0.0722, "ci95": [0.0111, 0.1333], "n": 120}}}}
    line = gain_line(gains["demo"])
    assert line == ("GRPO over the warm start: +7.2 points [+1.1, +13.3] (paired over the same 120 claims; "
                    "2hop +10.0, 3hop +5.0)")
    assert gain_line({"HARIS (trained) - HARIS (base)": {"pooled": {}}}) is None  # no warm row: no line
    rows = [{"dataset": "demo", "system": "HARIS (trained)", "num_hops": 2, "metric": "accuracy", "value": 0.8,
             "ci_low": 0.7, "ci_high": 0.9, "n": 60}]
    (tmp_path / "eval.json").write_text(json.dumps(nested_metrics(rows)))
    (tmp_path / "gains.json").write_text(json.dumps(gains))
    assert main([str(tmp_path / "eval.json"), "--gains", str(tmp_path / "gains.json")]) == 0
    assert f"demo: {line}" in capsys.readouterr().out
