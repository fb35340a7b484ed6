"""The demo world's claims: multi-hop chains rendered as SUPPORTS and REFUTES claims.

Claims chain 2-4 relations from a named start entity to a named final entity; the bridging
entities in between are never named. REFUTES claims are hard negatives: one link of the chain is
swapped for another entity of the same type and the claim states where that altered chain ends (in
a hard world, a share of them are near misses: the true end's namesake, or an entity the chain's
evidence names). :func:`generate_claims_with_variants` also returns, for a hard world, each
claim's variant (wording, namesakes, held-out wording and combination), which
``factrl.data.world.variant_sets`` turns into the extra claim sets.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from factrl.data.params import WorldParams
from factrl.data.schemas import CLAIMS, validate
from factrl.data.world_build import build_world, entity_passages
from factrl.data.world_entities import (
    RELATION,
    RELATIONS,
    SOURCE,
    WORK_NOUN,
    World,
    kind_noun,
    occupation_noun,
    passage_id,
)
from factrl.data.world_wordings import relation_wording

# "the film Kavelo": how the start entity of a claim is introduced.
_TYPE_NOUN = {
    "person": "person",
    "city": "city",
    "country": "country",
    "company": "company",
    "film": "film",
    "album": "album",
    "game": "game",
}


def relation_paths(hops: int) -> list[tuple[str, ...]]:
    """Every chain of ``hops`` relations whose types connect (dst of one = src of the next)."""
    paths: list[tuple[str, ...]] = [(r.name,) for r in RELATIONS]
    for _ in range(hops - 1):
        paths = [p + (r.name,) for p in paths for r in RELATIONS if r.src == RELATION[p[-1]].dst]
    return paths


def _follow(world: World, start: int, path: tuple[str, ...]) -> list[int]:
    """The entities visited from ``start`` along ``path`` (start included)."""
    chain = [start]
    for rel in path:
        chain.append(int(world.targets[rel][chain[-1]]))
    return chain


def mention(world: World, i: int) -> str:
    """How a claim names its start entity: ``the film Kavelo``; a namesake by what tells it apart,
    as a person would (``the 1994 film Kavelo``, ``the painter Dira Kavelo``, ``the city Varna in
    Debix``), never by its bracketed title."""
    t = world.type_of(i)
    if not world.is_qualified(i):
        return f"the {_TYPE_NOUN[t]} {world.name(i)}"
    base = world.base_names[i]
    if world.type_of(int(world.twin[i])) != t:
        return f"the {kind_noun(t)} {base}"
    if t == "person":
        return f"the {occupation_noun(world, i)} {base}"
    if t == "city":
        return f"the city {base} in {world.name(int(world.targets['located_in'][i]))}"
    return f"the {int(world.numbers['year'][i])} {WORK_NOUN[t]} {base}"


def render_claim(world: World, start: int, path: tuple[str, ...], final_name: str, wording: int = 0) -> str:
    """The claim text: the start entity named, the bridges described, the end entity named.

    Wordings 0 and 1 nest the descriptions and end on the last relation's predicate (``The birthplace
    of the director of the film Kavelo lies in ...``); wording 2 names the end first (``Debix is the
    home country of the home town of ...``)."""
    words = [relation_wording(RELATION[rel], wording) for rel in path]
    subject = mention(world, start)
    for w in words[:-1]:
        subject = f"the {w.noun} of {subject}"
    if wording == 2:
        text = f"{final_name} is the {words[-1].noun} of {subject}."
    else:
        text = f"{subject} {words[-1].predicate} {final_name}."
    return text[0].upper() + text[1:]


def _hops(world: World, chain: list[int], path: tuple[str, ...], wording: int = 0) -> list[dict]:
    return [
        {
            "question": relation_wording(RELATION[rel], wording).question.format(x=world.name(chain[k])),
            "answer": world.name(chain[k + 1]),
            "passage_ids": [passage_id(chain[k])],
        }
        for k, rel in enumerate(path)
    ]


def _mentioned(world: World, i: int) -> set[int]:
    """The entities passage ``i`` names: its relations' targets, its namesake, its cross mention."""
    named = {int(world.targets[rel.name][i]) for rel in RELATIONS if rel.src == world.type_of(i)}
    for other in (world.twin, world.cross):
        if other is not None and other[i] >= 0:
            named.add(int(other[i]))
    return named


