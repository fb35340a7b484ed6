"""The trace viewer: a self-contained page, escaped text, marked injected turns; rendered in Chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from factrl import cli
from factrl.data.schemas import TRAJECTORIES
from factrl.eval.traces import read_trajectories, trace_page, write_trace_page
from factrl.io import write_parquet
from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, NO_CHROMIUM


def _rows() -> list[dict]:
    reasoning_turns = [
        ("model", "<think>Need the birthplace.</think><question>Where was Ada Lovelace born?</question>"),
        ("env", "<result>Ada Lovelace was born in London. <script>alert('x')</script> & co</result>"),
        ("model", "<think>London.</think><verification>\\boxed{Support}</verification>"),
    ]
    search_turns = [
        ("model", "<think>search</think><search>Lovelace birthplace</search>"),
        ("env", "<result>Doc 1: London, 1815.</result>"),
        ("model", "<report>Born in London in 1815.</report>"),
    ]
    rows = []
    for i, (agent, turns, reward, valid) in enumerate(
        [("reasoning", reasoning_turns, 1.0, True), ("search", search_turns, 0.1, True),
         ("reasoning", [("model", "I think it is true.")], 0.0, False)]
    ):
        rows.append({
            "id": f"r{i}", "prompt_id": f"claim-{i}", "agent": agent, "round": 1,
            "prompt_ids": [1, 2, 3], "response_ids": list(range(10 + i)), "loss_mask": [1] * (10 + i),
            "turns": [{"role": r, "text": t} for r, t in turns], "reward": reward,
            "reward_parts": [("format", 1.0 if valid else 0.0)], "format_valid": valid,
            "num_tool_calls": sum(r == "env" for r, _ in turns),
        })
    return rows


@pytest.fixture
def rollouts(tmp_path) -> Path:
    path = tmp_path / "rollouts.parquet"
    write_parquet(pa.Table.from_pylist(_rows(), schema=TRAJECTORIES), path, TRAJECTORIES)
    return path


def test_page_is_self_contained_escaped_and_marks_injected_turns():
    page = trace_page(_rows())
    assert page.count('<section class="rollout') == 3
    assert page.count("<details") == 7
    assert page.count('class="turn env"') == 2 and page.count("env · injected") == 2
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in page
    assert '<span class="tag">&lt;question&gt;</span>' in page
    # no external resource of any kind: one inline style, one inline script
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert page.count("<script>") == 1 and "<link" not in page
    assert "3 rollouts · mean reward 0.367 · format valid 66.7%" in page


def test_cli_writes_the_page(rollouts, tmp_path, capsys):
    out = tmp_path / "traces.html"
    assert cli.main(["traces", str(rollouts), "-o", str(out), "--limit", "2"]) == 0
    assert "wrote" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    assert html.count('<section class="rollout') == 2 and "claim-1" in html and "claim-2" not in html


def test_bad_rollouts_file_names_the_field(tmp_path):
    bad = tmp_path / "bad.parquet"
    rows = _rows()
    rows[1]["agent"] = None
    for r in rows:
        del r["reward_parts"]  # a map column pyarrow cannot infer without the schema
    write_parquet(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=r"bad.parquet, row 1, field 'agent'"):
        read_trajectories(bad)
    with pytest.raises(FileNotFoundError, match="no such rollouts file"):
        read_trajectories(tmp_path / "missing.parquet")


def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_page_renders_in_headless_chromium(rollouts, tmp_path):
    from PIL import Image

    page = write_trace_page(read_trajectories(rollouts), tmp_path / "traces.html", title="test rollouts")
    url = page.resolve().as_uri()
    shot = tmp_path / "traces.png"
    proc = _chromium([f"--screenshot={shot}", "--window-size=1200,900", url], tmp_path)
    assert shot.is_file() and shot.stat().st_size > 5000, proc.stderr[-2000:]
    with Image.open(shot) as img:
        assert img.size == (1200, 900)
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 20  # text, header bar, shaded env turns: not blank
        # the injected-turn shade (#fff6dd) is on screen
        assert any(rgb == (0xFF, 0xF6, 0xDD) for _, rgb in colors)
    print(f"trace page screenshot: {shot}")

    dom = _chromium(["--dump-dom", url], tmp_path).stdout
    assert dom.count('<section class="rollout') == 3
    assert dom.count('class="turn env"') == 2
    assert re.search(r'id="shown">3<', dom)  # the inline script ran

    # a filter carried in the URL hides the rollouts that do not match
    dom = _chromium(["--dump-dom", url + "#q=Lovelace%20birthplace"], tmp_path).stdout
    assert re.search(r'id="shown">1<', dom)
    assert dom.count('class="rollout valid hidden"') + dom.count('class="rollout invalid hidden"') == 2


def test_rollout_rows_with_rewards_round_trip_through_parquet_to_the_page(tmp_path):
    from factrl.agents.rollout import Trajectory
    from factrl.rewards.haris import reasoning_reward

    turns = [("model", "<think>check</think><question>Who wrote Emma?</question>"),
             ("env", "<result>Emma is a novel by Jane Austen.</result>"),
             ("model", "<verification>\\boxed{Refute}</verification>")]
    traj = Trajectory(prompt_ids=[1, 2], response_ids=[5, 6, 7, 8], loss_mask=[1, 0, 0, 1], turns=turns,
                      response_text="".join(t for _, t in turns), num_tool_calls=1, finish_reason="stop")
    r = reasoning_reward(traj.response_text, "SUPPORTS")
    row = traj.to_row(id="t0", prompt_id="c0", agent="reasoning", round=0, reward=r.score,
                      reward_parts=r.parts, format_valid=r.format_valid)
    path = tmp_path / "rollouts.parquet"
    write_parquet(pa.Table.from_pylist([row], schema=TRAJECTORIES), path, TRAJECTORIES)
    page = write_trace_page(read_trajectories(path), tmp_path / "t.html").read_text(encoding="utf-8")
    assert "reward <b>0.100</b>" in page  # wrong verdict, valid format
    assert "parts: correct=0, format=1" in page and "format valid: yes" in page
    assert page.count('class="turn env"') == 1 and "Jane Austen" in page
