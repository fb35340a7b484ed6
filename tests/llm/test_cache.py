"""CachedLLM: reruns hit the cache, sampled unseeded calls bypass it, concurrent writers are safe."""

import multiprocessing as mp

import pytest

from factrl.llm.base import Completion, SamplingParams
from factrl.llm.cache import CachedLLM, DiskCache, cache_key


class CountingLLM:
    model_name = "fake"

    def __init__(self):
        self.calls = 0

    def chat(self, conversations, params):
        self.calls += len(conversations)
        return [[Completion(text=c[-1]["content"].upper() + str(k)) for k in range(params.n)] for c in conversations]

    def complete_tokens(self, prompts, params):
        self.calls += len(prompts)
        return [[Completion(text="", token_ids=list(p)[::-1])] for p in prompts]


def convs(n):
    return [[{"role": "user", "content": f"q{i}"}] for i in range(n)]


def test_rerun_hits_cache(tmp_path):
    inner = CountingLLM()
    llm = CachedLLM(inner, DiskCache(tmp_path / "c.sqlite"))
    first = llm.chat(convs(5), SamplingParams(n=2))
    assert inner.calls == 5
    again = CachedLLM(inner, DiskCache(tmp_path / "c.sqlite")).chat(convs(7), SamplingParams(n=2))
    assert inner.calls == 7  # only the two new conversations were sent
    assert again[:5] == first and again[6][1].text == "Q61"
    assert llm.complete_tokens([[1, 2]], SamplingParams())[0][0].token_ids == [2, 1]
    llm.complete_tokens([[1, 2]], SamplingParams())
    assert inner.calls == 8


def test_unseeded_sampling_not_cached(tmp_path):
    inner = CountingLLM()
    llm = CachedLLM(inner, DiskCache(tmp_path / "c.sqlite"))
    llm.chat(convs(2), SamplingParams(temperature=0.7))
    llm.chat(convs(2), SamplingParams(temperature=0.7))
    assert inner.calls == 4
    llm.chat(convs(2), SamplingParams(temperature=0.7, seed=1))
    llm.chat(convs(2), SamplingParams(temperature=0.7, seed=1))
    assert inner.calls == 6


def test_key_depends_on_params_and_model():
    p = SamplingParams()
    k = cache_key("m", "chat", [{"role": "user", "content": "x"}], p)
    assert k != cache_key("m2", "chat", [{"role": "user", "content": "x"}], p)
    assert k != cache_key("m", "chat", [{"role": "user", "content": "x"}], SamplingParams(max_tokens=3))


def _writer(path, start):
    cache = DiskCache(path)
    for i in range(start, start + 100):
        cache.put(f"k{i}", [Completion(text=str(i))])


def test_concurrent_writers(tmp_path):
    path = tmp_path / "c.sqlite"
    DiskCache(path)
    procs = [mp.get_context("spawn").Process(target=_writer, args=(path, s)) for s in (0, 50, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = DiskCache(path)
    assert len(cache) == 200 and cache.get("k149")[0].text == "149"


def test_wal_switch_retries_while_the_file_is_locked():
    """Switching a fresh file to WAL needs it to itself, and SQLite can refuse at once ("database
    is locked", no busy wait) while another connection opens it: seen in CI when Prefect tasks
    opened the synthesis cache together. The switch retries; other errors still raise."""
    import sqlite3

    from factrl.llm.cache import _use_wal

    class Conn:
        def __init__(self, failures, message="database is locked"):
            self.failures, self.message, self.statements = failures, message, []

        def execute(self, sql):
            self.statements.append(sql)
            if sql == "PRAGMA journal_mode":
                return type("Row", (), {"fetchone": lambda _self: ("delete",)})()
            if self.failures:
                self.failures -= 1
                raise sqlite3.OperationalError(self.message)
            return None

    conn = Conn(failures=2)
    _use_wal(conn)
    assert conn.statements.count("PRAGMA journal_mode=WAL") == 3 and conn.failures == 0
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _use_wal(Conn(failures=1, message="disk I/O error"))


def test_endpoint_cache_name_follows_a_model_directory_s_content_and_the_url(tmp_path):
    """A served checkpoint directory is keyed by its content (training rewrites it in place: its old
    answers must not serve the new weights) and an endpoint's model by its URL as well."""
    from factrl.llm.cache import endpoint_cache_name

    model = tmp_path / "reason_1"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"step 5")
    before = endpoint_cache_name(str(model), "http://127.0.0.1:8000/v1")
    (model / "model.safetensors").write_bytes(b"step 10")
    assert endpoint_cache_name(str(model), "http://127.0.0.1:8000/v1") != before
    assert endpoint_cache_name("gpt-4o-mini") == "gpt-4o-mini"
    assert endpoint_cache_name("gpt-4o-mini", "http://a/v1") != endpoint_cache_name("gpt-4o-mini", "http://b/v1")
