"""Training curves through DVCLive: the directory layout DVC reads, the rebuild a resume relies on."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from factrl.rl.step_log import StepLog, curve_dirs, read_history, read_summary, write_history


def test_rows_become_one_tsv_per_curve_and_a_summary(tmp_path):
    log = StepLog(tmp_path / "run")
    log.log({"step": 1, "reward_mean": 0.25, "kl": np.float32(0.5), "skipped": None})
    log.log({"step": 2, "reward_mean": 0.75})
    plots = tmp_path / "run" / "plots" / "metrics"
    assert (plots / "reward_mean.tsv").read_text() == "step\treward_mean\n1\t0.25\n2\t0.75\n"
    assert sorted(p.name for p in plots.iterdir()) == ["kl.tsv", "reward_mean.tsv"]  # None: not logged
    assert read_summary(tmp_path / "run") == {"reward_mean": 0.75, "kl": 0.5, "step": 2}
    assert read_history(tmp_path / "run") == [{"step": 1, "reward_mean": 0.25, "kl": 0.5},
                                              {"step": 2, "reward_mean": 0.75}]
    assert curve_dirs(tmp_path) == [tmp_path / "run"] and curve_dirs(tmp_path / "absent") == []


def test_a_rebuild_drops_rows_after_the_history_and_equals_a_straight_run(tmp_path):
    rows = [{"step": s, "reward_mean": s / 10} for s in (1, 2, 3, 4)]
    write_history(rows, tmp_path / "straight")
    killed = StepLog(tmp_path / "killed")
    for row in rows[:3]:  # step 3 logged, then killed; the checkpoint held steps 1-2
        killed.log(row)
    resumed = StepLog(tmp_path / "killed", rows[:2])
    for row in rows[2:]:
        resumed.log(row)
    files = lambda d: {p.name: p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}  # noqa: E731
    assert files(tmp_path / "killed") == files(tmp_path / "straight")


def test_an_empty_history_still_gives_dvc_its_outputs(tmp_path):
    write_history([], tmp_path / "none")
    assert (tmp_path / "none" / "plots" / "metrics").is_dir() and read_summary(tmp_path / "none") == {}
    assert read_history(tmp_path / "none") == []


def test_logging_opens_no_dvc_repository(tmp_path):
    """Live's own repo lookup would `dvc init` an enclosing git repository without DVC."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    StepLog(tmp_path / "run").log({"step": 1, "loss": 1.0})
    assert not (tmp_path / ".dvc").exists()


def test_bad_rows_and_files_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="needs a 'step' field"):
        StepLog(tmp_path / "run").log({"loss": 1.0})
    (tmp_path / "run" / "plots" / "metrics" / "loss.tsv").write_text("step\tloss\nx\t1.0\n")
    with pytest.raises(ValueError, match=r"loss.tsv: row 2: bad 'step' or 'loss' field"):
        read_history(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no DVCLive curves"):
        read_history(tmp_path / "absent")
