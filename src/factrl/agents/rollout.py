"""Multi-turn rollouts: generate until an action tag, call the tool, inject its answer, go on.

Each trajectory is one agent loop (:func:`agent_loop`): it generates until it stops (the tool's
closing tag such as ``</search>``, a final tag such as ``</report>``, EOS, or the token budget);
when it stopped on the tool's tag, the tool answers its query, the answer is wrapped in
``<result>...</result>`` (or the tool's own ``result_tag``) and appended, and the loop generates
again. A :class:`~factrl.agents.tools.Toolbox` gives a trajectory several tools, one per stop tag.
:func:`run_rollouts` runs every trajectory through :func:`factrl.agents.loop.run_loops`, which batches their generation
requests on a shared engine (rows join and leave the running batch between decode steps) and
their tool calls (one batched call per tool), so no trajectory waits for the others' turns.

Token ids (token-level engines such as :class:`~factrl.llm.local.LocalLLM`): the response is the exact concatenation of
the ids the policy sampled (loss mask 1; an EOS that ended a turn is one of them, the very id the
engine sampled, so training teaches the policy to stop the way it stopped, also for models with
several EOS ids) and the ids of the injected results (mask 0). The model conditions on precisely
these ids, so the mask and the log-probs are exact. When the engine returns the log-prob of each
id it sampled, the trajectory keeps them (``response_logprobs``, 0 at injected ids) for the trainer
to measure and correct the engine/trainer gap.

:func:`replay` builds the trajectory a rollout would produce for given reference turns (the supervised
warm start trains on it), through the same loop, so its ids and loss mask are laid out exactly as a
sampled rollout's.

Chat-only backends (``complete_tokens`` raises :class:`~factrl.llm.base.TokensUnsupported`): the
rollout becomes a conversation (assistant turn up to the action tag, the result as a user turn)
and ids are reconstructed with ``tokenizer`` when one is given: the prompt through its chat template,
then each turn's text tokenized on its own. That tokenization is approximate (the chat template's
turn markers between turns are not in ``response_ids``), so such trajectories serve inference and
label synthesis, not token-level training. Without a tokenizer the id lists stay empty.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from factrl.agents.loop import AgentLoop, CallTool, Generate, run_loops
from factrl.agents.tools import RESULT_TAG, Tool, Toolbox, open_tag, result_tag, tools_by_tag
from factrl.llm.base import Completion, Message, SamplingParams, TokensUnsupported
from factrl.llm.tokens import encode_chat

RESULT_OPEN = f"\n<{RESULT_TAG}>\n"
RESULT_CLOSE = f"\n</{RESULT_TAG}>\n"
ELLIPSIS = "\n[... truncated ...]\n"


@dataclass(frozen=True)
class RolloutParams:
    """Limits and sampling of a multi-turn rollout.

    max_turns: tool calls allowed per trajectory; a further action tag ends it ("max_turns").
    max_new_tokens: tokens generated per turn (between two tool calls).
    max_context_tokens: prompt + response ids never exceed this ("length" when reached).
    max_tool_response_tokens: a tool answer longer than this is cut in the middle.
    temperature / top_p / seed: sampling (temperature 0 = greedy); step t uses seed + t.
    end_tags: closing tags that end the trajectory (``</verification>``, ``</report>``).
    response_prefix: text placed at the start of every response before the model writes (e.g.
        ``<think>``, which steers a small model into the tag format); it is injected (mask 0) and
        is part of ``response_text``. Chat-only backends cannot be prefilled and skip it.
    watch_ids: token ids whose log-probs the engine reports at every generated position
        (``SamplingParams.watch_ids``), kept in ``Trajectory.response_watched_logprobs``; HARIS
        watches the verdict words' first tokens to score its confidence. Empty: nothing kept.
    """

    max_turns: int = 4
    max_new_tokens: int = 256
    max_context_tokens: int = 4096
    max_tool_response_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    end_tags: tuple[str, ...] = ()
    response_prefix: str = ""
    watch_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "max_context_tokens", "max_tool_response_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"RolloutParams.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_turns < 0:
            raise ValueError(f"RolloutParams.max_turns must be >= 0, got {self.max_turns}")


@dataclass
class Trajectory:
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]  # len == len(response_ids); 1 generated, 0 injected
    turns: list[tuple[str, str]]  # (role "model" | "env", text), in order
    response_text: str
    num_tool_calls: int
    finish_reason: str  # "stop" | "length" | "max_turns"
    queries: list[str] = field(default_factory=list)  # what was sent to the tool, in order
    results: list[str] = field(default_factory=list)  # the tool's answers before truncation
    # the engine's log-prob of each response id (0.0 at injected ids); None when it gave none
    response_logprobs: list[float] | None = None
    # per response id, the log-probs of RolloutParams.watch_ids at that position (None at injected
    # ids and where the engine gave none); None when nothing was watched
    response_watched_logprobs: list[list[float] | None] | None = None

    def to_row(self, *, id, prompt_id, agent, round, reward=None, reward_parts=None, format_valid=None) -> dict:
        """A row of :data:`factrl.data.schemas.TRAJECTORIES`."""
        return {
            "id": str(id), "prompt_id": str(prompt_id), "agent": agent,
            "round": None if round is None else int(round),
            "prompt_ids": list(self.prompt_ids), "response_ids": list(self.response_ids),
            "loss_mask": list(self.loss_mask),
            "turns": [{"role": r, "text": t} for r, t in self.turns],
            "reward": reward, "reward_parts": None if reward_parts is None else dict(reward_parts),
            "format_valid": format_valid, "num_tool_calls": int(self.num_tool_calls),
        }


@dataclass
class _State:
    prompt: list[int]
    conversation: list[Message] = field(default_factory=list)  # chat fallback only
    response: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)  # None once a generated span had none
    watched: list[list[float] | None] = field(default_factory=list)  # per response id (see Trajectory)
    turns: list[tuple[str, str]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    calls: int = 0
    done: bool = False
    finish: str = "stop"
    pending: str | None = None  # the query waiting for the tool
    pending_tag: str | None = None  # the stop tag that asked for it (which tool answers)

    def end(self, reason: str) -> None:
        self.done, self.finish, self.pending = True, reason, None

    def generated(self, ids: list[int], logprobs: Sequence[float] | None,
                  watched: Sequence[Sequence[float]] | None = None) -> None:
        """Append ids the policy sampled (trained: mask 1) with the engine's log-probs of them (and
        of the watched ids at their positions, where given)."""
        self.watched += list(watched) if watched is not None and len(watched) == len(ids) else [None] * len(ids)
        self.response += ids
        self.mask += [1] * len(ids)
        if self.logprobs is not None and logprobs is not None and len(logprobs) == len(ids):
            self.logprobs += list(logprobs)
        else:
            self.logprobs = None

    def injected(self, ids: list[int]) -> None:
        """Append ids the policy did not sample (a tool's answer, a response prefix): mask 0."""
        self.watched += [None] * len(ids)
        self.response += ids
        self.mask += [0] * len(ids)
        if self.logprobs is not None:
            self.logprobs += [0.0] * len(ids)

    def trajectory(self) -> Trajectory:
        return Trajectory(
            prompt_ids=self.prompt, response_ids=self.response, loss_mask=self.mask, turns=self.turns,
            response_text="".join(t for _, t in self.turns), num_tool_calls=self.calls,
            finish_reason=self.finish, queries=self.queries, results=self.results,
            response_logprobs=self.logprobs,
            response_watched_logprobs=self.watched if any(w is not None for w in self.watched) else None,
        )


def extract_query(text: str, stop_tag: str) -> str:
    """The action's argument: the text between the last open tag and the closing tag."""
    end = text.rfind(stop_tag)
    head = text[:end] if end >= 0 else text
    start = head.rfind(open_tag(stop_tag))
    if start < 0:
        return head[-300:].strip()  # no open tag: the tail of the turn is the best guess
    return head[start + len(open_tag(stop_tag)) :].strip()


def truncate_middle(ids: list[int], limit: int, marker: list[int]) -> list[int]:
    """Keep the head and the tail of ``ids`` so that the result has at most ``limit`` ids."""
    if len(ids) <= limit:
        return ids
    keep = max(limit - len(marker), 0)
    head = (keep + 1) // 2
    tail = keep - head
    return ids[:head] + (marker if limit >= len(marker) else []) + (ids[len(ids) - tail :] if tail else [])


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _wrap(tag: str | None) -> tuple[str, str]:
    """The text injected before and after a tool answer wrapped in ``tag`` (none for None)."""
    return (f"\n<{tag}>\n", f"\n</{tag}>\n") if tag is not None else ("", "")


def _result_ids(tokenizer, result: str, params: RolloutParams, tag: str | None = RESULT_TAG) -> tuple[list[int], str]:
    """Ids and exact text of one injected ``<tag>`` block, its body cut to the tool limit (an empty
    unwrapped answer injects nothing)."""
    if tag is None and not result:
        return [], ""
    body = truncate_middle(_encode(tokenizer, result), params.max_tool_response_tokens,
                           _encode(tokenizer, ELLIPSIS))
    head, tail = _wrap(tag)
    ids = (_encode(tokenizer, head) if head else []) + body + (_encode(tokenizer, tail) if tail else [])
    # decode the ids actually injected so the turn text is exactly what the model read
    return ids, tokenizer.decode(ids)


def _stops(tools: dict[str, Tool], params: RolloutParams) -> tuple[str, ...]:
    return tuple(tools) + tuple(params.end_tags)


def _after_turn(s: _State, text: str, stopped: bool, tools: dict[str, Tool], params: RolloutParams) -> None:
    """Decide what a finished generation turn means: a tool call, the end, or the budget."""
    tag = next((t for t in tools if text.rstrip().endswith(t)), None)
    if tag is not None:
        if s.calls >= params.max_turns:
            s.end("max_turns")
        else:
            s.pending, s.pending_tag = extract_query(text, tag), tag
        return
    s.end("stop" if stopped else "length")


def _sampling(params: RolloutParams, max_tokens: int, stops, turn: int) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens, temperature=params.temperature, top_p=params.top_p, stop=stops,
        include_stop=True, seed=None if params.seed is None else params.seed + turn, watch_ids=params.watch_ids,
    )


