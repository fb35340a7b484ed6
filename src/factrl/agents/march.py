"""MARCH's three roles (solver, proposer, blinded checker), played by one policy through the shared agent loops.

MARCH (multi-agent reinforced check for hallucination) answers a question from retrieved documents
and audits every number of the answer with an information asymmetry::

    solver   (question, documents)            -> free-text answer y
    proposer (y only)                         -> "- Question: ... [Answer: n]" pairs (q_i, a_i)
    checker  (documents, q_1..q_n only; k x)  -> "[Answer: n]" or "[Answer: Cannot answer]" per question

With ``anchor_question`` (a project extension, off in the paper's setting) the asked question itself is
claim 0, claimed answered by y's number (:func:`answer_number`) or "cannot answer" when y states none:
the paper's proposer is a strong model that keeps the question's context, and a 135M one does not, so
without the anchor an answer that states true facts about another entity passes every check, and an
answer that declines a question the documents do answer has no claim to fail
(docs/runs/march-2026-11-25). The checker still sees only the documents and questions.

The checker is blind by construction: :func:`checker_messages` takes the documents and the
questions and nothing else, and :func:`march_loop` builds its input from ``item.documents`` and the
audited questions only, so neither y nor any a_i can reach it. Each pair is then judged by
MARCH's vote over the k checker samples (``factrl.rewards.march``: +1 per sample whose answer equals
a_i, -1 otherwise; the pair fails when the sum is below 0), and the reward chosen by name (ZTR or ERR)
scores the episode.

An episode is one agent loop (:func:`march_loop`: each role one turn of
:func:`factrl.agents.rollout.agent_loop`, no tools), the same on every scale: the local trainer runs
all of a step's episodes on one scheduler (:func:`run_march`; a role's turns share the engine's
batches), verl one per row on its rollout server (``factrl.recipes.march_verl``). Parsers
never raise: malformed output is a recorded format failure (``format_errors`` of the episode), which
the reward scores as one claim that cannot be verified (see :meth:`MarchEpisode.claims` for the
anchored proposer). An answer that states no number has nothing to propose: the proposer is not asked.

Numbers are compared after :func:`normalize_number`: separators (``1,200``), units and currency
(``$45``, ``45 dollars``, ``450 people``, ``45%``), magnitude words (``12 thousand``, ``1.5 million``,
``12k``) and written numbers (``forty-five``, ``two thousand and five``) all reduce to one canonical
string (``"1200"``, ``"45"``, ``"12000"``, ``"2005"``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from factrl.agents.loop import AgentLoop, run_loops
from factrl.agents.rollout import RolloutParams, Trajectory, agent_loop, chat_prompt_ids
from factrl.agents.tools import format_hits
from factrl.llm.base import Message
from factrl.text import extract_numbers, normalize_number

CANNOT_ANSWER = "cannot answer"  # the checker's answer when the documents do not hold the number
ROLES = ("solver", "proposer", "checker")

# --------------------------------------------------------------------------------------------
# prompts (the paper's protocol in our own words)
# --------------------------------------------------------------------------------------------

SOLVER_SYSTEM = """\
Answer the question using only the documents below. Do not add anything the documents do not say. \
Answer in one short sentence that states the number asked for. If no document gives that number, \
answer: The documents do not give this number."""

PROPOSER_SYSTEM = """\
You turn an answer into checkable questions. For every number stated in the answer, write one \
question whose only correct answer is that number; give the question enough names and context to be \
unambiguous on its own. The answer to each question is a plain number: no units, no percent signs, \
no words. Write one line per number, exactly as:
- Question: <question> [Answer: <number>]
Write nothing else. If the answer states no number, write: None"""

CHECKER_SYSTEM = """\
Answer each question from the documents alone; never guess and never use outside knowledge. For \
each question write its number, the sentence of the documents that answers it, then the answer as a \
plain number in brackets. When the documents do not give the number, write [Answer: Cannot answer]. \
Use exactly this layout:
1. Evidence: <sentence from the documents>
[Answer: <number>]"""


@dataclass(frozen=True)
class Document:
    """One retrieved document as the roles read it (``format_hits`` numbers them: ``Doc 1 (title) text``)."""

    title: str
    text: str


def documents_block(documents: Sequence[Document]) -> str:
    return format_hits(list(documents))


def solver_messages(question: str, documents: Sequence[Document]) -> list[Message]:
    return [{"role": "system", "content": SOLVER_SYSTEM},
            {"role": "user", "content": f"Documents:\n{documents_block(documents)}\n\nQuestion: {question}"}]


def proposer_messages(response: str) -> list[Message]:
    """The proposer sees the solver's answer and nothing else (the paper's nu_propose(. | y))."""
    return [{"role": "system", "content": PROPOSER_SYSTEM}, {"role": "user", "content": f"Answer: {response}"}]


def checker_messages(documents: Sequence[Document], questions: Sequence[str]) -> list[Message]:
    """The blinded checker's input: the documents and the proposer's questions, nothing else."""
    listed = "\n".join(f"{i}. {q}" for i, q in enumerate(questions, 1))
    return [{"role": "system", "content": CHECKER_SYSTEM},
            {"role": "user", "content": f"Documents:\n{documents_block(documents)}\n\nQuestions:\n{listed}"}]


def proposer_text(pairs: Sequence[tuple[str, str]]) -> str:
    """What a proposer writes for ``pairs`` (the warm start's reference; the parser's inverse)."""
    return "\n".join(f"- Question: {q} [Answer: {a}]" for q, a in pairs) if pairs else "None"


def checker_text(evidence_answers: Sequence[tuple[str, str]]) -> str:
    """What a checker writes for ``(evidence, answer)`` per question (``answer`` a number or
    :data:`CANNOT_ANSWER`)."""
    return "\n".join(f"{i}. Evidence: {e}\n[Answer: {'Cannot answer' if a == CANNOT_ANSWER else a}]"
                     for i, (e, a) in enumerate(evidence_answers, 1))


# --------------------------------------------------------------------------------------------
# parsers (never raise)
# --------------------------------------------------------------------------------------------

_PAIR = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])?\s*Question\s*:\s*(?P<q>.+?)\s*\[\s*Answer\s*:\s*(?P<a>[^\]]*)\]\s*$",
                   re.IGNORECASE)
# no "[" inside an answer: with it, "[Answer: " repeated without a "]" made findall quadratic
# (20k repeats: 38 s); an answer holding a bracket is no number anyway
_ANSWER = re.compile(r"\[\s*Answer\s*:\s*([^\[\]\n]*)\]", re.IGNORECASE)
_NONE = re.compile(r"^\s*(?:none|no numbers?)\.?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ProposalParse:
    """The proposer's pairs ``(question, canonical number)``; ``error`` is the first format violation."""

    pairs: tuple[tuple[str, str], ...]
    format_valid: bool
    error: str | None


