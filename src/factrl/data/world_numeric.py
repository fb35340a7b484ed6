"""MARCH's numeric RAG questions about the demo world (``factrl.data.world``): a number a passage
states (a year, a population, a price), asked as a question with the entity's passage among
same-type distractors, optionally with that passage swapped out (unanswerable).

Apart from ``world.py`` so that MARCH's questions are MARCH's dependency alone: editing them reruns
``train_march``, not ``prepare`` and the stages after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from factrl.data.params import WorldParams
from factrl.data.world_build import build_world, entity_passages


@dataclass(frozen=True)
class NumericFact:
    """A number a passage of type ``type`` states (``numbers[key]``), as a question and an answer.

    extra: the number is in the optional extra sentence (stated only where ``flags`` is set).
    question: a self-contained question about ``{x}`` whose only answer is the number.
    statement: a one-sentence answer stating the number ``{n}`` about ``{x}``.
    """

    type: str
    key: str
    extra: bool
    question: str
    statement: str


# The answer to a numeric question whose documents do not give the number (MARCH's solver references).
NOT_IN_DOCUMENTS = "The documents do not give this number."

# Each is read off the passage templates of ``factrl.data.world_build`` (``_passage_texts``); a test checks that every
# question's number is in its entity's passage. Country populations are left out: the passage
# says "roughly N thousand inhabitants" with N already in people, an ambiguous number to ask for.
NUMERIC_FACTS = (
    NumericFact("person", "year", False, "In which year was {x} born?", "{x} was born in {n}."),
    NumericFact("city", "population", True, "How many people live in {x}?", "About {n} people live in {x}."),
    NumericFact("country", "year", True, "In which year did {x} adopt its present constitution?",
                "{x} adopted its present constitution in {n}."),
    NumericFact("company", "year", False, "In which year was {x} founded?", "{x} was founded in {n}."),
    NumericFact("company", "tracks", True, "How many product lines does the catalogue of {x} list?",
                "The catalogue of {x} lists {n} product lines."),
    NumericFact("film", "year", False, "In which year was the film {x} released?", "{x} is a film from {n}."),
    NumericFact("film", "minutes", True, "For how many minutes does the film {x} run?", "{x} runs for {n} minutes."),
    NumericFact("album", "year", False, "In which year was the album {x} released?", "{x} was released in {n}."),
    NumericFact("album", "tracks", True, "How many tracks does the album {x} have?", "{x} has {n} tracks."),
    NumericFact("game", "year", False, "In which year was the video game {x} released?", "{x} was released in {n}."),
    NumericFact("game", "price", True, "How many dollars did {x} cost at launch?", "{x} cost {n} dollars at launch."),
)


def numeric_questions(params: WorldParams, num_questions: int, num_documents: int = 3, seed: int = 0,
                      unanswerable: float = 0.0) -> list[dict]:
    """``num_questions`` numeric RAG questions about the world of ``params`` (MARCH's training data).

    Each row: ``id``, ``question``, ``answer`` (the number, a string), ``statement`` (a reference
    answer sentence), ``entity`` (its index), ``answerable`` and ``documents`` (``[{title, text}]``):
    the entity's own passage and ``num_documents - 1`` passages of other entities of the same type
    (which state the same kind of number, so a reader has to pick the right one), in a seeded order.
    Questions are drawn without repeating a (fact, entity) pair, from their own random stream, so the
    world's passages and claims are untouched.

    ``unanswerable``: the share of rows (rounded) whose own passage is swapped for one more same-type
    passage, as when retrieval misses: no document gives their number (``answerable`` false,
    ``statement`` :data:`NOT_IN_DOCUMENTS`; ``answer`` stays the world's number, for the record).
    The swap draws from a stream of its own, so the answerable rows are the same for every share.
    """
    if num_documents < 1:
        raise ValueError(f"num_documents must be >= 1, got {num_documents}")
    if not 0.0 <= unanswerable <= 1.0:
        raise ValueError(f"unanswerable must be a share in [0, 1], got {unanswerable}")
    world = build_world(params)
    rng = np.random.default_rng([params.seed, 2, seed])
    candidates = [(f, int(i)) for f in NUMERIC_FACTS for i in world.by_type[f.type]
                  if not f.extra or world.flags[i]]
    if num_questions > len(candidates):
        raise ValueError(f"the world has {len(candidates)} numeric facts, fewer than num_questions={num_questions}")
    picked = [candidates[k] for k in rng.choice(len(candidates), size=num_questions, replace=False)]
    docs_of = []
    for fact, i in picked:
        others = [int(j) for j in rng.permutation(world.by_type[fact.type])[:num_documents] if int(j) != i]
        docs_of.append([int(d) for d in rng.permutation([i] + others[:num_documents - 1])])
    swap_rng = np.random.default_rng([params.seed, 3, seed])
    missing = set(swap_rng.permutation(num_questions)[: round(unanswerable * num_questions)].tolist())
    for k in sorted(missing):
        (fact, i), docs = picked[k], docs_of[k]
        spare = [int(j) for j in swap_rng.permutation(world.by_type[fact.type]) if int(j) not in docs]
        if not spare:  # a type with no entity left to stand in: the row stays answerable
            missing.discard(k)
            continue
        docs_of[k] = [spare[0] if d == i else d for d in docs]
    texts = entity_passages(world, [d for ds in docs_of for d in ds])
    rows = []
    for k, ((fact, i), docs) in enumerate(zip(picked, docs_of)):
        name, value = world.name(i), str(int(world.numbers[fact.key][i]))
        rows.append({"id": f"w-n{k + 1:05d}", "question": fact.question.format(x=name), "answer": value,
                     "statement": (NOT_IN_DOCUMENTS if k in missing
                                   else fact.statement.format(x=name, n=value)),
                     "entity": i, "answerable": k not in missing,
                     "documents": [{"title": world.name(d), "text": texts[d]} for d in docs]})
    return rows
