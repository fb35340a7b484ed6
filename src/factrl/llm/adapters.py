"""peft's LoRA layers as a model's weights: where they are and the plain weight each one computes.

Both sides of a LoRA run need this: the engine decodes the policy with every adapter merged into its
layer's weight (:mod:`factrl.llm.engine_weights`), and the trainer saves the same merged weights as a
plain model (:func:`factrl.rl.lora.plain_state_dict`). Injecting, freezing and switching adapters
off is the trainer's business and lives in :mod:`factrl.rl.lora`.
"""

from __future__ import annotations

import torch

ADAPTER_MARK = "lora_"  # the substring peft puts in every adapter parameter's name


def has_adapters(model: torch.nn.Module | None) -> bool:
    return model is not None and any(ADAPTER_MARK in name for name, _ in model.named_parameters())


def adapter_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """``model``'s peft LoRA layers by module name (empty without peft or adapters)."""
    if not has_adapters(model):
        return {}
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def merged_weight(layer: torch.nn.Module) -> torch.Tensor:
    """The weight ``layer`` computes with its active adapters folded in: ``W + sum_a scaling_a B_a A_a``
    (peft's ``get_delta_weight``, which also handles transposed layouts), shape of ``W``, no grad."""
    with torch.no_grad():
        base = layer.get_base_layer().weight
        return base + sum(layer.get_delta_weight(a) for a in layer.active_adapters)