NO_PROPOSALS = ProposalParse((), True, None)  # what a proposer finds in an answer stating no number


@dataclass(frozen=True)
class CheckerParse:
    """One checker sample's answer per question: a canonical number, :data:`CANNOT_ANSWER`, or None
    (missing or not a number); ``error`` is the first format violation."""

    answers: tuple[str | None, ...]
    format_valid: bool
    error: str | None


def parse_proposals(text: str) -> ProposalParse:
    """Pairs of a proposer response. Valid: every non-blank line a ``Question: ... [Answer: n]`` whose
    answer is one number that the question does not state, or the whole response ``None`` (no number
    to check); anything else is invalid and keeps the well-formed pairs it has. A question that
    carries its own answer ("... born in 1892?" -> 1892) would hand the solver's number to the blinded
    checker: the first bench run's policy learned exactly that, so such a pair is a format error."""
    try:
        if not isinstance(text, str) or not text.strip():
            return ProposalParse((), False, "empty response")
        if _NONE.match(text):
            return ProposalParse((), True, None)
        pairs, error = [], None
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            m = _PAIR.match(line)
            number = normalize_number(m.group("a")) if m else None
            if m is None:
                error = error or f"line {i}: not a 'Question: ... [Answer: n]' pair"
            elif number is None:
                error = error or f"line {i}: answer {m.group('a').strip()!r} is not one number"
            elif number in extract_numbers(m.group("q")):
                error = error or f"line {i}: the question states its own answer {number}"
            else:
                pairs.append((m.group("q").strip(), number))
        return ProposalParse(tuple(pairs), error is None, error)
    except Exception as exc:  # a parser must never take a rollout down
        return ProposalParse((), False, f"parser error: {exc!r}")


