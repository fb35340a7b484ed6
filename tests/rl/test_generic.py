"""rl/ is generic machinery: it names no method. Its imports from factrl.agents are the generic agent
loop and rollout only (not HARIS's agent registry, nor any method's agents), it imports no reward
family and no recipe, and no string in its code names a method (the recipe passes what an error
must name, such as the params section)."""

from __future__ import annotations

import ast

from factrl.devtools import deps

GENERIC_AGENT_MODULES = {"factrl.agents", "factrl.agents.loop", "factrl.agents.rollout"}
METHODS = ("haris", "m2r", "march", "scmaks", "maporl")


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def method_strings(source: str) -> list[str]:
    """The string constants of ``source`` (docstrings aside) that name a method."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and any(m in node.value.lower() for m in METHODS)]


def test_rl_imports_no_method(repo_root):
    graph = deps.import_graph(repo_root)
    for module, imported in graph.items():
        if not module.startswith("factrl.rl."):
            continue
        for other in imported:
            assert not other.startswith(("factrl.rewards", "factrl.recipes")), (module, other)
            if other.startswith("factrl.agents"):
                assert other in GENERIC_AGENT_MODULES, (module, other)


def test_no_string_in_rl_names_a_method(repo_root):
    for path in sorted((repo_root / "src/factrl/rl").glob("*.py")):
        assert method_strings(path.read_text(encoding="utf-8")) == [], path


def test_the_string_check_finds_691c2d1s_params_keys():
    """691c2d1's rl/runs.py worded its device error with a table naming M2R's and MARCH's sections."""
    old = 'PARAMS_KEYS = {"m2r": "m2r", "march": "train_march"}\n'
    assert method_strings('"""Runs for M2R and MARCH alike."""\n' + old) == ["m2r", "march", "m2r", "train_march"]
