"""Debate features per claim and member: what SC-MAKS's reward model and aggregator read.

From the debate transcripts (:data:`factrl.data.schemas.DEBATE_TURNS`), for every claim and pool
member (``FEATURES``, in this order):

* ``critiques_given`` / ``critiques_received``: peers it named / peers that named it, per debate
  round, as a share of the n - 1 peers (mean over rounds): the paper's critique frequency;
* ``revision_sentiment``: mean over its debate turns of (agreeing - disagreeing words) /
  (agreeing + disagreeing + 1), a lexicon score in (-1, 1);
* ``flips``: stance changes over the rounds, per round; ``revised``: final stance != opening;
* ``citations``: log(1 + distinct passage ids it quoted);
* ``agreement`` / ``opening_agreement``: share of peers sharing its final / opening verdict;
* ``self_consistency``: share of its generation samples that agree with its opening (1 with one sample);
* ``format_failures``: share of its answers that were malformed;
* ``has_verdict``, ``stance_sign`` (+1 Support, -1 Refute, 0 none): its final stance;
* ``historical_accuracy``: its final-stance accuracy on the training claims of the fit at hand
  (:meth:`FeatureSet.with_history`; 0.5 until then), so held-out labels never leak into it.

A :class:`FeatureSet` holds them as an array ``x`` ``[C, n, F]`` (claims x members x features) with
the claims' labels and the members' opening and final stances; :func:`feature_table` writes it as
:data:`factrl.data.schemas.CONSENSUS_FEATURES` rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from factrl.agents.debate import GENERATE, SAMPLE, SUMMARY
from factrl.agents.protocol import REFUTES, SUPPORTS
from factrl.data.schemas import CONSENSUS_FEATURES

FEATURES = (
    "critiques_given", "critiques_received", "revision_sentiment", "flips", "revised", "citations",
    "agreement", "opening_agreement", "self_consistency", "format_failures", "has_verdict", "stance_sign",
    "historical_accuracy",
)
HISTORY = FEATURES.index("historical_accuracy")
UNKNOWN_HISTORY = 0.5

# Words of agreement and of disagreement in a critique. The verdict words (support, refute) are left
# out: they name a decision, not a stance towards a peer.
_AGREE = {"agree", "agrees", "agreed", "correct", "right", "confirm", "confirms", "confirmed", "accurate",
          "consistent", "valid", "true", "indeed", "yes"}
_DISAGREE = {"disagree", "disagrees", "wrong", "incorrect", "false", "unsupported", "mistake", "mistaken",
             "error", "contradict", "contradicts", "contradicted", "inaccurate", "invalid", "no", "not", "but"}
_WORD = re.compile(r"[a-z]+")


def revision_sentiment(text: str) -> float:
    """(agreeing - disagreeing words) / (agreeing + disagreeing + 1) of ``text``."""
    words = _WORD.findall((text or "").lower())
    pos = sum(w in _AGREE for w in words)
    neg = sum(w in _DISAGREE for w in words)
    return (pos - neg) / (pos + neg + 1)


@dataclass
class FeatureSet:
    """Features of C claims x n members. ``x``: ``[C, n, F]`` float64 in ``names`` order; ``opening``
    / ``stance``: ``[C][n]`` verdicts ("SUPPORTS" | "REFUTES" | None) before and after the debate."""

    claim_ids: list[str]
    splits: list[str | None]
    labels: list[str | None]
    num_hops: list[int | None]
    members: list[str]
    x: np.ndarray
    opening: list[list[str | None]]
    stance: list[list[str | None]]
    names: tuple[str, ...] = FEATURES

    def __len__(self) -> int:
        return len(self.claim_ids)

    @property
    def correct(self) -> np.ndarray:
        """``[C, n]`` bool: the member's final stance equals the gold label."""
        return np.array([[s is not None and s == lab for s in row] for row, lab in zip(self.stance, self.labels)],
                        dtype=bool).reshape(len(self), len(self.members))

    def subset(self, idx: Sequence[int]) -> FeatureSet:
        """The claims at positions ``idx``, in that order."""
        idx = list(idx)
        return replace(self, claim_ids=[self.claim_ids[i] for i in idx], splits=[self.splits[i] for i in idx],
                       labels=[self.labels[i] for i in idx], num_hops=[self.num_hops[i] for i in idx],
                       x=self.x[idx], opening=[self.opening[i] for i in idx], stance=[self.stance[i] for i in idx])

    def split_indices(self, split: str) -> list[int]:
        return [i for i, s in enumerate(self.splits) if s == split]

    def member_accuracy(self, idx: Sequence[int], which: str = "stance") -> np.ndarray:
        """``[n]`` accuracy of each member's ``stance`` (or ``opening``) verdicts on claims ``idx``
        (:data:`UNKNOWN_HISTORY` when ``idx`` is empty)."""
        idx = list(idx)
        if not idx:
            return np.full(len(self.members), UNKNOWN_HISTORY)
        verdicts = getattr(self, which)
        hits = np.array([[v is not None and v == self.labels[i] for v in verdicts[i]] for i in idx], dtype=float)
        return hits.mean(axis=0)

    def with_history(self, train_idx: Sequence[int]) -> FeatureSet:
        """A copy whose ``historical_accuracy`` is each member's accuracy on the claims ``train_idx``."""
        x = self.x.copy()
        x[:, :, HISTORY] = self.member_accuracy(train_idx)[None, :]
        return replace(self, x=x)


