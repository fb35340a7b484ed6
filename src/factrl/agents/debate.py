"""SC-MAKS debate (Sawkar, 2025): a pool of heterogeneous verifiers answers each claim, then debates it
in R rounds that alternate cooperative critique and adversarial challenge.

* Generation phase: every member answers with its own system, a name of
  :func:`factrl.agents.systems_registry.system_names` (HARIS or a registered baseline: single agent,
  RAG, Decompose-Then-Verify; the entries ``evaluate`` runs, with the same settings), one batched run
  per member over all claims; ``samples > 1`` draws further seeded answers that only feed the
  self-consistency feature.
* Debate rounds: every member reads every peer's latest answer once per round (the claim's top
  passages are shown to all, each with a short id to cite) and writes a critique addressed to them
  by name plus its revised verdict, in the reasoning agent's own grammar
  (``<think>...</think><verification>\\boxed{...}</verification>``, parsed by
  :func:`factrl.agents.protocol.parse_reasoning`). A round is one :func:`factrl.agents.loop.run_loops`
  over all (claim, member) turns: one batched call per model and phase.
* Summarizer: when a turn's prompt would pass ``max_context_tokens``, the oldest full round of that
  claim is compressed (``SUMMARIZERS``: ``extractive``, no model; ``llm``, one batched call), until the
  prompt fits.

A malformed turn never stops the debate: it is a recorded format failure (``format_valid`` false,
the parser's error), and the member keeps its previous stance. Each phase can be checkpointed
(``checkpoint_dir``), so a killed batch resumes at its first unfinished phase; the LLM disk cache
below the members answers the calls of that phase that had finished.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factrl.agents.loop import run_loops
from factrl.agents.protocol import escape_tags, parse_reasoning, parse_tags
from factrl.agents.rollout import RolloutParams, agent_loop, chat_prompt_ids
from factrl.agents.systems_registry import SYSTEMS, seed_for, system_names
from factrl.io import write_json
from factrl.llm.base import Message, SamplingParams, TokensUnsupported
from factrl.text import first_sentence
from factrl.verdicts import verdict_word

if TYPE_CHECKING:
    from factrl.recipes.scmaks_params import DebateParams

ROLES = ("cooperative", "adversarial")
GENERATE, SAMPLE, SUMMARY = "generate", "sample", "summary"  # the transcript's other phases

# The debate ablations of the paper's Section 4.10; each changes exactly one thing of the run.
ABLATIONS = {
    "no_adversary": "every round is cooperative (no adversarial challenge)",
    "no_coop": "every round is adversarial (no cooperative critique)",
    "fixed_agent": "every member runs the fixed member's system and model (persona, temperature, seed kept)",
}

ROLE_INSTRUCTIONS = {
    "cooperative": (
        "You are a fact-checker working with your peers. For each peer's answer, name the facts it "
        "gets wrong or leaves out and the passage that fixes them, and say how you would correct it."
    ),
    "adversarial": (
        "You are an adversary. For each peer's answer, name every statement that is false or that no "
        "passage backs, and give the passage that contradicts it, or demand a citation."
    ),
}
DEBATE_FORMAT = """\
Address your peers by name and cite passages by their id, e.g. [P2]. Write your review inside \
<think> </think>, then your own decision, changed or not, inside <verification> </verification> as \
\\boxed{Support} or \\boxed{Refute}.

