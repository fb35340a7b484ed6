"""LoRA for the GRPO policy (GRPOParams.lora_rank): what trains, what the reference is, what leaves the
trainer, and that a killed LoRA run resumes to the same weights."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from factrl.llm.local import LocalLLM
from factrl.rl.lora import adapters_off, has_adapters, plain_state_dict
from factrl.rl.params import GRPOParams
from factrl.rl.trainer import GRPOTrainer, checkpoints
from tests.rl.test_trainer import _chat_batch
from tests.rl.tiny import tiny_model

LORA = {"lora_rank": 4, "lora_alpha": 8}


def _cfg(**kw) -> GRPOParams:
    return replace(GRPOParams(lr=1e-2, micro_batch_size=4, precision="fp32", weight_decay=0.0, kl_coef=0.0), **kw)


def test_only_the_adapters_train_and_the_base_weights_stay(tok):
    model = tiny_model(tok, seed=3)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = GRPOTrainer(model, tok, _cfg(**LORA))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert trainer.memory()["gradients"] < 0.5 * trainer.memory()["policy"]
    metrics = trainer.step(*_chat_batch(tok))
    assert metrics["grad_norm"] > 0
    for name, p in model.named_parameters():
        if "lora_" not in name:
            assert torch.equal(p, base[name.replace(".base_layer", "")]), name
    assert any(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)  # B moved off 0


def test_the_reference_is_the_policy_with_its_adapters_off(tok):
    """kl_coef > 0 under LoRA: no copy of the model; the first step's KL is 0 (B = 0: the policy is its
    base), and after an update the KL term measures the adapters' change against the base."""
    model = tiny_model(tok, seed=3)
    trainer = GRPOTrainer(model, tok, _cfg(kl_coef=0.1, **LORA))
    assert trainer.ref_model is None
    first = trainer.step(*_chat_batch(tok))
    second = trainer.step(*_chat_batch(tok))
    assert first["kl"] == pytest.approx(0.0, abs=1e-9) and second["kl"] > 1e-6


def test_what_leaves_the_trainer_is_a_plain_model_computing_the_same(tok, tmp_path):
    """The checkpoint's Hugging Face directory loads without peft into the plain architecture and gives
    the adapted policy's logits; the engine sampling the policy decodes what the adapted policy computes."""
    model = tiny_model(tok, seed=3)
    trainer = GRPOTrainer(model, tok, _cfg(**LORA))
    trainer.step(*_chat_batch(tok))
    path = trainer.save_checkpoint(tmp_path, step=1)
    plain = type(model).from_pretrained(path)
    assert not has_adapters(plain)
    ids = torch.tensor([_chat_batch(tok)[0][0].prompt_ids])
    with torch.no_grad():
        adapted, reloaded = model(ids).logits, plain(ids).logits
        with adapters_off(model):
            base = model(ids).logits
    torch.testing.assert_close(reloaded, adapted, rtol=1e-5, atol=1e-5)
    assert (adapted - base).abs().max() > 1e-4  # the adapters changed what the model computes
    engine = LocalLLM(model_obj=model, tokenizer=tok, precision="fp32", prefix_cache_bytes=0)
    from factrl.llm.base import SamplingParams

    [[out]] = engine.complete_tokens([ids[0].tolist()], SamplingParams(max_tokens=1, temperature=0.0))
    assert out.token_ids[0] == int(adapted[0, -1].argmax())
    assert set(plain_state_dict(model)) == set(plain.state_dict())


def test_a_resumed_lora_run_continues_from_its_adapters(tok, tmp_path):
    """Save after one step, build a fresh trainer on the initial model, load: the second step gives the
    same adapters as an uninterrupted run's."""
    straight = tiny_model(tok, seed=3)
    t1 = GRPOTrainer(straight, tok, _cfg(**LORA))
    t1.step(*_chat_batch(tok))
    t1.save_checkpoint(tmp_path, step=1)
    t1.step(*_chat_batch(tok))

    resumed = tiny_model(tok, seed=3)
    t2 = GRPOTrainer(resumed, tok, _cfg(**LORA))
    t2.load_checkpoint(checkpoints(tmp_path)[-1])
    t2.step(*_chat_batch(tok))
    for (name, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7, msg=name)


def test_bad_lora_settings_name_the_field(tok, tiny):
    with pytest.raises(ValueError, match="lora_rank must be >= 0"):
        GRPOTrainer(tiny, tok, _cfg(lora_rank=-1))