def _near_miss_end(rng: np.random.Generator, world: World, chain: list[int], path: tuple[str, ...]) -> int | None:
    """A claimed end that is almost right: the true end's namesake of its own type where it has one,
    else an entity of the end's type that the chain's evidence passages name (a true fact one hop
    off), else the last relation's target of such a neighbour of the last bridge."""
    end, end_type = chain[-1], world.type_of(chain[-1])
    twin = int(world.twin[end]) if world.twin is not None else -1
    if twin >= 0 and world.type_of(twin) == end_type:
        return twin
    named = set().union(*(_mentioned(world, e) for e in chain[:-1]))
    candidates = sorted(e for e in named if world.type_of(e) == end_type and e != end)
    bridge_type = world.type_of(chain[-2])
    candidates += sorted({int(world.targets[path[-1]][e]) for e in named
                          if world.type_of(e) == bridge_type and e != chain[-2]} - {end} - set(candidates))
    return int(candidates[int(rng.integers(len(candidates)))]) if candidates else None


def _refute_end(rng: np.random.Generator, world: World, chain: list[int], path: tuple[str, ...]) -> int | None:
    """Swap one link of the chain for a same-type entity; return where the altered chain ends.

    Swapping a bridge (not just the final answer) makes the stated end a real fact about a
    plausible neighbour, which is what makes these negatives hard.
    """
    k = int(rng.integers(1, len(path) + 1))  # which visited entity (1..hops) gets swapped
    pool = world.by_type[world.type_of(chain[k])]
    for _ in range(8):
        other = int(pool[rng.integers(len(pool))])
        if other == chain[k]:
            continue
        end = _follow(world, other, path[k:])[-1]
        if end != chain[-1]:
            return end
    return None


def _claim_row(rng, world: World, hops: int, label: str, hard_rng=None) -> dict | None:
    """One claim of ``hops`` hops, or None if this draw is unusable (retry with a new draw).

    ``hard_rng`` (the hard world's own stream) draws the claim's wording, its held-out wording and
    whether a refutation is a near miss; the row's ``_variant`` records them."""
    paths = relation_paths(hops)
    path = paths[int(rng.integers(len(paths)))]
    pool = world.by_type[RELATION[path[0]].src]
    start = int(pool[rng.integers(len(pool))])
    chain = _follow(world, start, path)
    if len(set(chain)) != len(chain):
        return None
    d = world.difficulty
    wording, heldout, near = 0, None, False
    if hard_rng is not None:
        wording = int(hard_rng.integers(d.wordings - d.heldout_wordings))
        if d.heldout_wordings:
            heldout = d.wordings - d.heldout_wordings + int(hard_rng.integers(d.heldout_wordings))
        near = label == "REFUTES" and bool(hard_rng.random() < d.near_miss)
    if label == "SUPPORTS":
        end = chain[-1]
    else:
        end = _near_miss_end(rng, world, chain, path) if near else None
        near = end is not None  # a chain with no near miss at hand is refuted the usual way
        if end is None:
            end = _refute_end(rng, world, chain, path)
    if end is None:
        return None
    text = render_claim(world, start, path, world.name(end), wording)
    # Names are built so one never contains another, but guard anyway: a named bridge leaks a hop.
    if any(world.name(b) in text for b in chain[1:-1]) or (label == "REFUTES" and world.name(chain[-1]) in text):
        return None
    gold = world.name(chain[-1])
    why = (
        f"Following the chain from {world.name(start)} leads to {gold}, as the claim says."
        if label == "SUPPORTS"
        else f"Following the chain from {world.name(start)} leads to {gold}, not {world.name(end)}."
    )
    row = {
        "claim": text,
        "label": label,
        "num_hops": hops,
        "evidence": None,  # filled from passages below
        "evidence_ids": [passage_id(e) for e in chain[:-1]],
        "explanation": why,
        "source": SOURCE,
        "hops": _hops(world, chain, path, wording),
        "split": None,
        "_chain": chain[:-1],
    }
    if hard_rng is not None:
        row["_variant"] = {
            "wording": wording, "near_miss": near,
            "start_namesake": bool(world.twin[start] >= 0),  # qualified titles come in namesake pairs
            "chain_namesakes": int(sum(world.twin[e] >= 0 for e in chain)),
            "heldout_wording": heldout,
            "heldout_claim": None if heldout is None else render_claim(world, start, path, world.name(end), heldout),
            "heldout_hops": None if heldout is None else _hops(world, chain, path, heldout),
            "heldout_combination": _follows(path, d.heldout_pair),
        }
    return row


