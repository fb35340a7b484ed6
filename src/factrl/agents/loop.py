"""Per-trajectory agent loops and the scheduler that runs many of them on shared engines.

Each trajectory is a plain generator (an *agent loop*, as in verl's agent-loop design): it yields
what it needs next and receives the outcome.

* ``Generate(llm, params, prompt_ids=... | conversation=..., stream=i)`` -> a :class:`Completion`;
* ``CallTool(tool, query)`` -> the tool's answer (a string).

A loop can delegate to another loop with ``yield from`` (HARIS's reasoning agent runs a whole
search-agent loop for each question), so nested agents need no special support.

:func:`run_loops` advances every loop until it blocks, answers all pending tool calls with one
batched call per tool, then takes one engine step. On a step-level engine (``LocalLLM.submit`` /
``step``) a trajectory re-enters the running decode batch as soon as its tool answered, while the
others keep decoding: no trajectory waits for the slowest row of a phase, and a search agent
started by one claim decodes in the same batch as another claim's reasoning turn (continuous
batching). Any other backend (a chat-only API, a test double) gets the requests pending at a step
as one batched call per sampling setting, which it may batch or fan out itself.

:func:`drive` runs one loop on awaitable engines instead: verl's agent-loop workers run every
trajectory as its own coroutine against a shared rollout server (``factrl.rl.verl_agent``), and the
same generator answers there, so both paths share every step of the rollout logic.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from factrl.llm.base import Completion, Message, SamplingParams, TokensUnsupported
from factrl.llm.token_sampling import row_seed

T = TypeVar("T")


@dataclass(frozen=True)
class Generate:
    """Continue ``prompt_ids`` (token-level backends) or ``conversation`` (chat backends).

    ``stream`` identifies the trajectory: step-level engines seed each row's sampler with
    ``(params.seed, stream)`` so the samples do not depend on which rows share a batch.
    """

    llm: Any
    params: SamplingParams
    prompt_ids: list[int] | None = None
    conversation: list[Message] | None = None
    stream: int = 0


@dataclass(frozen=True)
class CallTool:
    """Ask ``tool`` (see :class:`factrl.agents.tools.Tool`) one query; answered in a batch."""

    tool: Any
    query: str


AgentLoop = Generator["Generate | CallTool", Any, T]


@dataclass(frozen=True)
class _Raise:
    """An outcome to throw into the loop instead of sending (a backend error)."""

    error: BaseException


class _StepEngine:
    """A backend with ``submit`` / ``step`` / ``busy``: rows join and leave between decode steps."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.owners: dict[int, int] = {}  # id(request) -> task
        self.finished_early: list[tuple[int, Completion]] = []  # answered at submit (zero budget)

    @property
    def busy(self) -> bool:
        return bool(self.owners or self.finished_early)

    def submit(self, task: int, action: Generate) -> None:
        ids = action.prompt_ids
        if ids is None:
            ids = self.llm.encode_chat(action.conversation)
        seed = None if action.params.seed is None else row_seed(action.params.seed, action.stream)
        request = self.llm.submit(ids, action.params, seed=seed)
        if request.done:  # nothing to generate (a zero budget): answered without a step
            self.finished_early.append((task, request.completion))
        else:
            self.owners[id(request)] = task

    def step(self) -> list[tuple[int, Completion]]:
        early, self.finished_early = self.finished_early, []
        if not self.owners:
            return early
        done = self.llm.step()
        return early + [(self.owners.pop(id(r)), r.completion) for r in done if id(r) in self.owners]


