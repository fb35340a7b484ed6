"""Reward functions registered by name, so params can pick one (``reward: haris_reasoning``).

Every reward is a small pure function; the registry only maps names to them. ``RewardResult`` is the
common return type: the scalar the trainer uses, its named parts (logged into the trajectories'
``reward_parts`` column) and whether the response was well formed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from factrl.registry import Registry, UnknownName

REWARDS: Registry[Callable[..., Any]] = Registry("reward")
register = REWARDS.register  # decorator: @register("name") adds a reward function (names are unique)


@dataclass(frozen=True)
class RewardResult:
    """One response's reward: ``score`` (what the policy sees), ``parts`` (for logs) and format validity."""

    score: float
    parts: dict[str, float] = field(default_factory=dict)
    format_valid: bool = True


def get_reward(name: str, key: str | None = None) -> Callable[..., Any]:
    """The reward function registered as ``name``; a KeyError listing the known names otherwise,
    which names the params ``key`` the name came from when one is given (``m2r.reward``). The
    built-in rewards are registered: importing this module runs ``factrl/rewards/__init__.py`` first,
    which imports every reward module."""
    try:
        return REWARDS.lookup(name)
    except UnknownName as exc:
        if key is None:
            raise
        raise UnknownName(f"params {key}: {exc}") from None
