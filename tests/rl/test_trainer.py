"""The local GRPO trainer: masked tokens, updates, KL at the start, accumulation, checkpoints, resume."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from factrl.rewards.haris import reasoning_reward
from factrl.rl.advantages import grpo_advantages
from factrl.rl.losses import logprobs_from_logits
from factrl.rl.params import GRPOParams
from factrl.rl.sampling import draw_prompts, part_rates, prompt_strata, sample_step, step_prompts
from factrl.rl.step_log import StepLog, read_history
from factrl.rl.trainer import (
    GRPOTrainer,
    checkpoints,
    collate,
    collate_shared,
    response_hidden,
    response_logits,
    train,
)
from tests.rl.tiny import (
    CURVES_DIR,
    DYNAMIC_CFG,
    TINY_CFG,
    checksum_reward,
    make_rollout_fn,
    parity_reward,
    run,
    tiny_model,
)

REPO = Path(__file__).resolve().parents[2]
TIMING = {"rollout_time", "reward_time", "train_time", "step_time"}


def _timing(name: str) -> bool:
    """A column that measures time (seconds ``*_time``, rates ``*_per_s``): never equal between runs."""
    return name in TIMING or name.endswith(("_time", "_per_s"))


@dataclass
class Traj:
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    num_tool_calls: int = 0


def _batch(tok):
    """Two groups of two; responses with injected (mask 0) spans inside and at the end."""
    p1 = tok("Is the claim true?", add_special_tokens=False)["input_ids"]
    p2 = tok("Check this", add_special_tokens=False)["input_ids"]
    return [
        Traj(p1, [10, 11, 12, 13, 14, 15], [1, 1, 0, 0, 1, 1]),
        Traj(p1, [20, 21, 22, 23], [1, 1, 1, 0]),
        Traj(p2, [30, 31, 32, 33, 34, 35, 36, 37], [1, 0, 0, 1, 1, 1, 0, 0]),
        Traj(p2, [40, 41], [1, 1]),
    ], [1.0, 0.0, 0.1, 1.0], [0, 0, 1, 1]


def _cfg(**kw):
    # no weight decay: AdamW's decay alone moves every weight, so a moved weight would prove nothing
    return replace(GRPOParams(lr=1e-3, micro_batch_size=4, precision="fp32", weight_decay=0.0), **kw)


def _weighted_logp(model, tok, trajs, rewards, groups) -> float:
    """sum_i A_i * mean log p(response_i): what a policy-gradient step must raise (the surrogate
    at ratio 1), for the batch's GRPO advantages ``A_i``."""
    adv = grpo_advantages(torch.tensor(rewards), groups)
    mb = collate(trajs, adv, tok.pad_token_id)
    with torch.no_grad():
        logp = logprobs_from_logits(response_logits(model, mb, 1.0), mb.responses)
    return float((adv * (logp * mb.mask).sum(-1) / mb.mask.sum(-1)).sum())


@pytest.mark.parametrize("chunked", [False, True])
def test_masked_tokens_get_zero_gradient(tok, tiny, chunked):
    """The gradient reaches the head's input (plain path: the logits; chunked: the final hidden
    states, which it projects itself) at every trained position and nowhere else (the left-padded
    layout, one pass over every row; the shared-prefix layout equals it row by row, tested below)."""
    trajs, rewards, groups = _batch(tok)
    trainer = GRPOTrainer(tiny, tok, _cfg(chunked_logprobs=chunked, group_by_length=False, shared_prefix=False))
    captured = []
    t = max(len(tr.response_ids) for tr in trajs)

    def keep(module, args, out):
        if out.requires_grad:  # the policy's training forward, not a no-grad pass
            out.retain_grad()
            captured.append(out)

    (tiny.model.norm if chunked else tiny.lm_head).register_forward_hook(keep)
    trainer.step(trajs, rewards, groups)
    (logits,) = captured  # [B, T + 1, V]: row j predicts response token j; the last row is unused
    row_norm = logits.grad.float().abs().sum(-1)[:, -(t + 1):]
    mask = collate(trajs, torch.zeros(4), trainer.pad_id).mask
    assert torch.all(row_norm[:, :-1][mask == 0] == 0)
    assert torch.all(row_norm[:, :-1][mask == 1] > 0)
    assert torch.all(row_norm[:, -1] == 0)


def test_trailing_masked_token_ids_do_not_change_the_update(tok):
    """Change the ids of injected tokens that end a response: the update is bit-identical."""
    results = []
    for swap in (False, True):
        trajs, rewards, groups = _batch(tok)
        if swap:
            trajs[2].response_ids[-2:] = [999, 1234]
            trajs[1].response_ids[-1] = 4321
        model = tiny_model(tok)
        GRPOTrainer(model, tok, _cfg()).step(trajs, rewards, groups)
        results.append({k: v.clone() for k, v in model.state_dict().items()})
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])


