"""Calls, tokens and cost of a trajectory."""

from __future__ import annotations

import pytest

from factrl.agents.rollout import Trajectory
from factrl.service.usage import Usage, cost_usd, price_of, trajectory_usage


def _traj(mask, turns, prompt=10):
    return Trajectory(prompt_ids=[1] * prompt, response_ids=[2] * len(mask), loss_mask=mask, turns=turns,
                      response_text="", num_tool_calls=1, finish_reason="stop")


def test_token_trajectory_counts_each_generated_run_as_a_call():
    # prefix (2 injected), turn 1 (3 generated), result (2 injected), turn 2 (2 generated)
    traj = _traj([0, 0, 1, 1, 1, 0, 0, 1, 1], [("env", "<think>"), ("model", "a"), ("env", "r"), ("model", "b")])
    assert vars(trajectory_usage(traj)) == {"calls": 2, "tokens_in": (10 + 2) + (10 + 7), "tokens_out": 5,
                                            "estimated": False}


def test_chat_only_trajectory_is_estimated_from_its_text():
    traj = Trajectory([], [], [], [("model", "x" * 40), ("env", "y" * 80), ("model", "z" * 8)], "", 1, "stop")
    usage = trajectory_usage(traj, prompt_chars=400)
    assert usage.estimated and usage.calls == 2 and usage.tokens_out == 10 + 2
    assert usage.tokens_in == 400 // 4 + (400 + 40 + 80) // 4


def test_prices_and_cost():
    prices = {"openai:gpt-4o-mini": (0.15, 0.60), "openai:m@http://h/v1": (1.0, 1.0)}
    assert price_of("smollm2-135m", prices) == (0.0, 0.0) and price_of("models/reason_1", {}) == (0.0, 0.0)
    assert price_of("openai:gpt-4o-mini@http://proxy/v1", prices) == (0.15, 0.60)  # by bare model name
    assert price_of("openai:m@http://h/v1", prices) == (1.0, 1.0)
    assert price_of("openai:unknown", prices) is None
    usage = {"openai:gpt-4o-mini": Usage(3, 2_000_000, 500_000), "smollm2-135m": Usage(9, 10**9, 10**9)}
    assert cost_usd(usage, prices) == pytest.approx(2 * 0.15 + 0.5 * 0.60)
    assert cost_usd({"openai:unknown": Usage(1, 1, 1)}, prices) is None
