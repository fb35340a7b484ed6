"""The verdict vocabulary: the claim labels and the words a model may write for a verdict.

One home for both, so the HARIS tag parser (``\\boxed{Support}``, ``factrl.agents.protocol``), the typed
verifier reply (``Verdict: Refute``, ``factrl.signatures``) and the claims schema
(``factrl.data.schemas.LABELS``) cannot drift apart. Standard library only: the GPU path imports it
(``factrl.agents.rollout`` -> ``factrl.agents.protocol``; see tests/test_gpu_path.py).
"""

from __future__ import annotations

SUPPORTS = "SUPPORTS"
REFUTES = "REFUTES"
NOT_ENOUGH_INFO = "NOT ENOUGH INFO"

# every label a claims file may carry (FEVER's three); the verifiers decide between the first two
LABELS = (SUPPORTS, REFUTES, NOT_ENOUGH_INFO)

# the word a model writes (lower-cased; lenient on the ending) -> the verdict label
VERDICT_WORDS = {"support": SUPPORTS, "supports": SUPPORTS, "supported": SUPPORTS,
                 "refute": REFUTES, "refutes": REFUTES, "refuted": REFUTES}



def verdict_word(verdict: str | None) -> str:
    """How a prompt writes a verdict label: ``Support``, ``Refute``, or ``no decision`` for None."""
    return {SUPPORTS: "Support", REFUTES: "Refute"}.get(verdict, "no decision")
