"""Planted defects (factrl.rl.defects): what each does to a batch, and that the flipped sign makes a
real GRPO run on a tiny policy lower the reward a sound run raises (the learning benchmark's
``flip_advantage`` ablation, in CI)."""

from __future__ import annotations

import random
import tempfile
from dataclasses import replace

import pytest
import torch

from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.llm.local import LocalLLM
from factrl.rewards.registry import RewardResult
from factrl.rl.advantages import grpo_advantages
from factrl.rl.defects import PLANTED_DEFECTS, flip_scores, plant, shuffle_scores, unmask
from factrl.rl.trainer import GRPOTrainer, train
from tests.rl.tiny import TINY_CFG, tiny_model


def _results(scores):
    return [RewardResult(score=s, parts={"correct": float(s > 0.5)}) for s in scores]


def test_flipped_scores_flip_every_group_advantage():
    scores = [1.0, 0.0, 0.5, 1.0, 0.2, 0.2, 0.9, 0.1]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    flipped = flip_scores(_results(scores))
    adv = grpo_advantages(torch.tensor(scores), groups)
    adv_flipped = grpo_advantages(torch.tensor([r.score for r in flipped]), groups)
    torch.testing.assert_close(adv_flipped, -adv)
    assert [r.parts["unplanted_reward"] for r in flipped] == scores  # the true reward is still logged
    assert [r.parts["correct"] for r in flipped] == [float(s > 0.5) for s in scores]


def test_shuffled_scores_are_a_seeded_permutation_across_groups():
    scores = [float(i) for i in range(16)]
    shuffled = [r.score for r in shuffle_scores(_results(scores), random.Random(0))]
    assert sorted(shuffled) == scores and shuffled != scores
    assert shuffled == [r.score for r in shuffle_scores(_results(scores), random.Random(0))]
    # scores move between groups of 4, not only within them
    assert any(set(shuffled[i:i + 4]) != set(scores[i:i + 4]) for i in range(0, 16, 4))


def test_unmask_trains_on_injected_tokens():
    from factrl.agents.rollout import Trajectory

    t = Trajectory(prompt_ids=[1, 2], response_ids=[5, 6, 7, 8], loss_mask=[1, 0, 0, 1], turns=[],
                   response_text="", num_tool_calls=1, finish_reason="stop")
    assert unmask(t).loss_mask == [1, 1, 1, 1] and t.loss_mask == [1, 0, 0, 1]


def test_plant_nothing_returns_the_functions_and_unknown_names_fail():
    def roll(items, g):
        return []

    def rew(items, trajs):
        return []

    assert plant("", roll, rew) == (roll, rew)
    with pytest.raises(ValueError, match="unknown planted defect 'flip'"):
        plant("flip", roll, rew)
    assert set(PLANTED_DEFECTS) == {"flip_advantage", "shuffled_reward", "mask_retrieved_tokens_off"}


def test_planted_defect_is_a_checked_param():
    from factrl.config import ConfigError, from_dict
    from factrl.rl.params import AgentTrainParams

    assert from_dict(AgentTrainParams, {"planted_defect": "shuffled_reward"}, "train.reasoning"
                        ).planted_defect == "shuffled_reward"
    with pytest.raises(ConfigError, match="planted_defect"):
        from_dict(AgentTrainParams, {"planted_defect": "flipped"}, "train.reasoning")


# ---- the direction test: a real GRPO run on a tiny policy ------------------------------------------

LOW_IDS = 32  # the reward: the share of response tokens whose id is below this (of a 64-id vocabulary)


def low_id_reward(items, trajectories) -> list[RewardResult]:
    """Reward a response by the share of its tokens in the lower half of the vocabulary: a skill the
    random policy has half of and GRPO can sharpen in a few steps."""
    return [RewardResult(score=sum(i < LOW_IDS for i in t.response_ids) / max(len(t.response_ids), 1))
            for t in trajectories]


def _mean_true_reward(defect: str, tok, steps: int = 8) -> tuple[float, float]:
    """(first step's, last three steps' mean) true reward of a GRPO run with ``defect`` planted."""
    cfg = replace(TINY_CFG, steps=steps, lr=2e-2, group_size=4, prompts_per_step=4, max_new_tokens=8,
                  precision="fp32", kl_coef=0.0, checkpoint_every=100, temperature=1.0)
    model = tiny_model(tok, vocab_size=64, init_std=0.02)
    trainer = GRPOTrainer(model, tok, cfg)
    llm = LocalLLM(model_obj=model, tokenizer=tok, precision=cfg.precision)
    params = RolloutParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature)

    def rollouts(prompts, n):  # prompts are token ids inside the 64-id vocabulary
        return run_rollouts(llm, [list(p) for p in prompts], None, params, n=n)

    rollout_fn, reward_fn = plant(defect, rollouts, low_id_reward, seed=cfg.seed)
    with tempfile.TemporaryDirectory() as out:
        rows = train(trainer, [(40, 41), (42, 43), (44, 45), (46, 47)], rollout_fn, reward_fn, out)
    true = [r.get("unplanted_reward_rate", r["reward_mean"]) for r in rows]
    return true[0], sum(true[-3:]) / 3


def test_flipped_advantage_lowers_the_reward_a_sound_run_raises(tok):
    first, sound = _mean_true_reward("", tok)
    flipped_first, flipped = _mean_true_reward("flip_advantage", tok)
    assert first == pytest.approx(flipped_first)  # the same policy and seeds: the same first draw
    # measured (8 steps): sound 0.56 -> 0.64 over the last three steps, flipped 0.56 -> 0.30
    assert sound > first and flipped < first, (first, sound, flipped)
    assert sound - flipped > 0.2, (sound, flipped)
