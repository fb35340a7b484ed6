"""The demo world's wordings: how each relation is said in claims, sub-questions and passages.

Wording 0 is the clean world's (``Relation.noun``, ``.predicate``, ``.question`` and the passage
templates of ``factrl.data.world_build``); wordings 1 and 2 say the same facts with other words, and
wording 2 also turns the claim around (the claimed end first: ``Debix is the home country of ...``),
so an agent that learned to copy wording 0's template meets a sentence it has not seen.
``WorldDifficulty.wordings`` says how many are in use, ``heldout_wordings`` how many of the last
are kept for evaluation only.

Every wording of a relation must keep the relation's ``cues`` findable (the world teacher names the
fact a free-form question asks for by them): ``tests/data/test_world_hard.py`` checks each question
wording against its relation's cues.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_WORDINGS = 3


@dataclass(frozen=True)
class RelationWording:
    """One relation's words in one wording: ``the <noun> of X`` describes the target, ``X <predicate>
    Y.`` states the edge, ``question`` asks for the target of ``{x}``."""

    noun: str
    predicate: str
    question: str


# relation -> wordings 1 and 2 (wording 0 is the Relation's own)
_ALTERNATIVES: dict[str, tuple[RelationWording, RelationWording]] = {
    "born_in": (RelationWording("city of birth", "is a native of", "Where was {x} born?"),
                RelationWording("home town", "came into the world in", "What is the birthplace of {x}?")),
    "located_in": (RelationWording("nation", "is located in", "Which country is {x} located in?"),
                   RelationWording("home country", "is a city of", "Which nation does {x} belong to?")),
    "founded_by": (RelationWording("creator", "was established by", "Who is the founder of {x}?"),
                   RelationWording("originator", "was created by", "By whom was {x} established?")),
    "headquartered_in": (RelationWording("base", "is based in", "In which city is {x} based?"),
                         RelationWording("head-office city", "has its head office in",
                                         "Where does {x} have its head office?")),
    "directed_by": (RelationWording("filmmaker", "is a film by", "Who is the director of {x}?"),
                    RelationWording("film director", "was made by the filmmaker", "Which filmmaker directed {x}?")),
    "produced_by": (RelationWording("production company", "was a production of", "Who produced {x}?"),
                    RelationWording("producing studio", "was produced at", "What is the production company of {x}?")),
    "soundtrack": (RelationWording("score album", "is scored by the album", "Which album is the soundtrack of {x}?"),
                   RelationWording("soundtrack album", "features the soundtrack album",
                                   "Which album scores {x}?")),
    "recorded_by": (RelationWording("recording artist", "is an album by", "Who is the performer of {x}?"),
                    RelationWording("singer", "was performed by", "Which artist performed {x}?")),
    "developed_by": (RelationWording("development studio", "was programmed by", "Who developed {x}?"),
                     RelationWording("game studio", "comes from the game studio", "Which game studio developed {x}?")),
}


def relation_wording(relation, wording: int) -> RelationWording:
    """``relation`` (a ``factrl.data.world_entities.Relation``) in ``wording`` (0 .. MAX_WORDINGS - 1)."""
    if wording == 0:
        return RelationWording(relation.noun, relation.predicate, relation.question)
    return _ALTERNATIVES[relation.name][wording - 1]


def question_wordings(relation) -> tuple[str, ...]:
    """Every sub-question template of ``relation``, wording 0 first."""
    return tuple(relation_wording(relation, w).question for w in range(MAX_WORDINGS))


# Passage templates per type and wording, over named fields (``{n}`` the entity's title, ``{year}``,
# and the titles of its relations' targets). Wording 0 is the clean world's text, built column-wise
# in ``factrl.data.world_build._passage_texts``; these are its equals for wordings 1 and 2.
PASSAGE_TEMPLATES: dict[str, tuple[str, str]] = {
    "person": ("Born in {year} in {born_in}, {n} grew up there.",
               "{n} ({year}) is a native of {born_in}."),
    "city": ("{n} is located in {located_in}.",
             "The city of {n} belongs to {located_in}."),
    "country": ("{n} has roughly {population} thousand inhabitants.",
                "Roughly {population} thousand people live in the country {n}."),
    "company": ("{founded_by} established {n} in {year}; its head office is in {headquartered_in}.",
                "Based in {headquartered_in}, {n} was created in {year} by {founded_by}."),
    "film": ("Directed by {directed_by}, the {year} film {n} was a production of {produced_by}, with the "
             "album {soundtrack} as its score.",
             "{directed_by} made the film {n} in {year} for {produced_by}; its soundtrack album is {soundtrack}."),
    "album": ("{recorded_by} recorded {n}, an album released in {year}.",
              "Released in {year}, the album {n} was performed by {recorded_by}."),
    "game": ("{developed_by} developed the video game {n}, which came out in {year}.",
             "Released in {year}, {n} is a video game programmed by {developed_by}."),
}
