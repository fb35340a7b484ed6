"""The evaluation report: a markdown table in the layout of the HARIS paper's Table 1.

Rows are systems, columns HOVER 2/3/4-hop, EX-FEVER 2/3-hop (F1 and accuracy each) and CHECKWHY
(accuracy on its positive claims). The paper's reported numbers (Table 1, plus the RL-trained single
agent of Table 2) are reference rows, marked "(paper)", so a run can be read against them directly.
Datasets outside that layout (the demo world, any claim file) get a second table of the same shape,
and every cell's bootstrap interval and sample size are listed below the tables. Each such dataset
also gets a per-hop accuracy table with intervals and questions per claim, which `factrl eval-table`
prints from metrics/eval.json (`make demo` ends with it).

Input rows follow ``factrl.data.schemas.METRICS``: dataset, system, num_hops, metric, value (a
fraction in [0, 1]), ci_low, ci_high, n. Metric names are those of ``eval.metrics``. The same rows
nested (:func:`nested_metrics`) are metrics/eval.json; :func:`table_rows` flattens that file for
display (the pipeline flow's Prefect table artifact).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from factrl.io import write_text
from factrl.tables import markdown_table

# (dataset, num_hops, metric) columns of Table 1, with their header labels.
TABLE1_COLUMNS: tuple[tuple[str, int | None, str, str], ...] = (
    ("hover", 2, "f1_weighted", "HOVER 2-hop F1"),
    ("hover", 2, "accuracy", "HOVER 2-hop Acc"),
    ("hover", 3, "f1_weighted", "HOVER 3-hop F1"),
    ("hover", 3, "accuracy", "HOVER 3-hop Acc"),
    ("hover", 4, "f1_weighted", "HOVER 4-hop F1"),
    ("hover", 4, "accuracy", "HOVER 4-hop Acc"),
    ("exfever", 2, "f1_weighted", "EX-FEVER 2-hop F1"),
    ("exfever", 2, "accuracy", "EX-FEVER 2-hop Acc"),
    ("exfever", 3, "f1_weighted", "EX-FEVER 3-hop F1"),
    ("exfever", 3, "accuracy", "EX-FEVER 3-hop Acc"),
    ("checkwhy", None, "accuracy", "CHECKWHY Acc"),
)
TABLE1_DATASETS = frozenset(d for d, *_ in TABLE1_COLUMNS)

# The paper's numbers in percent, in TABLE1_COLUMNS order (Table 1; "Single agent (RL)" is Table 2,
# which has no CHECKWHY column). Baselines use GPT-4o, Search-o1 QwQ-32B, HARIS / single Qwen3-4B.
PAPER_TABLE1: dict[str, tuple[float | None, ...]] = {
    "RAG": (58.96, 59.20, 56.59, 56.60, 55.06, 55.20, 68.83, 69.00, 64.41, 64.80, 56.40),
    "Decomp-Verify": (62.39, 62.60, 57.27, 57.31, 54.55, 55.60, 68.03, 68.40, 61.95, 63.00, 36.00),
    "ProgramFC": (66.84, 66.80, 55.35, 56.80, 48.30, 52.60, 71.28, 71.60, 60.34, 62.40, 21.60),
    "QACheck": (67.60, 67.60, 60.60, 60.60, 58.91, 59.00, 75.52, 75.60, 68.42, 68.60, 58.00),
    "FOLK": (67.22, 67.60, 59.89, 61.20, 50.90, 55.20, 75.55, 75.80, 67.24, 68.40, 50.70),
    "Search-o1": (68.72, 69.00, 59.34, 59.80, 54.90, 56.60, 77.41, 77.80, 72.08, 72.80, 52.40),
    "Single agent (RL)": (68.20, 68.20, 61.55, 62.00, 55.48, 56.00, 77.59, 77.60, 73.20, 73.40, None),
    "HARIS": (69.31, 69.40, 62.33, 62.80, 59.84, 61.00, 80.12, 80.20, 73.93, 74.20, 60.80),
}

# Dataset names as they appear in metric rows -> the Table 1 key (eval sets are named by file stem).
_ALIASES = {"hover": "hover", "ex-fever": "exfever", "ex_fever": "exfever", "exfever": "exfever",
            "checkwhy": "checkwhy", "check-why": "checkwhy"}


def _dataset_key(name: str) -> str:
    base = name.lower()
    for suffix in ("_2hop", "_3hop", "_4hop", "-2hop", "-3hop", "-4hop"):
        base = base.removesuffix(suffix)
    return _ALIASES.get(base, name)


def _index(rows: Iterable[Mapping]) -> dict[tuple, Mapping]:
    out = {}
    for r in rows:
        hops = r.get("num_hops")
        out[(r["system"], _dataset_key(r["dataset"]), None if hops is None else int(hops), r["metric"])] = r
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f}"


def _systems(rows: Iterable[Mapping]) -> list[str]:
    return list(dict.fromkeys(r["system"] for r in rows))


def table1_markdown(rows: Sequence[Mapping], *, reference: bool = True) -> str:
    """Table 1 layout: measured systems (percent), then the paper's reference rows."""
    idx = _index(rows)
    body = []
    for system in _systems(rows):
        cells = [_pct(idx[(system, d, h, m)]["value"]) if (system, d, h, m) in idx else "–"
                 for d, h, m, _ in TABLE1_COLUMNS]
        if any(c != "–" for c in cells):
            body.append([system, *cells])
    if reference:
        for system, values in PAPER_TABLE1.items():
            body.append([f"{system} (paper)", *("–" if v is None else f"{v:.2f}" for v in values)])
    return markdown_table(["System", *(label for *_, label in TABLE1_COLUMNS)], body)


