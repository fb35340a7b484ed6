"""Test helpers for verl on CPU: verl's config composed with given overrides, a stand-in rollout
server whose ``generate()`` answers as verl's vLLM server does (a ``TokenOutput`` whose ids end
with the EOS the model sampled) from any factrl token-level engine, and an agent loop built the
way verl's ``AgentLoopWorker`` builds one.

verl is imported at the top on purpose: `make setup` installs it, so a missing or broken verl
fails these tests instead of skipping them.
"""

from __future__ import annotations

import asyncio
import threading

import hydra.utils
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from factrl.llm.base import SamplingParams
from factrl.rl import verl_backend

CPU_OVERRIDES = ["trainer.device=cpu", "trainer.n_gpus_per_node=1",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]


def cpu_config(*overrides: str):
    """verl's ppo_trainer config on CPU with ``overrides``."""
    return verl_backend.compose([*CPU_OVERRIDES, *overrides])


class StandInServer:
    """verl's ``server_manager.generate`` over a factrl engine with ``complete_tokens`` (one request
    at a time, as a single-replica server would serialise them). Reads the vLLM sampling fields
    verl's server reads and records every request."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.lock = threading.Lock()  # not an asyncio lock: tests run several event loops in turn
        self.requests: list[dict] = []

    def _complete(self, prompt_ids: list[int], params: SamplingParams):
        with self.lock:
            return self.llm.complete_tokens([prompt_ids], params)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        sp = dict(sampling_params)
        self.requests.append({"request_id": request_id, "prompt_ids": list(prompt_ids), **sp})
        params = SamplingParams(max_tokens=sp["max_tokens"], temperature=sp["temperature"], top_p=sp["top_p"],
                                stop=tuple(sp.get("stop", ())), include_stop=sp["include_stop_str_in_output"],
                                seed=sp.get("seed"), ignore_eos=sp.get("ignore_eos", False))
        [[c]] = await asyncio.to_thread(self._complete, list(prompt_ids), params)
        return TokenOutput(token_ids=list(c.token_ids), log_probs=c.logprobs, stop_reason="completed")


def build_loop(agent_name: str, config, server, tokenizer, tools, **loop_kwargs):
    """The agent loop registered as ``agent_name``, instantiated as ``AgentLoopWorker`` does (Hydra
    ``instantiate`` of the registry entry, verl's keyword arguments), inside a running event loop."""
    entry = dict(_agent_loop_registry[agent_name], **loop_kwargs)
    return hydra.utils.instantiate(
        config=entry, trainer_config=DictConfigWrap(config=config), server_manager=server, tokenizer=tokenizer,
        processor=None, hf_model_type=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(list(tools)))


GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


def run_loops(loops_and_rows, sampling=GREEDY) -> list:
    """``[(make_loop, row), ...]`` -> ``AgentLoopOutput`` list; each loop is built inside the running
    event loop (verl's loops bind to it), then all run concurrently."""

    async def main():
        return await asyncio.gather(*(make().run(dict(sampling), **row) for make, row in loops_and_rows))

    return asyncio.run(main())
