"""HARIS: a high-level reasoning agent that delegates fact finding to a low-level search agent.

The reasoning agent reads a claim, thinks, and asks self-contained questions (``<question>``);
each question is answered by a full search-agent rollout (``<search>`` -> top-3 passages ->
``<report>``) whose report comes back inside ``<result>``; the reasoning agent ends with
``<verification>\\boxed{Support|Refute}</verification>``. Both agents are agent loops
(:func:`factrl.agents.rollout.agent_loop`); a question runs its search agent's loop inside the
asking trajectory, and one scheduler (:func:`factrl.agents.loop.run_loops`) batches them all, so
one code path serves inference, label synthesis and training. ``factrl verify "CLAIM"`` runs it
from the command line (:mod:`factrl.verify.command`).

System prompts come in styles (:data:`PROMPTS`): ``full`` (rules and a worked example, what an
untrained model needs) and ``short`` (the tags only, for agents that learned the protocol in the
supervised warm start; a third of the tokens, so every training step and rollout costs less). The
style belongs to the weights: a warm-started checkpoint records it in its config (``factrl_prompt``,
carried along by every later ``save_pretrained``), and :func:`prompt_style` reads it back wherever an
agent runs, so training, synthesis and evaluation always prompt a model the way it was trained.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from factrl.agents.confidence import VerdictWatch, verdict_confidence
from factrl.agents.loop import AgentLoop, run_loops
from factrl.agents.protocol import ReasoningParse, SearchParse, parse_reasoning, parse_search
from factrl.agents.rollout import RolloutParams, Trajectory, agent_loop, chat_prompt_ids, run_rollouts
from factrl.agents.tools import RetrieverTool, SearchAgentTool
from factrl.llm.base import Message

TOP_K = 3  # the paper retrieves the top-3 passages per search

REASONING_SYSTEM = """\
You decide whether a claim is true, step by step, with help from a search assistant that can look \
up facts in an encyclopedia. Many claims chain several facts together, and some of the facts in \
between are not named in the claim: find those first.

How to write:
- Put your reasoning inside <think> </think>.
- When a fact is missing, ask the assistant one question inside <question> </question>. Its findings \
come back to you inside <result> </result>. Never write <result> yourself.
- Finish with your decision inside <verification> </verification>, written as \\boxed{Support} or \
\\boxed{Refute}.

Rules for questions, because the assistant only sees the question:
1. Open with a question word (Who, What, Which, Where, When, How).
2. Name every person, place or work explicitly. Never write "the claim", and never use "it", "he", \
"she" or "that" for something the question itself does not name.
3. Do not lean on earlier text: no "mentioned above", "from that", "in this case".

Example.
Claim: The founder of the company Orlen Studios was born in Varna.
<think>I need the founder of Orlen Studios, then that person's birthplace.</think>
<question>Who founded Orlen Studios?</question>
<result>Orlen Studios was founded by Ilse Parrow.</result>
<question>In which city was Ilse Parrow born?</question>
<result>Ilse Parrow was born in Tessik.</result>
<think>Ilse Parrow was born in Tessik, not Varna.</think>
<verification>\\boxed{Refute}</verification>"""

SEARCH_SYSTEM = """\
You collect the information needed to answer one question, using an encyclopedia search tool.

How to write:
- Put your reasoning inside <think> </think>.
- To search, write a short query (names and key words) inside <search> </search>. The best \
passages come back inside <result> </result>. Never write <result> yourself.
- If the passages do not answer the question, search again with a different query.
- When you know enough, write the answer and the facts that back it inside <report> </report>.

