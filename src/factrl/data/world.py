"""The demo world: a generated fictional knowledge base with multi-hop fact-checking claims.

Every entity gets a name built from consonant-vowel syllables, so no pretrained model can know a
fact about it: a verifier has to read the passages. Entities are typed (people, cities,
countries, companies, films, albums, games) and linked by relations (born_in, located_in,
founded_by, headquartered_in, directed_by, produced_by, soundtrack, recorded_by, developed_by);
each also carries numeric facts (years, populations, track counts, prices), which
``numeric_questions`` turns into numeric RAG questions (MARCH's training data).

There is exactly one passage per entity (passage ``w-p{i+1:07d}`` describes entity ``i``), so a
claim can only cite passages that exist at the chosen scale. Passages are built column-wise with
pyarrow compute (no per-row Python) and streamed in record batches, which is what lets 1,000,000
passages be written in well under a minute and within a small memory budget.

Claims chain 2-4 relations from a named start entity to a named final entity; the bridging
entities in between are never named. REFUTES claims are hard negatives: one link of the chain is
swapped for another entity of the same type and the claim states where that altered chain ends.

Everything is a pure function of ``WorldParams`` (numpy ``default_rng(seed)``), so the same
parameters give byte-identical Parquet files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from factrl.data.params import WorldDifficulty, WorldParams
from factrl.data.schemas import CLAIMS, PASSAGES, validate
from factrl.data.world_wordings import PASSAGE_TEMPLATES, question_wordings, relation_wording
from factrl.io import atomic_path

SOURCE = "world"

# Fixed-length (consonant + vowel) syllables make a word's syllable split unambiguous, so distinct
# codes always give distinct words.
_CONSONANTS = list("bdfghklmnprstvzc")
_VOWELS = list("aeiou")
SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 80
# A trailing letter only decorates the word; uniqueness comes from the syllables.
_TAILS = ["", "n", "r", "s", "th", "l", "x", "m"]

# Share of the world per type. Cities and countries are few so that chains converge on them.
TYPE_SHARES = {
    "person": 0.30,
    "city": 0.10,
    "country": 0.02,
    "company": 0.14,
    "film": 0.18,
    "album": 0.12,
    "game": 0.14,
}
TYPES = tuple(TYPE_SHARES)

_COMPANY_SUFFIX = ["Works", "Labs", "Group", "Holdings", "Studios", "Industries", "Collective"]
_GAME_SUFFIX = ["Quest", "Tactics", "Legends", "Online", "Arena", "Chronicles"]
_ALBUM_SUFFIX = ["Sessions", "Nocturnes", "Echoes", "Tapes", "Anthems"]
_OCCUPATIONS = [
    "a painter", "an engineer", "a novelist", "a chemist", "an architect", "a violinist", "a chef", "a pilot"
]


@dataclass(frozen=True)
class Relation:
    """A typed edge: every entity of ``src`` type points at one entity of ``dst`` type."""

    name: str
    src: str
    dst: str
    noun: str  # "the <noun> of X" describes the target of X without naming it
    predicate: str  # "X <predicate> Y." states the edge
    question: str  # self-contained sub-question about ``{x}``
    # word beginnings that name this relation in a free-form question ("director", "directed"):
    # how the world teacher (factrl.data.world_teacher) tells which fact a question asks for
    cues: tuple[str, ...] = ()


RELATIONS = (
    Relation("born_in", "person", "city", "birthplace", "was born in", "In which city was {x} born?",
             ("born", "birth", "native", "home town", "came into")),
    Relation("located_in", "city", "country", "country", "lies in", "In which country does {x} lie?",
             ("countr", "lie", "nation")),
    Relation("founded_by", "company", "person", "founder", "was founded by", "Who founded {x}?",
             ("found", "establish", "creat", "originat")),
    Relation(
        "headquartered_in", "company", "city", "home city", "is headquartered in", "Where is {x} headquartered?",
        ("headquarter", "hq", "home city", "based", "head office"),
    ),
    Relation("directed_by", "film", "person", "director", "was directed by", "Who directed {x}?", ("direct", "filmmaker")),
    Relation("produced_by", "film", "company", "producer", "was produced by", "Which company produced {x}?",
             ("produc",)),
    Relation("soundtrack", "film", "album", "soundtrack", "has as its soundtrack", "What is the soundtrack of {x}?",
             ("soundtrack", "score")),
    Relation("recorded_by", "album", "person", "performer", "was recorded by", "Who recorded {x}?",
             ("record", "perform", "sang", "sung", "sing", "artist", "musician")),
    Relation("developed_by", "game", "company", "developer", "was developed by", "Which company developed {x}?",
             ("develop", "program")),
)
RELATION = {r.name: r for r in RELATIONS}



def parse_hop_question(question: str) -> tuple[Relation, str] | None:
    """The relation and subject of a hop's sub-question (the inverse of ``Relation.question`` and of
    its other wordings, ``factrl.data.world_wordings``):
    ``"Who founded Orlen Studios?"`` -> ``(RELATION["founded_by"], "Orlen Studios")``; None when the
    question is not one of the world's templates."""
    for rel in RELATIONS:
        for template in question_wordings(rel):
            head, tail = template.split("{x}")
            if question.startswith(head) and question.endswith(tail) and len(question) > len(head) + len(tail):
                return rel, question[len(head) : len(question) - len(tail)]
    return None


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