def _use_tool(tool: Tool, s: _State) -> AgentLoop[str]:
    """Answer the paused query: a tool with a ``loop`` (an agent, e.g. the search agent) runs
    inside this trajectory's loop; any other tool is called in a batch by the scheduler."""
    query = s.pending
    s.pending_tag = None
    nested = getattr(tool, "loop", None)
    answer = (yield from nested(query)) if nested is not None else (yield CallTool(tool, query))
    s.queries.append(query)
    s.results.append(answer)
    s.pending = None
    s.calls += 1
    return answer


def _token_loop(llm, prompt: list[int], tools: dict[str, Tool], params: RolloutParams, stream: int,
                tokenizer) -> AgentLoop[Trajectory]:
    s = _State(prompt=list(prompt))
    if params.response_prefix:
        ids = _encode(tokenizer, params.response_prefix)
        s.injected(ids)
        s.turns.append(("env", tokenizer.decode(ids)))
    stops = _stops(tools, params)
    turn = 0
    while not s.done:
        room = params.max_context_tokens - len(s.prompt) - len(s.response)
        if room <= 0:
            s.end("length")
            break
        c = yield Generate(llm, _sampling(params, min(params.max_new_tokens, room), stops, turn),
                           prompt_ids=s.prompt + s.response, stream=stream)
        turn += 1
        # the engine's ids as sampled (an ending EOS included); never re-tokenized or substituted
        ids = list(c.token_ids) if c.token_ids is not None else _encode(tokenizer, c.text)
        s.generated(ids, c.logprobs if c.token_ids is not None else None,
                    c.watched_logprobs if c.token_ids is not None else None)
        s.turns.append(("model", tokenizer.decode(ids, skip_special_tokens=True)))
        _after_turn(s, c.text, c.finish_reason == "stop", tools, params)
        if s.pending is None:
            continue
        tool = tools[s.pending_tag]
        answer = yield from _use_tool(tool, s)
        ids, text = _result_ids(tokenizer, answer, params, result_tag(tool))
        if len(s.prompt) + len(s.response) + len(ids) >= params.max_context_tokens:
            s.end("length")
            break
        s.injected(ids)
        s.turns.append(("env", text))
    return s.trajectory()


