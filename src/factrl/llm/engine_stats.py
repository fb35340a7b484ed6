"""What the in-process engines computed, step by step: counters every :class:`~factrl.llm.local.LocalLLM` keeps.

A training step reads them without the rollout functions handing their engines over: every
engine registers itself in :data:`ENGINES` (weakly: a released engine leaves on its own), a
step takes an :func:`engine_counters` snapshot before and after, and :func:`engine_step_metrics`
turns the difference into the flat ``engine_<label>_*`` metrics of the step's row.
"""

from __future__ import annotations

import itertools
import re
import weakref
from collections.abc import Iterator


class EngineRegistry:
    """The engines alive in this process, held weakly (a released engine leaves on its own), iterated
    in the order they registered: the order never depends on memory addresses."""

    def __init__(self) -> None:
        self._serials: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._next = itertools.count()

    def add(self, engine) -> None:
        self._serials.setdefault(engine, next(self._next))

    def __iter__(self) -> Iterator:
        return iter([e for e, _ in sorted(list(self._serials.items()), key=lambda item: item[1])])

    def __len__(self) -> int:
        return len(self._serials)


# Every engine alive in this process.
ENGINES = EngineRegistry()

# The counters an engine keeps (``LocalLLM.stats``): prompt tokens given vs. tokens the model ran
# over to admit them (after the prefix cache), decode steps and the rows they decoded, speculative
# draft tokens and those accepted, tokens emitted, greedy requests answered by an identical one, and
# seconds inside the engine's steps.
COUNTERS = ("prompt_tokens", "prefilled_tokens", "decoded_tokens", "decode_steps", "decoded_rows", "draft_tokens",
            "accepted_tokens", "memo_hits", "seconds")


def new_counters() -> dict[str, float]:
    """A fresh engine's counters, all zero."""
    return {c: 0.0 if c == "seconds" else 0 for c in COUNTERS}


def _label(engine) -> str:
    """The last component of an engine's ``model_name``, non-alphanumerics as ``_``."""
    label = re.sub(r"[^A-Za-z0-9]+", "_", str(engine.model_name).rstrip("/").rsplit("/", 1)[-1]).strip("_")
    return label or "engine"


def engine_counters() -> dict[int, tuple[str, dict[str, float]]]:
    """A snapshot of every live engine's cumulative counters: ``id(engine) -> (label, counters)``."""
    return {id(e): (_label(e), {c: float(e.stats.get(c, 0)) for c in COUNTERS}) for e in list(ENGINES)}


def engine_step_metrics(before: dict[int, tuple[str, dict[str, float]]],
                        after: dict[int, tuple[str, dict[str, float]]]) -> dict[str, float]:
    """What each engine computed between two :func:`engine_counters` snapshots, as flat metrics
    ``engine_<label>_<name>``: ``prefill_tokens`` (tokens the model ran over to admit prompts, after
    the prefix cache), ``decode_tokens`` (tokens emitted), ``mean_batch`` (rows per decode step),
    ``memo_hits`` (greedy requests answered by an identical one), ``time`` (seconds inside its
    steps) and ``decode_tokens_per_s``. Engines that did nothing are left out, and only the engines
    that did something share out the labels (a repeated one gets ``_2``, ``_3``... in order of
    creation): an idle engine still alive, say one another run left for the garbage collector, never
    renames this run's metrics."""
    zero = dict.fromkeys(COUNTERS, 0.0)
    active = []
    for engine_id, (label, now) in after.items():
        then_label, then = before.get(engine_id, (label, zero))
        d = {c: now[c] - (then[c] if then_label == label else 0.0) for c in COUNTERS}
        if d["decode_steps"] or d["prefilled_tokens"] or d["memo_hits"]:
            active.append((label, d))
    out: dict[str, float] = {}
    taken: set[str] = set()
    for label, d in active:  # in the order the engines registered (EngineRegistry)
        k, unique = 2, label
        while unique in taken:
            unique, k = f"{label}_{k}", k + 1
        taken.add(unique)
        key = f"engine_{unique}_"
        out.update({key + "prefill_tokens": d["prefilled_tokens"], key + "decode_tokens": d["decoded_tokens"],
                    key + "mean_batch": d["decoded_rows"] / max(d["decode_steps"], 1.0),
                    key + "memo_hits": d["memo_hits"], key + "time": d["seconds"],
                    key + "decode_tokens_per_s": d["decoded_tokens"] / d["seconds"] if d["seconds"] > 0 else 0.0})
    return out
