"""Summarise training curves (metrics/train/<run>/, DVCLive directories): how reward, format and
accuracy moved.

Per-step means over a handful of rollouts are noisy, so each run is summarised as the mean of
its first half of steps against the mean of its second half; ``--block N`` prints a table of
means over blocks of N steps instead, with the columns that show a collapse: search calls per
rollout and the share of groups whose rewards were all equal (no GRPO signal).

    factrl train-summary [metrics/train] [--block 8]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from factrl.rl.gate import gate_sentence
from factrl.rl.step_log import curve_dirs, read_history
from factrl.tables import markdown_table

COLUMNS = ("reward_mean", "format_valid_rate", "correct_rate", "useful_rate")
BLOCK_COLUMNS = COLUMNS + ("tool_calls", "uniform_group_rate", "kept_groups", "sampling_draws", "kl", "response_length",
                           "step_time")


def halves(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the second half (the middle step of an odd count goes to both)."""
    if not values:
        return math.nan, math.nan
    mid = len(values) / 2
    return (statistics.fmean(values[: math.ceil(mid)]), statistics.fmean(values[math.floor(mid):]))


def read_curve(path: Path) -> list[dict[str, float]]:
    """The rows of one run's DVCLive directory (:func:`factrl.rl.step_log.read_history`), numeric
    cells only (a column a run did not log at a step is absent)."""
    return [{k: float(v) for k, v in row.items() if isinstance(v, (int, float))} for row in read_history(path)]


def summarize(path: Path) -> str:
    """One line: ``name: N steps, reward_mean a -> b, format_valid_rate c -> d, ...``."""
    rows = read_curve(path)
    parts = [f"{path.name}: {len(rows)} steps"]
    for col in COLUMNS:
        values = [r[col] for r in rows if col in r]
        if values:
            first, second = halves(values)
            parts.append(f"{col} {first:.3f} -> {second:.3f}")
    line = ", ".join(parts) + " (first half -> second half of the steps)"
    if rows and "pass_at_group" in rows[0]:
        # step 1's groups were sampled before any update: the starting policy's gate, free
        first = rows[0]
        line += (f"\n  step 1, before any update: pass@1 {first.get('correct_rate', math.nan):.2f}, pass@G "
                 f"{first['pass_at_group']:.2f}, all-equal groups {first.get('uniform_group_rate', math.nan):.2f}")
    return line


def block_table(path: Path, block: int) -> str:
    """A markdown table of column means over consecutive blocks of ``block`` steps."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    rows = read_curve(path)
    if not rows:
        return f"{path.name}: 0 steps"
    cols = [c for c in BLOCK_COLUMNS if any(c in r for r in rows)]
    body = []
    for start in range(0, len(rows), block):
        chunk = rows[start : start + block]
        cells = [f"{start + 1}-{start + len(chunk)}"]
        for col in cols:
            values = [r[col] for r in chunk if col in r]
            cells.append(f"{statistics.fmean(values):.3g}" if values else "")
        body.append(cells)
    return f"{path.name}: {len(rows)} steps\n" + markdown_table(["steps", *cols], body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="factrl train-summary", description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="metrics/train", help="directory of runs' curve directories")
    parser.add_argument("--block", type=int, default=0, help="print means over blocks of this many steps")
    parser.add_argument("--gates", default="metrics/gate",
                        help="directory of the rounds' gate files (factrl.rl.gate), printed first when present")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for gate in sorted(Path(args.gates).glob("*.json")):
        print(f"gate {gate.stem}: {gate_sentence(json.loads(gate.read_text()))}")
    paths = curve_dirs(Path(args.root))
    if not paths:
        print(f"no training curves under {args.root}", file=sys.stderr)
        return 1
    for path in paths:
        print(block_table(path, args.block) + "\n" if args.block else summarize(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
