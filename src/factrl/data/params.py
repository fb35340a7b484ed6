"""Stage ``prepare``'s parameters: where the claims and passages come from (the generated demo world,
``factrl.data.world``; local files; the hub, ``factrl.data.sources``) and how they are split."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from factrl.config import params_section


@dataclass(frozen=True)
class WorldDifficulty:
    """What makes the demo world hard the way real claims are (``factrl.data.world_hard``); all off by
    default, which is the clean world (one wording, unique names, far refutations).

    homonyms: share of entities that get a namesake (another entity with the same base name, of the
        same type or another); both are then titled the way Wikipedia tells them apart
        (``Kavelo (1994 film)``, ``Dira Kavelo (painter)``, ``Varna (city)``), every mention uses that
        title, and each passage says what it is not to be confused with, stating a fact of the namesake.
    wordings: wordings per relation in use, 1..3 (``factrl.data.world_wordings``): claims,
        sub-questions and passages each draw one; wording 0 is the clean world's.
    heldout_wordings: the last this many of ``wordings`` are never used by the world's claims; the
        held-out-wording evaluation set (``data/claims/heldout_wording.parquet``) renders the eval
        claims in them.
    near_miss: share of REFUTES claims whose claimed end is a near miss: a namesake of the true end
        where it has one, else another entity of the end's type that the claim's own evidence
        passages name (a true fact one hop off); the rest swap a link for a random same-type entity.
    cross_mentions: share of passages that also state a fact of another entity of their own type
        ("Like Kavelo (film), which Mira Sol directed, ...").
    query_miss: share of (entity, relation) facts whose natural first query (``<title> <noun>``, e.g.
        ``Kavelo (1994 film) director``) is crowded: five other passages each name the noun of the
        title without stating the fact ("Some sources discuss the director of Kavelo (1994 film) and
        what is known about that director."), so that query's top hits are often those passages and
        a second search, by the title alone, is needed (the warm start's re-query,
        ``warmup.search_max_turns``). At 0.3 on the demo's world, BM25: the natural query's hit@3
        0.998 -> 0.960 (hit@1 0.93 -> 0.79), either of two searches 0.997.
    heldout_combination: two relations, ``"first>second"`` (``factrl.data.world_entities.RELATIONS``), whose
        combination no training claim uses: every claim whose chain follows ``first`` then ``second``
        leaves train, dev and eval for ``data/claims/heldout_combination.parquet``. Each relation
        still occurs in other chains, so the set asks whether the agents compose known hops in a new
        order. "" = none.
    """

    homonyms: float = 0.0
    wordings: int = 1
    heldout_wordings: int = 0
    near_miss: float = 0.0
    cross_mentions: float = 0.0
    query_miss: float = 0.0
    heldout_combination: str = ""

    def __post_init__(self) -> None:
        for key in ("homonyms", "near_miss", "cross_mentions", "query_miss"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"world.difficulty.{key} must be a share in [0, 1], got {getattr(self, key)}")
        if not 1 <= self.wordings <= 3:
            raise ValueError(f"world.difficulty.wordings must be 1..3, got {self.wordings}")
        if not 0 <= self.heldout_wordings < self.wordings:
            raise ValueError(f"world.difficulty.heldout_wordings must be in [0, wordings), got {self.heldout_wordings}")
        if self.heldout_combination and len(self.heldout_pair) != 2:
            raise ValueError("world.difficulty.heldout_combination must be two relations as 'first>second', "
                             f"got {self.heldout_combination!r}")

    @property
    def heldout_pair(self) -> tuple[str, ...]:
        """``heldout_combination`` as ``(first, second)``; () when none."""
        return tuple(r.strip() for r in self.heldout_combination.split(">")) if self.heldout_combination else ()

    @property
    def clean(self) -> bool:
        return self == WorldDifficulty()


@dataclass(frozen=True)
class WorldParams:
    """The generated demo world (``factrl.data.world``).

    seed: everything in the world is a function of this seed.
    num_passages: target passage count (100 .. 1,000,000); entities scale with it.
    num_claims: claims generated (balanced SUPPORTS/REFUTES, spread over ``hops``).
    hops: the hop counts of generated claims.
    difficulty: namesakes, wordings, near-miss refutations (:class:`WorldDifficulty`; off by default).
    """

    seed: int = 13
    num_passages: int = 2000
    num_claims: int = 600
    hops: tuple[int, ...] = (2, 3, 4)
    difficulty: WorldDifficulty = field(default_factory=WorldDifficulty)


@dataclass(frozen=True)
class FilesSource:
    """Local claim / passage files (JSONL or Parquet in the shared-data format).

    claims: claim files; their ``source`` decides label normalisation (see ``data.sources``).
    passages: passage files (id, title, text).
    """

    claims: tuple[str, ...] = ()
    passages: tuple[str, ...] = ()


@dataclass(frozen=True)
class HubSource:
    """Claim sets from the Hugging Face hub (real scale; needs network).

    datasets: names from ``factrl.data.sources.HUB_DATASETS`` (hover, fever, exfever).
    split: the hub split to read.
    limit: at most this many claims per dataset (0 = all).
    """

    datasets: tuple[str, ...] = ("hover",)
    split: str = "train"
    limit: int = 0


@params_section("prepare")
@dataclass(frozen=True)
class PrepareParams:
    """Stage ``prepare``: read a claim source, validate it, write stratified splits.

    source: ``world`` (generated, default), ``files`` or ``hub``.
    world: the generated world (see :class:`WorldParams`), read when ``source`` is ``world``.
    files: the local files (see :class:`FilesSource`), read when ``source`` is ``files``.
    hub: the hub sets (see :class:`HubSource`), read when ``source`` is ``hub``.
    split_fractions: train / dev / eval shares, stratified by (label, num_hops).
    seed: seed of the split.
    corrections: claim files (the claims format: JSONL or CLAIMS Parquet, e.g. the service's
        exported reviewer corrections) merged into the training claims after the split, never into
        dev or eval: a correction whose id is already a claim replaces that claim (its label and
        the rest) wherever it is; an id the source does not have is added to train
        (``factrl.data.corrections``). Files are read in order; a later file wins.
    """

    source: Literal["world", "files", "hub"] = "world"
    world: WorldParams = field(default_factory=WorldParams)
    files: FilesSource = field(default_factory=FilesSource)
    hub: HubSource = field(default_factory=HubSource)
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    seed: int = 7
    corrections: tuple[str, ...] = ()