def _follows(path: tuple[str, ...], pair: tuple[str, ...]) -> bool:
    """Whether ``path`` follows ``pair[0]`` with ``pair[1]`` (False for an empty pair)."""
    return bool(pair) and any(step == pair for step in zip(path, path[1:]))


def _check_heldout_pair(pair: tuple[str, ...]) -> None:
    """A held-out combination must name two relations that chain (the first's object type is the
    second's subject type), or no claim could follow it."""
    if not pair:
        return
    unknown = [r for r in pair if r not in RELATION]
    if unknown:
        raise ValueError(f"prepare.world.difficulty.heldout_combination: unknown relation(s) {unknown}; "
                         f"expected two of {[r.name for r in RELATIONS]}")
    if RELATION[pair[0]].dst != RELATION[pair[1]].src:
        raise ValueError(f"prepare.world.difficulty.heldout_combination: {pair[0]} ends at a "
                         f"{RELATION[pair[0]].dst}, {pair[1]} starts from a {RELATION[pair[1]].src}: no chain follows both")


def _plan(params: WorldParams) -> list[tuple[int, str]]:
    """(hops, label) for every claim: hop counts round-robin, labels alternating within a hop."""
    hops = tuple(params.hops)
    plan = []
    seen = {h: 0 for h in hops}
    for i in range(int(params.num_claims)):
        h = hops[i % len(hops)]
        plan.append((h, "SUPPORTS" if seen[h] % 2 == 0 else "REFUTES"))
        seen[h] += 1
    return plan


def generate_claims(params: WorldParams) -> pa.Table:
    """The world's claims, balanced per hop count between SUPPORTS and REFUTES (CLAIMS schema)."""
    return generate_claims_with_variants(params)[0]


def generate_claims_with_variants(params: WorldParams) -> tuple[pa.Table, list[dict] | None]:
    """:func:`generate_claims` and, for a hard world, each claim's variant (None for the clean
    world): ``id``, ``wording``, ``near_miss``, ``start_namesake`` (the claim names a namesake, told
    apart by year / occupation / country / type), ``chain_namesakes`` (how many of its chain's
    entities have one), ``heldout_combination`` (its chain follows the held-out pair of relations),
    ``clean`` (wording 0, no namesake at the start, not a near miss, not held out: what the warm
    start may see), and ``heldout_claim`` / ``heldout_hops``: the same claim in a held-out wording
    (None without ``heldout_wordings``)."""
    _check_heldout_pair(params.difficulty.heldout_pair)
    world = build_world(params)
    # A separate stream so the claim set does not shift when passage drawing changes.
    rng = np.random.default_rng([params.seed, 1])
    hard_rng = None if params.difficulty.clean else np.random.default_rng([params.seed, 5])
    rows, texts = [], set()
    for hops, label in _plan(params):
        row = None
        for attempt in range(200):
            row = _claim_row(rng, world, hops, label, hard_rng)
            # Prefer unseen claim texts; a tiny world may run out, then repeats are allowed.
            if row is not None and (row["claim"] not in texts or attempt >= 100):
                break
        if row is None:
            raise RuntimeError(f"could not draw a {hops}-hop {label} claim from this world")
        texts.add(row["claim"])
        rows.append(row)
    _attach_evidence(world, rows)
    variants = [] if hard_rng is not None else None
    for i, row in enumerate(rows):
        row["id"] = f"w-c{i + 1:06d}"
        del row["_chain"]
        if variants is not None:
            v = row.pop("_variant")
            v["clean"] = (v["wording"] == 0 and not v["start_namesake"] and not v["near_miss"]
                          and not v["heldout_combination"])
            variants.append({"id": row["id"], **v})
    return validate(pa.Table.from_pylist(rows), CLAIMS, "world claims"), variants


def _attach_evidence(world: World, rows: list[dict]) -> None:
    """Fill each claim's evidence with the texts of its supporting passages (built in one go)."""
    texts = entity_passages(world, [e for r in rows for e in r["_chain"]])
    for r in rows:
        r["evidence"] = [texts[e] for e in r["_chain"]]
