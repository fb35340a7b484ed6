"""On-disk cache of LLM results, so that a rerun of a stage re-pays nothing.

Only reproducible calls are cached: greedy (``temperature == 0``) or seeded ones. The key is the
sha256 of (model name, call kind, input, sampling params) in canonical JSON; the value is the list
of completions. Storage is one SQLite database in WAL mode, which lets many processes (Prefect
tasks, DVC stages) read and write concurrently; a write is a single ``INSERT OR REPLACE``.

Nothing but the model name, the inputs, the params and the outputs enters the cache: backends keep
their credentials to themselves, so an API key can never be part of a key or a value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from factrl.io import model_digest
from factrl.llm.base import Completion, Message, SamplingParams, call_each
from factrl.llm.counting import expose_tokens
from factrl.llm.models import cache_dir


def endpoint_cache_name(model: str, base_url: str = "") -> str:
    """The name a model's calls are cached under: a model directory by its content as well (training
    rewrites it in place, so its name alone would serve an older model's answers), an endpoint's
    model with its URL (two servers may serve different models under one name)."""
    name = model if not Path(model).is_dir() else f"{model}@{model_digest(model)[:16]}"
    return f"{name}@{base_url}" if base_url else name


def cacheable(params: SamplingParams) -> bool:
    """A call is reproducible, hence cacheable, when greedy or seeded."""
    return params.greedy or params.seed is not None


def cache_key(model: str, kind: str, item, params: SamplingParams) -> str:
    """sha256 over canonical JSON of everything that determines the output."""
    fields = dataclasses.asdict(params)
    if not fields["watch_ids"]:  # added later: keys of calls without it stay what they were
        del fields["watch_ids"]
    payload = {"model": model, "kind": kind, "input": item, "params": fields}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _use_wal(conn: sqlite3.Connection, attempts: int = 100) -> None:
    """Put the database in WAL mode (persistent: done once per file).

    Switching the journal mode needs the database to itself and SQLite reports "database is
    locked" at once instead of waiting out the busy timeout, so connections opened together on a
    fresh file (Prefect tasks each opening the cache) retry until one of them has switched it.
    """
    for attempt in range(attempts):
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


class DiskCache:
    """A sha256-keyed store of completion lists in SQLite (WAL), safe for concurrent writers."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else cache_dir() / "llm_cache.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()  # sqlite connections must not cross threads
        with self._conn() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60)
            _use_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> list[Completion] | None:
        row = self._conn().execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return [Completion(**c) for c in json.loads(row[0])]

    def put(self, key: str, completions: Sequence[Completion]) -> None:
        value = json.dumps([dataclasses.asdict(c) for c in completions])
        with self._conn() as conn:  # one transaction per entry: a crash never leaves half an entry
            conn.execute("INSERT OR REPLACE INTO completions (key, value) VALUES (?, ?)", (key, value))

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM completions").fetchone()[0]


class CachedLLM:
    """Wrap any :class:`~factrl.llm.base.LLM`: cached inputs are served from disk, the rest are
    sent to the inner backend in one batch. Non-reproducible calls pass straight through. With a
    backend that streams results, each answer is stored the moment it arrives.

    ``key_name`` replaces the model name in the cache keys: a model directory that training rewrites
    keeps its name, so callers key it by its content (e.g. ``models/reason_2@<digest>``). The inner
    backend's tokenizer stays visible, so agent loops keep running token-level through the cache.
    """

    def __init__(self, inner, cache: DiskCache | None = None, key_name: str | None = None):
        self.inner = inner
        self.cache = cache if cache is not None else DiskCache()  # an empty cache is falsy
        self.model_name = inner.model_name
        self.key_name = key_name or inner.model_name
        self.hits = 0
        self.misses = 0
        expose_tokens(self, inner)

    def chat(self, conversations: Sequence[Sequence[Message]], params: SamplingParams) -> list[list[Completion]]:
        items = [[dict(m) for m in c] for c in conversations]
        return self._run("chat", items, params, self.inner.chat)

    def complete_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        items = [list(p) for p in prompts]
        return self._run("tokens", items, params, self.inner.complete_tokens)

    def _run(self, kind: str, items: list, params: SamplingParams, call: Callable) -> list[list[Completion]]:
        if not cacheable(params):
            return call(items, params)
        keys = [cache_key(self.key_name, kind, it, params) for it in items]
        results: list[list[Completion] | None] = [self.cache.get(k) for k in keys]
        missing = [i for i, r in enumerate(results) if r is None]
        self.hits += len(items) - len(missing)
        self.misses += len(missing)
        if missing:
            def store(j: int, comps: list[Completion]) -> None:
                self.cache.put(keys[missing[j]], comps)

            fresh = call_each(call, [items[i] for i in missing], params, store)
            for i, comps in zip(missing, fresh):
                results[i] = comps
        return results  # type: ignore[return-value]
