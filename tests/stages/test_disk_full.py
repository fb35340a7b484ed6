"""A stage whose output disk fills up stops with an error naming the output, leaves no partial file
and succeeds once space is back (issue 41; src/factrl/testing/disk_full.py says how the disk is made small)."""

from __future__ import annotations

import pytest
import yaml

from factrl.testing.disk_full import disk_full_trial, run_prepare
from factrl.testing.pipeline_repo import make_pipeline_repo


@pytest.mark.slow  # three runs of prepare: ~40 s on the 2-core machine
def test_prepare_on_a_full_disk_names_the_output_leaves_nothing_partial_and_reruns(repo_root, tmp_path):
    tiny = yaml.safe_load((repo_root / "profiles" / "tiny.yaml").read_text())
    reference = make_pipeline_repo(repo_root, tmp_path / "reference", tiny)
    assert run_prepare(reference).returncode == 0
    repo = make_pipeline_repo(repo_root, tmp_path / "repo", tiny)
    got = disk_full_trial(repo, reference)
    assert got["full_returncode"] != 0
    assert "OutputWriteError" in got["error"] and "cannot write data/" in got["error"], got
    assert "no space left" in got["error"], got
    named = got["error"].split("cannot write data/")[1].split(":")[0]
    assert named not in got["files_left"]  # the output it could not write is not there at all
    assert got["partial_files"] == [] and got["temp_files_left"] == []
    assert got["rerun_returncode"] == 0 and got["rerun_equals_uninterrupted"], got