def _infer_stop(text: str, stops: Sequence[str]) -> str:
    """Chat APIs drop the matched stop string; put back the one whose open tag is left unclosed."""
    best, where = None, -1
    for stop in stops:
        i = text.rfind(open_tag(stop))
        if i > where and text.find(stop, i) < 0:
            best, where = stop, i
    return text + best if best is not None else text


def _chat_loop(llm, conversation: Sequence[Message], tools: dict[str, Tool], params: RolloutParams, stream: int,
               tokenizer) -> AgentLoop[Trajectory]:
    ids = encode_chat(tokenizer, conversation) if tokenizer is not None else []
    s = _State(prompt=list(ids), conversation=list(conversation))
    stops = _stops(tools, params)
    turn = 0
    while not s.done:
        c = yield Generate(llm, _sampling(params, params.max_new_tokens, stops, turn),
                           conversation=list(s.conversation), stream=stream)
        turn += 1
        text = _infer_stop(c.text, stops) if c.finish_reason == "stop" else c.text
        ids = _encode(tokenizer, text) if tokenizer is not None else []
        s.generated(ids, None)  # re-tokenized text: no engine log-probs of these ids
        s.turns.append(("model", text))
        s.conversation.append({"role": "assistant", "content": text})
        _after_turn(s, text, c.finish_reason == "stop", tools, params)
        if not s.done and tokenizer is not None and len(s.prompt) + len(s.response) >= params.max_context_tokens:
            s.end("length")
        if s.pending is None:
            continue
        tool = tools[s.pending_tag]
        answer = yield from _use_tool(tool, s)
        if tokenizer is not None:
            ids, text = _result_ids(tokenizer, answer, params, result_tag(tool))
        else:
            head, tail = _wrap(result_tag(tool))
            ids, text = [], (head + answer + tail if head or answer else "")
        s.injected(ids)
        s.turns.append(("env", text))
        if text.strip():  # an empty injection (a key saved) adds no user turn: the assistant goes on
            s.conversation.append({"role": "user", "content": text.strip()})
    return s.trajectory()


