"""Recipes: the code that wires factrl's components (agents, tools, rewards, trainers) into one
pipeline stage's run, in torchtune's sense of a recipe.

The reusable parts live in ``factrl.agents``, ``factrl.rewards``, ``factrl.rl`` and
``factrl.llm``; a recipe chooses and connects them for one method and one stage (HARIS's
alternating rounds here; the warm start, verl, SC-MAKS, MARCH and M2R runs beside it). A stage
in ``stages/`` reads its params section and calls one recipe.
"""