def parse_checker(text: str, num_questions: int) -> CheckerParse:
    """One checker sample's answers to ``num_questions`` questions, in order of its ``[Answer: ...]``
    brackets. Valid: exactly one bracket per question, each a number or ``Cannot answer``."""
    try:
        found = _ANSWER.findall(text if isinstance(text, str) else "")
        answers: list[str | None] = []
        error = None
        for i, raw in enumerate(found[:num_questions], 1):
            if re.fullmatch(r"\s*cannot\s+answer\.?\s*", raw, re.IGNORECASE):
                answers.append(CANNOT_ANSWER)
                continue
            number = normalize_number(raw)
            answers.append(number)
            if number is None:
                error = error or f"answer {i}: {raw.strip()!r} is neither a number nor 'Cannot answer'"
        if len(found) != num_questions:
            error = error or f"{len(found)} answers for {num_questions} questions"
        answers += [None] * (num_questions - len(answers))
        return CheckerParse(tuple(answers), error is None, error)
    except Exception as exc:
        return CheckerParse((None,) * num_questions, False, f"parser error: {exc!r}")


# --------------------------------------------------------------------------------------------
# episodes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarchItem:
    """One numeric RAG question: its documents and, for evaluation only (no role ever sees them), the
    gold number and whether the documents give it (``answerable``: when not, the right answer states
    no number, and any number stated is a hallucination)."""

    id: str
    question: str
    documents: tuple[Document, ...]
    answer: str | None = None
    answerable: bool = True


@dataclass(frozen=True)
class MarchParams:
    """How the roles run: one :class:`RolloutParams` each (no tools: one turn) and the checker's samples."""

    solver: RolloutParams
    proposer: RolloutParams
    checker: RolloutParams
    checker_samples: int = 3
    anchor_question: bool = False  # the asked question is claim 0 (see the module docstring)

    def __post_init__(self) -> None:
        if self.checker_samples < 1:
            raise ValueError(f"checker_samples must be >= 1, got {self.checker_samples}")


def default_march_params(*, max_new_tokens: int = 64, max_context_tokens: int = 2048, temperature: float = 0.0,
                         checker_temperature: float | None = None, checker_samples: int = 3,
                         anchor_question: bool = False) -> MarchParams:
    one_turn = {"max_turns": 0, "max_context_tokens": max_context_tokens}
    return MarchParams(
        solver=RolloutParams(max_new_tokens=max_new_tokens, temperature=temperature, **one_turn),
        proposer=RolloutParams(max_new_tokens=2 * max_new_tokens, temperature=0.0, **one_turn),
        checker=RolloutParams(max_new_tokens=2 * max_new_tokens, **one_turn,
                              temperature=temperature if checker_temperature is None else checker_temperature),
        checker_samples=checker_samples, anchor_question=anchor_question)


def audit_pairs(item: MarchItem, response: str, proposals: ProposalParse,
                anchor_question: bool = False) -> tuple[tuple[str, str], ...]:
    """The ``(question, claimed answer)`` pairs the blind checker audits: the proposer's pairs; with
    ``anchor_question``, first the asked question claimed answered by the answer's number, or
    :data:`CANNOT_ANSWER` when it states none. A proposer pair claiming the anchor's number is dropped:
    the anchor already audits that number against the question itself, and the pair is most often the
    question reworded, which the warm checker answers once for both (a format failure)."""
    if not anchor_question:
        return proposals.pairs
    claimed = answer_number(response, item.question)
    anchor = (item.question, claimed or CANNOT_ANSWER)
    return (anchor, *(pair for pair in proposals.pairs if pair[1] != claimed))


