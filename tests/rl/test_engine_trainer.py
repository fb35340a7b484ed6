"""The trainer against its rollout engine: the engine/trainer log-prob gap and its truncated
importance sampling, models with several EOS ids, devices, checkpoints from another device."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from factrl.agents.rollout import RolloutParams, run_rollouts
from factrl.llm.base import SamplingParams
from factrl.llm.local import LocalLLM
from factrl.rl.params import GRPOParams
from factrl.rl.trainer import GRPOTrainer
from tests.rl.tiny import PROMPTS, checksum_reward, tiny_model

GROUP = 3


def _cfg(**kw) -> GRPOParams:
    return replace(GRPOParams(lr=1e-3, micro_batch_size=4, precision="fp32", group_size=GROUP), **kw)


def _rollouts(model, tok, precision: str, seed: int = 1, **params):
    """GROUP sampled rollouts of two prompts, from an engine in ``precision`` sharing ``model``."""
    llm = LocalLLM(model_obj=model, tokenizer=tok, precision=precision)
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS[:2]]
    rollout = RolloutParams(max_new_tokens=8, temperature=1.0, seed=seed, **params)
    return llm, run_rollouts(llm, prompts, None, rollout, n=GROUP)


def _step(model, tok, trajectories, **cfg):
    trainer = GRPOTrainer(model, tok, _cfg(**cfg))
    metrics = trainer.step(trajectories, checksum_reward(None, trajectories), [i // GROUP for i in range(6)])
    return metrics, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_tis_corrects_a_bf16_engine_against_an_fp32_trainer(tok):
    """Rollouts from the bf16 engine copy, trained in fp32: the gap is measured, the weights move
    off 1, and the update differs from the uncorrected one; an fp32 engine has next to no gap."""
    model = tiny_model(tok)
    _, exact = _rollouts(model, tok, "fp32")
    llm, trajs = _rollouts(model, tok, "bf16")
    assert llm.engine_model is not model  # the engine decoded with its bf16 copy
    assert all(len(t.response_logprobs) == len(t.response_ids) for t in trajs)
    m_exact, _ = _step(tiny_model(tok), tok, exact, tis_cap=2.0)
    m_tis, w_tis = _step(tiny_model(tok), tok, trajs, tis_cap=2.0)
    m_off, w_off = _step(tiny_model(tok), tok, trajs, tis_cap=0.0)
    m_cap1, _ = _step(tiny_model(tok), tok, trajs, tis_cap=1.0)
    # the gap: bf16 rounding of the engine's weights, against kernel-level noise for an fp32 engine
    assert m_exact["rollout_logp_gap"] < 1e-4
    assert m_tis["rollout_logp_gap"] > 10 * max(m_exact["rollout_logp_gap"], 1e-6)
    assert m_off["rollout_logp_gap"] == pytest.approx(m_tis["rollout_logp_gap"])  # logged with TIS off too
    assert "tis_weight_mean" not in m_off and m_tis["tis_weight_mean"] != 1.0
    # a cap of 1 truncates every token the trainer finds likelier than the engine did
    assert 0 < m_cap1["tis_clipfrac"] < 1 and m_cap1["tis_weight_mean"] < 1
    assert any(not torch.equal(w_tis[k], w_off[k]) for k in w_tis)  # the correction changed the update


def test_several_eos_ids_train_on_the_sampled_one(tok):
    """A model whose generation config lists two EOS ids (as Qwen3's does) stops on the second:
    the engine returns that id, the rollout keeps it (loss mask 1), and the trainer's log-prob of
    it is the engine's (no other EOS id stands in for it)."""
    other = tok.convert_tokens_to_ids("<|endoftext|>")
    assert other != tok.eos_token_id
    model = tiny_model(tok)
    model.generation_config.eos_token_id = [tok.eos_token_id, other]
    bias = torch.zeros(model.config.vocab_size)
    bias[other] = 12.0  # the second EOS is the likeliest next token everywhere (p ~ 0.8)
    model.lm_head.register_forward_hook(lambda _m, _a, out: out + bias.to(out))

    llm, trajs = _rollouts(model, tok, "fp32")
    assert llm.eos_ids == {tok.eos_token_id, other}
    ended = [t for t in trajs if t.finish_reason == "stop"]
    assert ended and all(t.response_ids[-1] == other and t.loss_mask[-1] == 1 for t in ended)
    [c] = llm.complete_tokens([trajs[0].prompt_ids], SamplingParams(max_tokens=8, temperature=1.0, seed=3))[0]
    if c.finish_reason == "stop":
        assert c.token_ids[-1] == other and len(c.logprobs) == len(c.token_ids)
        assert c.text == tok.decode(c.token_ids[:-1], skip_special_tokens=True)
    metrics, _ = _step(model, tok, trajs, tis_cap=2.0)
    assert metrics["rollout_logp_gap_max"] < 1e-3  # the trainer scored exactly the sampled ids


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_grpo_step_on_device(tok, tmp_path, device):
    """One GRPO step with policy, engine (bf16 copy, key/value slots), trainer and reference model
    on ``device``; the checkpoint loads back on the CPU."""
    model = tiny_model(tok).to(device)
    llm, trajs = _rollouts(model, tok, "bf16")
    assert next(llm.engine_model.parameters()).device.type == device
    trainer = GRPOTrainer(model, tok, _cfg(precision="auto"))
    assert next(trainer.ref_model.parameters()).device.type == device
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    metrics = trainer.step(trajs, checksum_reward(None, trajs), [i // GROUP for i in range(6)])
    assert all(v == v for v in metrics.values())  # no NaN
    assert metrics["rollout_logp_gap"] > 0 and any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    path = trainer.save_checkpoint(tmp_path, 1)
    on_cpu = GRPOTrainer(tiny_model(tok), tok, _cfg())
    on_cpu.load_checkpoint(path)
    for k, v in on_cpu.model.state_dict().items():
        assert torch.equal(v, model.state_dict()[k].cpu())


def test_checkpoint_saved_on_a_gpu_loads_on_this_cpu(tok, tmp_path, monkeypatch):
    """A trainer state whose tensors were saved from CUDA (their storages tagged ``cuda:0``, as a
    GPU run writes them) resumes on a CPU-only machine."""
    trainer = GRPOTrainer(tiny_model(tok), tok, _cfg())
    _, trajs = _rollouts(trainer.model, tok, "fp32")
    trainer.step(trajs, checksum_reward(None, trajs), [i // GROUP for i in range(6)])  # optimizer states exist
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        path = trainer.save_checkpoint(tmp_path, 1)
    if not torch.cuda.is_available():  # the file really asks for CUDA without map_location
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path / "trainer_state.pt", weights_only=False)
    resumed = GRPOTrainer(tiny_model(tok), tok, _cfg())
    state = resumed.load_checkpoint(path)
    assert state["step"] == 1 and resumed.updates == trainer.updates
    exp_avg = next(iter(resumed.optimizer.state.values()))["exp_avg"]
    assert exp_avg.device.type == "cpu"


def test_trainer_memory_accounts_for_the_reference(tok):
    model = tiny_model(tok)
    params = sum(p.numel() for p in model.parameters())
    with_ref = GRPOTrainer(model, tok, _cfg()).memory()
    assert with_ref["gradients"] == 4 * params and with_ref["optimizer"] == 8 * params  # fp32 grads, AdamW's 2 moments
    assert with_ref["reference"] == with_ref["policy"] >= 4 * params  # a full copy (+ buffers: rotary frequencies)
    assert GRPOTrainer(tiny_model(tok), tok, _cfg(kl_coef=0.0)).memory()["reference"] == 0
