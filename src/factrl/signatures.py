"""The HARIS paper's typed LLM calls (its Table 5), on any :class:`~factrl.llm.base.LLM`.

Three calls, each a prompt that asks for simple ``Label: value`` lines plus a parser that
validates them:

* :func:`pseudo_answers` -- pseudo ground-truth QA (search-agent training data, Appendix A.4):
  claim, veracity, evidence, question -> rationale, answer (``None`` = the evidence does not
  answer the question; the paper drops those pairs).
* :class:`LLMJudge` -- the search-agent usefulness judge (Appendix A.5.1): question, ground-truth
  answer, gathered information -> yes / no.
* :func:`verify_claims` -- claim verification for the RAG / decompose baselines: claim, context
  -> Support / Refute.

A malformed output is never coerced into a value: the item is asked again (a sampled retry with a
new seed, so neither a greedy backend nor the on-disk cache hands back the same bad reply), and an
item still malformed after the last retry is returned with ``ok=False`` and the parse error. Each
attempt sends all still-pending items to ``llm.chat`` as one batch.

:class:`RuleJudge` is the model-free alternative to :class:`LLMJudge` (SQuAD-style token F1 and
answer containment), for settings where the local model is too weak to judge; :func:`make_judge`
picks either by name.

The prompts are short and carry one worked example as a prior chat turn, so that even the
embedded SmolLM2-135M mostly answers in the expected format.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from factrl.llm.base import Message, SamplingParams
from factrl.text import normalize_answer, token_f1
from factrl.verdicts import VERDICT_WORDS

T = TypeVar("T")

# Retries sample instead of decoding greedily: a greedy backend would repeat the same malformed
# reply whatever the seed. Low enough to stay close to the model's preferred answer.
RETRY_TEMPERATURE = 0.7

PSEUDO_QA_PARAMS = SamplingParams(max_tokens=160, temperature=0.0, seed=0)
VERIFY_PARAMS = SamplingParams(max_tokens=16, temperature=0.0, seed=0)
JUDGE_PARAMS = SamplingParams(max_tokens=16, temperature=0.0, seed=0)

MAX_ANSWER_WORDS = 40  # a pseudo answer is a short phrase; a longer one means the model rambled


class ParseError(ValueError):
    """A model output that does not match its signature's format."""


# ---- results ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PseudoAnswer:
    """A teacher's answer to one question. ``answer is None`` with ``ok`` = judged unanswerable."""

    rationale: str | None
    answer: str | None
    ok: bool
    error: str | None
    raw: str


@dataclass(frozen=True)
class Verdict:
    """A claim verification: ``label`` is ``"SUPPORTS"`` or ``"REFUTES"`` when ``ok``."""

    label: str | None
    ok: bool
    error: str | None
    raw: str


@dataclass(frozen=True)
class Judgment:
    """One usefulness judgement: ``useful`` is ``None`` when the judge's output stayed malformed."""

    useful: bool | None
    ok: bool
    error: str | None
    raw: str


# ---- shared retry loop ----------------------------------------------------------------------
def attempt_params(params: SamplingParams, attempt: int) -> SamplingParams:
    """Sampling params of attempt ``attempt`` (0 = the caller's params as given).

    A retry samples at least at :data:`RETRY_TEMPERATURE` with seed ``seed + attempt``: a new
    cache key and, on any backend, a chance of a different reply.
    """
    if attempt == 0:
        return params
    return dataclasses.replace(
        params,
        temperature=max(params.temperature, RETRY_TEMPERATURE),
        seed=(params.seed or 0) + attempt,
    )


