"""What one claim cost: model calls, input and output tokens per model, and USD from a price table.

Claims of a batch share the engine's calls, so the engine's own counters cannot say what one claim
used; its trajectories can. A token-level trajectory records every id: each run of generated ids
(loss mask 1) is one model call, whose input is the prompt plus every response id before it. A
chat-only trajectory (an API without token access) has no ids; its tokens are estimated from its
text at 4 characters a token and the usage says so (``estimated``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers


@dataclass
class Usage:
    """Model calls and tokens of one model; ``estimated`` when counted from text, not ids."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    estimated: bool = False

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.estimated = self.estimated or other.estimated


def trajectory_usage(traj, prompt_chars: int = 0) -> Usage:
    """Calls and tokens of one trajectory (a :class:`factrl.agents.rollout.Trajectory`);
    ``prompt_chars``: the length of its prompt messages, for a chat-only trajectory's estimate."""
    model_turns = [text for role, text in traj.turns if role == "model"]
    if traj.response_ids and len(traj.loss_mask) == len(traj.response_ids):
        usage, prompt = Usage(), len(traj.prompt_ids)
        run_start = None
        for i, m in enumerate([*traj.loss_mask, 0]):
            if m == 1 and run_start is None:
                run_start = i
            elif m != 1 and run_start is not None:
                usage.calls += 1
                usage.tokens_in += prompt + run_start
                usage.tokens_out += i - run_start
                run_start = None
        # a turn that generated nothing still was a call (its input was sent)
        usage.calls = max(usage.calls, len(model_turns))
        return usage
    # chat only: each call sends the prompt and the conversation so far
    usage, seen = Usage(estimated=True), prompt_chars
    for role, text in traj.turns:
        if role == "model":
            usage.calls += 1
            usage.tokens_in += (seen + 1) // CHARS_PER_TOKEN
            usage.tokens_out += (len(text) + 1) // CHARS_PER_TOKEN
        seen += len(text)
    return usage


def price_of(model: str, prices: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """USD per 1M (input, output) tokens of ``model`` (an LLM spec): its entry in ``prices`` (the
    spec, or the bare model name of an ``openai:`` spec), (0, 0) for a local model, else None."""
    from factrl.llm.backends import parse_spec

    if model in prices:
        return tuple(prices[model])
    parsed = parse_spec(model)
    if parsed.backend == "local":
        return (0.0, 0.0)
    for key in (f"openai:{parsed.model}", parsed.model):
        if key in prices:
            return tuple(prices[key])
    return None


def cost_usd(usage_by_model: Mapping[str, Usage], prices: Mapping[str, tuple[float, float]]) -> float | None:
    """USD of the usage of every model; None when a model's price is unknown."""
    total = 0.0
    for model, usage in usage_by_model.items():
        price = price_of(model, prices)
        if price is None:
            return None
        total += usage.tokens_in * price[0] / 1e6 + usage.tokens_out * price[1] / 1e6
    return total
