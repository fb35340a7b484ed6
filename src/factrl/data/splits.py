"""Stratified splits of claim tables (polars over Arrow).

Stratified by (label, num_hops): each stratum is shuffled with the seed and cut by the fractions,
with largest-remainder rounding so split sizes add up exactly.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

SPLIT_NAMES = ("train", "dev", "eval")


def stratified_split(claims: pa.Table, fractions: tuple[float, ...], seed: int) -> dict[str, pa.Table]:
    """Split ``claims`` into ``SPLIT_NAMES`` by ``fractions``, stratified by label and hops."""
    if len(fractions) != len(SPLIT_NAMES) or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"split fractions must be {len(SPLIT_NAMES)} non-negative numbers summing to 1: {fractions}")
    df = pl.from_arrow(claims).with_row_index("_row")
    rng = np.random.default_rng(seed)
    assignment = np.empty(len(df), dtype=np.int8)
    strata = df.group_by(["label", "num_hops"], maintain_order=True).agg(pl.col("_row")).sort(
        ["label", "num_hops"], nulls_last=True
    )
    for rows in strata["_row"].to_list():
        rows = np.array(sorted(rows))
        rng.shuffle(rows)
        counts = _largest_remainder(len(rows), fractions)
        start = 0
        for split_index, count in enumerate(counts):
            assignment[rows[start : start + count]] = split_index
            start += count
    df = df.with_columns(pl.Series("split", [SPLIT_NAMES[i] for i in assignment]))
    return {
        name: df.filter(pl.col("split") == name).drop("_row").to_arrow().cast(claims.schema)
        for name in SPLIT_NAMES
    }


def _largest_remainder(total: int, fractions: tuple[float, ...]) -> list[int]:
    exact = [total * f for f in fractions]
    counts = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def balanced_subset(table: pa.Table, n: int) -> pa.Table:
    """At most ``n`` claims (0 = all), taken round-robin over (label, hops) strata to keep balance."""
    if n <= 0 or table.num_rows <= n:
        return table
    strata: dict = {}
    for i, key in enumerate(zip(table.column("label").to_pylist(), table.column("num_hops").to_pylist())):
        strata.setdefault(key, []).append(i)
    queues = [rows for _, rows in sorted(strata.items(), key=lambda kv: str(kv[0]))]
    picked: list[int] = []
    while len(picked) < n:
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return table.take(sorted(picked))
