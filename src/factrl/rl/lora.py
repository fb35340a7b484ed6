"""LoRA for the local GRPO policy (``GRPOParams.lora_rank``), through peft.

The adapters are injected into the policy in place (``peft.inject_adapter_in_model``): the targeted
linear layers become ``base_layer + scaling * B @ A`` with ``B = 0`` at the start, so the policy's
first outputs are the base model's; only ``A`` and ``B`` train. What that buys on a trainer step is
the weight gradients and AdamW's moments of every targeted matrix (half of the backward's matmuls,
a third of forward plus backward, and two fp32 copies of the weights), at the cost of learning in a
rank-``r`` subspace, which is why it is a param to ablate, not an exact lever.

* The rollout engine decodes the policy with each adapter merged into a copy of its layer's weight
  (``factrl.llm.engine_weights``; the other parameters are shared), so it samples from exactly the
  policy being trained. It re-merges when an update moves the adapters, as it notices a full
  fine-tuning update. Decoding the adapters unmerged (two rank-``r`` matmuls more per targeted layer
  and decode step) measured 1.17x / 1.11x the plain model's step at batch 8 / 32 (SmolLM2-135M,
  rank 16, fp32, 1 AVX2 thread); the merged engine runs at the plain model's speed, for one copy of
  the targeted weights.
* The KL reference is the policy with its adapters switched off (:func:`adapters_off`), as TRL does
  under PEFT: no second copy of the model.
* What leaves the trainer (a checkpoint's Hugging Face directory, the stage's model) is a plain model
  with the adapters merged into its weights (:func:`plain_state_dict`), loadable without peft by
  every later stage; the adapters themselves ride in the checkpoint's trainer state
  (:func:`adapter_state`), so a resumed run continues from the same base and adapters.

verl runs the same settings from ``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` /
``target_modules`` (``factrl.rl.verl_backend``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from factrl.llm.adapters import ADAPTER_MARK, adapter_layers, has_adapters, merged_weight

BASE_LAYER = ".base_layer"  # where peft moves a wrapped layer's own weight


def add_adapters(model: torch.nn.Module, rank: int, alpha: int, targets: str) -> None:
    """Inject LoRA adapters of ``rank`` (scaling ``alpha / rank``) into ``model``'s ``targets``
    (``all-linear``: every linear layer but the output head; or comma-separated module names, e.g.
    ``q_proj,v_proj``) and freeze every other parameter."""
    from peft import LoraConfig, inject_adapter_in_model

    target_modules: str | list[str] = targets if targets == "all-linear" else [t.strip() for t in targets.split(",")]
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=target_modules, bias="none")
    inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad_(ADAPTER_MARK in name)


@contextmanager
def adapters_off(model: torch.nn.Module) -> Iterator[None]:
    """``model`` computes as its base model inside the block (the KL reference under LoRA)."""
    layers = list(adapter_layers(model).values())
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def plain_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """``model``'s weights as the plain model they compute (each adapter merged into its layer's
    weight, under the layer's own name); None when it has no adapters (save it as it is)."""
    if not has_adapters(model):
        return None
    merged = {f"{name}.weight": merged_weight(layer) for name, layer in adapter_layers(model).items()}
    state = {}
    for name, tensor in model.state_dict().items():
        if ADAPTER_MARK in name:
            continue
        plain = name.replace(BASE_LAYER, "")
        state[plain] = merged.get(plain, tensor)
    return state


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors by name (what a checkpoint keeps to resume)."""
    return {name: t.detach().clone() for name, t in model.state_dict().items() if ADAPTER_MARK in name}


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put the adapters of :func:`adapter_state` back (the base weights are the run's initial model)."""
    own = {name for name in model.state_dict() if ADAPTER_MARK in name}
    if set(state) != own:
        raise ValueError(f"checkpoint adapters do not match the model's: {sorted(set(state) ^ own)[:4]}")
    model.load_state_dict(state, strict=False)
