"""factrl train-summary: first-half vs second-half means of the training curves."""

import pytest

from factrl.rl.curves import block_table, halves, main, summarize
from factrl.rl.step_log import write_history


def _curve(path, header: str, *lines: str):
    """Write CSV-like rows as a run's DVCLive directory (what the trainer writes)."""
    names = header.split(",")
    write_history([dict(zip(names, map(float, line.split(",")))) | {"step": int(line.split(",")[0])}
                   for line in lines], path)
    return path


def test_halves_split_and_share_the_middle_step():
    assert halves([0.0, 1.0]) == (0.0, 1.0)
    assert halves([0.0, 0.5, 1.0]) == (0.25, 0.75)


def test_summary_of_a_curve_file(tmp_path, capsys):
    path = _curve(tmp_path / "reason_r1", "step,reward_mean,format_valid_rate", "1,0.1,0.0", "2,0.1,0.5",
                  "3,0.55,1.0", "4,1.0,1.0")
    assert summarize(path) == ("reason_r1: 4 steps, reward_mean 0.100 -> 0.775, "
                               "format_valid_rate 0.250 -> 1.000 (first half -> second half of the steps)")
    assert main([str(tmp_path)]) == 0 and "reason_r1: 4 steps" in capsys.readouterr().out
    assert main([str(tmp_path / "none")]) == 1


def test_block_table_means_per_block_and_collapse_columns(tmp_path, capsys):
    path = _curve(tmp_path / "reason_r2", "step,reward_mean,correct_rate,uniform_group_rate,tool_calls",
                  "1,0.1,0.0,0.0,1.0", "2,0.55,0.5,0.5,0.5", "3,1.0,1.0,1.0,0.0")
    assert block_table(path, 2).splitlines() == [
        "reason_r2: 3 steps",
        "| steps | reward_mean | correct_rate | tool_calls | uniform_group_rate |",
        "|---|---|---|---|---|",
        "| 1-2 | 0.325 | 0.25 | 0.75 | 0.25 |",
        "| 3-3 | 1 | 1 | 0 | 1 |",
    ]
    assert "correct_rate 0.250 -> 0.750" in summarize(path)
    empty = _curve(tmp_path / "search_r2", "step,reward_mean")
    assert block_table(empty, 8) == "search_r2: 0 steps"
    assert main([str(tmp_path), "--block", "2"]) == 0 and "| 1-2 |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="block must be >= 1"):
        block_table(path, 0)