@dataclass
class MarchEpisode:
    """One solver answer audited: the proposer's pairs, the claims the k checker samples answered
    (``audit``: the proposer's pairs, after the asked question when anchored) and what failed to parse.

    ``parts`` are the trajectories the policy trains on (solver, then checker sample 0), each in its
    own GRPO group per prompt (``factrl.rl.trainer``); the proposer only extracts claims and is not
    trained (as in the paper).
    """

    item: MarchItem
    solver: Trajectory
    proposer: Trajectory | None
    checkers: list[Trajectory]
    proposals: ProposalParse
    checks: list[CheckerParse]
    format_errors: dict[str, str] = field(default_factory=dict)  # role -> first violation
    audit: tuple[tuple[str, str], ...] | None = None  # None: not anchored, the proposer's pairs
    train_roles: tuple[str, ...] = ("solver", "checker")

    @property
    def response(self) -> str:
        return self.solver.response_text

    @property
    def audited(self) -> tuple[tuple[str, str], ...]:
        return self.proposals.pairs if self.audit is None else self.audit

    @property
    def format_valid(self) -> bool:
        return not self.format_errors

    def claims(self) -> tuple[list[str], list[list[str | None]]]:
        """``(a_i, [k checker answers])`` per claim, as the registered MARCH rewards take them. A
        malformed solver output, or a malformed proposer output when nothing else audits the answer
        (no anchor), is one claim that cannot be verified (``""`` / no votes), so every reward scores
        it as a failure without knowing why. Anchored, the answer's number is audited against the
        question whatever the proposer wrote, so its malformed lines are dropped (and still counted
        as a format failure): the proposer is not trained, and failing the solver for them would be
        noise in the solver's reward."""
        if "solver" in self.format_errors or ("proposer" in self.format_errors and self.audit is None):
            return [""], [[]]
        votes = [[c.answers[i] for c in self.checks] for i in range(len(self.audited))]
        return [a for _, a in self.audited], votes

    @property
    def parts(self) -> list[tuple[str, Trajectory]]:
        roles = {"solver": [self.solver], "checker": self.checkers[:1]}
        return [(role, t) for role in self.train_roles for t in roles.get(role, [])]

    # the trainer's TrajectoryLike view: the solver's trajectory (also what metrics measure)
    @property
    def prompt_ids(self) -> list[int]:
        return self.solver.prompt_ids

    @property
    def response_ids(self) -> list[int]:
        return self.solver.response_ids

    @property
    def loss_mask(self) -> list[int]:
        return self.solver.loss_mask


def _role(llm, conversation: list[Message], params: RolloutParams, stream: int, tokenizer=None
          ) -> AgentLoop[Trajectory]:
    """One role's turn as an agent loop: token-level when ``llm`` (or ``tokenizer``) can encode the
    chat, as a chat otherwise."""
    ids = chat_prompt_ids(llm, conversation, tokenizer)
    return (yield from agent_loop(llm, ids, conversation, None, params, stream=stream, tokenizer=tokenizer))


