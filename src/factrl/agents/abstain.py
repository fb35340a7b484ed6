"""NOT ENOUGH INFO: when a verifier's run holds too little evidence to answer, it says so.

A verdict is only as good as the passages behind it. A model that searched, found passages about
other entities and still wrote ``\\boxed{Support}`` (a 135M model does, at 0.94 raw confidence) has
guessed; this module turns such a run into the third outcome, ``NOT ENOUGH INFO``, from what the run
actually has, never from the verdict text alone:

* **grounding** (:func:`grounding`): do the cited sentences (each with its passage title, which
  names the passage's entity) mention the claim's own entities? The claim's *subject* is its first
  named entity (a run of capitalised words, "Orlen Studios", "Cural: Quest"); an entity counts as
  mentioned only as the whole run of its words, so a passage about "Hatur Studios" that shares
  "Studios" and "Varna" with "Orlen Studios is based in Varna." does not count. A claim with no named
  entity falls back on content words: the share of the claim's content words the best citation holds;
* **what was read** (``read_entity_share``): the share of the claim's named entities that the passages
  the run's searches retrieved and read mention (title or text). Retrieval's own evidence, independent
  of how well the 135M search agent's report quoted a sentence: a claim whose entities no passage of the
  corpus names (an out-of-corpus claim) reads none of them, whatever the reports say;
* **answered questions**: of the questions the reasoning agent asked, how many were answered from
  retrieved text: the question has a citation (a sentence of a passage its search read) and, when the
  question names an entity, the citation mentions it;
* **confidence**: the calibrated confidence of the verdict (``factrl.eval.calibration``).

:class:`AbstainParams` (params section ``abstain``) sets each rule's threshold; :func:`decide` applies
them and says which rules failed. ``factrl verify``, ``factrl serve`` (``factrl.service.engine``) and
``evaluate`` (``factrl.eval.abstention``) all decide through :func:`decide`; :func:`choose_rules`
picks the combination on a dev mix of in-corpus and out-of-corpus claims (bench/abstain.py), scoring
an abstention above a wrong verdict (:func:`mix_utility`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from factrl.config import PARAMS_FILE, ConfigError, load_section, params_section
from factrl.verdicts import NOT_ENOUGH_INFO

# A word as the citation matcher sees it (letters and digits; "Cural: Quest" -> cural, quest).
_WORD = re.compile(r"[A-Za-z0-9]+")
# A capitalised word or a number glued to one ("Studio 9"): the parts a named entity is made of.
_CAPITALISED = re.compile(r"[A-Z][A-Za-z0-9'\-]*")
# Words that start a sentence or a question with a capital without naming anything.
_NOT_NAMES = frozenset("""a an the this that these those it its in on at of for by with from to and or but is nothing everything nobody someone people
are was were be been who whom whose what which where when why how did does do has have had
there here not no yes some all any each every one many most few q for as after before during since if
while although because their our we they he she i you his her""".split())
# Between two capitalised words these still belong to one name ("Bank of England", "Cural: Quest").
_JOINERS = frozenset({"of", "de", "the", "and", "&", ":", "-"})
_STOPWORDS = frozenset("""a an the of in on at to for by with from and or but is are was were be been being
it its this that these those as into about which who whom whose what when where how than then
there their he she his her they them not no yes does did do has have had also""".split())


@params_section("abstain")
@dataclass(frozen=True)
class AbstainParams:
    """When a verdict becomes NOT ENOUGH INFO (``factrl.agents.abstain``): each rule below that a run
    fails turns its verdict into ``NOT ENOUGH INFO`` ("not enough evidence in this corpus"). Read by
    ``factrl verify``, ``factrl serve`` and ``evaluate``; bench/abstain.py chooses the combination on a
    dev mix of in-corpus and out-of-corpus claims.

    enabled: decide at all; off, every verdict stands (the verifier never abstains).
    require_subject: a claim that names an entity needs a citation (a quoted sentence or its passage's
        title) mentioning the claim's subject, its first named entity, as a whole: a passage about
        another entity that shares words with the claim does not count.
    min_entity_share: the share of the claim's named entities (0-1) the citations must mention.
    min_content_share: for a claim naming no entity: the share of its content words (0-1) the best
        citation must hold.
    min_answered_share: the share of the reasoning agent's questions (0-1) answered from retrieved text
        (a citation that mentions the question's own entity); a run that asked nothing has share 0.
    min_read_share: the share of the claim's named entities (0-1) that the passages the run's searches
        read mention (title or text), cited or not.
    min_confidence: the (calibrated, where a map exists) confidence a verdict needs (0-1).

    The defaults are the combination bench/abstain.py chose on the demo's dev mix (the one params.yaml
    holds; bench/results/abstain.json): the passages read must name half the claim's entities and a
    quarter of the questions be answered; the subject and confidence rules are off.
    """

    enabled: bool = True
    require_subject: bool = False
    min_entity_share: float = 0.0
    min_content_share: float = 0.5
    min_answered_share: float = 0.25
    min_read_share: float = 0.5
    min_confidence: float = 0.0

    def __post_init__(self) -> None:
        for name in ("min_entity_share", "min_content_share", "min_answered_share", "min_read_share",
                     "min_confidence"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"abstain.{name} must be in [0, 1], got {value}")

    def rules(self) -> dict:
        """The rules in force, by param name (what a result and bench/abstain.py report)."""
        return asdict(self)


def load_abstain_params(params_file=PARAMS_FILE) -> AbstainParams:
    """The ``abstain`` section of ``params_file`` (defaults where it is absent)."""
    return load_section(AbstainParams, params_file)


# --------------------------------------------------------------------------------------------
# named entities and mentions
# --------------------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` in order."""
    return [w.lower() for w in _WORD.findall(text)]


