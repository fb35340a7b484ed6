"""Shared fixtures: SmolLM2 (loaded once), a tiny demo world with a BM25 index, a scripted LLM."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never touch the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pyarrow.parquet as pq
import pytest

from factrl.llm.base import Completion, TokensUnsupported
from factrl.llm.local import trim_at_stop


@pytest.fixture(scope="session")
def local_llm():
    from factrl.llm.local import LocalLLM

    return LocalLLM("smollm2-135m", max_batch=16)


@pytest.fixture(scope="session")
def tokenizer(local_llm):
    return local_llm.tokenizer


@pytest.fixture(scope="session")
def demo_world(tmp_path_factory):
    """(claims as dicts, BM25 index directory) of a 200-passage demo world."""
    from factrl.config import WorldParams
    from factrl.data.world import write_world
    from factrl.retrieval.index import build_index

    d = tmp_path_factory.mktemp("world")
    write_world(WorldParams(seed=3, num_passages=200, num_claims=16, hops=(2,)), d / "p.parquet", d / "c.parquet")
    build_index(d / "p.parquet", d / "index", embedder=None)
    return pq.read_table(d / "c.parquet").to_pylist(), d / "index"


@pytest.fixture(scope="session")
def demo_retriever(demo_world):
    from factrl.retrieval.index import Retriever

    return Retriever(demo_world[1], mode="bm25")


class ScriptLLM:
    """A token-level fake that 'generates' ``reply(decoded_prompt)`` exactly as the local engine
    would: SmolLM2 token ids, cut at the first token whose decoding contains a stop string."""

    model_name = "script"

    def __init__(self, tokenizer, reply, chat_only: bool = False):
        self.tokenizer = tokenizer
        self.reply = reply
        self.chat_only = chat_only
        self.calls = []  # batch sizes of complete_tokens / chat calls

    def encode_chat(self, messages):
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _complete(self, prompt_text: str, params) -> Completion:
        ids = self.tokenizer(self.reply(prompt_text), add_special_tokens=False)["input_ids"]
        for j in range(1, len(ids) + 1):
            if j > params.max_tokens:
                break
            text, stopped = trim_at_stop(self.tokenizer.decode(ids[:j]), params.stop, params.include_stop)
            if stopped:
                return Completion(text, ids[:j], "stop")
        if len(ids) < params.max_tokens:  # the reply ends: the engine returns the EOS it sampled
            return Completion(self.tokenizer.decode(ids), ids + [self.tokenizer.eos_token_id], "stop")
        kept = ids[: params.max_tokens]
        return Completion(self.tokenizer.decode(kept), kept, "length" if len(ids) > params.max_tokens else "stop")

    def complete_tokens(self, prompts, params):
        if self.chat_only:
            raise TokensUnsupported("chat only")
        self.calls.append(len(prompts))
        return [[self._complete(self.tokenizer.decode(p), params)] for p in prompts]

    def chat(self, conversations, params):
        self.calls.append(len(conversations))
        out = []
        for conv in conversations:
            c = self._complete("\n".join(m["content"] for m in conv), params)
            if c.finish_reason == "stop":  # an OpenAI-style API drops the matched stop string
                for s in params.stop:
                    if c.text.endswith(s):
                        c = Completion(c.text[: -len(s)], None, "stop")
            out.append([c])
        return out


@pytest.fixture
def script_llm(tokenizer):
    return lambda reply, chat_only=False: ScriptLLM(tokenizer, reply, chat_only)