def chat_prompt_ids(llm, conversation: Sequence[Message], tokenizer=None) -> list[int] | None:
    """``conversation``'s token ids for a token-level rollout: the backend's ``encode_chat`` where it
    has one (and can: a chat-only endpoint's raises TokensUnsupported), else ``tokenizer``'s chat template (verl's server takes ids but renders no chat); None
    when neither exists, so :func:`agent_loop` runs the turn as a chat."""
    encode = getattr(llm, "encode_chat", None)
    if encode is not None:
        try:
            return encode(conversation)
        except TokensUnsupported:  # an API model with no local tokenizer (openai:gpt-4o-mini): chats only
            pass
    return encode_chat(tokenizer, conversation) if tokenizer is not None else None


def agent_loop(llm, prompt_ids: list[int] | None, conversation: Sequence[Message] | None,
               tool, params: RolloutParams, *, stream: int = 0, tokenizer=None
               ) -> AgentLoop[Trajectory]:
    """One multi-turn trajectory as an agent loop (run it with :func:`~factrl.agents.loop.run_loops`).

    ``tool``: None, one :class:`~factrl.agents.tools.Tool` or a :class:`~factrl.agents.tools.Toolbox`.
    Token-level when ``prompt_ids`` are given and the backend continues ids; when the backend
    raises :class:`TokensUnsupported` at the first turn, the same trajectory runs as a chat on
    ``conversation`` (see the module docstring). ``stream`` seeds this trajectory's sampler.
    """
    tokenizer = tokenizer if tokenizer is not None else getattr(llm, "tokenizer", None)
    tools = tools_by_tag(tool)
    if prompt_ids:
        if tokenizer is None:
            raise ValueError("token-level rollouts need a tokenizer (pass tokenizer= or use an LLM with .tokenizer)")
        try:
            return (yield from _token_loop(llm, prompt_ids, tools, params, stream, tokenizer))
        except TokensUnsupported:
            pass  # raised at the first turn, before anything was recorded
    if conversation is None:
        raise TokensUnsupported(f"{llm!r} cannot continue token ids; pass messages= so the rollout can run as a chat")
    return (yield from _chat_loop(llm, conversation, tools, params, stream, tokenizer))


