"""Synthetic SC-MAKS pools for the consensus tests: feature sets whose truth is known."""

from __future__ import annotations

import numpy as np

from factrl.consensus.features import FEATURES, FeatureSet

FLIP = {"SUPPORTS": "REFUTES", "REFUTES": "SUPPORTS"}


def pool(n_claims: int, *, members: int = 3, always_right: int | None = 0, seed: int = 0,
         split: str = "train") -> FeatureSet:
    """Claims with balanced random labels; member ``always_right`` always holds the gold verdict,
    every other member a coin flip. Features are noise except the stance sign."""
    rng = np.random.default_rng(seed)
    labels = [("SUPPORTS", "REFUTES")[i % 2] for i in range(n_claims)]
    stance = [[lab if i == always_right or rng.random() < 0.5 else FLIP[lab] for i in range(members)]
              for lab in labels]
    x = rng.normal(size=(n_claims, members, len(FEATURES)))
    x[:, :, FEATURES.index("stance_sign")] = [[1.0 if v == "SUPPORTS" else -1.0 for v in row] for row in stance]
    return FeatureSet([f"{split}-{i}" for i in range(n_claims)], [split] * n_claims, labels, [2] * n_claims,
                      [f"m{i}" for i in range(members)], x, [list(r) for r in stance], stance)
