"""Stratified evaluation samples: per hop count, up to N claims with balanced labels, seeded.

The HARIS paper (after Wang and Shu, 2023) evaluates on 500 claims per hop setting with a balanced
label distribution. Within each hop stratum every label gets the same count: ``per_hop // L`` for L
labels, cut to the rarest label's count when one label is short, so the sample is always balanced.
Rows with a null ``num_hops`` (e.g. CHECKWHY) form their own stratum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def stratified_sample(
    table: pa.Table, per_hop: int, seed: int, *, labels: Sequence[str] | None = None
) -> pa.Table:
    """Rows of ``table`` (CLAIMS-like: ``id``, ``label``, ``num_hops``) sampled per hop, labels balanced.

    ``labels`` restricts the sample to those labels first (e.g. the binary SUPPORTS / REFUTES task).
    The result is ordered by hop (nulls last), then label, then id; it is the same for the same seed.
    """
    for col in ("id", "label", "num_hops"):
        if col not in table.column_names:
            raise ValueError(f"stratified_sample: the table has no {col!r} column")
    if per_hop < 1:
        raise ValueError(f"per_hop must be >= 1, got {per_hop}")
    if labels is not None:
        table = table.filter(pc.is_in(table.column("label"), value_set=pa.array(list(labels), pa.string())))
    ids = table.column("id").to_pylist()
    labs = table.column("label").to_pylist()
    hops = table.column("num_hops").to_pylist()
    strata: dict[tuple, list[int]] = {}
    for i, (h, lab) in enumerate(zip(hops, labs)):
        strata.setdefault((h, lab), []).append(i)
    rng = np.random.default_rng(seed)
    chosen: list[int] = []
    for hop in sorted({h for h, _ in strata}, key=_hop_key):
        groups = {lab: rows for (h, lab), rows in strata.items() if h == hop}
        take = min(per_hop // len(groups), min(len(rows) for rows in groups.values()))
        for lab in sorted(groups):
            # a fixed starting order (by id) makes the draw independent of the file's row order
            rows = sorted(groups[lab], key=lambda i: ids[i])
            picked = rng.permutation(len(rows))[:take]
            chosen.extend(sorted((rows[j] for j in picked), key=lambda i: ids[i]))
    return table.take(pa.array(chosen, pa.int64()))


def _hop_key(h: int | None) -> tuple[int, int]:
    return (1, 0) if h is None else (0, h)
