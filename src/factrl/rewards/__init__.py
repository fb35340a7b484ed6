"""Reward functions in families, one module each, every reward registered with its kind (``registry``).

haris (R_high, R_low), m2r (token-F1 answer reward), march (zero-tolerance / error rate), maporl
(verifier-shaped immediate / cumulative / influence-aware rewards and the guarded reasoning reward).
This package imports none of them: a caller imports the families it uses (``from factrl.rewards
import haris``) and chooses among their ``REWARDS`` by name and kind
(:func:`factrl.rewards.registry.choose_reward`), so a stage depends on its own families only.
"""