def named_entities(text: str) -> list[str]:
    """The named entities of a claim or question, in order of first appearance: maximal runs of
    capitalised words (joined by ``of``, ``the``, ``:`` and the like), leaving out capitalised words
    that name nothing ("The", "Who", "In")."""
    tokens = re.findall(r"[A-Za-z0-9][A-Za-z0-9'\-]*|[:&]", text)
    entities: list[str] = []
    run: list[str] = []
    pending: list[str] = []

    def close() -> None:
        if run:
            name = " ".join(run).replace(" :", ":")
            if name not in entities:
                entities.append(name)
        run.clear()
        pending.clear()

    for token in tokens:
        if _CAPITALISED.fullmatch(token) and token.lower() not in _NOT_NAMES:
            run.extend(pending)
            pending.clear()
            run.append(token)
        elif run and (token.lower() in _JOINERS):
            pending.append(token)
        elif run and token[0].isdigit():  # "Studio 9", "Apollo 11": a number closes a name
            run.extend(pending)
            run.append(token)
            close()
        else:
            close()
    close()
    return entities


def mentions(entity: str, text: str) -> bool:
    """Whether ``text`` names ``entity``: all of its words, in order and adjacent."""
    want, have = words(entity), words(text)
    if not want:
        return False
    n = len(want)
    return any(have[i:i + n] == want for i in range(len(have) - n + 1))


def content_words(text: str) -> set[str]:
    """Lower-cased words of ``text`` without stopwords."""
    return {w for w in words(text) if w not in _STOPWORDS}


# --------------------------------------------------------------------------------------------
# the evidence of one run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CitedSentence:
    """What grounding reads of a citation: the quoted sentence, its passage's title, and the question
    whose report it backs."""

    quote: str
    title: str | None = None
    question: str = ""

    @property
    def text(self) -> str:
        """The quote with its passage title in front: the title names the passage's entity."""
        return f"{self.title}. {self.quote}" if self.title else self.quote


@dataclass(frozen=True)
class Grounding:
    """The measurements :func:`decide` reads (see the module docstring).

    entities: the claim's named entities; subject: the first (None when it names none).
    subject_cited: a citation mentions the subject (None without one).
    entity_share: share of ``entities`` some citation mentions (None without entities).
    content_share: share of the claim's content words the best citation holds.
    questions / answered: questions the reasoning agent asked; how many a citation answers.
    citations: citations considered; bearing: how many mention a claim entity (or, for a claim
        without entities, share a content word with it).
    read_entity_share: share of ``entities`` some passage the run read mentions (None without entities,
        or when the passages read were not recorded); unread: the entities none of them mentions.
    """

    entities: tuple[str, ...]
    subject: str | None
    subject_cited: bool | None
    entity_share: float | None
    content_share: float
    questions: int
    answered: int
    citations: int
    bearing: int
    read_entity_share: float | None = None
    unread: tuple[str, ...] = ()

    @property
    def answered_share(self) -> float:
        return self.answered / self.questions if self.questions else 0.0

    def to_dict(self) -> dict:
        return asdict(self) | {"answered_share": self.answered_share}


def _bears_on_question(question: str, cited: Sequence[CitedSentence]) -> bool:
    """A question is answered when a citation made for it mentions its own entity (or, for a
    question naming none, when it has a citation at all)."""
    mine = [c for c in cited if c.question.strip() == question.strip()]
    if not mine:
        return False
    entities = named_entities(question)
    return not entities or any(mentions(entities[0], c.text) for c in mine)


