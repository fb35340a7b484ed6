"""factrl train-summary: first-half vs second-half means of the training curves."""

import pytest

from factrl.rl.curves import block_table, halves, main, summarize


def test_halves_split_and_share_the_middle_step():
    assert halves([0.0, 1.0]) == (0.0, 1.0)
    assert halves([0.0, 0.5, 1.0]) == (0.25, 0.75)


def test_summary_of_a_curve_file(tmp_path, capsys):
    path = tmp_path / "reason_r1.csv"
    path.write_text("step,reward_mean,format_valid_rate\n1,0.1,0.0\n2,0.1,0.5\n3,0.55,1.0\n4,1.0,1.0\n")
    assert summarize(path) == ("reason_r1: 4 steps, reward_mean 0.100 -> 0.775, "
                               "format_valid_rate 0.250 -> 1.000 (first half -> second half of the steps)")
    assert main([str(tmp_path)]) == 0 and "reason_r1: 4 steps" in capsys.readouterr().out
    assert main([str(tmp_path / "none")]) == 1


def test_block_table_means_per_block_and_collapse_columns(tmp_path, capsys):
    path = tmp_path / "reason_r2.csv"
    path.write_text("step,reward_mean,correct_rate,uniform_group_rate,tool_calls\n"
                    "1,0.1,0.0,0.0,1.0\n2,0.55,0.5,0.5,0.5\n3,1.0,1.0,1.0,0.0\n")
    assert block_table(path, 2).splitlines() == [
        "reason_r2: 3 steps",
        "| steps | reward_mean | correct_rate | tool_calls | uniform_group_rate |",
        "|---|---|---|---|---|",
        "| 1-2 | 0.325 | 0.25 | 0.75 | 0.25 |",
        "| 3-3 | 1 | 1 | 0 | 1 |",
    ]
    assert "correct_rate 0.250 -> 0.750" in summarize(path)
    empty = tmp_path / "search_r2.csv"
    empty.write_text("step,reward_mean\n")
    assert block_table(empty, 8) == "search_r2: 0 steps"
    assert main([str(tmp_path), "--block", "2"]) == 0 and "| 1-2 |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="block must be >= 1"):
        block_table(path, 0)