def _sign(verdict: str | None) -> float:
    signs: dict[str | None, float] = {SUPPORTS: 1.0, REFUTES: -1.0}
    return signs.get(verdict, 0.0)


def _share_same(verdicts: Sequence[str | None], i: int) -> float:
    peers = [v for j, v in enumerate(verdicts) if j != i]
    if verdicts[i] is None or not peers:
        return 0.0
    return sum(v == verdicts[i] for v in peers) / len(peers)


def _flips(stances: Sequence[str | None]) -> int:
    known = [s for s in stances if s is not None]
    return sum(a != b for a, b in zip(known, known[1:]))


def debate_features(turns: pa.Table) -> FeatureSet:
    """The features of every claim in ``turns`` (DEBATE_TURNS rows). Every claim must have an
    opening answer from the same members; the members keep the pool's order."""
    rows = [r for r in turns.to_pylist() if r["phase"] != SUMMARY]
    by_claim: dict[str, list[dict]] = {}
    for r in rows:
        by_claim.setdefault(r["claim_id"], []).append(r)
    members: list[str] = []
    for r in rows:
        if r["phase"] == GENERATE and r["member"] not in members:
            members.append(r["member"])
    n = len(members)
    claim_ids, splits, labels, hops, xs, openings, stances = [], [], [], [], [], [], []
    for cid, claim_rows in by_claim.items():
        grid: dict[tuple[int, str], dict] = {(r["round"], r["member"]): r for r in claim_rows if r["phase"] != SAMPLE}
        samples = {m: [r for r in claim_rows if r["phase"] == SAMPLE and r["member"] == m] for m in members}
        missing = [m for m in members if (0, m) not in grid]
        if missing:
            raise ValueError(f"debate transcripts: claim {cid!r} has no opening answer of {missing}")
        rounds = sorted({k for k, _ in grid if k > 0})
        history = [[grid.get((k, m), {}).get("stance") for m in members] for k in [0, *rounds]]
        final = history[-1]
        x = np.zeros((n, len(FEATURES)))
        for i, m in enumerate(members):
            turns_i = [grid[(k, m)] for k in rounds if (k, m) in grid]
            given = [len(t["addressed"] or []) / max(n - 1, 1) for t in turns_i]
            received = [sum(m in (grid.get((k, o), {}).get("addressed") or []) for o in members if o != m)
                        / max(n - 1, 1) for k in rounds]
            cited = {c for t in turns_i for c in (t["cited"] or [])}
            answers = [grid[(k, m)] for k in [0, *rounds] if (k, m) in grid]
            opening = grid[(0, m)]["stance"]
            agreeing = [s["verdict"] == opening for s in samples[m]]
            values = {
                "critiques_given": float(np.mean(given)) if given else 0.0,
                "critiques_received": float(np.mean(received)) if received else 0.0,
                "revision_sentiment": float(np.mean([revision_sentiment(t["text"]) for t in turns_i]))
                if turns_i else 0.0,
                "flips": _flips([h[i] for h in history]) / max(len(rounds), 1),
                "revised": float(opening is not None and final[i] is not None and final[i] != opening),
                "citations": math.log1p(len(cited)),
                "agreement": _share_same(final, i),
                "opening_agreement": _share_same(history[0], i),
                "self_consistency": (1 + sum(agreeing)) / (1 + len(agreeing)) if opening is not None else 0.0,
                "format_failures": sum(not a["format_valid"] for a in answers) / len(answers),
                "has_verdict": float(final[i] is not None),
                "stance_sign": _sign(final[i]),
                "historical_accuracy": UNKNOWN_HISTORY,
            }
            x[i] = [values[name] for name in FEATURES]
        first = claim_rows[0]
        claim_ids.append(cid)
        splits.append(first["split"])
        labels.append(first["label"])
        hops.append(first["num_hops"])
        xs.append(x)
        openings.append(history[0])
        stances.append(final)
    x_all = np.stack(xs) if xs else np.zeros((0, n, len(FEATURES)))
    return FeatureSet(claim_ids, splits, labels, hops, members, x_all, openings, stances)


def feature_table(fs: FeatureSet) -> pa.Table:
    """CONSENSUS_FEATURES rows, one per (claim, member)."""
    correct = fs.correct
    rows = [{"claim_id": cid, "split": fs.splits[c], "label": fs.labels[c], "member": m,
             "opening": fs.opening[c][i], "stance": fs.stance[c][i], "correct": bool(correct[c, i]),
             "features": list(zip(fs.names, map(float, fs.x[c, i])))}
            for c, cid in enumerate(fs.claim_ids) for i, m in enumerate(fs.members)]
    return pa.Table.from_pylist(rows, schema=CONSENSUS_FEATURES)