def run_typed(
    llm, prompts: Sequence[list[Message]], parse: Callable[[str], T], *, retries: int, params: SamplingParams
) -> list[tuple[T | None, str | None, str]]:
    """Ask ``llm`` every prompt, parse each reply, retry the malformed ones up to ``retries`` times.

    Returns one ``(value, error, raw)`` per prompt, in order: ``value`` is the parsed output
    (``error`` None) or ``None`` with the last parse error after ``retries + 1`` attempts; ``raw``
    is the last reply seen.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if params.n != 1:
        raise ValueError(f"typed calls take one completion per item; got SamplingParams.n={params.n}")
    values: list[T | None] = [None] * len(prompts)
    errors: list[str | None] = [None] * len(prompts)
    raws = [""] * len(prompts)
    pending = list(range(len(prompts)))
    for attempt in range(retries + 1):
        if not pending:
            break
        replies = llm.chat([prompts[i] for i in pending], attempt_params(params, attempt))
        still = []
        for i, completions in zip(pending, replies, strict=True):
            raws[i] = completions[0].text
            try:
                values[i], errors[i] = parse(raws[i]), None
            except ParseError as exc:
                errors[i] = f"malformed output after {attempt + 1} attempt(s): {exc}"
                still.append(i)
        pending = still
    return [(values[i], errors[i], raws[i]) for i in range(len(prompts))]


# ---- parsing helpers --------------------------------------------------------------------------
_FIELD = re.compile(r"^[\s*#>_-]*([A-Za-z][A-Za-z_ ]*?)[\s*_]*:[\s*_]*(.*)$")


def parse_fields(text: str, multiline: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``Label: value`` lines of ``text`` as ``(label lower-cased, value)`` in order.

    Markdown decoration that small models like to add (``**Answer:**``, ``- Verdict:``) is ignored.
    A line without a label continues the previous field's value when that field's label is in
    ``multiline`` (a rationale may wrap; an answer is the rest of its own line only).
    """
    fields: list[tuple[str, str]] = []
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m and len(m.group(1)) <= 30:
            fields.append((m.group(1).strip("_ ").lower(), m.group(2).strip()))
        elif fields and line.strip() and fields[-1][0] in multiline:
            label, value = fields[-1]
            fields[-1] = (label, f"{value} {line.strip()}".strip())
    return fields


def first_field(text: str, names: Sequence[str]) -> str | None:
    """The value of the first ``Label: value`` line whose label is one of ``names``."""
    for label, value in parse_fields(text):
        if label in names:
            return value
    return None


def _clean_value(value: str) -> str:
    """Strip quotes, markdown emphasis and trailing punctuation around a one-word value."""
    return value.strip().strip("*_`'\"").strip().rstrip(".!").strip().strip("*_`'\"").strip()


def _choice(text: str, labels: Sequence[str], choices: dict[str, T], what: str) -> T:
    """Parse a closed-vocabulary output: a ``Label: value`` line, or a reply that is only the value."""
    value = first_field(text, labels)
    if value is None:
        bare = _clean_value(text).lower()
        if bare in choices:
            return choices[bare]
        raise ParseError(f"no '{labels[0].capitalize()}:' line in the output")
    key = _clean_value(value).lower()
    if key in choices:
        return choices[key]
    # "Support (the context says ...)": the first word decides, unless another choice follows
    words = re.findall(r"[a-z]+", key)
    named = {choices[w] for w in words if w in choices}
    if words and words[0] in choices and len(named) == 1:
        return choices[words[0]]
    raise ParseError(f"{what} {value!r} is not one of {sorted(set(choices))}")


# ---- pseudo ground-truth QA -------------------------------------------------------------------
_VERACITY = {  # our labels, HoVer's, and the paper's true / false
    "supports": "true", "supported": "true", "true": "true",
    "refutes": "false", "refuted": "false", "not_supported": "false", "false": "false",
}

_QA_INSTRUCTIONS = (
    "Use the evidence to answer the question a fact-checker asked about the claim. "
    "Give a short reason, then a short answer taken from the evidence. "
    "If the evidence does not answer the question, the answer is None.\n"
    "Reply in exactly two lines:\nRationale: <reason>\nAnswer: <short answer or None>"
)
_QA_EXAMPLE_USER = (
    "Claim: The Eiffel Tower, finished in 1889, is in Rome.\nVeracity: false\n"
    "Evidence:\n- The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889.\n"
    "Question: In which city is the Eiffel Tower?"
)
_QA_EXAMPLE_REPLY = "Rationale: The evidence says the tower is in Paris.\nAnswer: Paris"


