"""The training schedule's pieces of the train split T (HARIS Algorithm 1 and the M2R curriculum).

* ``all``: epoch 1 trains on all of T.
* ``seg1`` .. ``segN``: epoch 2 divides T into N segments, one per round. Each (label, num_hops)
  stratum is shuffled with the seed and dealt round-robin over the segments, the dealer starting
  where the previous stratum stopped, so every segment holds an equal share (within one claim) of
  every stratum and segment sizes differ by at most one.
* ``m2r_stage1`` / ``m2r_stage2``: M2R trains in two stages, macro retrieval and key saving first,
  micro retrieval second: the paper's curriculum is one of skills, not of questions. Two ways to
  assign the claims (``M2R_SPLITS``, chosen by ``curriculum.m2r_split``):

  - ``stratified`` (the default): each (label, num_hops) stratum is shuffled with the seed and its
    first ``stage1_fraction`` goes to stage 1 (rounded so the total is ``round(fraction * |T|)``),
    so both stages hold every hop count in the same share.
  - ``by_hops``: easy questions first. Within each label, claims are ordered by hop count (fewest
    first; unknown hop counts last, as the hardest), ties broken by the seeded shuffle, and the
    first ``stage1_fraction`` go to stage 1. At 135M this taught the policy to stop after the
    hops stage 1 had: after a 2-hop stage 1 it answered every 3-hop question one hop short, and
    stage 2 had no right rollout to learn from (docs/runs/m2r-2026-11-25).

  Both keep the stages label-balanced.

Every piece is a partition of T (or all of it), so no claim is lost or duplicated.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from factrl.config import names_from, params_section

EPOCH1 = "all"
M2R_STAGES = ("m2r_stage1", "m2r_stage2")


def segment_names(n: int) -> list[str]:
    """``seg1`` .. ``segN``: the epoch-2 segment names rounds refer to."""
    return [f"seg{i + 1}" for i in range(n)]


def _strata(table: pa.Table) -> dict[tuple[str, int | None], list[int]]:
    """Row indices per (label, num_hops), in a fixed (sorted) stratum order."""
    strata: dict[tuple[str, int | None], list[int]] = {}
    for i, key in enumerate(zip(table.column("label").to_pylist(), table.column("num_hops").to_pylist())):
        strata.setdefault(key, []).append(i)
    return dict(sorted(strata.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or 0)))


def _rng(seed: int, key: str) -> np.random.Generator:
    # one stream per stratum, so adding claims of one stratum leaves the others' shuffles alone
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def split_segments(table: pa.Table, n: int, seed: int) -> dict[str, pa.Table]:
    """T divided into ``n`` segments balanced by label and hop count (see module docstring)."""
    if n < 1:
        raise ValueError(f"curriculum.segments must be at least 1, got {n}")
    if table.num_rows < n:
        raise ValueError(f"cannot divide {table.num_rows} train claims into {n} segments")
    assignment = np.empty(table.num_rows, dtype=np.int64)
    start = 0
    for (label, hops), rows in _strata(table).items():
        rows = np.array(rows)
        _rng(seed, f"seg|{label}|{hops}").shuffle(rows)
        assignment[rows] = (start + np.arange(len(rows))) % n
        start = (start + len(rows)) % n
    return {name: table.filter(pa.array(assignment == k)) for k, name in enumerate(segment_names(n))}


def _stage1_by_hops(table: pa.Table, stage1_fraction: float, seed: int) -> np.ndarray:
    """Stage-1 mask: per label, the fewest-hop ``stage1_fraction`` of claims."""
    labels = table.column("label").to_pylist()
    hops = table.column("num_hops").to_pylist()
    stage1 = np.zeros(table.num_rows, dtype=bool)
    for label in sorted(set(labels)):
        rows = np.array([i for i, lab in enumerate(labels) if lab == label])
        tiebreak = _rng(seed, f"m2r|{label}").permutation(len(rows))
        difficulty = np.array([hops[i] if hops[i] is not None else np.iinfo(np.int32).max for i in rows])
        order = rows[np.lexsort((tiebreak, difficulty))]  # last key sorts first: hops, then shuffle
        stage1[order[: int(round(stage1_fraction * len(rows)))]] = True
    return stage1


def _stage1_stratified(table: pa.Table, stage1_fraction: float, seed: int) -> np.ndarray:
    """Stage-1 mask: a seeded ``stage1_fraction`` of every (label, num_hops) stratum."""
    stage1 = np.zeros(table.num_rows, dtype=bool)
    seen = 0
    for (label, hops), rows in _strata(table).items():
        rows = np.array(rows)
        _rng(seed, f"m2r|{label}|{hops}").shuffle(rows)
        # cumulative rounding: each stratum within one claim of its share, the total exact
        take = int(round(stage1_fraction * (seen + len(rows)))) - int(round(stage1_fraction * seen))
        stage1[rows[:take]] = True
        seen += len(rows)
    return stage1


M2R_SPLITS = {"stratified": _stage1_stratified, "by_hops": _stage1_by_hops}


def split_m2r(table: pa.Table, stage1_fraction: float, seed: int,
              how: str = "stratified") -> dict[str, pa.Table]:
    """The M2R two-stage split of ``table`` (see the module docstring for ``how``)."""
    if not 0.0 < stage1_fraction < 1.0:
        raise ValueError(f"curriculum.m2r_stage1_fraction must be in (0, 1), got {stage1_fraction}")
    if how not in M2R_SPLITS:
        raise ValueError(f"curriculum.m2r_split: unknown split {how!r}; expected one of {sorted(M2R_SPLITS)}")
    stage1 = M2R_SPLITS[how](table, stage1_fraction, seed)
    return {M2R_STAGES[0]: table.filter(pa.array(stage1)), M2R_STAGES[1]: table.filter(pa.array(~stage1))}


def build_curriculum(train: pa.Table, segments: int, stage1_fraction: float, seed: int,
                     m2r_split: str = "stratified") -> dict[str, pa.Table]:
    """Every piece of the schedule by name: ``all``, ``seg1..segN``, ``m2r_stage1``, ``m2r_stage2``."""
    return ({EPOCH1: train} | split_segments(train, segments, seed)
            | split_m2r(train, stage1_fraction, seed, m2r_split))


def counts(table: pa.Table) -> dict[str, int]:
    """Claims per ``"<label>|<hops>"`` stratum (``hops`` is ``?`` where unknown)."""
    c = Counter(
        f"{lab}|{h if h is not None else '?'}"
        for lab, h in zip(table.column("label").to_pylist(), table.column("num_hops").to_pylist())
    )
    return dict(sorted(c.items()))


def manifest(pieces: dict[str, pa.Table], *, segments: int, stage1_fraction: float, seed: int,
             m2r_split: str = "stratified") -> dict:
    """What the stage wrote: rows and per-stratum counts of every piece, and how it was made."""
    return {
        "seed": seed,
        "segments": segments,
        "m2r_stage1_fraction": stage1_fraction,
        "m2r_split": m2r_split,
        "m2r_assignment": {
            "stratified": "a seeded share of every label x hops stratum",
            "by_hops": "per label: fewest hops first (unknown last), seeded tie-break"}[m2r_split],
        "pieces": {name: {"rows": t.num_rows, "counts": counts(t)} for name, t in pieces.items()},
    }


@params_section("curriculum")
@dataclass(frozen=True)
class CurriculumParams:
    """Stage ``curriculum``: split the train claims T into the training schedule's pieces.

    segments: N, the number of epoch-2 segments (HARIS Algorithm 1: rounds 2..N+1 each train on
        one); every segment gets an equal share of every (label, num_hops) stratum.
    m2r_stage1_fraction: share of T in the first M2R curriculum stage (macro retrieval and key
        saving); the rest form stage 2 (micro retrieval). Both stages keep the label balance.
    m2r_split: which claims go to stage 1 (factrl.data.curriculum.M2R_SPLITS): ``stratified``, a
        share of every (label, num_hops) stratum, so the stages differ in skill only (the paper's
        curriculum); or ``by_hops``, the fewest-hop claims first (at 135M it taught the policy to
        stop after stage 1's hop count).
    seed: seed of the shuffles inside each stratum.
    """

    segments: int = 3
    m2r_stage1_fraction: float = 0.5
    m2r_split: str = names_from(M2R_SPLITS, "stratified")
    seed: int = 11
