"""Data: the contracts (schemas), sources and splits, the demo world and its claims, the
curriculum, synthesis and warm-start references, and the ``prepare`` section (params)."""