def grounding(claim: str, citations: Sequence[CitedSentence], questions: Sequence[str],
              read: Sequence[str] | None = None) -> Grounding:
    """How much the citations of a run bear on ``claim``, how many of its ``questions`` were answered
    from retrieved text, and (given the texts of the passages it ``read``, each with its title) how many
    of the claim's entities those mention (see the module docstring)."""
    entities = tuple(named_entities(claim))
    texts = [c.text for c in citations]
    found = [e for e in entities if any(mentions(e, t) for t in texts)]
    # each entity is looked for in the passages read once: the share and the names come from one pass
    unread = tuple(e for e in entities if not any(mentions(e, t) for t in read)) if read is not None else ()
    want = content_words(claim)
    content_share = max((len(want & content_words(t)) / len(want) for t in texts), default=0.0) if want else 0.0
    if entities:
        bearing = sum(1 for t in texts if any(mentions(e, t) for e in entities))
    else:
        bearing = sum(1 for t in texts if want & content_words(t))
    return Grounding(
        entities=entities, subject=entities[0] if entities else None,
        subject_cited=(entities[0] in found) if entities else None,
        entity_share=len(found) / len(entities) if entities else None,
        content_share=content_share, questions=len(questions),
        answered=sum(1 for q in questions if _bears_on_question(q, citations)),
        citations=len(citations), bearing=bearing,
        read_entity_share=((len(entities) - len(unread)) / len(entities) if entities and read is not None else None),
        unread=unread)


# --------------------------------------------------------------------------------------------
# the decision
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """The outcome of a run: ``verdict`` (the model's, or NOT ENOUGH INFO when ``abstained``),
    ``model_verdict`` (what the model wrote), ``reasons`` (one line per failed rule) and ``rules`` (the
    failed rules' param names, in the same order)."""

    verdict: str | None
    model_verdict: str | None
    abstained: bool
    reasons: tuple[str, ...] = field(default_factory=tuple)
    rules: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "model_verdict": self.model_verdict, "abstained": self.abstained,
                "reasons": list(self.reasons), "rules": list(self.rules)}


def failed_rules(g: Grounding, confidence: float | None, params: AbstainParams) -> list[tuple[str, str]]:
    """``(rule, reason)`` per rule of ``params`` that the run (its grounding ``g`` and ``confidence``)
    fails: the rule's param name and one line saying why."""
    failed = []
    if g.entities:
        if params.require_subject and not g.subject_cited:
            failed.append(("require_subject", f"no cited sentence mentions {g.subject!r}, the claim's subject"))
        if g.entity_share is not None and g.entity_share < params.min_entity_share:
            failed.append(("min_entity_share", f"the citations mention {g.entity_share:.0%} of the claim's entities "
                                               f"(abstain.min_entity_share {params.min_entity_share:.0%})"))
        if params.min_read_share > 0 and (g.read_entity_share or 0.0) < params.min_read_share:
            missing = f"; none names {', '.join(map(repr, g.unread))}" if g.unread else ""
            failed.append(("min_read_share", f"the passages read mention {g.read_entity_share or 0.0:.0%} of the "
                                             f"claim's entities{missing} (abstain.min_read_share "
                                             f"{params.min_read_share:.0%})"))
    elif g.content_share < params.min_content_share:
        failed.append(("min_content_share", f"the best citation holds {g.content_share:.0%} of the claim's content "
                                            f"words (abstain.min_content_share {params.min_content_share:.0%})"))
    if g.answered_share < params.min_answered_share:
        failed.append(("min_answered_share", f"{g.answered} of {g.questions} questions answered from retrieved text "
                                             f"(abstain.min_answered_share {params.min_answered_share:.0%})"))
    if params.min_confidence > 0 and (confidence is None or confidence < params.min_confidence):
        shown = "none" if confidence is None else f"{confidence:.2f}"
        failed.append(("min_confidence", f"confidence {shown} below abstain.min_confidence {params.min_confidence:.2f}"))
    return failed


def _decision(verdict: str | None, model_verdict: str | None, failed: list[tuple[str, str]]) -> Decision:
    return Decision(NOT_ENOUGH_INFO if failed else verdict, model_verdict, bool(failed),
                    tuple(reason for _, reason in failed), tuple(rule for rule, _ in failed))


def decide(verdict: str | None, g: Grounding, confidence: float | None, params: AbstainParams) -> Decision:
    """The run's outcome under ``params``: its verdict, or NOT ENOUGH INFO when any rule fails.

    The outcome is decided from the evidence, not from whether the model wrote a verdict: a run without
    one (a malformed or unfinished response, typically an agent that kept asking because its searches
    found nothing) is NOT ENOUGH INFO when its evidence fails a rule, and stays without a verdict ("the
    model failed") only when the evidence it had was enough. Its confidence rule is not applied: there
    is no verdict to be confident in."""
    if not params.enabled:
        return Decision(verdict, verdict, False)
    if verdict is None:
        return _decision(None, None, failed_rules(g, None, replace(params, min_confidence=0.0)))
    return _decision(verdict, verdict, failed_rules(g, confidence, params))