class _BatchEngine:
    """Any other backend: the requests pending at a step go out as one call per sampling setting."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.pending: list[tuple[int, Generate]] = []

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def submit(self, task: int, action: Generate) -> None:
        self.pending.append((task, action))

    def step(self) -> list[tuple[int, Completion | _Raise]]:
        groups: dict[tuple[bool, SamplingParams], list[tuple[int, Generate]]] = {}
        for task, action in self.pending:
            groups.setdefault((action.prompt_ids is not None, action.params), []).append((task, action))
        self.pending = []
        out: list[tuple[int, Completion | _Raise]] = []
        for (tokens, params), items in groups.items():
            try:
                if tokens:
                    res = self.llm.complete_tokens([a.prompt_ids for _, a in items], params)
                else:
                    res = self.llm.chat([a.conversation for _, a in items], params)
            except TokensUnsupported as err:  # the loops fall back to chat
                out += [(task, _Raise(err)) for task, _ in items]
                continue
            out += [(task, completions[0]) for (task, _), completions in zip(items, res)]
        return out


def _engine_for(llm):
    if all(hasattr(llm, name) for name in ("submit", "step")):
        return _StepEngine(llm)
    return _BatchEngine(llm)


def run_loops(loops: Sequence[AgentLoop[T]]) -> list[T]:
    """Run agent loops to completion on shared engines; their return values, in input order.

    Engines that keep memory for a burst of requests (``release()``: the local engine's key/value
    slots) are told when the loops are done, also when a loop raised.
    """
    engines: dict[int, _StepEngine | _BatchEngine] = {}
    try:
        return _drive(loops, engines)
    finally:
        for engine in engines.values():
            release = getattr(engine.llm, "release", None)
            if release is not None:
                release()


def _drive(loops: Sequence[AgentLoop[T]], engines: dict[int, _StepEngine | _BatchEngine]) -> list[T]:
    results: list[Any] = [None] * len(loops)
    finished = [False] * len(loops)
    ready: list[tuple[int, Any]] = [(i, None) for i in range(len(loops))]
    tool_calls: dict[int, tuple[Any, list[tuple[int, str]]]] = {}
    while True:
        for task, outcome in ready:
            loop = loops[task]
            try:
                action = loop.throw(outcome.error) if isinstance(outcome, _Raise) else loop.send(outcome)
            except StopIteration as stop:
                results[task], finished[task] = stop.value, True
                continue
            if isinstance(action, Generate):
                key = id(action.llm)
                if key not in engines:
                    engines[key] = _engine_for(action.llm)
                engines[key].submit(task, action)
            elif isinstance(action, CallTool):
                tool_calls.setdefault(id(action.tool), (action.tool, []))[1].append((task, action.query))
            else:
                raise TypeError(f"agent loop {task} yielded {action!r}; expected Generate or CallTool")
        ready = []
        if tool_calls:
            # tools first (retrieval is cheap): their trajectories rejoin the very next decode step
            for tool, calls in tool_calls.values():
                answers = tool([query for _, query in calls])
                if len(answers) != len(calls):
                    raise RuntimeError(f"tool {getattr(tool, 'name', tool)!r} returned {len(answers)} answers "
                                       f"for {len(calls)} queries")
                ready += [(task, answer) for (task, _), answer in zip(calls, answers)]
            tool_calls.clear()
            continue
        busy = [engine for engine in engines.values() if engine.busy]
        if not busy:
            break
        for engine in busy:
            ready += engine.step()
    if not all(finished):
        raise RuntimeError(f"{finished.count(False)} agent loops never finished")  # a scheduler bug
    return results


async def drive(loop: AgentLoop[T], generate: Callable[[Generate], Awaitable[Completion]],
                call_tool: Callable[[CallTool], Awaitable[str]]) -> T:
    """Run one agent loop to its end on awaitable engines: ``generate(action)`` answers each
    :class:`Generate`, ``call_tool(action)`` each :class:`CallTool`. A backend that raises
    :class:`TokensUnsupported` has the error thrown into the loop (its chat fallback), as
    :func:`run_loops` does."""
    outcome: Any = None
    while True:
        try:
            action = loop.throw(outcome.error) if isinstance(outcome, _Raise) else loop.send(outcome)
        except StopIteration as stop:
            return stop.value
        if isinstance(action, Generate):
            try:
                outcome = await generate(action)
            except TokensUnsupported as err:
                outcome = _Raise(err)
        elif isinstance(action, CallTool):
            outcome = await call_tool(action)
        else:
            raise TypeError(f"agent loop yielded {action!r}; expected Generate or CallTool")
