"""factrl's agent loops inside verl: the rollout engine adapter, the agent-loop base, the tool base.

verl 0.9 runs multi-turn rollouts as *agent loops* (``verl.experimental.agent_loop``): for every
row its worker builds the loop registered under the row's ``agent_name`` and awaits
``run(sampling_params, **row) -> AgentLoopOutput``; generation goes through the worker's rollout
server (``generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput``: vLLM or
SGLang underneath), and tools are ``BaseTool`` objects loaded from
``actor_rollout_ref.rollout.multi_turn.tool_config_path``.

Inside :meth:`FactrlAgentLoop.run` factrl's own agent loop (:func:`factrl.agents.rollout.agent_loop`:
generate until the action's closing tag, call the tool, inject ``<result>`` with loss mask 0,
continue) runs unchanged: :func:`factrl.agents.loop.drive` answers its ``Generate`` actions with
:class:`VerlEngine` (verl's server; ids to completions by :mod:`factrl.llm.tokens`) and its
``CallTool`` actions with the loop's :class:`FactrlTool`. Parsing, prompts, masks, stop rules and
limits are the local trainer's, so the two paths produce the same token ids and masks for the
same samples (``tests/rl/test_verl_agent.py`` checks it on SmolLM2).

Which loops and tools exist (HARIS's two agents, the retriever, the served search agent) is a
recipe's business: ``factrl.recipes.haris.verl_loops``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from factrl.agents.loop import CallTool, Generate, drive
from factrl.agents.rollout import RolloutParams, Trajectory, agent_loop
from factrl.llm.base import Completion
from factrl.llm.tokens import completion_from_ids, encode_chat, eos_token_ids, vllm_sampling

# verl's per-request sampling fields that pass through to its server untouched (``logprobs``: verl
# asks for the sampled ids' log-probs when it corrects the rollout/trainer gap; they come back in the
# trajectory as ``response_logprobs``); temperature and top_p become the rollout's own (so
# validation's greedy settings reach factrl's loop).
PASSTHROUGH = ("top_k", "repetition_penalty", "logprobs")


def plain(value: Any) -> Any:
    """OmegaConf containers (what Hydra hands to constructors) as plain dicts / lists."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


class VerlEngine:
    """verl's rollout server behind the :class:`~factrl.agents.loop.Generate` interface of one
    trajectory (one sticky ``request_id``, so the server keeps its prefix cache)."""

    def __init__(self, server, tokenizer, eos_ids: set[int], passthrough: dict[str, Any] | None = None) -> None:
        self.server = server
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.passthrough = dict(passthrough or {})
        self.request_id = uuid.uuid4().hex
        self.seconds = 0.0  # time spent waiting for the server

    async def generate(self, action: Generate) -> Completion:
        started = time.perf_counter()
        output = await self.server.generate(
            request_id=self.request_id, prompt_ids=list(action.prompt_ids),
            sampling_params={**self.passthrough, **vllm_sampling(action.params)})
        self.seconds += time.perf_counter() - started
        return completion_from_ids(self.tokenizer, output.token_ids, action.params, eos_ids=self.eos_ids,
                                   prompt_tokens=len(action.prompt_ids), logprobs=output.log_probs)


class FactrlTool(BaseTool):
    """A factrl tool (``stop_tag``; a batched ``__call__(queries) -> answers``, see
    :class:`factrl.agents.tools.Tool`) as a verl ``BaseTool``.

    verl builds it from its tool config (``class_name`` + ``config``); subclasses turn the config
    into the factrl tool in :meth:`build`, lazily, in the worker process that uses it (a test may
    hand a built ``tool`` instead). ``execute`` answers one call's ``argument``; the agent loops
    reach it through :meth:`answer`, which keeps verl's create / execute / release life cycle.
    """

    default_name: ClassVar[str] = "tool"
    default_stop_tag: ClassVar[str] = "</search>"
    argument: ClassVar[str] = "query"
    description: ClassVar[str] = "a factrl tool"

    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None, *,
                 tool=None) -> None:
        config = dict(plain(config) or {})
        super().__init__(config, tool_schema or self.schema(config.get("name", self.default_name)))
        self.stop_tag = config.get("stop_tag", self.default_stop_tag)
        self._tool = tool
        self._build_lock = threading.Lock()

    @classmethod
    def schema(cls, name: str) -> OpenAIFunctionToolSchema:
        """The OpenAI function schema verl lists the tool under (one string argument)."""
        return OpenAIFunctionToolSchema.model_validate({
            "type": "function",
            "function": {"name": name, "description": cls.description,
                         "parameters": {"type": "object", "required": [cls.argument],
                                        "properties": {cls.argument: {"type": "string"}}}}})

    def build(self):
        """The factrl tool this verl tool runs (from ``self.config``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement build()")

    @property
    def tool(self):
        with self._build_lock:
            if self._tool is None:
                self._tool = self.build()
            return self._tool

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        query = str(parameters.get(self.argument) or "")
        answers = await asyncio.to_thread(self.tool, [query])  # the factrl tools block (HTTP, rollouts)
        return ToolResponse(text=answers[0]), 0.0, {}

    async def answer(self, query: str, create_kwargs: dict | None = None) -> str:
        """One call with verl's life cycle: create an instance, execute, release."""
        instance_id, _ = await self.create(create_kwargs=dict(create_kwargs or {}))
        try:
            response, _, _ = await self.execute(instance_id, {self.argument: query})
        finally:
            await self.release(instance_id)
        return response.text or ""


