"""M2R, micro-macro retrieval: retrieve while thinking, save key information, answer from it.

One agent answers a multi-hop question in the paper's staged protocol (eq. 2)::

    <think>...</think> <macro_tool_call>query</macro_tool_call> <macro_result>passages</macro_result>
    ... <key_info_save>{"birthplace of Ilse Parrow": "Tessik"}</key_info_save> ...
    <answer><micro_tool_call>birthplace of Ilse Parrow</micro_tool_call>
    <micro_response>{"birthplace of Ilse Parrow": "Tessik"}</micro_response>
    She was born in \\boxed{Tessik}.</answer>

Three tools, one :class:`~factrl.agents.tools.Toolbox` per trajectory, through the shared agent loop
(:func:`factrl.agents.rollout.agent_loop`):

* :class:`MacroTool` (``</macro_tool_call>``): the retriever, top-k passages in ``<macro_result>``;
  shared by every trajectory and called in batches.
* :class:`SaveTool` (``</key_info_save>``): writes the JSON object into this trajectory's
  :class:`KeyInfoStore`; it injects nothing (the paper's save has no response). A save that is not
  a JSON object of short scalar values is refused and recorded: a format error, never a crash.
* :class:`MicroTool` (``</micro_tool_call>``): looks the queried keys up in the store and answers
  in ``<micro_response>`` (a JSON object of what was found, or a sentence saying nothing was).

Injected spans (``<macro_result>``, ``<micro_response>``, the ``<think>`` prefix) have loss mask 0,
so GRPO and the warm start train only the agent's own tokens (the paper's eq. 4).

The curriculum (paper section 3.4) changes what counts as a valid format: stage 1 (macro retrieval
and key saving) needs a retrieval, a valid save and a boxed answer; stage 2 (micro retrieval) also
needs the answer to fetch what it states from the store. :func:`parse_m2r` never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from factrl.agents.loop import AgentLoop, run_loops
from factrl.agents.protocol import (
    Segment,
    boxed_spans,
    escape_tags,
    parse_tags,
    sequence_error,
    span_error,
    tag_regex,
)
from factrl.agents.rollout import RolloutParams, Trajectory, agent_loop, chat_prompt_ids
from factrl.agents.tools import RetrieverTool, Toolbox
from factrl.llm.base import Message
from factrl.text import normalize_answer

THINK_TAGS = ("think", "macro_tool_call", "macro_result", "key_info_save", "answer")
ANSWER_TAGS = ("micro_tool_call", "micro_response")
M2R_TAGS = THINK_TAGS + ANSWER_TAGS
M2R_TAG_RE = tag_regex(M2R_TAGS)
STAGES = (1, 2)
AGENT = "m2r"  # the agent's name in reference rows and the warm start
MAX_KEYS = 16  # a save or a store holding more is refused: the repository keeps a handful of facts
MAX_VALUE_CHARS = 200  # values are answers, not passages
MACRO_STOP = "</macro_tool_call>"
NOT_FOUND = "No key information is saved under {key}: say that it could not be retrieved."

SYSTEM_FULL = """\
You answer a question in two phases.

Thinking phase. Reason inside <think> </think>. To look something up in the encyclopedia, write a \
short query inside <macro_tool_call> </macro_tool_call>; passages come back inside <macro_result> \
</macro_result>. You may look up several times. Each time you learn a fact the answer depends on, \
save it as a JSON object inside <key_info_save> </key_info_save>, for example \
<key_info_save>{"founder of Orlen Studios": "Ilse Parrow"}</key_info_save>. Keys are short \
descriptions, values are the facts themselves.