def other_datasets_markdown(rows: Sequence[Mapping]) -> str | None:
    """Accuracy and weighted F1 for datasets outside Table 1 (None when there are none)."""
    rest = [r for r in rows if _dataset_key(r["dataset"]) not in TABLE1_DATASETS]
    if not rest:
        return None
    idx = _index(rest)
    cols = sorted({(_dataset_key(r["dataset"]), r.get("num_hops")) for r in rest},
                  key=lambda c: (c[0], -1 if c[1] is None else c[1]))
    header = ["System"]
    for d, h in cols:
        where = d if h is None else f"{d} {h}-hop"
        header += [f"{where} F1", f"{where} Acc"]
    body = []
    for system in _systems(rest):
        row = [system]
        for d, h in cols:
            for m in ("f1_weighted", "accuracy"):
                r = idx.get((system, d, h, m))
                row.append(_pct(r["value"]) if r else "–")
        body.append(row)
    return markdown_table(header, body)


def intervals_markdown(rows: Sequence[Mapping], metrics: Sequence[str] = ("accuracy", "f1_weighted")) -> str:
    """Every measured cell with its bootstrap 95% interval and n, one line per (system, dataset, hops)."""
    body = []
    for r in rows:
        if r["metric"] not in metrics:
            continue
        hops = r.get("num_hops")
        ci = "–" if r.get("ci_low") is None else f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"
        body.append([r["system"], r["dataset"], "–" if hops is None else str(hops), r["metric"],
                     _pct(r["value"]), ci, str(r.get("n") or "–")])
    return markdown_table(["System", "Dataset", "Hops", "Metric", "Value", "95% CI", "n"], body)


def hop_key(num_hops: int | None) -> str:
    """``2`` -> ``"2hop"``; no hop count (CHECKWHY) -> ``"all"``."""
    return "all" if num_hops is None else f"{int(num_hops)}hop"


