"""factrl train-summary: first-half vs second-half means of the training curves."""

from factrl.rl.curves import halves, main, summarize


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