Example.
<think>Ada says Ilse Parrow was born in Varna, but [P2] says Tessik. Ben is right.</think>
<verification>\\boxed{Refute}</verification>"""

SUMMARY_SYSTEM = ("You compress one round of a fact-checking debate. In at most {words} words, give each "
                  "debater's decision and main reason; keep passage ids such as [P1].")
_CITE_RE = re.compile(r"\[(P\d{1,3})\]", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# members and their answers
# --------------------------------------------------------------------------------------------


@dataclass
class Member:
    """One debater at run time. ``llm`` / ``search_llm``: LLM-protocol backends (the stage puts the
    disk cache around them); ``model``: what the transcript records as its model."""

    name: str
    system: str
    llm: Any
    model: str = ""
    search_llm: Any = None
    persona: str = ""
    temperature: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class Limits:
    """Generation-phase budgets: passages per search, tokens per turn, questions / searches per rollout."""

    top_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 1


@dataclass
class Answer:
    """One member's output in one phase.

    verdict: this output's verdict (None: none given, or a malformed output).
    stance: the member's verdict after this phase (a malformed turn keeps the previous one).
    text: what the peers read (protocol tags removed, cut to the params' ``answer_chars``).
    """

    verdict: str | None
    stance: str | None
    text: str
    format_valid: bool
    error: str | None = None
    cited: list[str] = field(default_factory=list)  # passage ids quoted (debate turns)
    addressed: list[str] = field(default_factory=list)  # peers named (debate turns)
    prompt_tokens: int = 0


def plain_text(text: str, limit: int) -> str:
    """``text`` without protocol tags, whitespace collapsed, cut in the middle to ``limit`` characters
    (the head holds the reasoning, the tail the decision)."""
    flat = " ".join(" ".join(s.text.split()) for s in parse_tags(text or "") if s.text.strip())
    if len(flat) <= limit:
        return flat
    head = max(limit - 3, 0) * 2 // 3
    return flat[:head] + " … " + flat[len(flat) - (max(limit - 3, 0) - head):]


def member_answers(member: Member, claims: list[str], retriever, limits: Limits, temperature: float, seed: int,
                   chars: int) -> list[Answer]:
    """``member``'s answers to ``claims`` from its system in ``factrl.agents.systems_registry`` (a pair
    system, HARIS, on its two models; any other on its one; each with its registered settings), sampled at
    ``temperature`` with ``seed``; each run's verdict and text (cut to ``chars``) become an :class:`Answer`."""
    settings = {"top_k": limits.top_k, "max_new_tokens": limits.max_new_tokens, "max_turns": limits.max_turns,
                "temperature": temperature, "seed": seed}
    runs = SYSTEMS.lookup(member.system).answer(claims, member.llm, retriever, search_llm=member.search_llm,
                                                **settings)
    return [Answer(r.verdict, r.verdict, plain_text(r.text, chars), bool(r.format_valid), r.error) for r in runs]


def role_schedule(rounds: int, first_role: str, ablations: Sequence[str] = ()) -> tuple[str, ...]:
    """The role of each debate round: alternating from ``first_role``; ``no_adversary`` makes every
    round cooperative and ``no_coop`` every round adversarial (the number of rounds stays R)."""
    if first_role not in ROLES:
        raise ValueError(f"unknown role {first_role!r}; expected one of {ROLES}")
    if "no_adversary" in ablations and "no_coop" in ablations:
        raise ValueError("ablations no_adversary and no_coop together leave no debate role")
    if "no_adversary" in ablations:
        return ("cooperative",) * rounds
    if "no_coop" in ablations:
        return ("adversarial",) * rounds
    other = ROLES[1 - ROLES.index(first_role)]
    return tuple(first_role if r % 2 == 0 else other for r in range(rounds))


# --------------------------------------------------------------------------------------------
# evidence and prompts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """A claim's passages as every debater sees them: ``labels[i]`` (``P1``...) stands for ``ids[i]``."""

    ids: list[str]
    labels: list[str]
    text: str

    def cited(self, text: str) -> list[str]:
        """Passage ids ``text`` quotes by label (distinct, in order of first mention)."""
        by_label = {lab.upper(): pid for lab, pid in zip(self.labels, self.ids)}
        quoted = [by_label.get(m.upper()) for m in _CITE_RE.findall(text or "")]
        return list(dict.fromkeys(q for q in quoted if q is not None))


def gather_evidence(retriever, claims: list[str], k: int, chars: int = 240) -> list[Evidence]:
    """The top-``k`` passages of every claim (one batched search), labelled ``[P1]`` ... ``[Pk]``."""
    hits = retriever.search(list(claims), k=k) if claims else []
    out = []
    for row in hits:
        labels = [f"P{i + 1}" for i in range(len(row))]
        lines = [f"[{lab}] ({h.title}) {h.text[:chars]}" if h.title else f"[{lab}] {h.text[:chars]}"
                 for lab, h in zip(labels, row)]
        out.append(Evidence([h.id for h in row], labels, escape_tags("\n".join(lines)) or "(no passage found)"))
    return out