def test_one_step_changes_the_policy_not_the_reference(tok, tiny):
    """Without weight decay, only the policy gradient moves weights: every tensor moves, and the
    responses with positive advantage gain likelihood against those with negative advantage."""
    trajs, rewards, groups = _batch(tok)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    surrogate = _weighted_logp(tiny, tok, trajs, rewards, groups)
    trainer = GRPOTrainer(tiny, tok, _cfg())
    metrics = trainer.step(trajs, rewards, groups)
    changed = [k for k, v in tiny.state_dict().items() if not torch.equal(v, before[k])]
    assert len(changed) == len(before)  # every tensor moves (AdamW step on a non-zero gradient)
    assert _weighted_logp(tiny, tok, trajs, rewards, groups) > surrogate + 1e-3
    assert all(torch.equal(v, before[k]) for k, v in trainer.ref_model.state_dict().items())
    assert metrics["grad_norm"] > 0 and metrics["updates"] == 1
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_kl_is_zero_when_policy_equals_reference(tok, tiny, precision):
    trajs, rewards, groups = _batch(tok)
    trainer = GRPOTrainer(tiny, tok, _cfg(precision=precision, kl_coef=0.1))
    first = trainer.step(trajs, rewards, groups)
    assert first["kl"] == 0.0 and first["ppo_kl"] == 0.0 and first["clipfrac"] == 0.0
    second = trainer.step(trajs, rewards, groups)
    assert second["kl"] > 0  # after an update the policy has left the reference


@pytest.mark.parametrize("chunked", [False, True])
def test_gradient_accumulation_matches_one_big_batch(tok, chunked):
    trajs, rewards, groups = _batch(tok)
    out = []
    for micro in (1, 4):
        trainer = GRPOTrainer(tiny_model(tok), tok, _cfg(micro_batch_size=micro, loss_agg="seq-mean-token-mean",
                                                         chunked_logprobs=chunked))
        grads = {}
        # record the accumulated gradients just before AdamW consumes them
        trainer.optimizer.register_step_pre_hook(
            lambda opt, *_: grads.update({i: p.grad.clone() for i, p in enumerate(opt.param_groups[0]["params"])})
        )
        out.append((trainer.step(trajs, rewards, groups), grads))
    (m1, g1), (m4, g4) = out
    assert m1["grad_norm"] == pytest.approx(m4["grad_norm"], rel=1e-4)
    assert m1["pg_loss"] == pytest.approx(m4["pg_loss"], abs=1e-6)
    # equal up to float summation order: within 1e-5 of each tensor's largest entry (3e-5 chunked:
    # its head's products run at other shapes per micro-batch, one per trained-token count;
    # measured 1.4e-5 on the tied embedding)
    tol = 3e-5 if chunked else 1e-5
    assert all(torch.allclose(g1[i], g4[i], rtol=0, atol=tol * g4[i].abs().max().item()) for i in g1)


def test_several_updates_per_batch_use_old_logprobs(tok, tiny):
    trajs, rewards, groups = _batch(tok)
    trainer = GRPOTrainer(tiny, tok, _cfg(mini_batch_size=2, micro_batch_size=1, ppo_epochs=2))
    metrics = trainer.step(trajs, rewards, groups)
    assert metrics["updates"] == 4
    assert metrics["ppo_kl"] != 0.0  # later updates see a policy that moved away from the old one


def test_checkpoint_is_hugging_face_and_restores_optimizer(tok, tiny, tmp_path):
    from transformers import AutoModelForCausalLM

    trajs, rewards, groups = _batch(tok)
    trainer = GRPOTrainer(tiny, tok, _cfg())
    trainer.step(trajs, rewards, groups)
    path = trainer.save_checkpoint(tmp_path, 1, [{"step": 1}])
    loaded = AutoModelForCausalLM.from_pretrained(path)
    assert all(torch.equal(v, tiny.state_dict()[k]) for k, v in loaded.state_dict().items())
    fresh = GRPOTrainer(tiny_model(tok), tok, _cfg())
    state = fresh.load_checkpoint(path)
    assert state["step"] == 1 and state["metrics"] == [{"step": 1}]
    exp_avg = trainer.optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(fresh.optimizer.state_dict()["state"][0]["exp_avg"], exp_avg)


def test_bad_trajectory_names_the_row(tok, tiny):
    trainer = GRPOTrainer(tiny, tok, _cfg())
    bad = [Traj([1, 2], [3, 4, 5], [1, 1])]
    with pytest.raises(ValueError, match="trajectory 0: loss_mask has 2 entries for 3 response ids"):
        trainer.step(bad, [1.0], [0])


