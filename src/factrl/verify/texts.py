"""Labelled multi-claim texts from the demo world, to measure a decomposer.

:func:`labelled_texts` joins several demo-world claims (``factrl.data.world_claims.generate_claims``) with
filler sentences that are not check-worthy (opinions, hedges, questions, some naming the same
entities, so a splitter cannot pass on capitals alone) and records each claim's offsets: the gold a
decomposer's :class:`~factrl.verify.decompose.ClaimSpan` list is scored against
(:func:`score_decomposition`). Deterministic by seed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from factrl.verify.decompose import ClaimSpan

# {name}: a name from the text's claims, so some fillers name an entity yet state nothing checkable
FILLERS = (
    "I think this is a fascinating story.",
    "Honestly, nobody should care much about it.",
    "Who would have guessed that?",
    "What else is there to know about {name}?",
    "Perhaps {name} deserves a visit one day.",
    "It is all rather interesting, if you ask me.",
    "Maybe that will change soon.",
    "We love reading about {name}!",
    "Isn't that something?",
    "In my opinion, {name} is overrated.",
    # written after the sentences backend's rules, with none of their markers: what they miss
    "Everyone agrees that {name} is special.",
    "Stories like this are told all over {name}.",
    "Nobody knows what happened next.",
)
_NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*\b")


@dataclass(frozen=True)
class LabelledText:
    """A text and its gold claims (``ClaimSpan``: the claim as written, with its offsets)."""

    text: str
    gold: tuple[ClaimSpan, ...]


def labelled_texts(num_texts: int = 30, *, claims_per_text: tuple[int, int] = (2, 4), fillers_per_text: int = 2,
                   seed: int = 0, world=None) -> list[LabelledText]:
    """``num_texts`` texts, each ``claims_per_text[0]..[1]`` demo-world claims (drawn without
    replacement from one world) and ``fillers_per_text`` filler sentences in a seeded order, joined
    by spaces. ``world``: a ``WorldParams`` (default: a small world of 2-4-hop claims)."""
    from factrl.data.params import WorldParams
    from factrl.data.world_claims import generate_claims

    lo, hi = claims_per_text
    if not 1 <= lo <= hi:
        raise ValueError(f"claims_per_text must be 1 <= low <= high, got {claims_per_text}")
    rng = np.random.default_rng(seed)
    counts = [int(rng.integers(lo, hi + 1)) for _ in range(num_texts)]
    world = world or WorldParams(seed=seed + 1, num_passages=400, num_claims=max(60, sum(counts) + 12),
                                 hops=(2, 3, 4))
    pool = generate_claims(world).column("claim").to_pylist()
    if len(pool) < sum(counts):
        raise ValueError(f"the world has {len(pool)} claims; {sum(counts)} needed")
    order = rng.permutation(len(pool)).tolist()
    out = []
    for count in counts:
        claims = [pool[order.pop()] for _ in range(count)]
        names = [m for c in claims for m in _NAME.findall(c) if m != "The"] or ["it"]
        fillers = [FILLERS[int(rng.integers(len(FILLERS)))].format(name=names[int(rng.integers(len(names)))])
                   for _ in range(fillers_per_text)]
        pieces = [(c, True) for c in claims] + [(f, False) for f in fillers]
        pieces = [pieces[i] for i in rng.permutation(len(pieces))]
        text, gold = "", []
        for sentence, is_claim in pieces:
            if text:
                text += " "
            if is_claim:
                gold.append(ClaimSpan(sentence, len(text), len(text) + len(sentence)))
            text += sentence
        out.append(LabelledText(text, tuple(gold)))
    return out


def _words(s: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", s)}


def score_decomposition(gold: Sequence[ClaimSpan], found: Sequence[ClaimSpan], *, min_overlap: float = 0.6) -> dict:
    """How ``found`` covers ``gold`` in one text.

    A gold claim is *recovered* by a found claim whose span overlaps it and whose text shares at least
    ``min_overlap`` of the gold claim's words (a rewritten claim counts if it keeps the facts' words);
    each found claim recovers at most one gold claim. Returns counts: ``gold``, ``found``,
    ``recovered``, ``extra`` (found claims recovering none), ``exact_offsets`` (recovered with exactly
    the gold offsets)."""
    used: set[int] = set()
    recovered = exact = 0
    for g in gold:
        gw = _words(g.text)
        for j, f in enumerate(found):
            if j in used or f.end <= g.start or f.start >= g.end:
                continue
            if len(gw & _words(f.text)) >= min_overlap * len(gw):
                used.add(j)
                recovered += 1
                exact += (f.start, f.end) == (g.start, g.end)
                break
    return {"gold": len(gold), "found": len(found), "recovered": recovered, "extra": len(found) - len(used),
            "exact_offsets": exact}
