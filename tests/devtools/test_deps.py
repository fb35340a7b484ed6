"""dvc.yaml's code deps are each stage's import closure (factrl.devtools.deps): the committed file
agrees, a dropped closure file is named, a MARCH-only module reruns no HARIS stage, and the closure
follows every import form it claims to (a synthetic tree)."""

from __future__ import annotations

from pathlib import Path

import pytest

from factrl.devtools import deps

HARIS_STAGES = ("warmup", "synthesize", "train_search", "train_reason")
# MARCH's own code (issue 20): reached by stages/train_march.py alone
MARCH_MODULES = ("src/factrl/agents/march.py", "src/factrl/recipes/march.py",
                 "src/factrl/recipes/march_verl.py")


def _closures(root: Path) -> dict[str, set[str]]:
    _, doc = deps.load(root / "dvc.yaml")
    cache: dict = {}
    return {s.name: set(deps.stage_closure(s, root, cache)) for s in deps.stages(doc)}


def test_check_passes_on_the_repository(repo_root, capsys):
    assert deps.main(["--check", "--root", str(repo_root)]) == 0
    assert "every stage's code deps equal its import closure" in capsys.readouterr().out


def test_a_closure_file_dropped_from_a_stage_fails_the_check_naming_it(repo_root, tmp_path, capsys):
    original = (repo_root / "dvc.yaml").read_text()
    yaml, doc = deps.load(repo_root / "dvc.yaml")
    stage_deps = doc["stages"]["train_search"]["do"]["deps"]
    assert "src/factrl/text.py" in stage_deps  # imported through agents/protocol, not by the stage itself
    stage_deps.remove("src/factrl/text.py")
    mutated = tmp_path / "dvc.yaml"
    with mutated.open("w") as f:
        yaml.dump(doc, f)

    assert deps.main(["--check", "--root", str(repo_root), "--dvc-yaml", str(mutated)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "train_search@*: missing src/factrl/text.py (imported by its entry point)"]

    # --write puts it back and changes nothing else (comments, order, data deps)
    assert deps.main(["--write", "--root", str(repo_root), "--dvc-yaml", str(mutated)]) == 0
    assert mutated.read_text() == original


def test_a_directory_or_an_unimported_file_is_reported_extra(repo_root, tmp_path):
    original = (repo_root / "dvc.yaml").read_text()
    anchor = "    cmd: python -m stages.warmup\n    deps:\n"
    assert anchor in original
    mutated = tmp_path / "dvc.yaml"
    mutated.write_text(original.replace(anchor, anchor + "      - src/factrl/agents\n"
                                        "      - src/factrl/agents/march.py\n", 1))
    assert deps.check(repo_root, mutated) == [
        "warmup: extra src/factrl/agents (a directory: list the files it imports)",
        "warmup: extra src/factrl/agents/march.py (not imported)"]


def test_march_only_modules_are_in_no_haris_stage(repo_root):
    closures = _closures(repo_root)
    others = set().union(*(c for name, c in closures.items() if name != "train_march"))
    march_only = closures["train_march"] - others
    assert set(MARCH_MODULES) <= march_only, sorted(march_only)
    for stage in HARIS_STAGES:
        assert not set(MARCH_MODULES) & closures[stage], stage
    # and what every HARIS stage does import is in its deps (the check above); e.g. the misses
    assert "src/factrl/orchestration/fanout.py" in closures["synthesize"]
    both = closures["train_search"] & closures["train_reason"]
    assert {"src/factrl/text.py", "src/factrl/registry.py"} <= both


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_closure_follows_every_import_form(tmp_path):
    root = _tree(tmp_path, {
        "stages/__init__.py": "",
        "stages/run.py": "import json\nfrom factrl.pkg import sub, attr\n"
                         "def main():\n    from factrl import late\n",
        "src/factrl/__init__.py": "",
        "src/factrl/pkg/__init__.py": "attr = 1\n",
        "src/factrl/pkg/sub.py": "from . import sibling\nfrom ..rel import thing\n"
                                 "from typing import TYPE_CHECKING\n"
                                 "if TYPE_CHECKING:\n    import factrl.typed\n"
                                 "else:\n    import factrl.untyped\n",
        "src/factrl/pkg/sibling.py": "try:\n    import factrl.deep.leaf\nexcept ImportError:\n    pass\n",
        "src/factrl/rel.py": "thing = 1\n",
        "src/factrl/late.py": "",
        "src/factrl/typed.py": "",
        "src/factrl/untyped.py": "",
        "src/factrl/deep/__init__.py": "",
        "src/factrl/deep/leaf.py": "",
        "src/factrl/unused.py": "",
        "tests/helper.py": "",
        "dvc.yaml": "stages:\n  run:\n    cmd: python -m stages.run --flag\n    deps:\n      - stages\n"
                    "      - data/in.csv  # data\n"
                    "  each:\n    foreach: [a, b]\n    do:\n      cmd: python stages/run.py ${item}\n"
                    "      deps:\n        - src/factrl/unused.py\n        - data/${item}.csv\n",
    })
    want = ["src/factrl/__init__.py", "src/factrl/deep/__init__.py", "src/factrl/deep/leaf.py",
            "src/factrl/late.py", "src/factrl/pkg/__init__.py", "src/factrl/pkg/sibling.py",
            "src/factrl/pkg/sub.py", "src/factrl/rel.py", "src/factrl/untyped.py"]
    _, doc = deps.load(root / "dvc.yaml")
    run, each = deps.stages(doc)
    assert deps.stage_closure(run, root) == [*want, "stages/__init__.py", "stages/run.py"]
    assert deps.stage_closure(each, root) == [*want, "stages/run.py"]  # a script: no package __init__
    assert deps.check(root) == [
        *(f"run: missing {p} (imported by its entry point)"
          for p in [*want, "stages/__init__.py", "stages/run.py"]),
        "run: extra stages (a directory: list the files it imports)",
        *(f"each@*: missing {p} (imported by its entry point)" for p in [*want, "stages/run.py"]),
        "each@*: extra src/factrl/unused.py (not imported)"]
    assert deps.write(root) == ["run", "each@*"]
    assert deps.check(root) == []
    text = (root / "dvc.yaml").read_text()
    assert "      - stages/run.py\n      - data/in.csv  # data\n" in text  # data deps and comments kept
    assert "        - stages/run.py\n        - data/${item}.csv\n" in text


def test_dynamic_imports_are_followed(tmp_path, monkeypatch):
    root = _tree(tmp_path, {"stages/__init__.py": "", "stages/run.py": "import factrl.spawner\n",
                            "src/factrl/__init__.py": "", "src/factrl/spawner.py": "",
                            "src/factrl/server.py": "",
                            "dvc.yaml": "stages:\n  run:\n    cmd: python -m stages.run\n"})
    monkeypatch.setitem(deps.DYNAMIC_IMPORTS, "factrl.spawner", ("factrl.server",))
    _, doc = deps.load(root / "dvc.yaml")
    assert "src/factrl/server.py" in deps.stage_closure(deps.stages(doc)[0], root)


def test_the_dynamic_import_table_names_real_modules(repo_root):
    resolver = deps.Resolver(repo_root)
    for module, names in deps.DYNAMIC_IMPORTS.items():
        assert resolver.find(module) is not None, module
        for name in names:
            assert resolver.find(name) is not None, name


def test_a_cmd_without_a_python_entry_point_is_an_error(tmp_path):
    root = _tree(tmp_path, {"dvc.yaml": "stages:\n  s:\n    cmd: echo hi\n"})
    _, doc = deps.load(root / "dvc.yaml")
    with pytest.raises(ValueError, match="no `python -m module`"):
        deps.stage_closure(deps.stages(doc)[0], root)


def test_dvc_reruns_no_haris_stage_after_a_march_edit_and_every_importer_after_a_shared_edit(
        repo_root, tmp_path, monkeypatch):
    """The same promise, asked of DVC: on a copy of the repository with every stage up to date
    (stand-in outputs recorded with ``dvc commit``), editing a MARCH-only module leaves only
    train_march to rerun, and editing a module every training stage imports reruns them all."""
    from dvc.repo import Repo

    from factrl.testing.pipeline_repo import make_pipeline_repo
    from tests.stages.test_train_dvc import commit_stand_ins

    repo = make_pipeline_repo(repo_root, tmp_path / "repo", {"train_march": {"seeds": [0]}})
    monkeypatch.chdir(repo)
    commit_stand_ins(repo)

    def edit_and_dry_run(path: str) -> set[str]:
        with (repo / path).open("a") as f:
            f.write("# edited\n")
        with Repo(str(repo)) as dvc:
            return {s.addressing for s in dvc.reproduce(dry=True)}

    assert edit_and_dry_run("src/factrl/agents/march.py") == {"train_march@0"}
    rerun = edit_and_dry_run("src/factrl/text.py")
    for stage in ("warmup", "synthesize@1", "train_search@1", "train_reason@1", "train_march@0"):
        assert stage in rerun, (stage, sorted(rerun))


def test_no_import_circle_in_src(repo_root):
    assert deps.import_cycles(repo_root) == []


def test_an_import_circle_through_a_function_level_import_is_found(tmp_path):
    root = _tree(tmp_path, {
        "src/factrl/__init__.py": "",
        "src/factrl/a.py": "import factrl.b\n",
        "src/factrl/b.py": "def f():\n    from factrl import a\n",
        # a package importing its modules, which import each other one way: no circle
        "src/factrl/pkg/__init__.py": "from factrl.pkg import one, two\n",
        "src/factrl/pkg/one.py": "from factrl.pkg.two import x\n",
        "src/factrl/pkg/two.py": "x = 1\n",
    })
    assert deps.import_cycles(root) == [["factrl.a", "factrl.b"]]


def test_every_import_of_src_runs_down_the_layer_order(repo_root, capsys):
    assert deps.layer_breaks(repo_root) == []
    assert deps.main(["--layers", "--root", str(repo_root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "src/factrl: no import circle", "src/factrl: every import runs down the layer order of docs/design.md"]


def _copy_src(repo_root: Path, root: Path) -> Path:
    import shutil

    shutil.copytree(repo_root / "src/factrl", root / "src/factrl", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "docs").mkdir()
    shutil.copy(repo_root / deps.LAYERS_DOC, root / deps.LAYERS_DOC)
    return root


def test_691c2d1s_consensus_importing_a_recipe_breaks_the_layer_order(repo_root, tmp_path, capsys):
    """The two back-arrows of 691c2d1 (the consensus reading its params from recipes/scmaks_params.py),
    planted again in a copy of today's tree, fail the check naming both files."""
    root = _copy_src(repo_root, tmp_path)
    for name, params in (("aggregator", "AggregatorParams"), ("reward_model", "RewardModelParams")):
        path = root / f"src/factrl/consensus/{name}.py"
        path.write_text(path.read_text() + f"from factrl.recipes.scmaks_params import {params}\n")
    assert deps.layer_breaks(root) == [
        f"src/factrl/consensus/{name}.py (machinery (layer 6)) imports src/factrl/recipes/scmaks_params.py "
        "(recipes (layer 9)): a higher layer" for name in ("aggregator", "reward_model")]
    assert deps.main(["--layers", "--root", str(root)]) == 1
    assert capsys.readouterr().out.count("layer break: ") == 2


def test_a_peer_import_and_an_unplaced_unit_break_the_layer_order(repo_root, tmp_path):
    root = _copy_src(repo_root, tmp_path)
    (root / "src/factrl/rl/peek.py").write_text('"""Peeks."""\n\ndef f():\n    import factrl.consensus.features\n')
    (root / "src/factrl/newcomer.py").write_text('"""New."""\n')
    assert deps.layer_breaks(root) == [
        "newcomer: not in the layer order (docs/design.md's ```layers block)",
        "src/factrl/rl/peek.py (machinery (layer 6)) imports src/factrl/consensus/features.py "
        "(machinery (layer 6)): a peer in the same layer"]


def test_the_layer_order_places_each_unit_once(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / deps.LAYERS_DOC).write_text("```layers\nlow: io text\nhigh: rl io\n```\n")
    with pytest.raises(ValueError, match="placed twice"):
        deps.read_layers(tmp_path)
    (tmp_path / deps.LAYERS_DOC).write_text("no block here\n")
    with pytest.raises(ValueError, match="no ```layers block"):
        deps.read_layers(tmp_path)


def test_no_code_dep_is_an_empty_file(repo_root):
    """DVC warns "... is empty" for every empty file among a stage's deps, a dozen lines of every
    `make demo` log that a user can do nothing about: a package's __init__.py says what it holds."""
    _, doc = deps.load(repo_root / "dvc.yaml")
    code = {deps.dep_path(d) for stage in deps.stages(doc) for d in stage.body.get("deps") or []
            if deps.is_code(deps.dep_path(d), repo_root)}
    assert code and [p for p in sorted(code) if (repo_root / p).stat().st_size == 0] == []
