"""Reviews stay out of the data pipeline (issue 49): the store `factrl serve` writes in corrections/ is
ignored by git and by DVC, so a review saved through the API leaves `git status` and `dvc status` clean
and the next `dvc repro` reruns nothing; only exported claim files (params prepare.corrections) feed
training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from factrl.testing.pipeline_repo import git, make_pipeline_repo
from factrl.testing.service_fakes import app_of, make_service, wait_done

ROOT = Path(__file__).resolve().parents[2]
STORE = "corrections/corrections.sqlite"


def test_gitignore_ignores_the_reviews_store_and_its_journal():
    """`git check-ignore` in this repository: the pattern ignores the store (a comment after a pattern
    would be part of the pattern, and ignore nothing)."""
    for path in (STORE, "corrections/corrections.sqlite-journal"):
        found = subprocess.run(["git", "check-ignore", "--no-index", "-v", path], cwd=ROOT, capture_output=True,
                               text=True)
        assert found.returncode == 0, f"{path} is not ignored by .gitignore"
    kept = subprocess.run(["git", "check-ignore", "--no-index", "corrections/reviews.jsonl"], cwd=ROOT)
    assert kept.returncode == 1  # exported claim files are meant to be committed


def _dvc(repo: Path, *args: str) -> str:
    env = os.environ | {"DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_review_saved_through_the_api_leaves_dvc_status_and_git_status_clean(tmp_path):
    """prepare reproduced in a copy of this repository (a small world), a review saved through
    POST /v1/corrections into corrections/corrections.sqlite (serve's default store): prepare's
    dependencies are unchanged, and git lists nothing new."""
    repo = make_pipeline_repo(ROOT, tmp_path / "repo", {"prepare": {"world": {"num_passages": 60, "num_claims": 30}}})
    _dvc(repo, "repro", "--no-run-cache", "-s", "prepare")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "prepared")
    assert "up to date" in _dvc(repo, "status", "prepare")

    service = make_service(tmp_path, corrections_db=str(repo / STORE))
    try:
        client = TestClient(app_of(service))
        job = client.post("/v1/verify", json={"claim": "Orsa was founded by Ilse Parrow, true."}).json()
        wait_done(client, job["job_id"])
        saved = client.post("/v1/corrections", json={"job_id": job["job_id"], "index": 0, "reviewer": "Ada",
                                                     "corrected_verdict": "REFUTES"})
        assert saved.status_code == 200, saved.text
    finally:
        service.worker.stop()
    assert (repo / STORE).is_file()
    status = _dvc(repo, "status", "prepare")
    assert "up to date" in status, f"a saved review changed prepare's dependencies:\n{status}"
    assert git(repo, "status", "--porcelain") == ""
