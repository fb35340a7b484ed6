"""The gate's figures on crafted groups: pass@k against its closed form, all-equal groups, the decision."""

from __future__ import annotations

import pytest

from factrl.rl.gate import gate_passes, group_figures, pass_at_k


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 2)


def test_group_figures_on_crafted_groups():
    # rewards 1 (right), 0.1 (valid, wrong), 0 (invalid)
    rewards = [[1, 1, 1, 1], [0.1, 0.1, 0.1, 0.1], [1, 0.1, 0.1, 0], [0.1, 0, 0.1, 0]]
    correct = [[r == 1 for r in g] for g in rewards]
    f = group_figures(rewards, correct)
    assert f["groups"] == 4 and f["rollouts"] == 16 and f["k"] == 4
    assert f["accuracy"] == pytest.approx(5 / 16)
    assert f["pass_at_k"] == pytest.approx(2 / 4)  # groups 1 and 3 have a right sample
    assert f["uniform_group_rate"] == pytest.approx(2 / 4)  # the last group's rewards differ, none right
    assert f["all_right_rate"] == 0.25 and f["all_wrong_rate"] == 0.5 and f["mixed_group_rate"] == 0.25
    assert group_figures(rewards, correct, k=1)["pass_at_k"] == pytest.approx(f["accuracy"])


def test_the_gate_opens_only_where_groups_mix():
    saturated = group_figures([[1] * 4] * 9 + [[1, 0.1, 1, 1]], [[True] * 4] * 9 + [[True, False, True, True]])
    ok, why = gate_passes(saturated)
    assert not ok and "0.90 of 10 groups" in why
    room = group_figures([[1, 0.1, 0.1, 1], [0.1, 0.1, 1, 0.1], [1, 1, 1, 1]],
                         [[True, False, False, True], [False, False, True, False], [True] * 4])
    assert gate_passes(room)[0]


def test_bad_groups_are_refused():
    with pytest.raises(ValueError, match="same, non-zero"):
        group_figures([[1]], [])
    with pytest.raises(ValueError, match="as many rewards"):
        group_figures([[1, 0]], [[True]])


def test_gate_sentence_and_train_summary_print_the_gate(tmp_path, capsys):
    import json

    from factrl.rl.curves import main as train_summary
    from factrl.rl.gate import NO_GATE, gate_sentence

    rewards = [[1, 0.1, 1, 1], [0.1] * 4]
    f = group_figures(rewards, [[r == 1 for r in g] for g in rewards])
    gate = {"pass_at_1": f["accuracy"], "pass_at_4": f["pass_at_k"], **f, "decision": gate_passes(f)[1],
            "claims": 2, "group_size": 4}
    line = gate_sentence(gate)
    assert line == ("the starting policy on 2 training prompts x 4 rollouts: pass@1 0.38, pass@4 0.50, "
                    "all-equal groups of 4 0.50 (open)")
    assert gate_sentence(NO_GATE) == NO_GATE["decision"]
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "reason_r1.json").write_text(json.dumps(gate))
    train_summary([str(tmp_path / "train"), "--gates", str(tmp_path / "gate")])
    assert f"gate reason_r1: {line}" in capsys.readouterr().out


def test_a_steps_pass_at_group_is_the_share_of_groups_with_a_right_rollout():
    from factrl.rewards.registry import RewardResult
    from factrl.rl.sampling import group_pass_rate

    right, wrong = RewardResult(1.0, {"correct": 1.0}), RewardResult(0.1, {"correct": 0.0})
    results = [right, wrong, wrong, wrong, wrong, wrong, right, right]
    assert group_pass_rate(results, [0, 0, 1, 1, 2, 2, 3, 3]) == {"pass_at_group": 0.5}
    assert group_pass_rate([1.0, 0.0], [0, 0]) == {}  # plain-float rewards say nothing of correctness


def test_figures_by_stratum_groups_rollouts_by_prompt_and_stratum():
    from factrl.rewards.registry import RewardResult
    from factrl.rl.gate import figures_by_stratum

    right, wrong = RewardResult(1.0, {"correct": 1.0}), RewardResult(0.1, {"correct": 0.0})
    results = [right, wrong, wrong, wrong, right, right]  # three prompts of 2 rollouts
    overall, per = figures_by_stratum(results, 2, ["3hop", "2hop", "3hop"])
    assert overall == group_figures([[1.0, 0.1], [0.1, 0.1], [1.0, 1.0]],
                                    [[True, False], [False, False], [True, True]], k=2)
    assert list(per) == ["2hop", "3hop"]
    assert per["2hop"]["groups"] == 1 and per["2hop"]["pass_at_k"] == 0.0
    assert per["3hop"]["pass_at_k"] == 1.0 and per["3hop"]["accuracy"] == 0.75


def test_more_samples_than_the_group_give_the_groups_uniform_rate_unbiased():
    """8 samples of a prompt, 2 right: pass@8 = 1; a random group of 4 of them is all wrong with
    probability C(6,4)/C(8,4) = 15/70, never all right, and uniform in reward likewise. The estimate
    equals the exact share over every 4-subset of the 8."""
    from itertools import combinations

    correct = [[True, True] + [False] * 6]
    rewards = [[1.0, 1.0] + [0.0] * 6]
    f = group_figures(rewards, correct, group_size=4)
    assert (f["k"], f["group_size"], f["pass_at_k"]) == (8, 4, 1.0)
    subsets = list(combinations(range(8), 4))
    exact = sum(len({rewards[0][i] for i in s}) == 1 for s in subsets) / len(subsets)
    assert f["uniform_group_rate"] == pytest.approx(exact) == pytest.approx(15 / 70)
    assert f["all_wrong_rate"] == pytest.approx(15 / 70) and f["all_right_rate"] == 0.0
    assert f["mixed_group_rate"] == pytest.approx(55 / 70)
    # with the group as large as the samples it is the plain all-equal test, as before
    assert group_figures(rewards, correct)["uniform_group_rate"] == 0.0
    with pytest.raises(ValueError, match="group_size 9"):
        group_figures(rewards, correct, group_size=9)