Example.
Question: Who founded Orlen Studios?
<think>I will look up Orlen Studios.</think>
<search>Orlen Studios founder</search>
<result>Doc 1 (Orlen Studios) Orlen Studios is a company founded by Ilse Parrow, based in Tessik.</result>
<report>Orlen Studios was founded by Ilse Parrow; the company is based in Tessik.</report>"""


# The short style names the tags and nothing else: a warm-started agent learned the rest from its
# reference trajectories (about 60 tokens against the full style's ~400 for the reasoning agent).
REASONING_SHORT = """\
Verify the claim. Think in <think> </think>. Ask a search assistant one self-contained question at a \
time in <question> </question>; its findings come back in <result> </result>. End with \
<verification>\\boxed{Support}</verification> or <verification>\\boxed{Refute}</verification>."""

SEARCH_SHORT = """\
Answer the question from an encyclopedia. Think in <think> </think>. Search with a short query in \
<search> </search>; passages come back in <result> </result>. End with the answer and the facts \
that back it in <report> </report>."""

# style -> (reasoning agent's system prompt, search agent's system prompt)
PROMPTS = {"full": (REASONING_SYSTEM, SEARCH_SYSTEM), "short": (REASONING_SHORT, SEARCH_SHORT)}
PROMPT_KEY = "factrl_prompt"  # the model config key naming the style a checkpoint was trained with


def _check_style(style: str) -> str:
    if style not in PROMPTS:
        raise ValueError(f"unknown prompt style {style!r}; known: {sorted(PROMPTS)}")
    return style


def prompt_style(llm) -> str:
    """The system-prompt style ``llm``'s weights were trained with: ``factrl_prompt`` in the model's
    config (a local engine's weights, or the ``config.json`` of the model directory an HTTP backend
    serves under that name); ``full`` for any model without one (base models, hosted teachers)."""
    config = getattr(getattr(llm, "model", None), "config", None)
    style = getattr(config, PROMPT_KEY, None)
    served = str(getattr(llm, "model_name", "") or "")
    if style is None and served and (Path(served) / "config.json").is_file():
        style = json.loads((Path(served) / "config.json").read_text(encoding="utf-8")).get(PROMPT_KEY)
    return _check_style(style or "full")


def reasoning_messages(claim: str, style: str = "full") -> list[Message]:
    return [{"role": "system", "content": PROMPTS[_check_style(style)][0]},
            {"role": "user", "content": f"Claim: {claim}"}]


def search_messages(question: str, style: str = "full") -> list[Message]:
    return [{"role": "system", "content": PROMPTS[_check_style(style)][1]},
            {"role": "user", "content": f"Question: {question}"}]


def default_reasoning_params(**kw) -> RolloutParams:
    return RolloutParams(**{"max_turns": 4, "max_new_tokens": 160, "max_context_tokens": 4096,
                            "max_tool_response_tokens": 256, "end_tags": ("</verification>",),
                            "response_prefix": "<think>", **kw})


def default_search_params(**kw) -> RolloutParams:
    return RolloutParams(**{"max_turns": 3, "max_new_tokens": 128, "max_context_tokens": 4096,
                            "max_tool_response_tokens": 384, "end_tags": ("</report>",),
                            "response_prefix": "<think>", **kw})


@dataclass
class SearchResult:
    """One search-agent rollout for one question."""

    question: str
    trajectory: Trajectory
    parse: SearchParse

    @property
    def report(self) -> str | None:
        return self.parse.report

    @property
    def retrieved(self) -> list[str]:
        return list(self.trajectory.results)


@dataclass
class HarisResult:
    """One reasoning-agent rollout for one claim, with the search rollouts it triggered.

    raw_confidence: the reasoning agent's probability that its verdict is right, read from the
        verdict token's log-probs (``factrl.agents.confidence``; 0.0 without a verdict);
        ``confidence_source`` says how it was obtained.
    """

    claim: str
    trajectory: Trajectory
    parse: ReasoningParse
    searches: list[SearchResult | None] = field(default_factory=list)  # one per question asked
    raw_confidence: float = 0.5
    confidence_source: str = "uninformative"

    @property
    def verdict(self) -> str | None:
        return self.parse.verdict


def search_agent_loop(llm, question: str, retriever_tool: RetrieverTool, params: RolloutParams | None = None,
                      stream: int = 0) -> AgentLoop[SearchResult]:
    """One search-agent rollout for ``question`` (top-k retrieval behind ``</search>``), as an agent loop,
    prompted in the style ``llm`` was trained with."""
    conv = search_messages(question, prompt_style(llm))
    traj = yield from agent_loop(llm, chat_prompt_ids(llm, conv), conv, retriever_tool,
                                 params or default_search_params(), stream=stream)
    return SearchResult(question, traj, parse_search(traj.response_text))


def run_search_agent(llm, questions: list[str], retriever_tool: RetrieverTool,
                     params: RolloutParams | None = None, n: int = 1) -> list[SearchResult]:
    """``n`` search-agent rollouts per question (question-major), each with top-k retrieval."""
    return run_loops([search_agent_loop(llm, q, retriever_tool, params, stream=i * n + j)
                      for i, q in enumerate(questions) for j in range(n)])


class Haris:
    """The two agents wired together. ``search_llm`` defaults to ``reason_llm`` (shared weights)."""

    def __init__(self, reason_llm, retriever, *, search_llm=None, k: int = TOP_K,
                 reason_params: RolloutParams | None = None, search_params: RolloutParams | None = None):
        self.reason_llm = reason_llm
        self.search_llm = search_llm if search_llm is not None else reason_llm
        self.retriever_tool = retriever if isinstance(retriever, RetrieverTool) else RetrieverTool(retriever, k=k)
        self.reason_params = reason_params or default_reasoning_params()
        self.search_params = search_params or default_search_params()
        self.search_tool = SearchAgentTool(self._search_loop)

    @classmethod
    def with_limits(cls, reason_llm, retriever, *, search_llm=None, top_k: int = TOP_K, max_new_tokens: int,
                    max_turns: int, temperature: float = 0.0, seed: int | None = None) -> Haris:
        """Both agents at the same per-turn and per-rollout limits and sampling over ``retriever``'s top
        ``top_k``: how ``evaluate``, ``factrl serve`` and a debate's HARIS member run a checkpoint pair."""
        limits = {"max_new_tokens": max_new_tokens, "max_turns": max_turns, "temperature": temperature,
                  "seed": seed}
        return cls(reason_llm, retriever, search_llm=search_llm, k=top_k,
                   reason_params=default_reasoning_params(**limits), search_params=default_search_params(**limits))

    def _search_loop(self, question: str, stream: int) -> AgentLoop[SearchResult]:
        return search_agent_loop(self.search_llm, question, self.retriever_tool, self.search_params, stream)

    def verify(self, claims: list[str], n: int = 1) -> list[HarisResult]:
        """``n`` HARIS rollouts per claim (claim-major), each with its raw confidence."""
        style = prompt_style(self.reason_llm)
        convs = [reasoning_messages(c, style) for c in claims]
        start = len(self.search_tool.history)
        ids = [chat_prompt_ids(self.reason_llm, c) for c in convs]
        tokenizer = getattr(self.reason_llm, "tokenizer", None)
        watch = VerdictWatch.for_tokenizer(tokenizer) if tokenizer is not None else None
        params = self.reason_params
        if watch is not None and watch.usable:  # the engine reports the verdict tokens' log-probs
            params = dataclasses.replace(params, watch_ids=watch.ids)
        trajs = run_rollouts(self.reason_llm, ids, self.search_tool, params, n=n, messages=convs)
        history = self.search_tool.history[start:]
        by_question: dict[str, list[SearchResult]] = {}
        for q, res in history:
            by_question.setdefault(q, []).append(res)
        out = []
        for claim, t in zip([c for c in claims for _ in range(n)], trajs):
            # the tool answers questions in the order they were asked; same-text questions from
            # different rollouts get equivalent answers, so attribution by text is faithful
            searches = [by_question[q].pop(0) if by_question.get(q) else None for q in t.queries]
            parse = parse_reasoning(t.response_text)
            confidence, source = verdict_confidence(t, parse.verdict, tokenizer, watch)
            out.append(HarisResult(claim, t, parse, searches, confidence, source))
        return out


