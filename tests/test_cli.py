"""The `factrl` entry point dispatches to the stage modules."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import yaml

from factrl import cli


def test_help_lists_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


def test_unknown_command_exits_with_usage():
    proc = subprocess.run([sys.executable, "-m", "factrl.cli", "bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_prepare_command_runs_the_stage(tmp_path, monkeypatch, shared_data, repo_root):
    claims = str(shared_data / "haris_eval" / "hover_2hop.jsonl")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"prepare": {"source": "files", "files": {"claims": [claims]}}}))
    (tmp_path / "stages").symlink_to(repo_root / "stages")  # a checkout's stages, found from the cwd
    monkeypatch.chdir(tmp_path)
    assert cli.main(["prepare"]) == 0
    assert pq.read_table(tmp_path / "data" / "claims" / "train.parquet").num_rows > 0


def test_serve_commands_have_help():
    for name in ("serve-retriever", "serve-llm", "serve"):
        proc = subprocess.run([sys.executable, "-m", "factrl.cli", name, "--help"], capture_output=True, text=True)
        assert proc.returncode == 0 and "--port" in proc.stdout, proc.stderr
