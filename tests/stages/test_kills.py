"""SIGKILL at points drawn from a stage's own progress, then `dvc repro` of the stage: it resumes or
restarts cleanly and its outputs equal an uninterrupted run's (issue 41; src/factrl/testing/stage_kills.py says
how kill points are drawn and outputs compared). A Prefect flow run killed mid-stage leaves dvc.lock
listing a stage with matching outputs or not at all."""

from __future__ import annotations

import random

import pytest

from factrl.testing import stage_kills as sk


def test_equal_saves_and_a_rerun_s_cache_counters_compare_equal_and_real_differences_do_not(tmp_path):
    """The comparison's two rules for outputs a rerun may not reproduce byte for byte: ``.pt`` files
    with equal values (torch.save's bytes vary), and call counters a rerun's cache answered."""
    import json

    import torch

    ref, got = tmp_path / "ref", tmp_path / "got"
    for d in (ref, got):
        (d / "consensus").mkdir(parents=True)
    obj = {"state_dict": {"w": torch.arange(4.0)}, "members": ["Ada", "Ben"], "best_iteration": 3}
    torch.save(obj, ref / "consensus" / "m.pt")
    torch.save(obj, got / "consensus" / "m.pt")
    (ref / "summary.json").write_text(json.dumps({"accuracy": 0.5, "calls": {"backend": 36, "cache_hits": 0},
                                                  "peak_rss_mib": 2615.0}))
    (got / "summary.json").write_text(json.dumps({"accuracy": 0.5, "calls": {"backend": 12, "cache_hits": 24},
                                                  "peak_rss_mib": 1875.8}))
    rels = ["consensus/m.pt", "summary.json"]
    differ_all = {r: "a" for r in rels}, {r: "b" for r in rels}  # as if every byte hash differed
    assert sk.compare(*differ_all, reference_dir=ref, repo=got)["equal"]
    assert not sk.resumed_in_outputs(got, ["summary.json"])  # cache hits are not a resume record
    torch.save({**obj, "state_dict": {"w": torch.arange(4.0) + 1}}, got / "consensus" / "m.pt")
    (got / "summary.json").write_text(json.dumps({"accuracy": 1.0, "calls": {"backend": 12, "cache_hits": 24}}))
    got_cmp = sk.compare(*differ_all, reference_dir=ref, repo=got)
    assert not got_cmp["equal"] and got_cmp["differ_in_timings_only"] == []


def test_dvclive_timing_curves_compare_equal_and_other_curves_do_not(tmp_path):
    """A training run's DVCLive curves are one TSV per metric: a timing's (step_time.tsv) may differ
    between equal runs, a result's (reward_mean.tsv) may not."""
    ref, got = tmp_path / "ref", tmp_path / "got"
    curves = "metrics/train/reason_r1/plots/metrics"
    for d, t in ((ref, 1.5), (got, 2.5)):
        (d / curves).mkdir(parents=True)
        (d / curves / "step_time.tsv").write_text(f"step\tstep_time\n1\t{t}\n")
        (d / curves / "reward_mean.tsv").write_text("step\treward_mean\n1\t0.5\n")
    timing = {f"{curves}/step_time.tsv": "a"}, {f"{curves}/step_time.tsv": "b"}
    assert sk.compare(*timing, reference_dir=ref, repo=got)["equal"]
    (got / curves / "reward_mean.tsv").write_text("step\treward_mean\n1\t0.75\n")
    result = {f"{curves}/reward_mean.tsv": "a"}, {f"{curves}/reward_mean.tsv": "b"}
    assert not sk.compare(*result, reference_dir=ref, repo=got)["equal"]


def assert_survived(stage: str, record: dict) -> None:
    for name, got in record["kills"].items():
        assert got["killed_returncode"] == -9, (stage, name, got)  # the kill hit the running stage
        assert got["identical"] or got["equal"], (stage, name, got["differ"])


def test_prepare_killed_early_reruns_to_the_same_outputs(repo_root, tmp_path):
    """The cheap stage in the default suite: one kill in the first third of prepare's command."""
    repo = sk.tiny_repo(repo_root, tmp_path / "repo")
    record = sk.kill_stage(repo, "prepare", random.Random(0), tmp_path / "work", points=("early",))
    assert record["kills"]["early"]["point"]["after_s"] < record["reference_command_seconds"] / 3 + 0.01
    assert_survived("prepare", record)
    assert record["kills"]["early"]["identical"]  # prepare's outputs hold no timing: byte-identical


@pytest.mark.soak  # every stage of the tiny profile, four runs each: an hour or more on 2 cores
def test_every_stage_killed_early_and_late_reruns_to_the_same_outputs(repo_root, tmp_path):
    repo = sk.tiny_repo(repo_root, tmp_path / "repo")
    rng = random.Random(0)
    for stage in sk.stages_of(repo):
        assert_survived(stage, sk.kill_stage(repo, stage, rng, tmp_path / "work"))


@pytest.mark.slow  # a Prefect API starts for each flow run
@pytest.mark.parametrize(("stage", "after_s"), [("prepare", 0.5), ("index", 5.0)])
def test_killed_flow_run_leaves_no_stage_half_recorded_in_dvc_lock(repo_root, tmp_path, stage, after_s):
    """Where the kill lands depends on the machine's speed (the killed stage may have finished and
    been recorded): whatever dvc.lock lists must match the outputs on disk."""
    repo = sk.tiny_repo(repo_root, tmp_path / "repo")
    got = sk.kill_flow(repo, stage, after_s, tmp_path / "work")
    assert got["killed"] and got["stage_started"], got  # killed while the flow ran
    assert got["half_recorded"] == {}, got