Answer phase. Write the answer inside <answer> </answer>. Before stating a fact, fetch it from your \
saved key information: write its key inside <micro_tool_call> </micro_tool_call>; the saved value \
comes back inside <micro_response> </micro_response>. Base the answer only on what comes back; if \
nothing does, say so instead of guessing. Put every saved value you use in the answer inside \
\\boxed{ }. Never write <macro_result> or <micro_response> yourself."""

SYSTEM_SHORT = """\
Answer the question. Think in <think> </think>; search with <macro_tool_call> </macro_tool_call> \
(passages come back in <macro_result> </macro_result>); save each fact as JSON in <key_info_save> \
</key_info_save>. Then answer in <answer> </answer>: fetch a saved fact with <micro_tool_call>key\
</micro_tool_call> (it comes back in <micro_response> </micro_response>) and box the value: \\boxed{ }."""

PROMPTS = {"full": SYSTEM_FULL, "short": SYSTEM_SHORT}


def m2r_messages(question: str, style: str = "full") -> list[Message]:
    if style not in PROMPTS:
        raise ValueError(f"unknown M2R prompt style {style!r}; known: {sorted(PROMPTS)}")
    return [{"role": "system", "content": PROMPTS[style]}, {"role": "user", "content": f"Question: {question}"}]


def default_m2r_params(**kw) -> RolloutParams:
    """Rollout limits of one M2R trajectory: macro searches, saves and micro calls all count as tool
    turns; the trajectory ends with ``</answer>``."""
    return RolloutParams(**{"max_turns": 8, "max_new_tokens": 128, "max_context_tokens": 2048,
                            "max_tool_response_tokens": 256, "end_tags": ("</answer>",),
                            "response_prefix": "<think>", **kw})


# --------------------------------------------------------------------------------------------
# the key-information store
# --------------------------------------------------------------------------------------------


def validate_save(text: str) -> tuple[dict[str, str], str | None]:
    """The key/value pairs of one ``<key_info_save>`` body and the first problem (None when valid).

    Valid: a non-empty JSON object of at most :data:`MAX_KEYS` non-empty string keys whose values are
    strings or numbers (stored as strings) of at most :data:`MAX_VALUE_CHARS` characters.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError) as exc:
        return {}, f"key_info_save is not valid JSON: {exc}"
    if not isinstance(data, dict):
        return {}, f"key_info_save must be a JSON object, got {type(data).__name__}"
    if not data:
        return {}, "key_info_save holds no key"
    if len(data) > MAX_KEYS:
        return {}, f"key_info_save holds {len(data)} keys (at most {MAX_KEYS})"
    out: dict[str, str] = {}
    for key, value in data.items():
        if not key.strip():
            return {}, "key_info_save has an empty key"
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return {}, f"key_info_save value of {key!r} must be a string or a number, got {type(value).__name__}"
        value = str(value).strip()
        if not value or len(value) > MAX_VALUE_CHARS:
            return {}, f"key_info_save value of {key!r} must have 1..{MAX_VALUE_CHARS} characters"
        out[key.strip()] = value
    return out, None


@dataclass
class KeyInfoStore:
    """One trajectory's key-information repository M: what its valid saves wrote, and the errors of
    the saves it refused (each one a format failure of the trajectory)."""

    values: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def save(self, text: str) -> str | None:
        """Validate and store one save; returns the problem (None when stored)."""
        pairs, error = validate_save(text)
        if error is None and len(set(self.values) | set(pairs)) > MAX_KEYS:
            error = f"the store would hold more than {MAX_KEYS} keys"
        if error is not None:
            self.errors.append(error)
            return error
        self.values.update(pairs)
        return None

    def lookup(self, key: str) -> tuple[str, str] | None:
        """``(key, value)`` saved under ``key``: the exact key first, then the same key up to case,
        punctuation and articles (the paper's dictionary-style lookup)."""
        key = key.strip()
        if key in self.values:
            return key, self.values[key]
        wanted = normalize_answer(key)
        for k, v in self.values.items():
            if normalize_answer(k) == wanted:
                return k, v
        return None


def micro_keys(query: str) -> list[str]:
    """The keys a ``<micro_tool_call>`` asks for: a plain key, a JSON string or list of keys, or a
    JSON object ``{"query": key or [keys]}`` (the paper's form)."""
    query = query.strip()
    try:
        data = json.loads(query)
    except (json.JSONDecodeError, RecursionError):
        data = query
    if isinstance(data, dict):
        data = data.get("query", data.get("key", ""))
    items = data if isinstance(data, list) else [data]
    return [str(k).strip() for k in items if str(k).strip()]