def test_step_prompts_cover_every_prompt_each_epoch():
    seen = [i for s in range(5) for i in step_prompts(10, 2, seed=1, step=s)]
    assert sorted(seen) == list(range(10))
    assert step_prompts(10, 2, seed=1, step=3) == step_prompts(10, 2, seed=1, step=3)


def test_reward_parts_become_rate_columns():
    right = "<think>Both hops check out.</think><verification>\\boxed{Support}</verification>"
    results = [reasoning_reward(right, "SUPPORTS"), reasoning_reward(right, "REFUTES"),
               reasoning_reward("no verdict", "SUPPORTS"), reasoning_reward(right, "SUPPORTS")]
    assert [r.score for r in results] == [1.0, 0.1, 0.0, 1.0]
    assert part_rates(results) == {"correct_rate": 0.5}  # format is format_valid_rate's job
    assert part_rates([1.0, 0.0]) == {}  # plain-float rewards have no parts


def _rows(out_dir):
    """The run's curves (its DVCLive directory) as rows, timings left out."""
    return [{k: v for k, v in r.items() if not _timing(k)} for r in read_history(Path(out_dir) / CURVES_DIR)]


def _curve_files(out_dir):
    """The text of each non-timing curve file, by name: what `dvc plots` reads."""
    plots = Path(out_dir) / CURVES_DIR / "plots" / "metrics"
    return {p.stem: p.read_text() for p in sorted(plots.glob("*.tsv")) if not _timing(p.stem)}


