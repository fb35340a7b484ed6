"""Summarise training curves (metrics/train/*.csv): how reward and format validity moved.

Per-step means over a handful of rollouts are noisy, so each run is summarised as the mean of
its first half of steps against the mean of its second half.

    factrl train-summary [metrics/train]
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from pathlib import Path

COLUMNS = ("reward_mean", "format_valid_rate")


def halves(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the second half (the middle step of an odd count goes to both)."""
    if not values:
        return math.nan, math.nan
    mid = len(values) / 2
    return (statistics.fmean(values[: math.ceil(mid)]), statistics.fmean(values[math.floor(mid):]))


def summarize(path: Path) -> str:
    """One line: ``name: N steps, reward_mean a -> b, format_valid_rate c -> d``."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    parts = [f"{path.stem}: {len(rows)} steps"]
    for col in COLUMNS:
        values = [float(r[col]) for r in rows if r.get(col) not in (None, "")]
        if values:
            first, second = halves(values)
            parts.append(f"{col} {first:.3f} -> {second:.3f}")
    return ", ".join(parts) + " (first half -> second half of the steps)"


def main(argv: list[str] | None = None) -> int:
    root = Path((argv or sys.argv[1:] or ["metrics/train"])[0])
    paths = sorted(root.glob("*.csv"))
    if not paths:
        print(f"no training curves under {root}", file=sys.stderr)
        return 1
    for path in paths:
        print(summarize(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