@dataclass
class World:
    """All entities of one world as columns: index ``i`` is entity ``i`` and passage ``i``."""

    types: np.ndarray  # int8 index into TYPES
    names: pa.Array  # string
    targets: dict[str, np.ndarray]  # relation -> target entity index (-1 where not applicable)
    numbers: dict[str, np.ndarray]  # numeric facts, one int array each
    flags: np.ndarray  # bool: add the optional extra sentence to the passage
    by_type: dict[str, np.ndarray]  # type -> sorted entity indices
    # the hard world's parts (WorldDifficulty); the clean world leaves them at their defaults
    difficulty: WorldDifficulty = WorldDifficulty()
    twin: np.ndarray | None = None  # the namesake of each entity (-1: none)
    qualified: np.ndarray | None = None  # bool: titled with a qualifier, "Kavelo (1994 film)"
    base_names: list[str] | None = None  # each entity's name without its qualifier
    wording: np.ndarray | None = None  # the wording of each passage (0 = the clean world's)
    cross: np.ndarray | None = None  # the other entity whose fact each passage also states (-1: none)
    decoys: dict[int, list[str]] | None = None  # passage -> sentences crowding out another's query

    def __len__(self) -> int:
        return len(self.types)

    def type_of(self, i: int) -> str:
        return TYPES[int(self.types[i])]

    def name(self, i: int) -> str:
        return self.names[int(i)].as_py()

    def is_qualified(self, i: int) -> bool:
        return self.qualified is not None and bool(self.qualified[int(i)])


def passage_id(i: int) -> str:
    return f"w-p{i + 1:07d}"


def _type_counts(n: int) -> dict[str, int]:
    """Entities per type: the shares of ``n``, but at least 2 per type so swaps always exist."""
    counts = {t: max(2, int(round(s * n))) for t, s in TYPE_SHARES.items()}
    counts["person"] += n - sum(counts.values())  # the biggest type absorbs rounding
    if counts["person"] < 2:
        raise ValueError(f"num_passages={n} is too small for a world (need >= {2 * len(TYPES)})")
    return counts


def _words(codes: np.ndarray, width: int, tails: np.ndarray) -> pa.Array:
    """Capitalised syllable words, one per code: ``width`` base-80 digits plus a tail letter."""
    syll = pa.array(SYLLABLES)
    parts = []
    rest = codes.copy()
    for _ in range(width):
        parts.append(syll.take(pa.array(rest % len(SYLLABLES))))
        rest //= len(SYLLABLES)
    parts.append(pa.array(_TAILS).take(pa.array(tails)))
    return pc.utf8_capitalize(pc.binary_join_element_wise(*parts, ""))


def _pick(rng: np.random.Generator, options: list[str], n: int) -> pa.Array:
    return pa.array(options).take(pa.array(rng.integers(len(options), size=n)))


