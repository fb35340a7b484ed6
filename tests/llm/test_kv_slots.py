"""Slot cache and packed attention: each segment attends exactly to its own slot's columns."""

import math

import torch
from transformers import DynamicCache

from factrl.llm.kv_slots import Segment, SlotCache, SlotPlan, cache_states, slot_attention
from tests.rl.tiny import tiny_model

KV_HEADS, GROUPS, DIM = 2, 3, 8


def reference_attention(q, k, v, start):
    """Plain causal attention of queries ``[heads, n, dim]`` at positions ``start..`` over keys
    ``[kv_heads, start + n, dim]`` (each key/value head serves ``GROUPS`` query heads)."""
    k, v = k.repeat_interleave(GROUPS, 0), v.repeat_interleave(GROUPS, 0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    n, span = q.shape[1], k.shape[1]
    visible = torch.arange(span) <= torch.arange(start, start + n)[:, None]
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1) @ v  # [heads, n, dim]


class _Module:
    layer_idx = 0


def _run(cache, segments, rows_kv, seed=0):
    """Write each segment's new keys/values through the cache, run packed attention, return
    the output ``[T, heads, dim]`` and the packed query ``[heads, T, dim]``."""
    gen = torch.Generator().manual_seed(seed)
    plan = SlotPlan(cache, segments)
    cache.begin(plan)  # as the engine does before each packed forward
    total = plan.tokens
    new_k = torch.randn(1, KV_HEADS, total, DIM, generator=gen)
    new_v = torch.randn(1, KV_HEADS, total, DIM, generator=gen)
    for s in segments:  # what the model's layer does: project, then cache.update
        rows_kv[s.slot][0][:, s.start : s.start + s.length] = new_k[0, :, s.offset : s.offset + s.length]
        rows_kv[s.slot][1][:, s.start : s.start + s.length] = new_v[0, :, s.offset : s.offset + s.length]
    cache.layers[0].update(new_k, new_v, 0)
    query = torch.randn(1, KV_HEADS * GROUPS, total, DIM, generator=gen)
    out, _ = slot_attention(_Module(), query, new_k, new_v, None, slot_plan=plan, scaling=1 / math.sqrt(DIM))
    return out[0], query[0]


def test_packed_attention_matches_per_row_attention():
    cache = SlotCache(num_layers=1, kv_heads=KV_HEADS, head_dim=DIM, dtype=torch.float32)
    cache.reserve(4, 40, max_slots=8)
    # slot -> its full key/value history (what a row's cache should hold), [kv_heads, 40, dim]
    rows_kv = {s: (torch.zeros(KV_HEADS, 40, DIM), torch.zeros(KV_HEADS, 40, DIM)) for s in range(4)}
    # prefill: 4 rows of different lengths in one packed forward
    lengths = [5, 9, 1, 12]
    segments, offset = [], 0
    for slot, n in enumerate(lengths):
        segments.append(Segment(slot, 0, n, offset))
        offset += n
    out, q = _run(cache, segments, rows_kv)
    for s in segments:
        want = reference_attention(q[:, s.offset : s.offset + s.length], rows_kv[s.slot][0][:, : s.length],
                                   rows_kv[s.slot][1][:, : s.length], 0)
        torch.testing.assert_close(out[s.offset : s.offset + s.length].transpose(0, 1), want)
    # decode: one token per row (batched path), then a ragged step (a draft on row 1, a new row)
    for step_segments in (
        [Segment(slot, n, 1, slot) for slot, n in enumerate(lengths)],
        [Segment(0, 6, 1, 0), Segment(1, 10, 4, 1), Segment(2, 2, 1, 5), Segment(3, 13, 1, 6)],
    ):
        plan_batched = SlotPlan(cache, step_segments).batched
        out, q = _run(cache, step_segments, rows_kv, seed=len(step_segments) + plan_batched)
        for s in step_segments:
            span = s.start + s.length
            want = reference_attention(q[:, s.offset : s.offset + s.length], rows_kv[s.slot][0][:, :span],
                                       rows_kv[s.slot][1][:, :span], s.start)
            torch.testing.assert_close(out[s.offset : s.offset + s.length].transpose(0, 1), want)
    assert SlotPlan(cache, [Segment(slot, 3, 1, slot) for slot in range(4)]).batched == 4
    assert SlotPlan(cache, [Segment(1, 3, 1, 0)]).batched == 0  # not slot 0: attends on its own


def test_batched_rows_never_see_garbage_past_their_length():
    """A short row batched with a long one reads columns it never wrote; those must be finite."""
    cache = SlotCache(num_layers=1, kv_heads=KV_HEADS, head_dim=DIM, dtype=torch.float32)
    cache.reserve(2, 30, max_slots=2)
    cache.layers[0].keys.fill_(float("nan"))  # what fresh memory may hold
    cache.layers[0].values.fill_(float("nan"))
    rows_kv = {s: (torch.zeros(KV_HEADS, 30, DIM), torch.zeros(KV_HEADS, 30, DIM)) for s in range(2)}
    _run(cache, [Segment(0, 0, 3, 0), Segment(1, 0, 20, 3)], rows_kv)
    segments = [Segment(0, 3, 1, 0), Segment(1, 20, 1, 1)]
    assert SlotPlan(cache, segments).batched == 2  # row 0 reads columns 4..20, never written
    out, q = _run(cache, segments, rows_kv)
    assert torch.isfinite(out).all()
    want = reference_attention(q[:, :1], rows_kv[0][0][:, :4], rows_kv[0][1][:, :4], 3)
    torch.testing.assert_close(out[:1].transpose(0, 1), want)


def test_reserve_grows_and_keeps_states_move_and_read():
    cache = SlotCache(num_layers=2, kv_heads=KV_HEADS, head_dim=DIM, dtype=torch.float32)
    cache.reserve(2, 10, max_slots=16)
    states = [(torch.randn(KV_HEADS, 10, DIM), torch.randn(KV_HEADS, 10, DIM)) for _ in range(2)]
    cache.load(1, states, 7)
    cache.reserve(9, 300, max_slots=16)  # more slots and more columns than block one
    assert cache.slots >= 9 and cache.capacity >= 300 and cache.capacity % 256 == 0
    for (k, v), (rk, rv) in zip(states, cache.read(1, 7)):
        assert torch.equal(rk, k[:, :7]) and torch.equal(rv, v[:, :7])
    cache.move(1, 5, 7)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(cache.read(5, 7), cache.read(1, 7)))
    assert cache.clean[5] == 7
    cache.reserve(40, 10, max_slots=16)  # more rows than max_slots asks for: given exactly
    assert cache.slots == 40


def test_cache_states_of_a_plain_forward(tok):
    """The one reader of transformers' ``Cache.layers`` outside SlotCache, on the pinned transformers."""
    model = tiny_model(tok)
    past = DynamicCache()
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3, 4]]), past_key_values=past, use_cache=True)
    states = cache_states(past)
    cfg = model.config
    assert len(states) == cfg.num_hidden_layers
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    assert all(k.shape == v.shape == (1, cfg.num_key_value_heads, 4, head_dim) for k, v in states)