def march_loop(llm, item: MarchItem, params: MarchParams, *, stream: int = 0,
               train_roles: Sequence[str] = ("solver", "checker"), tokenizer=None) -> AgentLoop[MarchEpisode]:
    """One MARCH episode as an agent loop: the solver answers, the proposer extracts the answer's
    claims (not asked when the answer states no number), then ``params.checker_samples`` checker
    samples answer the audited questions. The local trainer runs many on one scheduler
    (:func:`run_march`); verl runs one per row on its rollout server (``factrl.recipes.march_verl``).

    The checker's input is built from ``item.documents`` and the audited questions only: the blindness."""
    solver_prompt = solver_messages(item.question, item.documents)
    solver = yield from _role(llm, solver_prompt, params.solver, stream, tokenizer)
    proposer = None
    if extract_numbers(solver.response_text):  # an answer stating no number has no claim to extract
        proposer = yield from _role(llm, proposer_messages(solver.response_text), params.proposer, stream,
                                    tokenizer)
    proposals = parse_proposals(proposer.response_text) if proposer is not None else NO_PROPOSALS
    audit = audit_pairs(item, solver.response_text, proposals, params.anchor_question)
    checkers: list[Trajectory] = []
    if audit:
        conversation = checker_messages(item.documents, [q for q, _ in audit])
        k = params.checker_samples
        for j in range(k):  # its own stream per sample: k different samples of one prompt
            checkers.append((yield from _role(llm, conversation, params.checker, stream * k + j, tokenizer)))
    checks = [parse_checker(t.response_text, len(audit)) for t in checkers]
    errors = {}
    if not solver.response_text.strip():
        errors["solver"] = "empty response"
    if not proposals.format_valid:
        errors["proposer"] = proposals.error
    bad = next((c.error for c in checks if not c.format_valid), None)
    if bad is not None:
        errors["checker"] = bad
    return MarchEpisode(item, solver, proposer, checkers, proposals, checks, errors,
                        audit=audit if params.anchor_question else None, train_roles=tuple(train_roles))


def run_march(llm, items: Sequence[MarchItem], params: MarchParams, *, n: int = 1,
              train_roles: Sequence[str] = ("solver", "checker")) -> list[MarchEpisode]:
    r"""``n`` MARCH episodes per item (item-major): :func:`march_loop`\ s on one scheduler, so each
    role's turns of all episodes share the engine's batches."""
    return run_loops([march_loop(llm, item, params, stream=i * n + j, train_roles=train_roles)
                      for i, item in enumerate(items) for j in range(n)])


# --------------------------------------------------------------------------------------------
# what an answer is worth, against the documents and the gold number
# --------------------------------------------------------------------------------------------


def unsupported_numbers(response: str, documents: Sequence[Document], question: str = "") -> list[str]:
    """Numbers ``response`` states that neither the documents nor the question contain (hallucinated)."""
    known = set(extract_numbers(question))
    for d in documents:
        known.update(extract_numbers(f"{d.title} {d.text}"))
    return [x for x in extract_numbers(response) if x not in known]


def judge_answer(response: str, item: MarchItem) -> tuple[bool, bool]:
    """``(correct, hallucinated)`` of a solver answer to ``item``. Answerable: correct when its number
    (:func:`answer_number`) is the gold one; hallucinated when it states a number the documents and the
    question do not contain. Unanswerable (the documents lack the number): correct when it states no
    number; hallucinated when it states one, whatever document the digits come from."""
    number = answer_number(response, item.question)
    if not item.answerable:
        return number is None, number is not None
    return number == item.answer, bool(unsupported_numbers(response, item.documents, item.question))


def score_episode(reward: Callable, episode: MarchEpisode):
    """The named reward of one episode (``reward``: a registered claim-consistency reward,
    ``(solver, checker) -> RewardResult``), with what the logs need beside it in its parts: proposals,
    training accuracy (``correct``, against the gold number no role sees) and hallucination; its
    format validity is the episode's. The local trainer (``factrl.recipes.march``) and verl's agent loop
    (``factrl.recipes.march_verl``) both score with it."""
    solver, checker = episode.claims()
    result = reward(solver, checker)
    correct, hallucinated = judge_answer(episode.response, episode.item)
    parts = {**result.parts, "proposals": float(len(episode.proposals.pairs)), "correct": float(correct),
             "hallucinated": float(hallucinated), "answerable": float(episode.item.answerable)}
    return dataclasses.replace(result, parts=parts, format_valid=episode.format_valid)


def answer_number(response: str, question: str = "") -> str | None:
    """The number an answer gives: its first number that the question does not already state."""
    asked = set(extract_numbers(question))
    return next((x for x in extract_numbers(response) if x not in asked), None)