def nested_metrics(rows: Iterable[Mapping]) -> dict:
    """dataset -> hop -> system -> {metric: value, n, ci_low: {metric: v}, ci_high: {metric: v}}."""
    out: dict = {}
    for r in rows:
        cell = out.setdefault(r["dataset"], {}).setdefault(hop_key(r["num_hops"]), {}).setdefault(r["system"], {})
        cell[r["metric"]] = r["value"]
        cell["n"] = r["n"]
        if r.get("ci_low") is not None:
            cell.setdefault("ci_low", {})[r["metric"]] = r["ci_low"]
            cell.setdefault("ci_high", {})[r["metric"]] = r["ci_high"]
    return out


def table_rows(nested: Mapping) -> list[dict]:
    """The nested ``metrics/eval.json`` as flat display rows (percent, 2 decimals; '' where absent):
    dataset, hops, system, accuracy, its 95% interval, weighted F1, n, avg questions / searches."""
    def pct(v):
        return "" if v is None else round(100 * float(v), 2)

    rows = []
    for dataset, by_hop in nested.items():
        for hop, by_system in by_hop.items():
            for system, m in by_system.items():
                low, high = m.get("ci_low", {}).get("accuracy"), m.get("ci_high", {}).get("accuracy")
                rows.append({
                    "dataset": dataset, "hops": hop, "system": system, "accuracy": pct(m.get("accuracy")),
                    "accuracy_ci95": "" if low is None else f"[{pct(low)}, {pct(high)}]",
                    "f1_weighted": pct(m.get("f1_weighted")), "n": m.get("n", ""),
                    "avg_questions": round(float(m.get("avg_questions", 0.0)), 2),
                    "avg_searches": round(float(m.get("avg_searches", 0.0)), 2),
                })
    return rows


def hop_accuracy_markdown(nested: Mapping, dataset: str) -> str | None:
    """Accuracy per hop setting with its bootstrap 95% interval, and questions asked per claim, one
    line per system, for ``dataset`` of ``nested`` (:func:`nested_metrics`, the
    layout of metrics/eval.json); None when the dataset has no rows. The table `make demo` prints."""
    by_hop = nested.get(dataset)
    if not by_hop:
        return None
    hops = sorted(by_hop, key=lambda h: (h == "all", h))
    systems = list(dict.fromkeys(s for h in hops for s in by_hop[h]))

    def cell(hop: str, system: str) -> str:
        c = by_hop[hop].get(system)
        if not c or c.get("accuracy") is None:
            return "–"
        low, high = c.get("ci_low", {}).get("accuracy"), c.get("ci_high", {}).get("accuracy")
        ci = "" if low is None else f" [{_pct(low)}, {_pct(high)}]"
        return f"{_pct(c['accuracy'])}{ci}"

    def questions(system: str) -> str:
        counts = [by_hop[h][system].get("avg_questions") for h in hops if system in by_hop[h]]
        return " / ".join("–" if q is None else f"{q:.2f}" for q in counts)

    header = ["System", *(f"{h} acc (95% CI)" for h in hops), f"questions per claim ({' / '.join(hops)})",
              "n"]
    body = [[s, *(cell(h, s) for h in hops), questions(s),
             str(next((by_hop[h][s].get("n") for h in hops if s in by_hop[h]), "–"))] for s in systems]
    return markdown_table(header, body)


