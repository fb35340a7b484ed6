"""Stratified splits of claim tables (polars over Arrow), and the folds of repeated evaluation runs.

Stratified by (label, num_hops): each stratum is shuffled with the seed and cut by the fractions,
with largest-remainder rounding so split sizes add up exactly. :func:`cv_splits` gives the SC-MAKS
paper's protocol: train / validation / test runs stratified by label, k folds x several seeds.
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


def cv_splits(labels: list, folds: int, seeds: tuple[int, ...], fractions: tuple[float, float, float]
              ) -> list[tuple[int, int, list[int], list[int], list[int]]]:
    """``(seed, fold, train, val, test)`` index lists for every seed and fold, stratified by label.

    Per seed, each label's items are shuffled and the test share of every fold is a consecutive
    window of that order, so the folds' test parts are disjoint (this needs ``folds`` x test
    fraction <= 1); the validation part is the window after it (wrapping around), and the rest is
    training. Window sizes round each stratum's share by largest remainder.
    """
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"fractions must be three non-negative shares summing to 1: {fractions}")
    if folds < 1 or folds * fractions[2] > 1 + 1e-9:
        raise ValueError(f"{folds} folds of test share {fractions[2]} overlap; need folds x test share <= 1")
    strata: dict = {}
    for i, lab in enumerate(labels):
        strata.setdefault(lab, []).append(i)
    out = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        orders = {lab: [rows[j] for j in rng.permutation(len(rows))] for lab, rows in sorted(strata.items(), key=str)}
        for fold in range(folds):
            train, val, test = [], [], []
            for rows in orders.values():
                n = len(rows)
                _, n_val, n_test = _largest_remainder(n, fractions)
                start = fold * n_test
                test_pos = {(start + j) % n for j in range(n_test)} if n else set()
                val_pos = {(start + n_test + j) % n for j in range(n_val)} - test_pos if n else set()
                for pos, row in enumerate(rows):
                    (test if pos in test_pos else val if pos in val_pos else train).append(row)
            out.append((seed, fold, sorted(train), sorted(val), sorted(test)))
    return out