class FactrlAgentLoop(AgentLoopBase):
    """A verl agent loop that runs factrl's :func:`~factrl.agents.rollout.agent_loop`.

    Subclasses name their tool (``tool_name``, from verl's tool config) and their rollout defaults
    (``default_params``); the agent-loop config entry may add ``rollout: {field: value}`` overrides of
    :class:`~factrl.agents.rollout.RolloutParams`. From verl's config come the sampling temperature
    and top-p (per request, so validation's settings apply), the tool calls allowed
    (``multi_turn.max_user_turns``) and the token budget: a response never exceeds
    ``rollout.response_length`` (verl pads responses to it).
    """

    tool_name: ClassVar[str | None] = None
    default_params: ClassVar[Callable[..., RolloutParams]] = RolloutParams

    def __init__(self, *args, tools=None, rollout: dict | None = None, name: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.name = name
        overrides = dict(plain(rollout) or {})
        if "end_tags" in overrides:
            overrides["end_tags"] = tuple(overrides["end_tags"])
        self.base_params = type(self).default_params(**overrides)
        found = {t.name: t for t in (tools.tools if tools is not None else [])}
        self.tool: FactrlTool | None = None
        if self.tool_name is not None:
            if self.tool_name not in found:
                raise ValueError(f"agent loop {type(self).__name__} needs the verl tool {self.tool_name!r} "
                                 f"(actor_rollout_ref.rollout.multi_turn.tool_config_path); loaded: {sorted(found)}")
            self.tool = found[self.tool_name]
        model_config = getattr(self.config.actor_rollout_ref, "model", None)
        self.eos_ids = eos_token_ids(self.tokenizer, _generation_config(model_config))

    def rollout_params(self, sampling_params: dict[str, Any], prompt_len: int) -> RolloutParams:
        """This row's limits and sampling: the loop's defaults under verl's config (see the class)."""
        turns = self.rollout_config.multi_turn.get("max_user_turns")
        budget = prompt_len + int(self.rollout_config.response_length)
        return dataclasses.replace(
            self.base_params,
            temperature=float(sampling_params.get("temperature", self.base_params.temperature)),
            top_p=float(sampling_params.get("top_p", self.base_params.top_p)),
            max_turns=int(turns) if turns is not None else self.base_params.max_turns,
            max_context_tokens=min(self.base_params.max_context_tokens, budget),
            seed=None)

    def prompt_ids(self, messages: list[dict], row: dict[str, Any]) -> list[int]:
        ids = encode_chat(self.tokenizer, messages)
        limit = int(self.rollout_config.prompt_length)
        if len(ids) > limit:  # verl would cut the system prompt's start: refuse instead
            raise ValueError(f"row {row.get('index')}: the prompt has {len(ids)} tokens, more than "
                             f"rollout.prompt_length = {limit}; raise data.max_prompt_length")
        return ids

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        prompt_ids = self.prompt_ids(messages, kwargs)
        params = self.rollout_params(sampling_params, len(prompt_ids))
        engine = VerlEngine(self.server_manager, self.tokenizer, self.eos_ids,
                            {k: sampling_params[k] for k in PASSTHROUGH if k in sampling_params})
        tools_kwargs = plain(kwargs.get("tools_kwargs") or {})
        create_kwargs = dict(tools_kwargs.get(self.tool_name or "", {}).get("create_kwargs", {}))
        tool_seconds = 0.0

        async def call_tool(action: CallTool) -> str:
            nonlocal tool_seconds
            started = time.perf_counter()
            try:
                return await action.tool.answer(action.query, create_kwargs)
            finally:
                tool_seconds += time.perf_counter() - started

        loop = agent_loop(engine, prompt_ids, None, self.tool, params, tokenizer=self.tokenizer)
        traj: Trajectory = await drive(loop, engine.generate, call_tool)
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids, response_ids=traj.response_ids, response_mask=traj.loss_mask,
            response_logprobs=traj.response_logprobs,
            num_turns=1 + sum(role == "model" for role, _ in traj.turns) + traj.num_tool_calls,
            metrics=AgentLoopMetrics(generate_sequences=engine.seconds, tool_calls=tool_seconds),
            extra_fields={"num_tool_calls": traj.num_tool_calls, "finish_reason": traj.finish_reason})


def _generation_config(model_config) -> Any:
    """The policy's ``generation_config`` (its EOS ids), read from ``model.path`` when it is there."""
    path = getattr(model_config, "path", None) if model_config is not None else None
    if not path:
        return None
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):  # no generation_config.json: the tokenizer's EOS alone
        return None
