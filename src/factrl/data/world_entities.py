"""The demo world's vocabulary: entity types, the relations between them, and the world itself.

What every part of the world generator shares (``factrl.data.world`` gives the overview): the
entity types and their shares (:data:`TYPES`), the typed relations that link them
(:data:`RELATIONS`, with the sub-question each asks and the cue words the world teacher reads),
:class:`World` (every entity as columns: index ``i`` is entity ``i`` and passage ``i``,
``passage_id(i)``), and the nouns a type or an occupation is called by in a qualifier or a claim.
The builder (``factrl.data.world_build``), the hard world (``factrl.data.world_hard``) and the
claims (``factrl.data.world_claims``) all import these, so none of them imports another's internals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from factrl.data.params import WorldDifficulty
from factrl.data.world_wordings import question_wordings

SOURCE = "world"

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

OCCUPATIONS = [
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


WORK_NOUN = {"film": "film", "album": "album", "game": "video game", "company": "company"}


def kind_noun(type_name: str) -> str:
    """What a type is called in a qualifier or a claim: ``video game`` for a game, else the type."""
    return WORK_NOUN.get(type_name, type_name)


def occupation_noun(world: World, i: int) -> str:
    return OCCUPATIONS[int(world.numbers["occupation"][i])].split(" ", 1)[1]
