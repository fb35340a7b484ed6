"""Shared fixtures: offline settings, ../shared/data and the repo root (factrl.testing.fixtures, shared
with bench/tests), Chromium, the session's SmolLM2 engine."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from factrl.testing.fixtures import REPO_ROOT, SHARED_DATA, repo_root, shared_data  # noqa: F401  (fixtures)

# Headless Chromium renders the trace page (tests/eval/test_traces.py); `make setup` installs it
# with apt-get where the machine allows, and the render test skips without it: said in the report
# header, and (the header is hidden under -q) as the skip reason in the -ra summary at the end.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = ("Chromium not found: the trace page and service page browser tests (tests/eval/test_traces.py, "
               "tests/service/test_app.py) will be SKIPPED; "
               "install it with `apt-get install chromium` (as root; `make setup` tries)")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def pytest_report_header(config):
    return [NO_CHROMIUM] if CHROMIUM is None else [f"chromium: {CHROMIUM}"]


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests (``make test-gpu``) skip, saying why, on a machine without a CUDA device."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False on this machine "
                                   "(`make test-gpu` runs these on the first machine with a GPU)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def local_llm():
    """One SmolLM2 engine per test session (loading costs ~5 s), in fp32 on every machine: the engine's
    exactness tests (a row decodes as it does alone, speculation changes no output) are fp32 properties;
    `auto` would pick bf16 on a CPU with AVX512-BF16, whose rounding depends on the batch's shape.
    The bf16 path has tests of its own."""
    from factrl.llm.local import LocalLLM

    return LocalLLM("smollm2-135m", max_batch=16, precision="fp32")


@pytest.fixture(scope="session")
def tokenizer(local_llm):
    """SmolLM2's tokenizer (the session engine's)."""
    return local_llm.tokenizer


@pytest.fixture
def script_llm(tokenizer):
    """``script_llm(reply, chat_only=False)``: an LLM that answers from a script, tokenized as SmolLM2."""
    from tests.script_llm import ScriptLLM

    return lambda reply, chat_only=False: ScriptLLM(tokenizer, reply, chat_only)


@pytest.fixture(scope="session")
def demo_world(tmp_path_factory):
    """(claims as dicts, BM25 index directory) of a 200-passage demo world."""
    from factrl.data.params import WorldParams
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