# --------------------------------------------------------------------------------------------
# choosing the combination on a dev mix
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DevRun:
    """One dev claim's run as :func:`choose_rules` scores it: its label (NOT ENOUGH INFO for a claim
    the corpus cannot answer), the model's verdict, its grounding and confidence."""

    label: str
    verdict: str | None
    grounding: Grounding
    confidence: float | None


# the grid :func:`choose_rules` searches by default: every rule on and off at a few thresholds, each
# param's values from lenient to strict (ties go to the first, the most lenient)
RULE_GRID: Mapping[str, tuple] = {
    "require_subject": (False, True),
    "min_entity_share": (0.0, 0.5),
    "min_answered_share": (0.0, 0.25, 0.5, 1.0),
    "min_read_share": (0.0, 0.5, 1.0),
    "min_confidence": (0.0, 0.3, 0.5, 0.7),
}


def _outcomes(runs: Sequence[DevRun], params: AbstainParams) -> list[str | None]:
    return [decide(r.verdict, r.grounding, r.confidence, params).verdict for r in runs]


def _accuracy_coverage(runs: Sequence[DevRun], outcomes: Sequence[str | None]) -> tuple[float, float]:
    right = sum(o == r.label for o, r in zip(outcomes, runs))
    inside = [o for o, r in zip(outcomes, runs) if r.label != NOT_ENOUGH_INFO]
    answered = sum(o != NOT_ENOUGH_INFO for o in inside)
    return (right / len(runs) if runs else 0.0), (answered / len(inside) if inside else 0.0)


def _utility(runs: Sequence[DevRun], outcomes: Sequence[str | None], wrong_cost: float) -> float:
    total = 0.0
    for outcome, r in zip(outcomes, runs):
        if outcome == r.label:
            total += 1.0
        elif not (outcome == NOT_ENOUGH_INFO and r.label != NOT_ENOUGH_INFO):
            total -= wrong_cost
    return total / len(runs) if runs else 0.0


def mix_accuracy(runs: Iterable[DevRun], params: AbstainParams) -> tuple[float, float]:
    """(accuracy with abstention counted as an answer: NOT ENOUGH INFO right on out-of-corpus claims,
    wrong on the others; coverage of the in-corpus claims) of ``params`` over ``runs``."""
    runs = list(runs)
    return _accuracy_coverage(runs, _outcomes(runs, params))


def mix_utility(runs: Iterable[DevRun], params: AbstainParams, wrong_cost: float = 1.0) -> float:
    """The mean payoff of ``params`` over ``runs``, as a user of a verifier counts it: +1 for a right
    outcome (the right verdict, or NOT ENOUGH INFO on an out-of-corpus claim), 0 for NOT ENOUGH INFO on
    a claim the corpus answers (coverage lost, nothing asserted), ``-wrong_cost`` for anything else (a
    wrong verdict, a verdict on a claim the corpus holds nothing on, no verdict). Unlike
    :func:`mix_accuracy` it prefers abstaining to asserting a wrong verdict (selective prediction)."""
    runs = list(runs)
    return _utility(runs, _outcomes(runs, params), wrong_cost)


def choose_rules(runs: Sequence[DevRun], base: AbstainParams = AbstainParams(), *, min_coverage: float = 0.95,
                 grid: Mapping[str, tuple] = RULE_GRID, wrong_cost: float = 1.0) -> tuple[AbstainParams, dict]:
    """The combination of ``grid`` with the best :func:`mix_utility` among those answering at least
    ``min_coverage`` of the in-corpus dev claims (the most covering one when none does); ties go to
    the fewer rules switched on, then to the first in ``grid``'s order (the most lenient). Returns it
    and its ``{"utility", "accuracy", "coverage"}`` on ``runs``."""
    best, best_key, best_score = base, None, {"utility": 0.0, "accuracy": 0.0, "coverage": 0.0}
    for values in itertools.product(*grid.values()):
        params = replace(base, enabled=True, **dict(zip(grid, values)))
        outcomes = _outcomes(runs, params)  # each run decided once per combination
        accuracy, coverage = _accuracy_coverage(runs, outcomes)
        utility = _utility(runs, outcomes, wrong_cost)
        active = sum(1 for v in values if v)
        key = (coverage >= min_coverage, utility if coverage >= min_coverage else coverage, -active)
        if best_key is None or key > best_key:
            best, best_key = params, key
            best_score = {"utility": utility, "accuracy": accuracy, "coverage": coverage}
    return best, best_score