def _weights(out_dir):
    return load_file(str(checkpoints(Path(out_dir) / "checkpoints")[-1] / "model.safetensors"))


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic_sampling"])
def test_resume_after_kill_equals_uninterrupted_run(tmp_path, dynamic):
    straight = tmp_path / "straight"
    rows = run(str(straight), cfg=DYNAMIC_CFG, reward_fn=parity_reward) if dynamic else run(str(straight))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(0.0 <= r["uniform_group_rate"] <= 1.0 for r in rows)
    assert [p.name for p in checkpoints(straight / "checkpoints")] == ["step-000002", "step-000004"]
    if dynamic:  # the run did draw again after dropping groups, or the resume check proves little
        assert max(r["sampling_draws"] for r in rows) > 1 and max(r["uniform_group_rate"] for r in rows) > 0
        assert max(r["skipped_prompts"] for r in rows) > 0  # and the filter skipped: its state must resume

    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}  # this checkout's code
    cmd = [sys.executable, "-m", "tests.rl.tiny", str(killed)] + (["--dynamic"] if dynamic else [])
    first = subprocess.run([*cmd, "3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == -9, first.stderr[-2000:]  # SIGKILL after step 3, checkpoint at 2
    assert len(_rows(killed)) == 3
    assert [p.name for p in checkpoints(killed / "checkpoints")] == ["step-000002"]
    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]

    assert _rows(killed) == _rows(straight) and len(_rows(straight)) == 4
    assert _curve_files(killed) == _curve_files(straight)
    a, b = _weights(straight), _weights(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _weights(straight)["model.embed_tokens.weight"].abs().sum() > 0


def test_raising_steps_continues_the_run_and_lowering_them_does_not_reuse_later_steps(tmp_path):
    """A run of 2 steps whose ``steps`` is raised to 4 continues from its step-2 checkpoint and ends
    exactly as a 4-step run; lowered to 1, it neither reuses nor keeps the later checkpoints."""
    straight = tmp_path / "straight"
    run(str(straight))  # TINY_CFG: 4 steps, a checkpoint every 2
    extended = tmp_path / "extended"
    assert [r["step"] for r in run(str(extended), cfg=replace(TINY_CFG, steps=2))] == [1, 2]
    rows = run(str(extended))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert _rows(extended) == _rows(straight)
    a, b = _weights(straight), _weights(extended)
    assert all(torch.equal(a[k], b[k]) for k in a)

    one = tmp_path / "one"
    run(str(one), cfg=replace(TINY_CFG, steps=1))
    assert [r["step"] for r in run(str(extended), cfg=replace(TINY_CFG, steps=1))] == [1]
    assert [p.name for p in checkpoints(extended / "checkpoints")] == ["step-000001"]
    a, b = _weights(one), _weights(extended)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # minutes of real SmolLM2 decoding on 2 cores
def test_real_smollm2_one_step():
    """One GRPO step of the real SmolLM2-135M on its own samples, through the rollout engine."""
    from factrl.llm.models import load_model_and_tokenizer
    from tests.rl.tiny import checksum_reward

    model, tok = load_model_and_tokenizer("smollm2-135m")
    cfg = replace(TINY_CFG, group_size=2, micro_batch_size=4, max_new_tokens=8, lr=1e-5, weight_decay=0.0)
    before = model.model.layers[0].mlp.up_proj.weight.clone()
    trainer = GRPOTrainer(model, tok, cfg)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in ("Is Paris in France? Answer briefly.", "Write one sentence about the sea.")]
    torch.manual_seed(0)
    trajs = make_rollout_fn(model, tok, cfg)(prompts, cfg.group_size)
    rewards = checksum_reward(prompts, trajs)
    assert rewards[0] != rewards[1] and rewards[2] != rewards[3]
    metrics = trainer.step(trajs, rewards, [0, 0, 1, 1])
    assert metrics["kl"] == 0.0 and metrics["grad_norm"] > 0 and metrics["response_length"] > 0
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert not torch.equal(before, model.model.layers[0].mlp.up_proj.weight)


# ---- dynamic sampling (DAPO; verl algorithm.filter_groups) ------------------------------------


def _controlled(prompts_mixed: list[bool]):
    """Prompts whose groups are mixed (rewards 0, 1, 0, ...) or uniform (all 0.5), by design, and a
    rollout function that records which prompts each call drew."""
    prompts = [{"id": i, "mixed": m} for i, m in enumerate(prompts_mixed)]
    calls: list[list[int]] = []

    def rollout(items, n):
        calls.append([it["id"] for it in items])
        return [Traj([1, 2, 3], [10 + it["id"], 20 + j], [1, 1]) for it in items for j in range(n)]

    def reward(items, trajectories):
        return [float(j % 2) if it["mixed"] else 0.5 for j, it in enumerate(items)]

    return prompts, rollout, reward, calls


def test_dynamic_sampling_keeps_only_mixed_groups_until_the_batch_is_full():
    prompts, rollout, reward, calls = _controlled([i % 3 == 0 for i in range(12)])  # 4 of 12 mixed
    cfg = _cfg(group_size=2, prompts_per_step=3, dynamic_sampling=True, max_sampling_draws=10)
    batch = sample_step(cfg, prompts, rollout, reward, step=0)
    kept_prompts = {batch.group_ids[i] for i in batch.kept}
    drawn = [p for call in calls for p in call]
    assert len(batch.kept) == 3 * 2 and len(kept_prompts) == 3  # exactly prompts_per_step groups
    assert all(prompts[drawn[g]]["mixed"] for g in kept_prompts)  # group g is the g-th prompt drawn
    assert batch.draws == len(calls) > 1  # it drew again, and stopped once the batch was full
    mixed_before_last = sum(prompts[p]["mixed"] for call in calls[:-1] for p in call)
    assert mixed_before_last < 3 <= mixed_before_last + sum(prompts[p]["mixed"] for p in calls[-1])
    assert len(set(drawn)) == len(drawn)  # later draws take prompts the step has not drawn yet
    again = sample_step(cfg, prompts, rollout, reward, step=0)
    assert again.kept == batch.kept and calls[-batch.draws:] == calls[:batch.draws]  # (seed, step, draw)
    # off: one draw, every group trained on, uniform or not
    plain = sample_step(replace(cfg, dynamic_sampling=False), prompts, rollout, reward, step=0)
    assert plain.draws == 1 and len(plain.kept) == len(plain.trajectories) == 6


def test_a_missing_redraw_rolls_out_only_the_groups_the_step_still_lacks():
    """redraw: missing draws again only as many prompts as groups with signal are missing (full
    draws prompts_per_step each time); the step still ends with prompts_per_step groups."""
    prompts, rollout, reward, calls = _controlled([i % 4 != 0 for i in range(16)])  # 12 of 16 mixed
    cfg = _cfg(group_size=2, prompts_per_step=4, dynamic_sampling=True, max_sampling_draws=10)
    full = sample_step(cfg, prompts, rollout, reward, step=1)
    lacking = 4 - sum(prompts[p]["mixed"] for p in calls[0])
    assert lacking > 0 and full.draws > 1 and all(len(c) == 4 for c in calls)  # the seed gives a uniform group
    calls.clear()
    batch = sample_step(replace(cfg, redraw="missing"), prompts, rollout, reward, step=1)
    assert len(calls[0]) == 4 and len(calls[1]) == lacking  # the first draw is the same, then the rest
    assert len(batch.kept) == 4 * 2 and len({batch.group_ids[i] for i in batch.kept}) == 4
    assert len(batch.group_ids) == len(batch.trajectories) == 2 * sum(len(c) for c in calls)
    assert len(set(p for c in calls for p in c)) == sum(len(c) for c in calls)  # no prompt drawn twice


def test_dynamic_sampling_stops_at_the_cap_and_trains_on_what_it_kept(tok, tiny, tmp_path):
    prompts, rollout, reward, calls = _controlled([i == 5 for i in range(8)])  # one mixed prompt
    cfg = _cfg(group_size=2, prompts_per_step=2, steps=1, dynamic_sampling=True, max_sampling_draws=4,
               checkpoint_every=1)
    [row] = train(GRPOTrainer(tiny, tok, cfg), prompts, rollout, reward, tmp_path / "one")
    assert len(calls) == 4 and row["sampling_draws"] == 4  # all 8 prompts drawn, the cap reached
    assert row["kept_groups"] == 1 and row["updates"] == 1  # the one mixed group was trained on
    assert row["uniform_group_rate"] == pytest.approx(7 / 8)  # among all groups drawn
    assert row["reward_mean"] == pytest.approx((7 * 2 * 0.5 + 1) / 16)  # over every drawn trajectory


def test_dynamic_sampling_with_no_mixed_group_skips_the_update_but_logs_the_step(tok, tiny, tmp_path):
    prompts, rollout, reward, calls = _controlled([False] * 6)
    cfg = _cfg(group_size=2, prompts_per_step=2, steps=2, dynamic_sampling=True, max_sampling_draws=2,
               checkpoint_every=1)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    rows = train(GRPOTrainer(tiny, tok, cfg), prompts, rollout, reward, tmp_path / "none",
                 curves=functools.partial(StepLog, tmp_path / "none" / CURVES_DIR))
    assert [r["step"] for r in rows] == [1, 2] and len(calls) == 4
    assert all(r["kept_groups"] == 0 and r["updates"] == 0 and r["uniform_group_rate"] == 1.0 for r in rows)
    assert all(torch.equal(v, before[k]) for k, v in tiny.state_dict().items())
    assert _rows(tmp_path / "none")[1]["kept_groups"] == 0.0


def test_a_step_with_only_uniform_groups_makes_no_update(tok, tiny, tmp_path):
    """Without dynamic sampling too: all-equal rewards leave every advantage 0, and an update would
    only apply weight decay (AdamW's default here, as verl's) and what Adam makes of that."""
    prompts, rollout, reward, calls = _controlled([False] * 4)
    cfg = replace(_cfg(group_size=2, prompts_per_step=2, steps=2, checkpoint_every=1), weight_decay=0.01)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    rows = train(GRPOTrainer(tiny, tok, cfg), prompts, rollout, reward, tmp_path / "flat")
    assert [r["updates"] for r in rows] == [0, 0]
    assert all(torch.equal(v, before[k]) for k, v in tiny.state_dict().items())
    assert all(r["reward_mean"] == 0.5 and r["response_length"] == 2 for r in rows)  # still logged


def test_draw_cap_must_allow_one_draw(tok, tiny):
    with pytest.raises(ValueError, match="max_sampling_draws must be >= 1"):
        GRPOTrainer(tiny, tok, _cfg(dynamic_sampling=True, max_sampling_draws=0))


def test_draws_are_functions_of_seed_step_and_draw():
    assert draw_prompts(10, 3, 1, 4, 0) == step_prompts(10, 3, 1, 4)
    assert draw_prompts(10, 3, 1, 4, 2, {1, 2}) == draw_prompts(10, 3, 1, 4, 2, {1, 2})
    assert draw_prompts(10, 3, 1, 4, 1) != draw_prompts(10, 3, 1, 4, 2)
    assert not {1, 2} & set(draw_prompts(10, 8, 1, 4, 1, {1, 2}))
    short = draw_prompts(3, 5, 0, 0, 1)  # fewer prompts than a draw needs: each once, then again
    assert len(short) == 5 and set(short[:3]) == {0, 1, 2} and short[3:] == short[:2]


def test_balanced_draws_hold_every_label_in_proportion():
    labels = ["SUPPORTED"] * 10 + ["NOT_SUPPORTED"] * 10
    for step in range(12):  # across epoch boundaries (5 steps of 4 per epoch)
        picked = step_prompts(20, 4, seed=3, step=step, strata=labels)
        assert sorted(labels[i] for i in picked) == ["NOT_SUPPORTED"] * 2 + ["SUPPORTED"] * 2, step
    epoch = [i for s in range(5) for i in step_prompts(20, 4, seed=3, step=s, strata=labels)]
    assert sorted(epoch) == list(range(20))  # still every prompt once per epoch
    later = draw_prompts(20, 4, 3, 7, 2, {0, 10}, labels)  # a dynamic-sampling draw: balanced too
    assert sorted(labels[i] for i in later) == ["NOT_SUPPORTED"] * 2 + ["SUPPORTED"] * 2
    assert not {0, 10} & set(later)
    # unequal strata: each step about in proportion (1 of 3 prompts is the minority label)
    skewed = ["a"] * 20 + ["b"] * 10
    assert all(sum(skewed[i] == "b" for i in step_prompts(30, 6, 0, s, skewed)) == 2 for s in range(5))
    # no strata: the unstratified order is unchanged (a seeded permutation per epoch)
    assert step_prompts(20, 4, 3, 1) == np.random.default_rng([3, 0]).permutation(20)[4:8].tolist()


def test_balance_by_draws_by_a_prompt_field_and_names_a_missing_one():
    prompts, rollout, reward, calls = _controlled([True] * 16)
    prompts = [dict(p, label="S" if p["id"] < 8 else "N") for p in prompts]  # unshuffled: 8 S then 8 N
    cfg = _cfg(group_size=2, prompts_per_step=4, balance_by="label")
    for step in range(6):
        sample_step(cfg, prompts, rollout, reward, step=step)
    assert all(sorted(prompts[i]["label"] for i in call) == ["N", "N", "S", "S"] for call in calls)
    with pytest.raises(KeyError, match="balance_by: 'hops' is not a field of training prompt 0"):
        sample_step(replace(cfg, balance_by="hops"), prompts, rollout, reward, step=0)


def test_balance_by_reads_an_attribute_of_object_prompts():
    @dataclass(frozen=True)
    class Question:  # as factrl.agents.march.MarchItem
        id: int
        answerable: bool

    questions = [Question(i, i % 4 == 0) for i in range(16)]  # a quarter answerable
    assert prompt_strata(questions, "answerable") == [i % 4 == 0 for i in range(16)]
    per_step = [step_prompts(16, 4, 0, s, prompt_strata(questions, "answerable")) for s in range(4)]
    assert all(sum(questions[i].answerable for i in picked) == 1 for picked in per_step)
    with pytest.raises(KeyError, match="balance_by: 'label' is not a field of training prompt 0"):
        prompt_strata(questions, "label")


def test_joint_parts_train_each_role_in_its_own_group():
    from types import SimpleNamespace

    from factrl.rl.sampling import joint_parts

    plain = SimpleNamespace(name="plain")
    episode = SimpleNamespace(parts=[("solver", "y"), ("checker", "lambda")])
    trajs, scores, groups = joint_parts([plain, episode, episode], [0.5, 1.0, 0.0], [0, 1, 1])
    assert trajs == [plain, "y", "lambda", "y", "lambda"]
    assert scores == [0.5, 1.0, 1.0, 0.0, 0.0]
    assert groups == [0, (1, "solver"), (1, "checker"), (1, "solver"), (1, "checker")]


def test_after_rollouts_runs_between_each_steps_rollouts_and_its_update(tmp_path):
    """The hook that frees the rollout engine's memory runs once per step, after the rollouts and
    before the update (a trainer step would otherwise hold both)."""
    from factrl.rl.trainer import GRPOTrainer, train
    from tests.rl.tiny import PROMPTS, tokenizer

    tok = tokenizer()
    model = tiny_model(tok)
    trainer = GRPOTrainer(model, tok, TINY_CFG)
    events: list[str] = []
    rollout = make_rollout_fn(model, tok, TINY_CFG)
    update = trainer.step

    def logged_rollout(*args, **kwargs):
        events.append("rollout")
        return rollout(*args, **kwargs)

    def logged_update(*args, **kwargs):
        events.append("update")
        return update(*args, **kwargs)

    trainer.step = logged_update
    rows = train(trainer, PROMPTS, logged_rollout, checksum_reward, tmp_path,
                 after_rollouts=lambda: events.append("release"))
    steps = [e for e in events if e != "rollout"]
    assert steps.count("release") == len(rows) == TINY_CFG.steps
    for i, event in enumerate(events):
        if event == "update":  # every update follows a release since the last rollout
            assert "release" in events[max(j for j in range(i) if events[j] == "rollout"):i]


# ---- the step's cost levers (issue 48): each changes no result beyond rounding ------------------

LEVERS_OFF = {"chunked_logprobs": False, "group_by_length": False, "shared_prefix": False}
LEVERS_ON = {"chunked_logprobs": True, "group_by_length": True, "shared_prefix": True}


def _chat_batch(tok):
    """Six rollouts of three chat prompts tokenized by SmolLM2's own template, of varied lengths,
    with injected (mask 0) spans: what the reasoning agent's trajectories look like."""
    trajs, rewards, groups = [], [], []
    for k, claim in enumerate(["Paris is in France.", "The Nile flows north into the Mediterranean Sea.", "Water is dry."]):
        prompt = tok.apply_chat_template([{"role": "user", "content": f"Verify: {claim}"}], add_generation_prompt=True,
                                         tokenize=False)
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        for j in range(2):
            text = tok(f"<question>Is it {claim.lower()}</question>" * (1 + (k + j) % 3) + "<verdict>SUPPORTS</verdict>",
                       add_special_tokens=False)["input_ids"]
            mask = [0 if 5 <= i < 9 else 1 for i in range(len(text))]  # an injected tool answer
            trajs.append(Traj(ids, text, mask))
            rewards.append(float((k + j) % 2) + 0.1 * k)
            groups.append(k)
    return trajs, rewards, groups


def _step_with_grads(tok, levers: dict, precision: str = "fp32"):
    """One step's metrics and the gradients AdamW received, from a fixed tiny policy and a reference
    that differs from it (so the KL term and its gradient are not 0)."""
    model = tiny_model(tok, seed=5)
    ref = tiny_model(tok, seed=6)
    cfg = _cfg(precision=precision, kl_coef=0.05, temperature=0.7, micro_batch_size=2, logprob_chunk=5, **levers)
    trainer = GRPOTrainer(model, tok, cfg, ref_model=ref)
    grads = {}
    trainer.optimizer.register_step_pre_hook(
        lambda opt, *_: grads.update({i: p.grad.clone() for i, p in enumerate(opt.param_groups[0]["params"])}))
    return trainer.step(*_chat_batch(tok)), grads


def test_update_levers_give_the_plain_paths_loss_and_gradients(tok):
    """Chunked log-probs at loss positions only, length-grouped micro-batches and each prompt forwarded
    once for its group: the same loss, KL, entropy and gradients as the plain path, to fp32 rounding
    (real SmolLM2 tokenization)."""
    plain, g_plain = _step_with_grads(tok, LEVERS_OFF)
    fast, g_fast = _step_with_grads(tok, LEVERS_ON)
    assert plain["kl"] > 0 and plain["grad_norm"] > 0
    for k in ("pg_loss", "kl", "entropy", "grad_norm", "ppo_kl", "clipfrac"):
        assert fast[k] == pytest.approx(plain[k], rel=1e-5, abs=1e-7), k
    for i in g_plain:
        torch.testing.assert_close(g_fast[i], g_plain[i], rtol=0, atol=3e-5 * g_plain[i].abs().max().item())
    assert fast["update_tokens"] < plain["update_tokens"]  # each prompt ran once per micro-batch
    by_length, _ = _step_with_grads(tok, LEVERS_OFF | {"group_by_length": True})
    assert by_length["update_pad_share"] < plain["update_pad_share"]  # grouping by length padded less


def test_update_levers_in_bf16_stay_within_bf16_rounding(tok):
    plain, g_plain = _step_with_grads(tok, LEVERS_OFF, "bf16")
    fast, g_fast = _step_with_grads(tok, LEVERS_ON, "bf16")
    for k in ("pg_loss", "kl", "entropy", "grad_norm"):
        assert fast[k] == pytest.approx(plain[k], rel=2e-2, abs=1e-4), k
    # bf16 rounds each product to 8 bits of mantissa, and the two paths round at different places
    # (the plain path rounds the head's weight gradient to bf16, the chunked one accumulates it in
    # fp32): compare each tensor's gradient as a whole, by relative L2 error
    for i in g_plain:
        assert (g_fast[i] - g_plain[i]).norm() <= 2e-2 * g_plain[i].norm(), i


@pytest.mark.parametrize("chunked", [False, True])
def test_shared_prefix_equals_the_plain_layout_row_by_row(tok, chunked):
    """One prompt forwarded once, four responses of different lengths on its key/values: each row's
    log-probs and the gradient of their advantage-weighted sum equal the left-padded layout's (fp32),
    through the chunked path (hidden states) and the full-logits path (the head on them)."""
    trajs, _, _ = _chat_batch(tok)
    group = trajs[2:4] + [Traj(trajs[2].prompt_ids, [7], [1]), Traj(trajs[2].prompt_ids, [8, 9, 10], [1, 0, 1])]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    results = []
    for build in (collate, collate_shared):
        model = tiny_model(tok, seed=5)
        mb = build(group, adv, tok.pad_token_id)
        if chunked:
            hidden = response_hidden(model, mb)
            logp = logprobs_from_logits(hidden @ model.get_output_embeddings().weight.T, mb.responses)
        else:
            logp = logprobs_from_logits(response_logits(model, mb, 0.7), mb.responses)
        (-(logp * mb.advantages * mb.mask).sum()).backward()
        results.append((logp.detach() * mb.mask, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (plain, g_plain), (shared, g_shared) = results
    torch.testing.assert_close(shared, plain, rtol=1e-5, atol=1e-5)
    for name, g in g_plain.items():
        torch.testing.assert_close(g_shared[name], g, rtol=0, atol=1e-5 * g.abs().max().item() + 1e-9, msg=name)


def test_shared_prefix_batches_hold_one_prompt_and_forward_it_once(tok, tiny):
    """Six rollouts of three prompts in micro-batches of 4: three micro-batches (a prompt never spans
    two), and the update forwards each prompt once per micro-batch."""
    trajs, rewards, groups = _chat_batch(tok)
    on = GRPOTrainer(tiny, tok, _cfg(kl_coef=0.0, micro_batch_size=4, shared_prefix=True)).step(trajs, rewards, groups)
    off = GRPOTrainer(tiny_model(tok), tok, _cfg(kl_coef=0.0, micro_batch_size=4, shared_prefix=False)).step(
        trajs, rewards, groups)
    assert on["micro_batches"] == 3 and off["micro_batches"] == 2
    # per prompt: the prompt once, then each response but its last token, padded to the longest
    once = sum(len(a.prompt_ids) + 2 * (max(len(a.response_ids), len(b.response_ids)) - 1)
               for a, b in zip(trajs[::2], trajs[1::2]))
    assert on["update_tokens"] == once < off["update_tokens"]


def test_a_shared_batch_needs_one_prompt(tok):
    trajs, _, _ = _chat_batch(tok)
    with pytest.raises(ValueError, match="trajectory 2: its prompt differs"):
        collate_shared(trajs[:3], torch.zeros(3), tok.pad_token_id)


def test_kl_coef_zero_builds_and_runs_no_reference(tok, tiny):
    """``kl_coef: 0``: no reference model exists, and a one-update step forwards the policy once
    per micro-batch (no reference pass, no separate old-log-prob pass)."""
    trajs, rewards, groups = _batch(tok)
    trainer = GRPOTrainer(tiny, tok, _cfg(kl_coef=0.0, micro_batch_size=2, shared_prefix=False))
    assert trainer.ref_model is None and trainer.memory()["reference"] == 0
    calls = []
    tiny.model.register_forward_hook(lambda *a: calls.append(1))
    metrics = trainer.step(trajs, rewards, groups)
    assert len(calls) == metrics["micro_batches"] == 2 and metrics["reference_time"] < metrics["policy_time"]


def test_step_rows_say_what_each_engine_computed(tmp_path, tok):
    """Each step's row reports the policy engine's prefilled and decoded tokens (exact counts: every
    response token was decoded once), its mean batch and seconds, and the update's throughput."""
    from factrl.agents.rollout import RolloutParams, run_rollouts
    from factrl.llm.local import LocalLLM

    cfg = replace(TINY_CFG, steps=2, precision="fp32")
    model = tiny_model(tok)
    llm = LocalLLM(model_obj=model, tokenizer=tok, precision="fp32", model_name="tiny/row-policy")
    params = RolloutParams(max_new_tokens=cfg.max_new_tokens, temperature=1.0)
    generated = []

    def rollout(items, n):
        trajs = run_rollouts(llm, [tok(p, add_special_tokens=False)["input_ids"] for p in items], None, params, n=n)
        generated.append(sum(len(t.response_ids) for t in trajs))
        return trajs

    rows = train(GRPOTrainer(model, tok, cfg), ["Hello there", "Two plus two", "Is it so?"], rollout,
                 checksum_reward, tmp_path, after_rollouts=llm.free_memory)
    for row, tokens in zip(rows, generated):
        assert row["engine_row_policy_decode_tokens"] == tokens
        assert row["engine_row_policy_prefill_tokens"] > 0
        assert 1 <= row["engine_row_policy_mean_batch"] <= cfg.prompts_per_step * cfg.group_size
        assert row["engine_row_policy_time"] > 0 and row["update_tokens_per_s"] > 0
    assert llm.prefix_cache is not None and len(llm.prefix_cache) == 0  # freed before each update


def test_chunked_logprobs_never_compute_the_full_logits(tok, tiny):
    """With ``chunked_logprobs`` the model's own head never runs in the update (its ``[b, T, V]``
    output is what the lever avoids); without it, it runs once per micro-batch pass."""
    trajs, rewards, groups = _batch(tok)
    for chunked, passes in ((True, 0), (False, 2)):  # plain: the policy and the reference pass
        trainer = GRPOTrainer(tiny, tok, _cfg(chunked_logprobs=chunked, kl_coef=0.01))
        heads = {id(tiny.lm_head), id(trainer.ref_model.lm_head)}
        calls = []
        # a global hook: a hook on the head itself would (rightly) make plain_head refuse the shortcut
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda module, *a: calls.append(1) if id(module) in heads else None)
        metrics = trainer.step(trajs, rewards, groups)
        handle.remove()
        assert len(calls) == passes * metrics["micro_batches"], chunked
