"""The hard world: namesakes, passage wordings, cross mentions and query decoys (``WorldDifficulty``).

:func:`harden` turns a clean world (``factrl.data.world_build.build_world``) into a hard one, in
place and from random streams of its own, so the clean world's draws stay as they are: pairs of
namesakes told apart by a qualifier (``Kavelo (1994 film)``), each passage's wording, a cross
mention of another entity's fact, and decoy sentences that crowd out a fact's natural query.
:func:`hard_passage_texts` renders a hard world's passages from the clean wording's sentences.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from factrl.data.params import WorldDifficulty
from factrl.data.world_entities import (
    OCCUPATIONS,
    RELATIONS,
    TYPES,
    WORK_NOUN,
    World,
    kind_noun,
    occupation_noun,
)
from factrl.data.world_wordings import PASSAGE_TEMPLATES


def base_word(name: str, type_name: str) -> str:
    """The invented word a decorated name is built on: ``Dira Kavelo`` -> ``Kavelo``."""
    if type_name == "person":
        return name.split(" ", 1)[1]
    if type_name == "game":
        return name.split(": ", 1)[0]
    if type_name in ("company", "album"):
        return name.rsplit(" ", 1)[0]
    return name


def _with_base(name: str, type_name: str, base: str) -> str:
    """``name`` rebuilt on another base word, keeping its own decoration."""
    old = base_word(name, type_name)
    if type_name == "person":
        return name.split(" ", 1)[0] + " " + base
    return base + name[len(old):]


def _qualifier(world: World, i: int, same_type: bool) -> str:
    """How a namesake is told apart: by type across types; within a type by year (works, companies),
    occupation (people) or country (cities)."""
    t = world.type_of(i)
    if not same_type:
        return kind_noun(t)
    if t == "person":
        return occupation_noun(world, i)
    if t == "city":
        return world.name(int(world.targets["located_in"][i]))
    return f"{int(world.numbers['year'][i])} {WORK_NOUN[t]}"


def harden(world: World, d: WorldDifficulty, seed: int) -> None:
    """Give ``world`` namesakes, passage wordings, cross mentions and query decoys, in place (see
    WorldDifficulty).

    Namesakes come in pairs: within a type the second entity takes the first's whole name (their
    year, occupation or country is made to differ so the qualifier tells them apart); across types
    it takes the first's base word in its own decoration (``Kavelo`` the film, ``Kavelo Works`` the
    company), qualified by type only where the two titles would be equal. Countries are never
    namesakes (they qualify cities). Row-wise Python: the hard world is a demo-scale world.
    """
    rng = np.random.default_rng([seed, 4])
    n = len(world)
    names = world.names.to_pylist()
    twin = np.full(n, -1, dtype=np.int64)
    qualified = np.zeros(n, dtype=bool)
    same = np.zeros(n, dtype=bool)
    kinds = [t for t in TYPES if t != "country"]
    queues = {t: list(rng.permutation(world.by_type[t])) for t in kinds}
    taken = set(names)
    for p in range(int(round(d.homonyms * n / 2))):
        if p % 2 == 0:  # within a type, the type drawn by its size
            sizes = np.array([len(queues[t]) for t in kinds], dtype=float)
            if sizes.max() < 2:
                break
            t1 = t2 = kinds[int(rng.choice(len(kinds), p=sizes / sizes.sum()))]
            if len(queues[t1]) < 2:
                continue
        else:
            t1, t2 = (kinds[int(k)] for k in rng.choice(len(kinds), size=2, replace=False))
            if not queues[t1] or not queues[t2]:
                continue
        a, b = int(queues[t1].pop()), int(queues[t2].pop())
        if t1 == t2:
            if t1 == "person" and world.numbers["occupation"][a] == world.numbers["occupation"][b]:
                world.numbers["occupation"][b] = (world.numbers["occupation"][a] + 1) % len(OCCUPATIONS)
            elif t1 == "city" and world.targets["located_in"][a] == world.targets["located_in"][b]:
                countries = world.by_type["country"]
                world.targets["located_in"][b] = countries[(np.searchsorted(countries, world.targets["located_in"][a])
                                                            + 1) % len(countries)]
            elif t1 not in ("person", "city") and world.numbers["year"][a] == world.numbers["year"][b]:
                world.numbers["year"][b] += 1 if world.numbers["year"][b] < 2023 else -1
            new = names[a]
        else:
            new = _with_base(names[b], t2, base_word(names[a], t1))
            if new != names[a] and new in taken:
                continue  # the rebuilt name is some third entity's: leave this pair out
        taken.add(new)
        names[b] = new
        twin[a], twin[b] = b, a
        same[a] = same[b] = t1 == t2
        qualified[a] = qualified[b] = names[a] == names[b]
    world.base_names = names
    world.twin, world.qualified = twin, qualified
    titles = [f"{names[i]} ({_qualifier(world, i, bool(same[i]))})" if qualified[i] else names[i] for i in range(n)]
    world.names = pa.array(titles, pa.string())
    world.difficulty = d
    world.wording = rng.integers(d.wordings, size=n)
    others = rng.integers(n, size=n)
    cross = np.where(rng.random(n) < d.cross_mentions, others, -1)
    # a cross mention names another entity of the passage's own type
    for i in np.flatnonzero(cross >= 0):
        pool = world.by_type[world.type_of(int(i))]
        j = int(pool[int(others[i]) % len(pool)])
        cross[i] = j if j != i else -1
    world.cross = cross
    world.decoys = _decoys(world, d.query_miss, seed)


# How many passages crowd out one fact's natural query: the search agents read the top 3.
DECOYS_PER_FACT = 5


def _decoys(world: World, share: float, seed: int) -> dict[int, list[str]]:
    """For ``share`` of the (entity, relation) facts, :data:`DECOYS_PER_FACT` other passages (not
    the entity's nor its namesake's) each get a sentence naming the relation's noun and the entity's
    title without stating the fact; a separate stream, so the rest of the world is the same with or
    without them."""
    decoys: dict[int, list[str]] = {}
    if not share:
        return decoys
    rng = np.random.default_rng([seed, 6])
    n = len(world)
    for i in range(n):
        for rel in RELATIONS:
            if rel.src != world.type_of(i) or rng.random() >= share:
                continue
            hosts = [int(h) for h in rng.choice(n, size=DECOYS_PER_FACT + 2, replace=False)
                     if h != i and h != world.twin[i]][:DECOYS_PER_FACT]
            for h in hosts:
                decoys.setdefault(h, []).append(
                    f" Some sources discuss the {rel.noun} of {world.name(i)} and what is known about that {rel.noun}.")
    return decoys


def _main_fact(world: World, i: int) -> str | None:
    """``which was directed by Mira Sol``: the first relation fact of entity ``i`` as a clause."""
    for rel in RELATIONS:
        if rel.src == world.type_of(i):
            who = "who" if world.type_of(i) == "person" else "which"
            return f"{who} {rel.predicate} {world.name(int(world.targets[rel.name][i]))}"
    return None


def hard_passage_texts(world: World, rows: np.ndarray, type_name: str, main: pa.Array, extra: pa.Array) -> pa.Array:
    """Passages of the hard world: each in its own wording, a namesake's line ("Not to be confused
    with Kavelo (2001 film), which was directed by Mira Sol.") and a cross mention of another
    entity's fact where drawn, the sentences crowding out other facts' queries it hosts, then the
    extra numeric sentence where flagged."""
    texts = []
    for i, text, more in zip(rows.tolist(), main.to_pylist(), extra.to_pylist()):
        w = int(world.wording[i])
        if w:
            fields = {"n": world.name(i), "year": int(world.numbers["year"][i]),
                      "population": int(world.numbers["population"][i])}
            fields |= {rel.name: world.name(int(world.targets[rel.name][i])) for rel in RELATIONS
                       if rel.src == type_name}
            text = PASSAGE_TEMPLATES[type_name][w - 1].format(**fields)
        if world.twin[i] >= 0:
            fact = _main_fact(world, int(world.twin[i]))
            text += f" Not to be confused with {world.name(int(world.twin[i]))}" + (f", {fact}." if fact else ".")
        if world.cross[i] >= 0:
            fact = _main_fact(world, int(world.cross[i]))
            if fact:
                text += f" See also {world.name(int(world.cross[i]))}, {fact}."
        text += "".join(world.decoys.get(i, ()))
        texts.append(text + more if world.flags[i] else text)
    return pa.array(texts, pa.string())