@dataclass
class Round:
    """One phase's answers for one claim, as later prompts show it (``summary`` once compressed)."""

    index: int  # 0 = the generation phase
    phase: str
    answers: dict[str, Answer]
    summary: str | None = None

    @property
    def title(self) -> str:
        return "Opening answers" if self.index == 0 else f"Round {self.index} ({self.phase})"

    def render(self, viewer: str | None = None) -> str:
        if self.summary is not None:
            return f"{self.title}, summarized: {self.summary}"
        lines = [f"{self.title}:"]
        for name, a in self.answers.items():
            lines.append(f"- {name}{' (you)' if name == viewer else ''}: {verdict_word(a.stance)}. {a.text}".rstrip())
        return "\n".join(lines)


def debate_messages(member: Member, role: str, claim: str, evidence: Evidence, history: Sequence[Round]
                    ) -> list[Message]:
    """A debate turn's prompt: persona and role, the claim and its passages, the debate so far."""
    system = "\n".join(p for p in (member.persona.strip(), ROLE_INSTRUCTIONS[role], DEBATE_FORMAT) if p)
    past = "\n\n".join(r.render(member.name) for r in history)
    user = (f"Claim: {claim}\n\nPassages:\n{evidence.text}\n\n{past}\n\n"
            f"You are {member.name}. Review your peers' answers and decide.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def prompt_tokens(llm, messages: list[Message]) -> int:
    """Prompt length in the model's tokens; about four characters a token where no tokenizer is known."""
    encode = getattr(llm, "encode_chat", None)
    if encode is not None:
        try:
            return len(encode(messages))
        except TokensUnsupported:  # an API model with no local tokenizer: estimate as below
            pass
    return sum(len(m["content"]) for m in messages) // 4 + 4 * len(messages)


# --------------------------------------------------------------------------------------------
# summarizers
# --------------------------------------------------------------------------------------------


def extractive_summary(rounds: Sequence[Round], *, llm=None, words: int = 60) -> list[str]:
    """No model: each debater's stance, the passages it cited and its first sentence, within ``words``."""
    out = []
    for r in rounds:
        per = max(4, words // max(1, len(r.answers)) - 6)
        parts = []
        for name, a in r.answers.items():
            cites = "".join(f" [{c}]" for c in a.cited[:3])
            parts.append(f"{name}: {verdict_word(a.stance)}{cites}, {first_sentence(a.text, per)}")
        out.append("; ".join(parts))
    return out


def llm_summary(rounds: Sequence[Round], *, llm, words: int = 60) -> list[str]:
    """One batched chat call with ``llm``; an empty reply falls back to the extractive summary."""
    convs = [[{"role": "system", "content": SUMMARY_SYSTEM.format(words=words)},
              {"role": "user", "content": r.render()}] for r in rounds]
    replies = llm.chat(convs, SamplingParams(max_tokens=2 * words, temperature=0.0, seed=0)) if convs else []
    texts = [" ".join(c[0].text.split()[:words]) if c else "" for c in replies]
    fallback = extractive_summary(rounds, words=words)
    return [t or f for t, f in zip(texts, fallback)]


SUMMARIZERS: dict[str, Callable[..., list[str]]] = {"extractive": extractive_summary, "llm": llm_summary}


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


@dataclass
class ClaimState:
    """One claim's debate: its evidence and every phase so far (round 0 = the openings)."""

    id: str
    claim: str
    evidence: Evidence
    rounds: list[Round] = field(default_factory=list)
    samples: dict[str, list[Answer]] = field(default_factory=dict)  # member -> extra generation samples
    summaries: list[tuple[int, str]] = field(default_factory=list)  # (round compressed, summary), in order


class PhaseStore:
    """Per-phase checkpoints of one batch (JSON files in ``directory``; None = keep nothing)."""

    def __init__(self, directory: Path | None):
        self.directory = directory

    def load(self, phase: int) -> dict | None:
        if self.directory is None or not (self.directory / f"phase-{phase}.json").exists():
            return None
        return json.loads((self.directory / f"phase-{phase}.json").read_text(encoding="utf-8"))

    def save(self, phase: int, record: dict) -> None:
        if self.directory is not None:
            write_json(record, self.directory / f"phase-{phase}.json")


def _answers_from(record: dict) -> dict:
    return {k: Answer(**v) for k, v in record.items()}


class Debate:
    """One batch of claims through the generation phase and the debate rounds.

    ``params``: the ``debate`` params section (rounds, budgets, summarizer); ``roles``: the role of
    each round (:func:`role_schedule`); ``calls``: a function returning the number of backend calls
    made so far (the stage counts below the cache), for the per-phase cost record.
    """

    def __init__(self, members: Sequence[Member], retriever, params: DebateParams, roles: Sequence[str], *,
                 summarizer_llm=None, calls: Callable[[], int] = lambda: 0):
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"debate members need distinct names, got {names}")
        known = system_names()
        unknown = [m.system for m in members if m.system not in known]
        if unknown:
            raise ValueError(f"unknown member system(s) {unknown}; known: {sorted(known)}")
        if params.summarizer not in SUMMARIZERS:
            raise ValueError(f"unknown summarizer {params.summarizer!r}; known: {sorted(SUMMARIZERS)}")
        self.members = list(members)
        self.retriever = retriever
        self.params = params
        self.roles = tuple(roles)
        self.summarizer_llm = summarizer_llm if summarizer_llm is not None else self.members[0].llm
        self.calls = calls
        self.costs: dict[str, dict] = {}  # phase -> {"calls", "seconds"} (and per member for generation)

    # ---- phases ---------------------------------------------------------------------------
    def run(self, claims: Sequence[dict], checkpoint_dir: Path | None = None) -> list[ClaimState]:
        """Every phase for ``claims`` (dicts with ``id`` and ``claim``); finished phases of an earlier,
        killed run of the same batch are read back from ``checkpoint_dir``."""
        store = PhaseStore(checkpoint_dir)
        texts = [c["claim"] for c in claims]
        evidence = gather_evidence(self.retriever, texts, self.params.evidence_k)
        states = [ClaimState(str(c["id"]), c["claim"], e) for c, e in zip(claims, evidence)]
        for phase in range(len(self.roles) + 1):
            record = store.load(phase)
            if record is None:
                t0, c0 = time.perf_counter(), self.calls()
                record = self._generation(states) if phase == 0 else self._round(states, phase)
                record["cost"] |= {"calls": self.calls() - c0, "seconds": time.perf_counter() - t0}
                store.save(phase, record)
            self._apply(states, phase, record)
            self.costs[GENERATE if phase == 0 else f"round{phase}"] = record["cost"]
        return states

    def _generation(self, states: list[ClaimState]) -> dict:
        """Each member's system over all claims (one batched run per member and sample)."""
        p = self.params
        limits = Limits(p.top_k, p.max_new_tokens, p.max_turns)
        texts = [s.claim for s in states]
        answers: dict[str, list[list[dict]]] = {}
        cost: dict[str, dict] = {}
        for m in self.members:
            t0, c0 = time.perf_counter(), self.calls()
            per_sample = []
            for sample in range(p.samples):
                temperature = m.temperature if sample == 0 else max(m.temperature, p.sample_temperature)
                got = member_answers(m, texts, self.retriever, limits, temperature, m.seed + sample,
                                     p.answer_chars)
                per_sample.append([asdict(a) for a in got])
            answers[m.name] = per_sample
            cost[m.name] = {"calls": self.calls() - c0, "seconds": time.perf_counter() - t0}
        return {"answers": answers, "cost": {"members": cost}}

    def _round(self, states: list[ClaimState], index: int) -> dict:
        """Round ``index``: compress what would overflow, then every (claim, member) turn in one run."""
        p = self.params
        role = self.roles[index - 1]
        made = self._fit_context(states, role)
        turns = [(s, m) for s in states for m in self.members]
        prompts = [debate_messages(m, role, s.claim, s.evidence, s.rounds) for s, m in turns]
        loops = []
        for stream, ((_s, m), messages) in enumerate(zip(turns, prompts)):
            params = RolloutParams(max_turns=0, max_new_tokens=p.debate_max_tokens,
                                   max_context_tokens=p.max_context_tokens, end_tags=("</verification>",),
                                   response_prefix="<think>", temperature=m.temperature,
                                   seed=seed_for(m.temperature, m.seed + 1000 * index))
            loops.append(agent_loop(m.llm, chat_prompt_ids(m.llm, messages), messages, None, params,
                                    stream=stream))
        trajectories = run_loops(loops)
        answers: dict[str, dict[str, dict]] = {}
        for (s, m), messages, traj in zip(turns, prompts, trajectories):
            parse = parse_reasoning(traj.response_text)
            previous = s.rounds[-1].answers[m.name].stance
            peers = [o.name for o in self.members if o.name != m.name]
            addressed = [n for n in peers if re.search(rf"\b{re.escape(n)}\b", traj.response_text, re.IGNORECASE)]
            verdict = parse.verdict if parse.format_valid else None
            answer = Answer(verdict, verdict if verdict is not None else previous,
                            plain_text(traj.response_text, p.answer_chars), parse.format_valid, parse.error,
                            s.evidence.cited(traj.response_text), addressed, prompt_tokens(m.llm, messages))
            answers.setdefault(s.id, {})[m.name] = asdict(answer)
        return {"answers": answers, "summaries": made, "cost": {"role": role}}

    def _fit_context(self, states: list[ClaimState], role: str) -> dict[str, list[tuple[int, str]]]:
        """Compress each claim's oldest full round while some member's prompt would overflow; one
        summarizer call per pass over the claims. Returns claim id -> [(round, summary)] made."""
        p = self.params
        budget = p.max_context_tokens - p.debate_max_tokens
        summarize = SUMMARIZERS[p.summarizer]
        made: dict[str, list[tuple[int, str]]] = {}
        while True:
            todo: list[tuple[ClaimState, Round]] = []
            for s in states:
                full = [r for r in s.rounds if r.summary is None]
                if full and any(prompt_tokens(m.llm, debate_messages(m, role, s.claim, s.evidence, s.rounds)) > budget
                                for m in self.members):
                    todo.append((s, full[0]))
            if not todo:
                return made
            texts = summarize([r for _, r in todo], llm=self.summarizer_llm, words=p.summary_words)
            for (s, r), text in zip(todo, texts):
                r.summary = text
                made.setdefault(s.id, []).append((r.index, text))

    def _apply(self, states: list[ClaimState], phase: int, record: dict) -> None:
        """Put a phase's (computed or checkpointed) record into the claims' states."""
        if phase == 0:
            for i, s in enumerate(states):
                opening = {m.name: Answer(**record["answers"][m.name][0][i]) for m in self.members}
                s.rounds.append(Round(0, GENERATE, opening))
                s.samples = {m.name: [Answer(**smp[i]) for smp in record["answers"][m.name][1:]] for m in self.members}
            return
        for s in states:
            for index, text in record["summaries"].get(s.id, []):
                s.rounds[index].summary = text
                s.summaries.append((index, text))
            s.rounds.append(Round(phase, record["cost"]["role"], _answers_from(record["answers"][s.id])))


def transcript_rows(states: Sequence[ClaimState], members: Sequence[Member], extra: Callable[[str], dict]
                    ) -> list[dict]:
    """:data:`factrl.data.schemas.DEBATE_TURNS` rows: every answer of every phase, the extra samples
    and the summaries made. ``extra(claim_id)`` adds the claim's own columns (split, label, ...)."""
    by_name = {m.name: m for m in members}
    rows = []
    for s in states:
        base = {"claim_id": s.id, "claim": s.claim, "evidence_ids": s.evidence.ids} | extra(s.id)

        def row(rnd: int, phase: str, member: str, a: Answer, sample: int = 0) -> dict:
            m = by_name.get(member)
            return base | {"round": rnd, "phase": phase, "member": member, "system": m.system if m else None,  # noqa: B023  (row runs within this iteration)
                           "model": m.model if m else None, "sample": sample} | asdict(a) | {
                # an empty reply is a format failure like any other; the transcripts hold no empty text
                "text": a.text if a.text and a.text.strip() else None}

        for r in s.rounds:
            rows += [row(r.index, r.phase, name, a) for name, a in r.answers.items()]
        for name, samples in s.samples.items():
            rows += [row(0, SAMPLE, name, a, j + 1) for j, a in enumerate(samples)]
        for index, text in s.summaries:
            rows.append(row(index, SUMMARY, "summarizer", Answer(None, None, text, True)))
    return rows