def micro_answer(store: KeyInfoStore, query: str) -> str:
    """The ``<micro_response>`` body for ``query``: the found pairs as a JSON object, and a sentence
    for each key with nothing saved."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for key in micro_keys(query) or [query.strip()]:
        hit = store.lookup(key)
        if hit is None:
            missing.append(key)
        else:
            found[hit[0]] = hit[1]
    parts = [json.dumps(found, ensure_ascii=False)] if found else []
    parts += [NOT_FOUND.format(key=json.dumps(k, ensure_ascii=False)) for k in missing]
    return escape_tags("\n".join(parts), M2R_TAG_RE)


# --------------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------------


class MacroTool(RetrieverTool):
    """Macro retrieval: top-k passages behind ``</macro_tool_call>``, injected in ``<macro_result>``."""

    name = "macro_retriever"
    result_tag = "macro_result"

    def __init__(self, retriever, k: int = 5) -> None:
        super().__init__(retriever, k=k, stop_tag=MACRO_STOP)

    def __call__(self, queries: list[str]) -> list[str]:
        return [escape_tags(a, M2R_TAG_RE) for a in super().__call__(queries)]


class SaveTool:
    """``</key_info_save>``: writes into one trajectory's store; injects nothing."""

    name = "key_info_save"
    stop_tag = "</key_info_save>"
    result_tag = None

    def __init__(self, store: KeyInfoStore) -> None:
        self.store = store

    def __call__(self, queries: list[str]) -> list[str]:
        for q in queries:
            self.store.save(q)
        return ["" for _ in queries]


class MicroTool:
    """``</micro_tool_call>``: answers from one trajectory's store in ``<micro_response>``."""

    name = "micro_retriever"
    stop_tag = "</micro_tool_call>"
    result_tag = "micro_response"

    def __init__(self, store: KeyInfoStore) -> None:
        self.store = store

    def __call__(self, queries: list[str]) -> list[str]:
        return [micro_answer(self.store, q) for q in queries]


# stop tag -> the wrapper of its answers (what :func:`factrl.agents.rollout.replay` needs)
RESULT_TAGS = {MACRO_STOP: MacroTool.result_tag, SaveTool.stop_tag: SaveTool.result_tag,
               MicroTool.stop_tag: MicroTool.result_tag}
STOP_TAGS = tuple(RESULT_TAGS)


def reference_text(turns: Sequence[dict]) -> str:
    """The response text of reference turns (``{role, text}``; env turns raw tool answers), each
    answer wrapped as the tool whose stop tag ended the model turn before it wraps it."""
    out, tag = [], None
    for t in turns:
        if t["role"] == "model":
            out.append(t["text"])
            tag = next((s for s in STOP_TAGS if t["text"].rstrip().endswith(s)), None)
        else:
            wrapper = RESULT_TAGS.get(tag, "result")
            out.append(f"\n<{wrapper}>\n{t['text']}\n</{wrapper}>\n" if wrapper else t["text"])
    return "".join(out)


# --------------------------------------------------------------------------------------------
# parsing and format validity
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class M2RParse:
    """What one M2R response did. ``saved``: the pairs of its valid saves, in order (later saves of a
    key win); ``boxed``: the boxed values of the answer; ``final_answer``: them joined (None when the
    answer boxes nothing); ``error``: the first format violation of the stage (None when valid)."""

    macro_queries: tuple[str, ...]
    saved: dict[str, str]
    save_errors: tuple[str, ...]
    micro_queries: tuple[str, ...]
    boxed: tuple[str, ...]
    final_answer: str | None
    format_valid: bool
    error: str | None

    @property
    def key_values(self) -> list[str]:
        return list(self.saved.values())


def _actions_error(tagged: list[Segment], action: str, result: str) -> str | None:
    """Each ``action`` non-empty and answered by a ``result`` right after it; results only after actions."""
    error = sequence_error(tagged, action, result)
    if error is None and any(s.tag == action and not s.text.strip() for s in tagged):
        error = f"empty <{action}>"
    return error


def _answer_error(answer: str, saved: dict[str, str], stage: int) -> tuple[tuple[str, ...], str | None]:
    """Micro queries of the ``<answer>`` body and its first violation: micro calls answered, at least
    one box, stage 2's micro retrieval, and no saved value stated outside a box."""
    segments = parse_tags(answer, M2R_TAG_RE)
    tagged = [s for s in segments if s.tag is not None]
    queries = tuple(s.text.strip() for s in tagged if s.tag == "micro_tool_call")
    for s in tagged:
        if s.tag not in ANSWER_TAGS:
            return queries, f"tag <{s.tag}> not allowed inside <answer>"
        if not s.closed:
            return queries, f"unclosed <{s.tag}> inside <answer>"
        if s.tag == "micro_tool_call" and M2R_TAG_RE.search(s.text):
            return queries, "nested tag inside <micro_tool_call>"
    error = _actions_error(tagged, "micro_tool_call", "micro_response")
    if error is not None:
        return queries, error
    written = "".join(s.text for s in segments if s.tag is None)  # the agent's own answer text
    spans = boxed_spans(written)
    if not spans:
        return queries, "no \\boxed{} in <answer>"
    if stage >= 2 and not queries:
        return queries, "stage 2 needs a <micro_tool_call> in the answer"
    unboxed, last = [], 0
    for start, end, _ in spans:
        unboxed.append(written[last:start])
        last = end
    unboxed = normalize_answer(" ".join(unboxed + [written[last:]]))
    for value in saved.values():
        v = normalize_answer(value)
        if v and re.search(rf"\b{re.escape(v)}\b", unboxed):
            return queries, f"a saved value is stated outside \\boxed{{}}: {value!r}"
    return queries, None


