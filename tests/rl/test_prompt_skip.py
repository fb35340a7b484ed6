"""GRESO's pre-rollout filter (GRPOParams.skip_uniform_prompts): which prompts it skips, how its
exploration probabilities move, and that a step still rolls out as many groups."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from factrl.rl.params import GRPOParams
from factrl.rl.prompt_skip import EASY, HARD, MIXED, PromptSkipper, group_outcome, uniform_streak
from factrl.rl.sampling import sample_step
from tests.rl.test_trainer import Traj


def test_outcomes_and_streaks():
    assert group_outcome([1.0, 1.0, 1.0]) == EASY and group_outcome([0.0, 0.0]) == HARD
    assert group_outcome([0.5, 0.5]) == EASY and group_outcome([0.0, 1.0]) == MIXED
    assert uniform_streak([]) == (MIXED, 0)
    assert uniform_streak([HARD, MIXED, EASY, EASY]) == (EASY, 2)
    assert uniform_streak([EASY, HARD, MIXED]) == (MIXED, 0)


def test_skip_probability_grows_with_the_streak():
    """1 - p ** z: never for a prompt not seen or last mixed; the all-right and all-wrong streaks each
    use their own exploration probability."""
    skipper = PromptSkipper(p_easy=0.5, p_hard=0.8, history={1: [EASY], 2: [EASY, EASY], 3: [HARD, HARD],
                                                               4: [EASY, MIXED]})
    assert skipper.skip_probability(0) == 0.0 and skipper.skip_probability(4) == 0.0
    assert skipper.skip_probability(1) == pytest.approx(0.5)
    assert skipper.skip_probability(2) == pytest.approx(0.75)
    assert skipper.skip_probability(3) == pytest.approx(1 - 0.8**2)


def test_choose_keeps_the_order_and_always_fills_the_draw():
    skipper = PromptSkipper(p_easy=EXPLORE_NEVER, history={0: [EASY] * 3, 2: [EASY] * 3})
    chosen, skipped = skipper.choose([0, 1, 2, 3, 4], 3, np.random.default_rng(0))
    assert chosen == [1, 3, 4] and skipped == 2
    # fewer survivors than asked: the skipped ones fill the rest, in order
    chosen, skipped = skipper.choose([0, 1, 2], 3, np.random.default_rng(0))
    assert chosen == [1, 0, 2] and skipped == 2


EXPLORE_NEVER = 0.0  # p = 0: a prompt with any uniform streak is always skipped


def test_the_exploration_probabilities_move_toward_the_targets_once_the_filter_acts():
    skipper = PromptSkipper(target_uniform=0.3)
    skipper.record([0, 1, 2], [1, 1, 0, 0, 0, 1], group_size=2)  # easy, hard, mixed: no history yet
    assert (skipper.p_easy, skipper.p_hard) == (0.5, 0.5)
    assert skipper.history == {0: [EASY], 1: [HARD], 2: [MIXED]}
    skipper.record([0, 3, 4, 5], [1, 1, 0, 1, 0, 1, 0, 1], group_size=2)  # 1/4 easy >= 0.1, 0 hard < 0.2
    assert skipper.p_easy == pytest.approx(0.49) and skipper.p_hard == pytest.approx(0.51)
    copy = PromptSkipper()
    copy.load_state_dict(skipper.state_dict())
    assert copy.state_dict() == skipper.state_dict()


def test_a_run_rolls_out_prompts_that_keep_giving_all_equal_groups_less_often():
    """Over several epochs of 8 prompts (4 a step), half of them always all-equal: with the filter the
    step still rolls out 4 groups, and the share of them that is all-equal falls."""
    prompts = [{"id": i, "mixed": i % 2 == 0} for i in range(8)]
    drawn: list[int] = []

    def rollout(items, n):
        drawn.extend(it["id"] for it in items)
        return [Traj([1, 2, 3], [10 + it["id"], 20 + j], [1, 1]) for it in items for j in range(n)]

    def reward(items, trajectories):
        return [float(j % 2) if it["mixed"] else 1.0 for j, it in enumerate(items)]

    cfg = replace(GRPOParams(), group_size=2, prompts_per_step=4, seed=1)

    def uniform_share(skipper: PromptSkipper | None) -> float:
        drawn.clear()
        for step in range(16):
            batch = sample_step(cfg, prompts, rollout, reward, step, skipper)
            assert len(batch.trajectories) == 4 * 2
        later = drawn[4 * 4:]  # after the first two steps (one epoch): the filter has a history
        return sum(not prompts[i]["mixed"] for i in later) / len(later)

    assert uniform_share(None) == pytest.approx(0.5)
    skipper = PromptSkipper()
    assert uniform_share(skipper) < 0.35
    assert skipper.p_hard > 0.5  # no all-wrong group, under its target: it would explore such prompts more
