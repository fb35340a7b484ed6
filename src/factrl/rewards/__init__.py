"""Reward functions, each a small pure function registered by name (see ``registry``).

haris (R_high, R_low), m2r (token-F1 answer reward), march (zero-tolerance / error rate),
maporl (verifier-shaped immediate / cumulative / influence-aware rewards). Importing the package
registers all of them, so ``REWARDS`` is complete.
"""

from factrl.rewards.registry import REWARDS, RewardResult, get_reward, register
from factrl.rewards import haris, m2r, maporl, march  # noqa: E402,F401  (registers the rewards)

__all__ = ["REWARDS", "RewardResult", "get_reward", "register"]
