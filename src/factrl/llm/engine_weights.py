"""The weights the in-process engine (:mod:`factrl.llm.local`) decodes with, and noticing when a
trainer changed them.

A trainer updates the policy's parameters in place between steps while the engine that samples its
rollouts keeps key/value states (the prefix cache) and greedy answers computed with the old ones.
:class:`EngineWeights` keeps the engine's own module (never the caller's: a trainer runs plain
forwards and backwards on that one, so its attention implementation and hooks must stay as they
are) and tells the engine when the weights moved, so it drops what the old weights computed.

A policy trained with LoRA (peft layers, :mod:`factrl.llm.adapters`) is decoded as the plain model it
computes: in the engine's module each adapted layer is its base layer with a weight of its own, the
adapters merged in, re-merged whenever they move.
"""

from __future__ import annotations

import copy

import torch

from factrl.llm.adapters import adapter_layers, merged_weight
from factrl.llm.kv_slots import SLOT_ATTENTION, use_fp32_attention


def parameter_versions(model: torch.nn.Module) -> list[tuple[int, int]]:
    """Identity and in-place version of every parameter of ``model``: an optimizer step, ``add_`` or
    ``load_state_dict`` bumps a tensor's version, swapping a parameter changes its ``id``.

    The one place factrl reads torch's in-place counter (``Tensor._version``, private but what
    autograd itself relies on to detect in-place changes); tests/llm/test_engine_weights.py checks
    that it still moves on exactly these events.
    """
    return [(id(p), p._version) for p in model.parameters()]


class EngineWeights:
    """The module an engine decodes ``model`` with.

    ``bf16`` on fp32 weights (a policy under training, decoded in bf16): a bf16 copy, re-synced
    whenever the weights change, as verl syncs the actor's weights into its rollout engine.
    Otherwise a module tree of its own whose parameters and buffers *are* the model's (no memory
    copied, in-place updates seen at once). Under LoRA each adapted layer of that tree is a plain
    layer holding the merged weight (one copy of the adapted weights, kept in step by :meth:`sync`).
    Either way set up for packed slot attention, with fp32 key/value states under bf16
    (:func:`~factrl.llm.kv_slots.use_fp32_attention`): ``kv_dtype``.
    """

    def __init__(self, model: torch.nn.Module, bf16: bool):
        self.model = model  # the weights of record (a trainer updates these)
        self.owns_copy = bf16 and next(model.parameters()).dtype != torch.bfloat16
        self.module = self._build()
        self._seen: list[tuple[int, int]] | None = None

    def _build(self) -> torch.nn.Module:
        if self.owns_copy:
            engine = copy.deepcopy(self.model).to(torch.bfloat16).requires_grad_(False)
        else:
            shared = {id(t): t for t in (*self.model.parameters(), *self.model.buffers())}
            engine = copy.deepcopy(self.model, memo=shared)
        self._merged = self._unwrap_adapters(engine)
        self._copied: list[tuple[torch.nn.Parameter, torch.nn.Parameter]] = []  # (bf16 copy, its source)
        if self.owns_copy:  # by name: merged layers have no source of their own (sync merges them)
            sources = dict(self.model.named_parameters())
            self._copied = [(p, sources[name]) for name, p in engine.named_parameters() if name in sources]
        engine.eval()  # its own training flags: a trainer's model.train() does not reach it
        dtype = next(engine.parameters()).dtype
        fp32_states = dtype == torch.bfloat16 and use_fp32_attention(engine)
        self.kv_dtype = torch.float32 if fp32_states else dtype
        engine.set_attn_implementation(SLOT_ATTENTION)  # packed forwards over slots
        return engine

    def _unwrap_adapters(self, engine: torch.nn.Module) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """Replace each LoRA layer of ``engine`` by its base layer with a weight of its own (filled
        by :meth:`sync`) -> (engine layer, the model's LoRA layer) pairs."""
        pairs = []
        model_layers = adapter_layers(self.model)
        for name, layer in adapter_layers(engine).items():
            base = layer.get_base_layer()
            base.weight = torch.nn.Parameter(torch.empty_like(base.weight), requires_grad=False)
            parent, _, child = name.rpartition(".")
            setattr(engine.get_submodule(parent), child, base)
            pairs.append((base, model_layers[name]))
        return pairs

    def sync(self) -> bool:
        """Bring the engine's module up to the model's weights; True when they changed since the
        last call (the first call included), i.e. whatever the engine computed before is stale."""
        versions = parameter_versions(self.model)
        if versions == self._seen:
            return False
        if self._seen is not None and [i for i, _ in versions] != [i for i, _ in self._seen]:
            self.module = self._build()  # parameters replaced: share (or copy from) the new ones
        with torch.no_grad():
            for copy_p, p in self._copied:
                copy_p.copy_(p)
            for engine_layer, lora_layer in self._merged:
                engine_layer.weight.copy_(merged_weight(lora_layer))
        self._seen = versions
        return True
