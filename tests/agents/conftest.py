"""Shared fixtures: SmolLM2 (loaded once), a tiny demo world with a BM25 index, a scripted LLM."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never touch the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pyarrow.parquet as pq
import pytest

from tests.script_llm import ScriptLLM


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


@pytest.fixture
def script_llm(tokenizer):
    return lambda reply, chat_only=False: ScriptLLM(tokenizer, reply, chat_only)