def _names(rng: np.random.Generator, types: np.ndarray) -> pa.Array:
    """Unique fictional names; each type gets its own decoration ("Kavelo Works", "Dira Kavelo")."""
    n = len(types)
    width = max(2, math.ceil(math.log(n + 1, len(SYLLABLES))))
    space = len(SYLLABLES) ** width
    # An affine map with a multiplier coprime to the space is a bijection: unique codes, no shuffle.
    mult = int(rng.integers(1, space // 7)) * 6 + 1
    while math.gcd(mult, space) != 1:
        mult += 2
    codes = (np.arange(n, dtype=np.int64) * mult + int(rng.integers(space))) % space
    base = _words(codes, width, rng.integers(len(_TAILS), size=n))
    first = _words(rng.integers(len(SYLLABLES) ** 2, size=n), 2, np.zeros(n, dtype=np.int64))
    decorated = {
        "person": pc.binary_join_element_wise(first, base, " "),
        "company": pc.binary_join_element_wise(base, _pick(rng, _COMPANY_SUFFIX, n), " "),
        "game": pc.binary_join_element_wise(base, _pick(rng, _GAME_SUFFIX, n), ": "),
        "album": pc.binary_join_element_wise(base, _pick(rng, _ALBUM_SUFFIX, n), " "),
    }
    names = base
    for t, col in decorated.items():
        names = pc.if_else(pa.array(types == TYPES.index(t)), col, names)
    return names


def build_world(params: WorldParams) -> World:
    """Draw every entity, edge and number of the world (vectorised; ~1 s for 1M entities)."""
    n = int(params.num_passages)
    rng = np.random.default_rng(params.seed)
    counts = _type_counts(n)
    types = rng.permutation(np.repeat(np.arange(len(TYPES), dtype=np.int8), [counts[t] for t in TYPES]))
    by_type = {t: np.flatnonzero(types == k) for k, t in enumerate(TYPES)}
    targets = {}
    for rel in RELATIONS:
        col = np.full(n, -1, dtype=np.int64)
        src, dst = by_type[rel.src], by_type[rel.dst]
        col[src] = dst[rng.integers(len(dst), size=len(src))]
        targets[rel.name] = col
    numbers = {
        "year": rng.integers(1890, 2024, size=n),
        "population": rng.integers(2, 900, size=n) * 1000,
        "tracks": rng.integers(6, 19, size=n),
        "price": rng.integers(5, 70, size=n),
        "minutes": rng.integers(78, 181, size=n),
        "occupation": rng.integers(len(_OCCUPATIONS), size=n),
    }
    flags = rng.random(n) < 0.5
    world = World(types, _names(rng, types), targets, numbers, flags, by_type)
    if not params.difficulty.clean:
        _harden(world, params.difficulty, params.seed)  # a stream of its own: the clean draws stay
    return world


# --- the hard world: namesakes, wordings, cross mentions ----------------------------------------

_WORK_NOUN = {"film": "film", "album": "album", "game": "video game", "company": "company"}


def _kind_noun(type_name: str) -> str:
    """What a type is called in a qualifier or a claim: ``video game`` for a game, else the type."""
    return _WORK_NOUN.get(type_name, type_name)


def _base_word(name: str, type_name: str) -> str:
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
    old = _base_word(name, type_name)
    if type_name == "person":
        return name.split(" ", 1)[0] + " " + base
    return base + name[len(old):]


def _occupation_noun(world: World, i: int) -> str:
    return _OCCUPATIONS[int(world.numbers["occupation"][i])].split(" ", 1)[1]


def _qualifier(world: World, i: int, same_type: bool) -> str:
    """How a namesake is told apart: by type across types; within a type by year (works, companies),
    occupation (people) or country (cities)."""
    t = world.type_of(i)
    if not same_type:
        return _kind_noun(t)
    if t == "person":
        return _occupation_noun(world, i)
    if t == "city":
        return world.name(int(world.targets["located_in"][i]))
    return f"{int(world.numbers['year'][i])} {_WORK_NOUN[t]}"


def _harden(world: World, d: WorldDifficulty, seed: int) -> None:
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
                world.numbers["occupation"][b] = (world.numbers["occupation"][a] + 1) % len(_OCCUPATIONS)
            elif t1 == "city" and world.targets["located_in"][a] == world.targets["located_in"][b]:
                countries = world.by_type["country"]
                world.targets["located_in"][b] = countries[(np.searchsorted(countries, world.targets["located_in"][a])
                                                            + 1) % len(countries)]
            elif t1 not in ("person", "city") and world.numbers["year"][a] == world.numbers["year"][b]:
                world.numbers["year"][b] += 1 if world.numbers["year"][b] < 2023 else -1
            new = names[a]
        else:
            new = _with_base(names[b], t2, _base_word(names[a], t1))
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


# --- passages ---------------------------------------------------------------------------------


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _num(values: np.ndarray) -> pa.Array:
    return pa.array(values).cast(pa.string())


def _passage_texts(world: World, rows: np.ndarray, type_name: str) -> pa.Array:
    """The text of every passage in ``rows`` (all of one type): 1-3 sentences of its facts."""
    main, extra = _passage_parts(world, rows, type_name)
    if world.wording is not None:
        return _hard_passage_texts(world, rows, type_name, main, extra)
    # Half the passages carry an extra numeric sentence so lengths and styles vary.
    return pc.if_else(pa.array(world.flags[rows]), _join(main, extra), main)


def _passage_parts(world: World, rows: np.ndarray, type_name: str) -> tuple[pa.Array, pa.Array]:
    """The clean wording's main sentences and extra numeric sentence of each passage in ``rows``."""
    name = world.names.take(pa.array(rows))

    def ref(rel: str) -> pa.Array:
        return world.names.take(pa.array(world.targets[rel][rows]))

    def num(key: str) -> pa.Array:
        return _num(world.numbers[key][rows])

    if type_name == "person":
        main = _join(name, " was born in ", ref("born_in"), " in ", num("year"), ".")
        occ = pa.array(_OCCUPATIONS).take(pa.array(world.numbers["occupation"][rows]))
        extra = _join(" By trade, ", name, " is ", occ, ".")
    elif type_name == "city":
        main = _join(name, " is a city in ", ref("located_in"), ".")
        extra = _join(" About ", num("population"), " people live there.")
    elif type_name == "country":
        main = _join(name, " is a country with roughly ", num("population"), " thousand inhabitants.")
        extra = _join(" It adopted its present constitution in ", num("year"), ".")
    elif type_name == "company":
        main = _join(
            name, " was founded by ", ref("founded_by"), " in ", num("year"), ". The company is headquartered in ",
            ref("headquartered_in"), ".",
        )
        extra = _join(" Its catalogue lists ", num("tracks"), " product lines.")
    elif type_name == "film":
        main = _join(
            name, " is a ", num("year"), " film directed by ", ref("directed_by"), " and produced by ",
            ref("produced_by"), ". Its soundtrack is the album ", ref("soundtrack"), ".",
        )
        extra = _join(" The film runs for ", num("minutes"), " minutes.")
    elif type_name == "album":
        main = _join(name, " is an album recorded by ", ref("recorded_by"), ", released in ", num("year"), ".")
        extra = _join(" It has ", num("tracks"), " tracks.")
    elif type_name == "game":
        main = _join(name, " is a video game developed by ", ref("developed_by"), ", released in ", num("year"), ".")
        extra = _join(" At launch it cost ", num("price"), " dollars.")
    else:  # pragma: no cover - TYPES is closed
        raise ValueError(type_name)
    return main, extra


def _main_fact(world: World, i: int) -> str | None:
    """``which was directed by Mira Sol``: the first relation fact of entity ``i`` as a clause."""
    for rel in RELATIONS:
        if rel.src == world.type_of(i):
            who = "who" if world.type_of(i) == "person" else "which"
            return f"{who} {rel.predicate} {world.name(int(world.targets[rel.name][i]))}"
    return None


def _hard_passage_texts(world: World, rows: np.ndarray, type_name: str, main: pa.Array, extra: pa.Array) -> pa.Array:
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


def _passage_batch(world: World, start: int, stop: int) -> pa.RecordBatch:
    idx = np.arange(start, stop)
    types = world.types[start:stop]
    pieces, order = [], []
    for k, t in enumerate(TYPES):
        rows = idx[types == k]
        if len(rows):
            pieces.append(_passage_texts(world, rows, t))
            order.append(rows)
    # Texts were built per type; put them back in entity order.
    texts = pa.concat_arrays(pieces).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
    ids = _join("w-p", pc.utf8_lpad(_num(idx + 1), 7, "0"))
    titles = world.names.slice(start, stop - start)
    source = pa.array(np.full(stop - start, SOURCE, dtype=object), pa.string())
    return pa.RecordBatch.from_arrays([ids, titles, texts, source], schema=PASSAGES)


def iter_passage_batches(params: WorldParams, batch_size: int = 100_000) -> Iterator[pa.RecordBatch]:
    """Stream the world's passages in entity order, ``batch_size`` rows at a time."""
    world = build_world(params)
    for start in range(0, len(world), batch_size):
        yield _passage_batch(world, start, min(start + batch_size, len(world)))


# --- claims -----------------------------------------------------------------------------------


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
        return f"the {_kind_noun(t)} {base}"
    if t == "person":
        return f"the {_occupation_noun(world, i)} {base}"
    if t == "city":
        return f"the city {base} in {world.name(int(world.targets['located_in'][i]))}"
    return f"the {int(world.numbers['year'][i])} {_WORK_NOUN[t]} {base}"


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


def entity_passages(world: World, entities) -> dict[int, str]:
    """The passage text of each entity index in ``entities`` (built in one go per type)."""
    needed = np.unique(np.asarray(list(entities), dtype=np.int64))
    texts = {}
    for k, t in enumerate(TYPES):
        sel = needed[world.types[needed] == k]
        if len(sel):
            texts.update(zip(sel.tolist(), _passage_texts(world, sel, t).to_pylist()))
    return texts


def _attach_evidence(world: World, rows: list[dict]) -> None:
    """Fill each claim's evidence with the texts of its supporting passages (built in one go)."""
    texts = entity_passages(world, [e for r in rows for e in r["_chain"]])
    for r in rows:
        r["evidence"] = [texts[e] for e in r["_chain"]]


# --- files ------------------------------------------------------------------------------------


def variant_sets(splits: dict[str, pa.Table], variants: list[dict] | None) -> dict[str, pa.Table]:
    """The claim sets a hard world adds to the ``train`` / ``dev`` / ``eval`` splits:

    * ``warm``: the training claims the warm start may see (``clean`` variants: wording 0, no
      namesake to tell apart at the start, no near-miss refutation); all of ``train`` for a clean
      world (``variants`` None), so the warm start reads one file whatever the world;
    * ``heldout_wording`` (hard worlds with held-out wordings): every eval claim, same id, facts,
      passages and label, said in a wording no training claim uses;
    * ``heldout_combination`` (hard worlds with ``heldout_combination``): every claim, of any split,
      whose chain follows the held-out pair of relations; ``train``, ``dev`` and ``eval`` come back
      without them (so they replace the splits given).
    """
    if variants is None:
        return {"warm": splits["train"]}
    by_id = {v["id"]: v for v in variants}

    def where(table: pa.Table, key: str, value: bool = True) -> pa.Table:
        # a reviewer correction with an id the world did not generate (prepare.corrections) is
        # neither a clean variant nor held out
        return table.filter(pa.array([by_id.get(i, {}).get(key, False) == value for i in table.column("id").to_pylist()],
                                     pa.bool_()))

    sets: dict[str, pa.Table] = {}
    if any(v["heldout_combination"] for v in variants):
        sets["heldout_combination"] = pa.concat_tables([where(t, "heldout_combination") for t in splits.values()])
        splits = {name: where(t, "heldout_combination", False) for name, t in splits.items()}
        sets |= splits
    sets["warm"] = where(splits["train"], "clean")
    if any(v["heldout_claim"] is not None for v in variants):
        rows = splits["eval"].to_pylist()
        for row in rows:
            v = by_id[row["id"]]
            row["claim"], row["hops"] = v["heldout_claim"], v["heldout_hops"]
        sets["heldout_wording"] = pa.Table.from_pylist(rows, schema=CLAIMS)
    return sets


def write_world(params: WorldParams, passages_path: str | Path, claims_path: str | Path) -> dict:
    """Write passages (streamed) and claims as Parquet, each atomically; return counts and, under
    ``variants``, a hard world's claim variants (None for the clean world; see
    :func:`generate_claims_with_variants`)."""
    num_passages = 0
    with atomic_path(passages_path) as tmp:
        with pq.ParquetWriter(tmp, PASSAGES, compression="zstd") as writer:
            for batch in iter_passage_batches(params):
                writer.write_batch(batch)
                num_passages += batch.num_rows
    claims, variants = generate_claims_with_variants(params)
    with atomic_path(claims_path) as tmp:
        pq.write_table(claims, tmp, compression="zstd")
    labels = claims.column("label").to_pylist()
    hops = claims.column("num_hops").to_pylist()
    return {
        "num_passages": num_passages,
        "num_claims": claims.num_rows,
        "labels": {lab: labels.count(lab) for lab in sorted(set(labels))},
        "hops": {str(h): hops.count(h) for h in sorted(set(hops))},
        "passages_path": os.fspath(passages_path),
        "claims_path": os.fspath(claims_path),
        "variants": variants,
    }
