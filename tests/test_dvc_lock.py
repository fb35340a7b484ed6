"""dvc.lock records only stages that dvc.yaml defines: a stage renamed or removed from dvc.yaml (or a
foreach key dropped from params) leaves an entry that no `dvc repro` will ever update or remove,
and that readers of the lock take for a result of the current pipeline."""

from __future__ import annotations

from pathlib import Path

import yaml

# the entries 691c2d1's dvc.lock still carried: base_models (a stage since removed) and round 0 of the
# foreach stages (params `rounds` has no round 0 any more)
OLD_ENTRIES = ("base_models", "synthesize@0", "train_search@0", "train_reason@0")


def dvc_stage_names(root: Path) -> set[str]:
    """Every stage dvc.yaml defines, foreach and matrix stages expanded over params, as DVC names them."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {stage.addressing for stage in repo.index.stages}


def stale_entries(lock: dict, names: set[str]) -> list[str]:
    """The stages ``lock`` (a parsed dvc.lock) records that are not among ``names``."""
    return sorted(set(lock.get("stages") or {}) - names)


def test_dvc_lock_names_only_stages_dvc_yaml_has(repo_root):
    lock = yaml.safe_load((repo_root / "dvc.lock").read_text(encoding="utf-8"))
    assert stale_entries(lock, dvc_stage_names(repo_root)) == []


def test_691c2d1s_leftover_entries_are_found(repo_root):
    lock = yaml.safe_load((repo_root / "dvc.lock").read_text(encoding="utf-8"))
    for name in OLD_ENTRIES:
        lock["stages"][name] = {"cmd": "python -m stages.synthesize base_models"}
    assert stale_entries(lock, dvc_stage_names(repo_root)) == sorted(OLD_ENTRIES)
