"""The engine notices every change of the weights it decodes (and only those): the private counter
it reads (torch's ``Tensor._version``) is pinned here (transformers' ``Cache.layers``: test_kv_slots.py)."""

import pytest
import torch

from factrl.llm.engine_weights import EngineWeights, parameter_versions
from tests.rl.tiny import tiny_model


def test_parameter_versions_move_on_in_place_updates_only(tok):
    model = tiny_model(tok)
    before = parameter_versions(model)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))
    assert parameter_versions(model) == before  # a forward changes nothing
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    after_step = parameter_versions(model)
    assert after_step != before and [i for i, _ in after_step] == [i for i, _ in before]
    model.load_state_dict(tiny_model(tok, seed=1).state_dict())
    assert parameter_versions(model) != after_step


@pytest.mark.parametrize("bf16", [False, True])
def test_engine_weights_sync_when_the_model_changes(tok, bf16):
    model = tiny_model(tok)
    weights = EngineWeights(model, bf16)
    assert weights.module is not model  # never the trainer's module
    assert weights.sync() and not weights.sync()  # first call: nothing computed yet is valid
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert weights.sync()
    engine_p, p = next(weights.module.parameters()), next(model.parameters())
    if bf16:  # a bf16 copy, re-synced
        assert engine_p.dtype == torch.bfloat16 and torch.equal(engine_p, p.to(torch.bfloat16))
        assert weights.kv_dtype == torch.float32  # fp32 key/value states under bf16
    else:  # the same tensors
        assert engine_p is p and weights.kv_dtype == torch.float32
    # a replaced parameter (not an in-place update): the module shares the new one
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    assert weights.sync()
    if not bf16:
        assert weights.module.lm_head.weight is model.lm_head.weight
    with torch.no_grad():  # and later updates of the new parameter reach the engine (a bf16 copy too)
        model.lm_head.weight.add_(1.0)
    assert weights.sync()
    torch.testing.assert_close(weights.module.lm_head.weight, model.lm_head.weight.to(weights.module.lm_head.weight.dtype))



@pytest.mark.parametrize("bf16", [False, True])
def test_a_lora_policy_is_decoded_with_its_adapters_merged(tok, bf16):
    """Under LoRA the engine's module is the plain architecture (no peft layer left: no unmerged
    adapter matmul per decode step) holding the merged weights, before and after the adapters move,
    and computing what the adapted policy computes; the weights LoRA leaves alone stay shared."""
    from peft.tuners.lora import LoraLayer

    from factrl.llm.adapters import adapter_layers, merged_weight
    from factrl.rl.lora import add_adapters

    model = tiny_model(tok, seed=3)
    add_adapters(model, rank=4, alpha=8, targets="all-linear")
    with torch.no_grad():  # B = 0 at injection: move the adapters so the merge matters
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    weights = EngineWeights(model, bf16)
    assert not any(isinstance(m, LoraLayer) for m in weights.module.modules())
    assert not any("lora_" in name for name, _ in weights.module.named_parameters())
    if not bf16:
        assert weights.module.model.embed_tokens.weight is model.model.embed_tokens.weight
    ids = torch.tensor([[1, 5, 9, 40, 3]])

    def assert_engine_is_the_adapted_policy() -> None:
        for name, layer in adapter_layers(model).items():
            engine_weight = weights.module.get_submodule(name).weight
            assert torch.equal(engine_weight, merged_weight(layer).to(engine_weight.dtype)), name
        if not bf16:  # a plain forward of the engine's module (the slot layout is the engine's)
            weights.module.set_attn_implementation("sdpa")
            with torch.no_grad():
                torch.testing.assert_close(weights.module(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)

    assert weights.sync()
    assert_engine_is_the_adapted_policy()
    with torch.no_grad():  # an optimizer step on the adapters only
        before = model(ids).logits
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.add_(0.1)
        assert (model(ids).logits - before).abs().max() > 1e-3
    assert weights.sync() and not weights.sync()
    assert_engine_is_the_adapted_policy()
