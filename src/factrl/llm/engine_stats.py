"""What the in-process engines computed, step by step: counters every :class:`~factrl.llm.local.LocalLLM` keeps.

A training step reads them without the rollout functions handing their engines over: every
engine registers itself in :data:`ENGINES` (weakly: a released engine leaves on its own), a
step takes an :func:`engine_counters` snapshot before and after, and :func:`engine_step_metrics`
turns the difference into the flat ``engine_<label>_*`` metrics of the step's row.
"""

from __future__ import annotations

import re
import weakref

# Every engine alive in this process.
ENGINES: weakref.WeakSet = weakref.WeakSet()

# The counters an engine keeps (``LocalLLM.stats``): prompt tokens given vs. tokens the model ran
# over to admit them (after the prefix cache), decode steps and the rows they decoded, speculative
# draft tokens and those accepted, tokens emitted, greedy requests answered by an identical one, and
# seconds inside the engine's steps.
COUNTERS = ("prompt_tokens", "prefilled_tokens", "decoded_tokens", "decode_steps", "decoded_rows", "draft_tokens",
            "accepted_tokens", "memo_hits", "seconds")


def new_counters() -> dict[str, float]:
    """A fresh engine's counters, all zero."""
    return {c: 0.0 if c == "seconds" else 0 for c in COUNTERS}


def engine_counters() -> dict[str, dict[str, float]]:
    """A snapshot of every live engine's cumulative counters, by a short label (the last component
    of its ``model_name``, non-alphanumerics as ``_``; a repeated label gets ``_2``...)."""
    out: dict[str, dict[str, float]] = {}
    for engine in sorted(ENGINES, key=id):
        label = re.sub(r"[^A-Za-z0-9]+", "_", str(engine.model_name).rstrip("/").rsplit("/", 1)[-1]).strip("_")
        label = label or "engine"
        k, unique = 2, label
        while unique in out:
            unique, k = f"{label}_{k}", k + 1
        out[unique] = {c: float(engine.stats.get(c, 0)) for c in COUNTERS}
    return out


def engine_step_metrics(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, float]:
    """What each engine computed between two :func:`engine_counters` snapshots, as flat metrics
    ``engine_<label>_<name>``: ``prefill_tokens`` (tokens the model ran over to admit prompts, after
    the prefix cache), ``decode_tokens`` (tokens emitted), ``mean_batch`` (rows per decode step),
    ``memo_hits`` (greedy requests answered by an identical one), ``time`` (seconds inside its
    steps) and ``decode_tokens_per_s``. Engines that did nothing are left out."""
    out: dict[str, float] = {}
    for label, now in after.items():
        then = before.get(label, dict.fromkeys(COUNTERS, 0.0))
        d = {c: now[c] - then[c] for c in COUNTERS}
        if d["decode_steps"] == 0 and d["prefilled_tokens"] == 0 and d["memo_hits"] == 0:
            continue
        key = f"engine_{label}_"
        out.update({key + "prefill_tokens": d["prefilled_tokens"], key + "decode_tokens": d["decoded_tokens"],
                    key + "mean_batch": d["decoded_rows"] / max(d["decode_steps"], 1.0),
                    key + "memo_hits": d["memo_hits"], key + "time": d["seconds"],
                    key + "decode_tokens_per_s": d["decoded_tokens"] / d["seconds"] if d["seconds"] > 0 else 0.0})
    return out