def parse_m2r(text: str, stage: int = 2) -> M2RParse:
    """Parse one M2R response (generated text with injected spans) and check its format for the
    curriculum ``stage`` (1 or 2; see the module docstring). Never raises."""
    try:
        if stage not in STAGES:
            raise ValueError(f"unknown M2R stage {stage!r}; expected one of {STAGES}")
        segments = parse_tags(text, M2R_TAG_RE)
        tagged = [s for s in segments if s.tag is not None]
        macro = tuple(s.text.strip() for s in tagged if s.tag == "macro_tool_call")
        saved: dict[str, str] = {}
        save_errors: list[str] = []
        for s in tagged:
            if s.tag == "key_info_save":
                pairs, problem = validate_save(s.text)
                saved.update(pairs)
                if problem is not None:
                    save_errors.append(problem)
        answers = [s for s in tagged if s.tag == "answer"]
        micro: tuple[str, ...] = ()
        boxed: tuple[str, ...] = ()
        if answers:
            body = "".join(s.text for s in parse_tags(answers[-1].text, M2R_TAG_RE) if s.tag is None)
            boxed = tuple(c for _, _, c in boxed_spans(body) if c)
        # the answer may hold tags: its own grammar is checked apart (_answer_error)
        error = span_error(segments, THINK_TAGS, ("macro_result", "answer"), M2R_TAG_RE)
        if error is None:
            error = _actions_error(tagged, "macro_tool_call", "macro_result")
        if error is None and save_errors:
            error = save_errors[0]
        if error is None and not macro:
            error = "no <macro_tool_call> before the answer"
        if error is None and not saved:
            error = "no <key_info_save> before the answer"
        if error is None and len(answers) != 1:
            error = f"expected exactly one <answer>, found {len(answers)}"
        if error is None and tagged[-1].tag != "answer":
            error = "<answer> is not the last segment"
        if answers:
            micro, answer_error = _answer_error(answers[-1].text, saved, stage)
            error = error or answer_error
        final = ", ".join(dict.fromkeys(boxed)) if boxed else None
        return M2RParse(macro, saved, tuple(save_errors), micro, boxed, final, error is None, error)
    except Exception as exc:  # the parser must never take a rollout or a reward down
        return M2RParse((), {}, (), (), (), None, False, f"parser error: {exc!r}")


# --------------------------------------------------------------------------------------------
# rollouts
# --------------------------------------------------------------------------------------------


@dataclass
class M2RResult:
    """One M2R rollout for one question: the trajectory, its parse for the stage and its store."""

    question: str
    trajectory: Trajectory
    parse: M2RParse
    store: KeyInfoStore

    @property
    def answer(self) -> str | None:
        return self.parse.final_answer


def m2r_loop(llm, question: str, macro_tool: MacroTool, params: RolloutParams | None = None, *, stage: int = 2,
             style: str = "full", stream: int = 0) -> AgentLoop[M2RResult]:
    """One M2R rollout as an agent loop: a fresh store, the three tools, the shared loop."""
    store = KeyInfoStore()
    tools = Toolbox(macro_tool, SaveTool(store), MicroTool(store))
    conv = m2r_messages(question, style)
    traj = yield from agent_loop(llm, chat_prompt_ids(llm, conv), conv, tools, params or default_m2r_params(),
                                 stream=stream)
    return M2RResult(question, traj, parse_m2r(traj.response_text, stage), store)


def run_m2r(llm, questions: Sequence[str], macro_tool: MacroTool, params: RolloutParams | None = None, *,
            n: int = 1, stage: int = 2, style: str = "full") -> list[M2RResult]:
    """``n`` M2R rollouts per question (question-major), all on one scheduler."""
    return run_loops([m2r_loop(llm, q, macro_tool, params, stage=stage, style=style, stream=i * n + j)
                      for i, q in enumerate(questions) for j in range(n)])
