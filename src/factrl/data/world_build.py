"""The demo world's builder: entity names, types, edges and numbers, then the passage of every entity.

:func:`build_world` draws the whole world from ``WorldParams`` (numpy ``default_rng(seed)``,
vectorised: ~1 s for 1M entities) and, for a hard world, hands it to
:func:`factrl.data.world_hard.harden`. Names are built from consonant-vowel syllables (an affine
code map keeps them unique), so no pretrained model can know a fact about them.

Passages are built column-wise with pyarrow compute (no per-row Python) and streamed in record
batches (:func:`iter_passage_batches`); :func:`entity_passages` builds the texts of a few entities
(the claims' evidence, the numeric questions' passages). A hard world's passages are finished by
:func:`factrl.data.world_hard.hard_passage_texts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from factrl.data.params import WorldParams
from factrl.data.schemas import PASSAGES
from factrl.data.world_entities import OCCUPATIONS, RELATIONS, SOURCE, TYPE_SHARES, TYPES, World
from factrl.data.world_hard import hard_passage_texts, harden

# Fixed-length (consonant + vowel) syllables make a word's syllable split unambiguous, so distinct
# codes always give distinct words.
_CONSONANTS = list("bdfghklmnprstvzc")
_VOWELS = list("aeiou")
SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 80
# A trailing letter only decorates the word; uniqueness comes from the syllables.
_TAILS = ["", "n", "r", "s", "th", "l", "x", "m"]


_COMPANY_SUFFIX = ["Works", "Labs", "Group", "Holdings", "Studios", "Industries", "Collective"]
_GAME_SUFFIX = ["Quest", "Tactics", "Legends", "Online", "Arena", "Chronicles"]
_ALBUM_SUFFIX = ["Sessions", "Nocturnes", "Echoes", "Tapes", "Anthems"]


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
        "occupation": rng.integers(len(OCCUPATIONS), size=n),
    }
    flags = rng.random(n) < 0.5
    world = World(types, _names(rng, types), targets, numbers, flags, by_type)
    if not params.difficulty.clean:
        harden(world, params.difficulty, params.seed)  # a stream of its own: the clean draws stay
    return world


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _num(values: np.ndarray) -> pa.Array:
    return pa.array(values).cast(pa.string())


def _passage_texts(world: World, rows: np.ndarray, type_name: str) -> pa.Array:
    """The text of every passage in ``rows`` (all of one type): 1-3 sentences of its facts."""
    main, extra = _passage_parts(world, rows, type_name)
    if world.wording is not None:
        return hard_passage_texts(world, rows, type_name, main, extra)
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
        occ = pa.array(OCCUPATIONS).take(pa.array(world.numbers["occupation"][rows]))
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


def entity_passages(world: World, entities) -> dict[int, str]:
    """The passage text of each entity index in ``entities`` (built in one go per type)."""
    needed = np.unique(np.asarray(list(entities), dtype=np.int64))
    texts = {}
    for k, t in enumerate(TYPES):
        sel = needed[world.types[needed] == k]
        if len(sel):
            texts.update(zip(sel.tolist(), _passage_texts(world, sel, t).to_pylist()))
    return texts
