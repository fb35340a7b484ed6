"""Slot key/value cache and packed (variable-length) attention for the engine in :mod:`factrl.llm.local`.

Every running row owns one slot: a row of preallocated storage ``[slots, kv_heads, capacity,
head_dim]`` per layer where its cached tokens sit in order from column 0 (column ``t`` holds the
states of the token at position ``t``). A row joining the batch touches only its own slot, a row
leaving it costs one slot copy (the last running row moves into the hole, so the running rows
stay in slots ``0..n-1``), and nothing is concatenated per step. Columns past a row's length hold
stale states (rejected draft tokens, or a row that used the slot before); attention never looks
at them and the next write overwrites them.

A forward pass is *packed*: the new tokens of every participating row (one token of a decoding
row, its draft tokens when speculating, or the whole uncached part of a newly admitted prompt)
are concatenated into one sequence of batch 1, so that the linear layers run over exactly the
real tokens (no padding) and prefilling new rows costs no extra pass over the weights: it rides
in the decode step (vLLM's chunked prefill, without the chunking). Attention is the one part
that must see the rows apart: :func:`slot_attention` (registered as the attention
implementation :data:`SLOT_ATTENTION`) writes nothing itself; the cache has already written each
token's key/value states into its slot, and it attends each segment of the packed query to its
own slot: all one-token rows in one batched call, every other segment in a call of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

# Storage grows in steps of this many columns (growing copies the cache; small steps copy often).
COLUMN_BLOCK = 256

SLOT_ATTENTION = "factrl_slots"


@dataclass(frozen=True)
class Segment:
    """The tokens of one row in a packed forward: ``length`` tokens at ``offset`` in the packed
    input, at positions (and cache columns) ``start..start + length - 1`` of slot ``slot``."""

    slot: int
    start: int
    length: int
    offset: int


class SlotPlan:
    """What one packed forward runs: the segments, where their states are written, and the
    attention masks (built once here, used by every layer)."""

    def __init__(self, cache: SlotCache, segments: list[Segment]):
        self.cache = cache
        self.segments = segments
        self.tokens = sum(s.length for s in segments)
        device = cache.device  # every tensor of the plan lives where the cache does
        slots = torch.cat([torch.full((s.length,), s.slot, device=device) for s in segments])
        self.positions = torch.cat([torch.arange(s.start, s.start + s.length, device=device) for s in segments])
        self.write_slots, self.write_columns = slots[None], self.positions[None]
        # leading one-token segments of slots 0..m-1 attend in one batched call
        m = 0
        while m < len(segments) and segments[m].length == 1 and segments[m].slot == m and segments[m].offset == m:
            m += 1
        self.batched = m
        if m:
            starts = [s.start for s in segments[:m]]
            self.batched_width = max(starts) + 1
            columns = torch.arange(self.batched_width, device=device)
            self.batched_mask = (columns <= torch.tensor(starts, device=device)[:, None])[:, None, None]  # [m, 1, 1, W]
        self._masks: dict[tuple[int, int, int], torch.Tensor] = {}

    def span(self) -> int:
        """Cache columns the plan needs (the furthest position written, plus one)."""
        return max(s.start + s.length for s in self.segments)

    def causal_mask(self, segment: Segment, groups: int) -> torch.Tensor:
        """``[1, 1, groups * length, start + length]``: query ``j`` sees columns ``0..start + j``;
        repeated per query head of a key/value head (queries are packed group-major)."""
        key = (segment.start, segment.length, groups)
        if key not in self._masks:
            span = segment.start + segment.length
            device = self.cache.device
            mask = torch.arange(span, device=device) <= torch.arange(segment.start, span, device=device)[:, None]
            self._masks[key] = mask.repeat(groups, 1)[None, None]
        return self._masks[key]

    def attend(self, layer_idx: int, query: torch.Tensor, scaling: float | None) -> torch.Tensor:
        """Attention output ``[1, T, heads, head_dim]`` for the packed query ``[1, heads, T, head_dim]``."""
        layer = self.cache.layers[layer_idx]
        keys, values = layer.keys, layer.values
        _, heads, tokens, dim = query.shape
        kv_heads = keys.shape[1]
        groups = heads // kv_heads
        q = query[0].to(keys.dtype)  # [heads, T, dim]
        out = q.new_empty(tokens, heads, dim)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        m = self.batched
        if m:
            # one query per row: the query heads of a key/value head become its query rows (GQA
            # without repeating the keys), [m, kv_heads, groups, dim]
            qb = q[:, :m].transpose(0, 1).reshape(m, kv_heads, groups, dim)
            w = self.batched_width
            ob = sdpa(qb, keys[:m, :, :w], values[:m, :, :w], attn_mask=self.batched_mask, scale=scaling)
            out[:m] = ob.reshape(m, heads, dim)
        for seg in self.segments[m:]:
            n, span = seg.length, seg.start + seg.length
            qs = q[:, seg.offset : seg.offset + n].reshape(kv_heads, groups * n, dim)[None]
            os = sdpa(qs, keys[seg.slot : seg.slot + 1, :, :span], values[seg.slot : seg.slot + 1, :, :span],
                      attn_mask=self.causal_mask(seg, groups), scale=scaling)
            out[seg.offset : seg.offset + n] = os[0].reshape(heads, n, dim).transpose(0, 1)
        return out[None].to(query.dtype)


def slot_attention(module, query, key, value, attention_mask, slot_plan: SlotPlan | None = None, **kwargs):
    """The attention implementation of engine models: packed attention over slots when the
    forward carries a :class:`SlotPlan`; otherwise SDPA (training and plain forwards).

    Keys and values may be fp32 while the model is bf16 (see :func:`use_fp32_attention`): the
    query is cast to their dtype and the output back.
    """
    if slot_plan is not None:
        return slot_plan.attend(module.layer_idx, query, kwargs.get("scaling")), None
    out, weights = sdpa_attention_forward(module, query.to(key.dtype), key, value, attention_mask, **kwargs)
    return out.to(query.dtype), weights


AttentionInterface.register(SLOT_ATTENTION, slot_attention)
# the same masks as "sdpa" for plain forwards (a name without a mask function gets no mask at all)
AttentionMaskInterface.register(SLOT_ATTENTION, sdpa_mask)


class SlotLayer(CacheLayerMixin):
    """One layer's slot storage: ``keys`` / ``values`` ``[slots, kv_heads, capacity, head_dim]``."""

    def __init__(self, owner: SlotCache):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("slot storage is allocated by SlotCache.reserve before the forward pass")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the packed new states ``[1, kv_heads, T, head_dim]`` into the slots and columns of
        the owner's plan; the packed states are returned as given (:func:`slot_attention` reads
        the slots)."""
        plan = self.owner.plan
        # advanced indices on dims 0 and 2 put their broadcast shape [1, T] first: [1, T, heads, dim]
        self.keys[plan.write_slots, :, plan.write_columns] = key_states.transpose(1, 2).to(self.keys.dtype)
        self.values[plan.write_slots, :, plan.write_columns] = value_states.transpose(1, 2).to(self.values.dtype)
        return key_states, value_states

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return query_length, 0

    def get_seq_length(self) -> int:
        return 0  # positions are always given explicitly

    def get_max_length(self) -> int:
        return self.keys.shape[2] if self.keys is not None else -1


class SlotCache(Cache):
    """Slot storage for every layer; :meth:`run` packs, plans and runs one forward over it."""

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu"):
        super().__init__(layers=[SlotLayer(self) for _ in range(num_layers)])
        self.kv_heads, self.head_dim, self.dtype = kv_heads, head_dim, dtype
        self.device = torch.device(device)
        self.plan: SlotPlan | None = None
        # per slot: columns 0..clean-1 hold finite values (states written at some point, or zeros)
        self.clean: list[int] = []

    @property
    def slots(self) -> int:
        return 0 if self.layers[0].keys is None else self.layers[0].keys.shape[0]

    @property
    def capacity(self) -> int:
        return 0 if self.layers[0].keys is None else self.layers[0].keys.shape[2]

    def reserve(self, slots: int, width: int, max_slots: int) -> None:
        """Make room for ``slots`` rows of ``width`` columns, keeping the stored states. Slots grow by a
        quarter more than asked (up to ``max_slots``) and columns by whole :data:`COLUMN_BLOCK` s, so a
        burst of admissions reallocates a few times, not once per row."""
        if slots <= self.slots and width <= self.capacity:
            return
        new_slots = self.slots if slots <= self.slots else min(max(slots + slots // 4, 4), max(max_slots, slots))
        new_capacity = max(self.capacity, -(-width // COLUMN_BLOCK) * COLUMN_BLOCK)
        for layer in self.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                # empty, not zeros: only the pages rows actually use get touched (a first touch of
                # fresh memory is what allocation costs here); see ensure_clean
                new = torch.empty(new_slots, self.kv_heads, new_capacity, self.head_dim, dtype=self.dtype,
                                  device=self.device)
                for slot, clean in enumerate(self.clean):
                    new[slot, :, :clean] = old[slot, :, :clean]
                setattr(layer, name, new)
            layer.is_initialized = True
        self.clean += [0] * (new_slots - len(self.clean))

    def begin(self, plan: SlotPlan) -> None:
        """Make ``plan`` the next forward's: its segments' columns count as written and the rows it
        attends in one batch read only finite columns (:meth:`ensure_clean`)."""
        for s in plan.segments:
            self.written(s.slot, s.start + s.length)
        for s in plan.segments[: plan.batched]:
            self.ensure_clean(s.slot, plan.batched_width)
        self.plan = plan

    def written(self, slot: int, end: int) -> None:
        """Columns ``0..end-1`` of ``slot`` now hold states."""
        self.clean[slot] = max(self.clean[slot], end)

    def ensure_clean(self, slot: int, end: int) -> None:
        """Make columns ``0..end-1`` of ``slot`` finite (zeros where nothing was ever written).

        Batched decode attention reads every row up to the longest row's length; the mask hides
        the columns past a row's own length, but it is applied as ``-inf`` added to the scores
        and probabilities of 0 multiply the values, so a NaN bit pattern in never-written memory
        would still poison the row. Zeroing ahead by a block keeps this off the per-step path.
        """
        if self.clean[slot] < end:
            stop = min(self.capacity, end + COLUMN_BLOCK // 4)
            for layer in self.layers:
                layer.keys[slot, :, self.clean[slot] : stop] = 0
                layer.values[slot, :, self.clean[slot] : stop] = 0
            self.clean[slot] = stop

    def load(self, slot: int, states: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        """Copy the first ``length`` tokens of ``states`` (per layer ``(keys, values)`` each
        ``[kv_heads, T, head_dim]``) into columns ``0..length-1`` of ``slot``."""
        for layer, (k, v) in zip(self.layers, states):
            layer.keys[slot, :, :length] = k[:, :length]
            layer.values[slot, :, :length] = v[:, :length]
        self.written(slot, length)

    def read(self, slot: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the states of the first ``length`` tokens of ``slot`` (see :meth:`load`)."""
        return [(layer.keys[slot, :, :length].clone(), layer.values[slot, :, :length].clone())
                for layer in self.layers]

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` columns of slot ``source`` into slot ``target``."""
        for layer in self.layers:
            layer.keys[target, :, :length] = layer.keys[source, :, :length]
            layer.values[target, :, :length] = layer.values[source, :, :length]
        self.written(target, length)


def cache_states(cache: Cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the ``(keys, values)`` a transformers cache holds (``[batch, kv_heads, T, head_dim]``
    each), e.g. a ``DynamicCache`` after a plain forward. The one place outside :class:`SlotCache`
    that reads ``Cache.layers`` (transformers >= 4.56's per-layer cache objects; the exact pin in
    pyproject.toml is checked by tests/llm/test_kv_slots.py)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def use_fp32_attention(model) -> bool:
    """Keep a bf16 model's key/value states (the cache) and attention in fp32; the matrix products
    stay bf16. CPU bf16 attention is several times slower than fp32 (measured here: 4 ms vs
    0.5 ms per layer at batch 16 over 500 cached tokens), while its FLOPs are few.

    Forward hooks cast the key and value projections' outputs to fp32, so the cache stores fp32
    states and attention never converts the whole cache (:func:`slot_attention`
    casts the query). Returns False (nothing changed) for architectures without ``k_proj`` /
    ``v_proj`` modules.
    """
    projections = [m for name, m in model.named_modules() if name.endswith(("k_proj", "v_proj"))]
    if not projections:
        return False
    for m in projections:
        m.register_forward_hook(lambda _module, _args, out: out.float())
    return True
