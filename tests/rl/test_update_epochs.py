"""Several clipped updates per rollout batch (``ppo_epochs``; GRPO's mu iterations, TRL's
``num_iterations``, verl's ``ppo_epochs``): every epoch's loss is the PPO clipped surrogate against the
log-probs of the policy that sampled the batch, computed here by hand from the trainer's inputs."""

from __future__ import annotations

import torch

import factrl.rl.trainer as trainer_module
from factrl.rl.params import GRPOParams
from factrl.rl.trainer import GRPOTrainer
from tests.rl.tiny import tiny_model


class Traj:
    def __init__(self, prompt, response, mask):
        self.prompt_ids, self.response_ids, self.loss_mask = prompt, response, mask


def hand_clipped_surrogate(logp, old, adv, mask, eps_low, eps_high, clip_c) -> float:
    """Token-mean of verl's dual-clipped PPO loss, one token at a time in plain Python floats."""
    total, count = 0.0, 0
    for lp_row, old_row, adv_row, m_row in zip(logp.tolist(), old.tolist(), adv.tolist(), mask.tolist()):
        for lp, o, a, m in zip(lp_row, old_row, adv_row, m_row):
            if not m:
                continue
            r = torch.tensor(lp - o).clamp(-20, 20).exp().item()
            loss = max(-a * r, -a * min(max(r, 1 - eps_low), 1 + eps_high))
            if a < 0:
                loss = min(loss, -a * clip_c)
            total += loss
            count += 1
    return total / count


def test_second_epoch_is_clipped_against_the_sampling_policy(tok, monkeypatch):
    calls = []
    real = trainer_module.policy_loss

    def recording(logp, old, adv, mask, *args, **kw):
        loss, stats = real(logp, old, adv, mask, *args, **kw)
        calls.append((logp.detach().clone(), old.detach().clone(), adv.clone(), mask.clone(), loss.item(), stats))
        return loss, stats

    monkeypatch.setattr(trainer_module, "policy_loss", recording)
    cfg = GRPOParams(group_size=2, prompts_per_step=2, lr=0.05, ppo_epochs=3, micro_batch_size=4, kl_coef=0.0,
                     precision="fp32", max_grad_norm=0.0, tis_cap=0.0, warmup_steps=0, shared_prefix=False)
    trainer = GRPOTrainer(tiny_model(tok), tok, cfg)
    trajs = [Traj([5, 6, 7], [11, 12, 13, 14], [1, 1, 0, 1]), Traj([5, 6, 7], [21, 22, 23], [1, 1, 1]),
             Traj([8, 9], [31, 32], [1, 1]), Traj([8, 9], [41, 42, 43], [1, 0, 1])]
    metrics = trainer.step(trajs, [1.0, 0.0, 0.2, 0.9], [0, 0, 1, 1])
    assert len(calls) == 3  # one micro-batch, three epochs
    first_logp = calls[0][0]
    for epoch, (logp, old, adv, mask, loss, _) in enumerate(calls):
        # every epoch's ratio is against the log-probs before the first update
        torch.testing.assert_close(old, first_logp)
        expected = hand_clipped_surrogate(logp, old, adv, mask, cfg.clip_ratio_low, cfg.clip_ratio_high,
                                          cfg.clip_ratio_c)
        assert abs(loss - expected) < 1e-5, (epoch, loss, expected)
    # the first epoch is on-policy (ratio 1: nothing clipped); the lr is large enough that later
    # epochs move the ratio past the clip range, where the clipped term takes over
    assert calls[0][5]["clipfrac"] == 0.0
    assert max(c[5]["clipfrac"] for c in calls[1:]) > 0.0
    assert not torch.allclose(calls[2][0], first_logp)
    assert metrics["updates"] == 3.0