def run_rollouts(
    llm,
    prompts_ids: Sequence[list[int] | None],
    tool: Tool | None,
    params: RolloutParams,
    n: int = 1,
    *,
    tokenizer=None,
    messages: Sequence[Sequence[Message]] | None = None,
) -> list[Trajectory]:
    """``n`` multi-turn rollouts per prompt, prompt-major (``[p0 s0, p0 s1, ..., p1 s0, ...]``).

    ``tokenizer`` defaults to ``llm.tokenizer``. ``messages`` (the same prompts as chat
    conversations) are needed only for chat-only backends (see the module docstring); a prompt
    whose ids are None (see :func:`chat_prompt_ids`) runs as that chat.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    count = len(prompts_ids) if prompts_ids else len(messages or [])
    if messages is not None and prompts_ids and len(messages) != len(prompts_ids):
        raise ValueError(f"{len(prompts_ids)} token prompts but {len(messages)} conversations")
    loops = [
        agent_loop(llm, prompts_ids[i] if prompts_ids else None, messages[i] if messages is not None else None,
                   tool, params, stream=i * n + j, tokenizer=tokenizer)
        for i in range(count) for j in range(n)
    ]
    return run_loops(loops)


# --- replaying reference turns ----------------------------------------------------------------


class _ScriptedPolicy:
    """A backend that 'generates' the model turns of a reference trajectory, one per request."""

    model_name = "reference"

    def __init__(self, tokenizer, texts: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.texts = list(texts)

    def complete_tokens(self, prompts, params: SamplingParams) -> list[list[Completion]]:
        if len(self.texts) < len(prompts):
            raise ValueError("the rollout asked for more model turns than the reference has")
        texts, self.texts = self.texts[: len(prompts)], self.texts[len(prompts):]
        return [[Completion(t, _encode(self.tokenizer, t), "stop")] for t in texts]


class _ScriptedTool:
    """A tool that answers with the env turns of a reference trajectory, in order (the tools of a
    toolbox share one list of answers: the reference's env turns in the order they came)."""

    name = "reference"

    def __init__(self, stop_tag: str, answers: list[str], tag: str | None = RESULT_TAG) -> None:
        self.stop_tag = stop_tag
        self.answers = answers
        self.result_tag = tag

    def __call__(self, queries: list[str]) -> list[str]:
        if len(self.answers) < len(queries):
            raise ValueError("the rollout called its tool more often than the reference answers")
        out = self.answers[: len(queries)]
        del self.answers[: len(queries)]
        return out


def replay(tokenizer, prompt_ids: list[int], turns: Sequence[tuple[str, str]], params: RolloutParams,
           stop_tag: str | Sequence[str], result_tags: dict[str, str | None] | None = None) -> Trajectory:
    """The trajectory a rollout from ``prompt_ids`` produces when the policy writes exactly the
    ``"model"`` turns of ``turns`` and the tool (``stop_tag``, e.g. ``</question>``; several tags
    for a toolbox) answers with the ``"env"`` turns in between (raw answers: wrapped in ``<result>``,
    or ``result_tags[stop tag]``, and cut to ``params.max_tool_response_tokens`` here, as in a rollout).

    The rollout loop itself lays out the ids, so the response prefix and every injected result have
    loss mask 0 and the agent's own tokens mask 1, exactly as in a sampled rollout. The first model
    turn starts with ``params.response_prefix`` (a rollout injects it; the reference writes it).
    Raises ``ValueError`` when the turns do not alternate model / env, start and end with a model
    turn, or do not fit ``params.max_context_tokens``.
    """
    roles = [r for r, _ in turns]
    if not roles or roles[0] != "model" or roles[-1] != "model" or any(
            a == b for a, b in zip(roles, roles[1:])) or set(roles) - {"model", "env"}:
        raise ValueError(f"turns must alternate model / env, starting and ending with a model turn; got {roles}")
    texts = [t for r, t in turns if r == "model"]
    answers = [t for r, t in turns if r == "env"]
    prefix = params.response_prefix
    if not texts[0].startswith(prefix):
        raise ValueError(f"the first model turn must start with the response prefix {prefix!r}")
    texts[0] = texts[0][len(prefix):]
    # a sampled turn ends right at its stop tag (the engine stops there): no trailing whitespace
    stop_tags = (stop_tag,) if isinstance(stop_tag, str) else tuple(stop_tag)
    texts = [t.rstrip() if t.rstrip().endswith(stop_tags + tuple(params.end_tags)) else t for t in texts]
    for i, text in enumerate(texts[:-1]):
        if not text.rstrip().endswith(stop_tags):
            raise ValueError(f"model turn {i} is followed by a tool answer but does not end with "
                             f"{' or '.join(stop_tags)}")
    queue = list(answers)
    tags = result_tags or {}
    tool = Toolbox(*(_ScriptedTool(t, queue, tags.get(t, RESULT_TAG)) for t in stop_tags))
    # one tool call per answer and no turn budget: the reference decides where the trajectory ends
    budget = max(params.max_new_tokens, max(len(_encode(tokenizer, t)) for t in texts))
    params = dataclasses.replace(params, max_turns=len(answers), max_new_tokens=budget)
    [traj] = run_loops([agent_loop(_ScriptedPolicy(tokenizer, texts), list(prompt_ids), None, tool, params,
                                   tokenizer=tokenizer)])
    if traj.finish_reason == "length":
        raise ValueError(f"the trajectory does not fit max_context_tokens={params.max_context_tokens}")
    if queue or traj.num_tool_calls != len(answers):
        raise ValueError(f"the replay used {traj.num_tool_calls} of {len(answers)} tool answers")
    return traj