def _one_shot(instructions: str, example_user: str, example_reply: str, user: str) -> list[Message]:
    """The chat layout every typed call uses: instructions, one worked example, then the item."""
    return [
        {"role": "system", "content": instructions},
        {"role": "user", "content": example_user},
        {"role": "assistant", "content": example_reply},
        {"role": "user", "content": user},
    ]


def _veracity(value, i: int) -> str:
    key = str(value).strip().lower()
    if key not in _VERACITY:
        raise ValueError(f"item {i}: field 'label': unknown veracity {value!r}; expected SUPPORTS or REFUTES")
    return _VERACITY[key]


def _field(item: dict, name: str, i: int) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"item {i}: field {name!r} must be a non-empty string, got {value!r}")
    return value.strip()


def _evidence_lines(evidence, i: int) -> str:
    if evidence is None:
        evidence = []
    elif isinstance(evidence, str):
        evidence = [evidence]
    lines = [f"- {e.strip()}" for e in evidence if isinstance(e, str) and e.strip()]
    if not lines:
        raise ValueError(f"item {i}: field 'evidence' is empty; a pseudo answer needs evidence")
    return "\n".join(lines)


def pseudo_qa_messages(item: dict, i: int = 0) -> list[Message]:
    """Chat prompt of one pseudo ground-truth QA item (keys: claim, label, evidence, question)."""
    user = (
        f"Claim: {_field(item, 'claim', i)}\nVeracity: {_veracity(item.get('label'), i)}\n"
        f"Evidence:\n{_evidence_lines(item.get('evidence'), i)}\nQuestion: {_field(item, 'question', i)}"
    )
    return _one_shot(_QA_INSTRUCTIONS, _QA_EXAMPLE_USER, _QA_EXAMPLE_REPLY, user)