def main(argv: Sequence[str] | None = None) -> int:
    """`factrl eval-table [metrics/eval.json] [--dataset demo]`: print the per-hop accuracy table."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="factrl eval-table", description=main.__doc__.split(": ", 1)[1])
    ap.add_argument("metrics", nargs="?", default="metrics/eval.json")
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--also", nargs="*", default=["heldout_wording"],
                    help="further datasets printed when the metrics have them")
    ap.add_argument("--gains", default="metrics/gains.json",
                    help="the paired gains file: its GRPO-over-warm-start line is printed when present")
    args = ap.parse_args(argv)
    path = Path(args.metrics)
    if not path.exists():
        raise SystemExit(f"{path}: no such metrics file (run the evaluate stage first: dvc repro evaluate)")
    metrics = json.loads(path.read_text())
    table = hop_accuracy_markdown(metrics, args.dataset)
    if table is None:
        raise SystemExit(f"{path}: no rows for dataset {args.dataset!r}")
    print(f"{args.dataset}: accuracy per hop (percent, bootstrap 95% interval)\n{table}")
    gains = json.loads(Path(args.gains).read_text()) if Path(args.gains).exists() else {}
    for dataset in [args.dataset, *(d for d in args.also if d != args.dataset and d in metrics)]:
        if dataset != args.dataset:
            print(f"\n{dataset}: accuracy per hop (percent, bootstrap 95% interval)\n"
                  f"{hop_accuracy_markdown(metrics, dataset)}")
        line = gain_line(gains.get(dataset, {}))
        if line:
            print(f"{dataset}: {line}")
    return 0


# the checkpoint pair whose paired gain says what the GRPO round added (evaluate's checkpoint names)
GRPO_PAIR = ("HARIS (trained)", "HARIS (warm)")


def gain_line(pairs: Mapping, pair: tuple[str, str] = GRPO_PAIR) -> str | None:
    """"GRPO over the warm start: +X points [low, high]" from one dataset's paired gains
    (``factrl.eval.runner.paired_gains``: ``"A - B" -> hop -> {mean, ci95, n}``), pooled, with the
    per-hop means; None when the pair was not evaluated."""
    cells = pairs.get(f"{pair[0]} - {pair[1]}")
    if not cells or "pooled" not in cells:
        return None
    pooled = cells["pooled"]
    hops = ", ".join(f"{h} {100 * c['mean']:+.1f}" for h, c in cells.items() if h != "pooled")
    return (f"GRPO over the warm start: {100 * pooled['mean']:+.1f} points "
            f"[{100 * pooled['ci95'][0]:+.1f}, {100 * pooled['ci95'][1]:+.1f}] "
            f"(paired over the same {pooled['n']} claims; {hops})")


def render_report(
    rows: Sequence[Mapping],
    *,
    title: str = "Evaluation",
    notes: Sequence[str] = (),
    plots: Sequence[str] = (),
    sections: Sequence[tuple[str, str]] = (),
) -> str:
    """The whole markdown report. ``notes``: extra lines (settings, sample sizes); ``plots``: image paths;
    ``sections``: further ``(heading, markdown)`` parts placed before the plots (calibration)."""
    rows = list(rows)
    parts = [f"# {title}", ""]
    parts += [f"- {n}" for n in notes]
    if notes:
        parts.append("")
    parts += [
        "## Table 1 layout (percent)",
        "",
        "F1 is the support-weighted F1 and Acc the accuracy, as the HARIS paper reports them; CHECKWHY is "
        "accuracy on its positive claims. Rows marked (paper) are the paper's reported numbers "
        "(500 claims per set, GPT-4o baselines, Qwen3-4B HARIS), for reference only.",
        "",
        table1_markdown(rows),
        "",
    ]
    other = other_datasets_markdown(rows)
    if other:
        parts += ["## Other datasets (percent)", "", other, ""]
        nested = nested_metrics(rows)
        for dataset in [d for d in nested if _dataset_key(d) not in TABLE1_DATASETS]:
            parts += [f"## {dataset}: accuracy per hop (percent, 95% CI)", "",
                      hop_accuracy_markdown(nested, dataset), ""]
    if rows:
        parts += ["## Bootstrap 95% intervals", "", intervals_markdown(rows), ""]
    for heading, body in sections:
        parts += [f"## {heading}", "", body, ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(parts)


def write_report(rows: Sequence[Mapping], path: str | Path, **kw) -> Path:
    """Render the report and write it atomically to ``path``."""
    write_text(render_report(rows, **kw), path)
    return Path(path)