def verify(claims: list[str], *, reason_llm, retriever, search_llm=None, k: int = TOP_K, n: int = 1,
           reason_params: RolloutParams | None = None, search_params: RolloutParams | None = None
           ) -> list[HarisResult]:
    """Verify ``claims`` with HARIS; each result has ``verdict`` ("SUPPORTS" | "REFUTES" | None),
    the reasoning trajectory and the search trajectories behind every question."""
    haris = Haris(reason_llm, retriever, search_llm=search_llm, k=k,
                  reason_params=reason_params, search_params=search_params)
    return haris.verify(list(claims), n=n)


def format_trace(result: HarisResult) -> str:
    """A readable trace: every question, the searches behind it, the report and the verdict."""
    lines = [f"CLAIM: {result.claim}"]
    for i, q in enumerate(result.trajectory.queries):
        lines.append(f"\n[question {i + 1}] {q}")
        search = result.searches[i] if i < len(result.searches) else None
        if search is not None:
            for j, sq in enumerate(search.trajectory.queries):
                lines.append(f"  [search {j + 1}] {sq}")
            lines.append(f"  [report] {search.report or '(no report; passages passed on)'}")
        lines.append(f"  [result] {result.trajectory.results[i].strip()}")
    lines.append(f"\nVERDICT: {result.verdict or 'none (no valid verification)'}")
    lines.append(f"raw confidence: {result.raw_confidence:.3f} ({result.confidence_source})")
    lines.append(f"format valid: {result.parse.format_valid}"
                 + (f" ({result.parse.error})" if result.parse.error else ""))
    lines.append(f"finish: {result.trajectory.finish_reason}")
    return "\n".join(lines)