def pseudo_qa_prompt_hash() -> str:
    """sha256 (16 hex digits) of the pseudo-answer prompt, rendered for a fixed probe item: it
    changes whenever the instructions, the example or the layout change (recorded as provenance)."""
    probe = {"claim": "C", "label": "SUPPORTS", "evidence": ["E"], "question": "Q"}
    blob = json.dumps(pseudo_qa_messages(probe), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


_NONE_ANSWERS = {"none", "no answer", "n/a", "unanswerable"}


def parse_pseudo_answer(text: str) -> tuple[str | None, str | None]:
    """``(rationale, answer)`` from a reply; answer ``None`` when the model wrote ``None``."""
    fields = parse_fields(text, multiline=("rationale", "reason", "reasoning"))
    answers = [v for label, v in fields if label in ("answer", "final answer")]
    if not answers:
        raise ParseError("no 'Answer:' line in the output")
    # "Answer: The answer is Paris." says "Paris"
    answer = re.sub(r"^(the\s+)?answer\s+is\s*:?\s*", "", answers[0].strip().strip("*_`").strip(), flags=re.I)
    if not answer:
        raise ParseError("the 'Answer:' line is empty")
    if _clean_value(answer).lower() in _NONE_ANSWERS:
        answer = None
    elif len(answer.split()) > MAX_ANSWER_WORDS:
        raise ParseError(f"answer has {len(answer.split())} words; expected a short answer")
    rationale = next((v for label, v in fields if label in ("rationale", "reason", "reasoning")), None)
    return (rationale or None), answer


def pseudo_answers(
    llm, items: Sequence[dict], *, retries: int = 2, params: SamplingParams | None = None
) -> list[PseudoAnswer]:
    """Teacher answers to fact-checking questions from the claim's gold evidence (HARIS A.4)."""
    prompts = [pseudo_qa_messages(item, i) for i, item in enumerate(items)]
    out = run_typed(llm, prompts, parse_pseudo_answer, retries=retries, params=params or PSEUDO_QA_PARAMS)
    return [
        PseudoAnswer(rationale=v[0], answer=v[1], ok=True, error=None, raw=raw)
        if err is None
        else PseudoAnswer(rationale=None, answer=None, ok=False, error=err, raw=raw)
        for v, err, raw in out
    ]


# ---- claim verification -------------------------------------------------------------------------
_VERIFY_INSTRUCTIONS = (
    "Decide whether the context supports or refutes the claim. "
    "Reply with one line: 'Verdict: Support' or 'Verdict: Refute'."
)
_VERIFY_EXAMPLE_USER = (
    "Claim: The Nile flows into the Atlantic Ocean.\n"
    "Context: The Nile flows north through Egypt and empties into the Mediterranean Sea."
)
_VERIFY_EXAMPLE_REPLY = "Verdict: Refute"


def verify_messages(item: dict, i: int = 0) -> list[Message]:
    """Chat prompt of one claim verification item (keys: claim, context)."""
    context = item.get("context")
    if isinstance(context, (list, tuple)):
        context = "\n".join(str(c) for c in context)
    user = f"Claim: {_field(item, 'claim', i)}\nContext: {_field({'context': context}, 'context', i)}"
    return _one_shot(_VERIFY_INSTRUCTIONS, _VERIFY_EXAMPLE_USER, _VERIFY_EXAMPLE_REPLY, user)


def parse_verdict(text: str) -> str:
    """``"SUPPORTS"`` or ``"REFUTES"`` from a ``Verdict: Support|Refute`` reply."""
    return _choice(text, ("verdict", "veracity", "label"), VERDICT_WORDS, "verdict")


def verify_claims(
    llm, items: Sequence[dict], *, retries: int = 2, params: SamplingParams | None = None
) -> list[Verdict]:
    """Support / Refute for each claim given its retrieved context (the RAG baseline's classifier)."""
    prompts = [verify_messages(item, i) for i, item in enumerate(items)]
    out = run_typed(llm, prompts, parse_verdict, retries=retries, params=params or VERIFY_PARAMS)
    return [Verdict(label=v, ok=err is None, error=err, raw=raw) for v, err, raw in out]


# ---- usefulness judges ----------------------------------------------------------------------------
@runtime_checkable
class Judge(Protocol):
    """Decides whether a search agent's gathered information is enough to derive the answer.

    Items have keys ``question``, ``answer`` (the pseudo ground truth) and ``gathered``.
    """

    name: str

    def judge(self, items: Sequence[dict]) -> list[bool]:
        ...


def _judge_inputs(item: dict, i: int) -> tuple[str, str, str]:
    """(question, answer, gathered) of a judge item; gathered may be empty (never useful)."""
    gathered = item.get("gathered")
    if gathered is not None and not isinstance(gathered, str):
        raise ValueError(f"item {i}: field 'gathered' must be a string or None, got {type(gathered).__name__}")
    return _field(item, "question", i), _field(item, "answer", i), (gathered or "").strip()


_JUDGE_INSTRUCTIONS = (
    "You check a search assistant's notes. Given a question and its correct answer, decide whether "
    "the gathered information is enough to work out that answer. "
    "Reply with one line: 'Useful: yes' or 'Useful: no'."
)
_JUDGE_EXAMPLE_USER = (
    "Question: Who wrote the novel Dracula?\nCorrect answer: Bram Stoker\n"
    "Gathered information: Dracula is an 1897 Gothic horror novel by the Irish author Bram Stoker."
)
_JUDGE_EXAMPLE_REPLY = "Useful: yes"
_YES_NO = {"yes": True, "no": False}


def judge_messages(item: dict, i: int = 0) -> list[Message]:
    """Chat prompt of one usefulness judgement (keys: question, answer, gathered)."""
    question, answer, gathered = _judge_inputs(item, i)
    user = f"Question: {question}\nCorrect answer: {answer}\nGathered information: {gathered}"
    return _one_shot(_JUDGE_INSTRUCTIONS, _JUDGE_EXAMPLE_USER, _JUDGE_EXAMPLE_REPLY, user)


def parse_useful(text: str) -> bool:
    """``True`` / ``False`` from a ``Useful: yes|no`` reply."""
    return _choice(text, ("useful", "is useful", "is_useful"), _YES_NO, "usefulness")


class LLMJudge:
    """The HARIS LLM-as-a-judge: asks ``llm`` whether the gathered information is useful.

    Empty gathered information is not useful and costs no call. An output still malformed after
    ``retries`` retries counts as not useful; such failures are counted in ``failures`` and the
    last batch's :class:`Judgment` records (with errors) are kept in ``last``.
    """

    name = "llm"

    def __init__(self, llm, *, retries: int = 2, params: SamplingParams | None = None):
        self.llm = llm
        self.retries = retries
        self.params = params or JUDGE_PARAMS
        self.failures = 0
        self.calls = 0
        self.last: list[Judgment] = []

    def assess(self, items: Sequence[dict]) -> list[Judgment]:
        """One :class:`Judgment` per item, in order."""
        inputs = [_judge_inputs(item, i) for i, item in enumerate(items)]
        asked = [i for i, (_, _, gathered) in enumerate(inputs) if gathered]
        results = [Judgment(useful=False, ok=True, error=None, raw="") for _ in items]
        prompts = [judge_messages(items[i], i) for i in asked]
        out = run_typed(self.llm, prompts, parse_useful, retries=self.retries, params=self.params)
        for i, (value, err, raw) in zip(asked, out):
            results[i] = Judgment(useful=value, ok=err is None, error=err, raw=raw)
        self.calls += len(asked)
        self.failures += sum(not r.ok for r in results)
        self.last = results
        return results

    def judge(self, items: Sequence[dict]) -> list[bool]:
        return [bool(r.useful) for r in self.assess(items)]


def containment(gathered: str, answer: str) -> float:
    """1.0 when the normalised answer occurs as a whole-word span of the normalised gathered text,
    else the fraction of the answer's tokens found in it (partial mentions earn partial credit)."""
    ans, text = normalize_answer(answer), normalize_answer(gathered)
    if not ans:
        return 0.0
    if re.search(rf"(?<!\S){re.escape(ans)}(?!\S)", text):
        return 1.0
    ref = ans.split()
    common = sum((collections.Counter(text.split()) & collections.Counter(ref)).values())
    return common / len(ref)


class RuleJudge:
    """Model-free usefulness judge: useful when ``max(token F1, containment) >= threshold``.

    Containment dominates for long gathered reports (F1 is diluted by their length); F1 covers
    short reports that paraphrase the answer with extra words.
    """

    name = "rule"

    def __init__(self, threshold: float = 0.8):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    def score(self, gathered: str, answer: str) -> float:
        return max(token_f1(gathered, answer), containment(gathered, answer))

    def judge(self, items: Sequence[dict]) -> list[bool]:
        out = []
        for i, item in enumerate(items):
            _, answer, gathered = _judge_inputs(item, i)
            out.append(bool(gathered) and self.score(gathered, answer) >= self.threshold)
        return out


JUDGES = ("llm", "rule")


def make_judge(name: str, llm=None, **kw) -> Judge:
    """A judge by name: ``"llm"`` (needs ``llm``; kw: retries, params) or ``"rule"`` (kw: threshold)."""
    if name == "llm":
        if llm is None:
            raise ValueError("make_judge('llm') needs an llm backend")
        return LLMJudge(llm, **kw)
    if name == "rule":
        return RuleJudge(**kw)
    raise ValueError(f"unknown judge {name!r}; expected one of {JUDGES}")
