"""Out-of-corpus claims: claims a corpus holds no evidence for, labelled NOT ENOUGH INFO.

A verifier whose confidence was only ever fitted on claims its corpus answers is confident exactly where
it has no evidence (issue 49). These claims join the dev mix the calibration maps are fitted on
(``evaluate.calibration.out_of_corpus``) and the mix bench/abstain.py chooses the NOT ENOUGH INFO rules
on, so confidence falls where evidence is missing. Two kinds, each filtered against the served corpus:

* :func:`generated_claims`: the demo world's own claim generator run on a *shadow* world (another seed):
  the same templates, hops and wording as the in-corpus claims, about entities the served corpus never
  writes a passage for (a claim naming any title of the corpus is dropped);
* :func:`real_claims`: real claims of a shared-data claim file (FEVER-Symmetric, Climate-FEVER, ...)
  whose subject, the first named entity, no passage of the corpus mentions ("Paris" is not in the demo
  world).

Both come back as CLAIMS rows with label NOT ENOUGH INFO, their ``source`` saying where they came from.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from factrl.agents.abstain import named_entities, words
from factrl.data.params import WorldParams
from factrl.data.schemas import CLAIMS
from factrl.verdicts import NOT_ENOUGH_INFO

MAX_NAME_WORDS = 6  # the longest entity name looked up as a run of words (n-grams of the corpus)


class CorpusNames:
    """What a corpus mentions: every run of up to :data:`MAX_NAME_WORDS` words of its passages' titles
    and texts, for :meth:`mentions` (an entity is mentioned when all its words occur in order)."""

    def __init__(self, passages: pa.Table) -> None:
        self.grams: set[tuple[str, ...]] = set()
        self.titles: list[str] = [t for t in passages.column("title").to_pylist() if t]
        for column in ("title", "text"):
            for text in passages.column(column).to_pylist():
                ws = words(text or "")
                for n in range(1, MAX_NAME_WORDS + 1):
                    self.grams.update(tuple(ws[i:i + n]) for i in range(len(ws) - n + 1))

    def mentions(self, entity: str) -> bool:
        """Whether some passage names ``entity`` (all its words, adjacent and in order)."""
        ws = tuple(words(entity))
        return bool(ws) and (ws in self.grams if len(ws) <= MAX_NAME_WORDS else False)


def _as_nei(rows: Iterable[dict], source: str) -> pa.Table:
    """CLAIMS rows relabelled NOT ENOUGH INFO, evidence dropped (the corpus holds none), ``source`` set."""
    out = []
    for r in rows:
        out.append({**{f.name: None for f in CLAIMS}, "id": r["id"], "claim": r["claim"], "label": NOT_ENOUGH_INFO,
                    "num_hops": r.get("num_hops"), "evidence": [], "evidence_ids": [], "source": source,
                    "split": "dev"})
    return pa.Table.from_pylist(out, schema=CLAIMS)


def generated_claims(corpus: CorpusNames, n: int, seed: int = 0, world: WorldParams | None = None) -> pa.Table:
    """Up to ``n`` claims of a shadow demo world (``world`` with another ``seed``; default params
    otherwise), balanced over its hop counts, naming no entity ``corpus`` mentions: NOT ENOUGH INFO."""
    from factrl.data.world_claims import generate_claims_with_variants

    base = world or WorldParams()
    # a seed the served world does not use, and enough claims that filtering leaves n
    shadow = dataclasses.replace(base, seed=base.seed * 7919 + 104729 + seed, num_claims=max(4 * n, 60))
    claims, _ = generate_claims_with_variants(shadow)
    by_hops: dict[int, list[dict]] = {}
    for row in claims.to_pylist():
        if not any(corpus.mentions(e) for e in named_entities(row["claim"])):
            by_hops.setdefault(row["num_hops"], []).append(row | {"id": f"ooc-world-{row['id']}"})
    picked: list[dict] = []
    hops = sorted(by_hops)
    while len(picked) < n and any(by_hops.values()):  # round-robin over hop counts: balanced
        for h in hops:
            if by_hops[h] and len(picked) < n:
                picked.append(by_hops[h].pop(0))
    return _as_nei(picked, f"out_of_corpus:world(seed {shadow.seed})")


def real_claims(path: str | Path, corpus: CorpusNames, n: int, seed: int = 0) -> pa.Table:
    """Up to ``n`` claims of the shared-data claim file ``path`` (any label), sampled with ``seed``,
    whose subject (first named entity) ``corpus`` does not mention: NOT ENOUGH INFO. Claims naming no
    entity are left out (nothing to tell whether the corpus covers them)."""
    from factrl.data.sources import iter_jsonl

    rows = []
    for row, rec in iter_jsonl(path):
        claim = rec.get("claim")
        if not isinstance(claim, str) or not claim.strip():
            continue
        entities = named_entities(claim)
        if entities and not corpus.mentions(entities[0]):
            rows.append({"id": f"ooc-{Path(path).stem}-{rec.get('id', row)}", "claim": claim.strip(),
                         "num_hops": rec.get("num_hops") if isinstance(rec.get("num_hops"), int) else None})
    random.Random(seed).shuffle(rows)
    return _as_nei(rows[:n], f"out_of_corpus:{Path(path).name}")


def out_of_corpus_claims(passages: pa.Table, *, generated: int, real_files: Iterable[str | Path] = (),
                         real: int = 0, seed: int = 0, world: WorldParams | None = None) -> pa.Table:
    """``generated`` shadow-world claims and ``real`` real claims (split evenly over ``real_files``;
    a file that does not exist is skipped) that ``passages`` hold no evidence for."""
    corpus = CorpusNames(passages)
    parts = [generated_claims(corpus, generated, seed, world)] if generated else []
    files = [Path(f) for f in real_files if Path(f).is_file()]
    for i, path in enumerate(files):
        share = real // len(files) + (1 if i < real % len(files) else 0)
        if share:
            parts.append(real_claims(path, corpus, share, seed))
    return pa.concat_tables(parts) if parts else CLAIMS.empty_table()
