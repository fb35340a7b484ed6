"""In-process LLM backend on transformers: a step-level (continuous batching) engine with a KV cache.

The engine runs its own decode loop instead of ``model.generate`` so that it can stop each row as
soon as one of the request's stop strings appears in its decoded text (the rollout engine stops on
closing tags such as ``</search>``), and return the exact generated token ids the policy produced.

Requests are submitted (:meth:`LocalLLM.submit`) and the engine advances in steps
(:meth:`LocalLLM.step`): every running row decodes one token, finished rows leave the batch and
waiting rows are prefilled and join it (their key/value states left-padded to the batch's width),
so agent loops that pause for a tool re-enter the batch without waiting for the others.
:meth:`LocalLLM.complete_tokens` is submit-all-then-step on the same engine.

Multi-turn rollouts continue the whole context so far at every turn, and many prompts share a
long system prompt; re-running the model over those tokens (prefill) would dominate the cost. The
engine therefore keeps a bounded :class:`PrefixCache` of the key/value states of every prompt it
prefilled and every sequence it decoded, and prefills a prefix shared by all rows admitted
together once: each row then runs the model only over the tokens after its longest cached prefix.
The cache is dropped whenever the weights change (trainers update them in place between steps).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from factrl.llm.base import Completion, Message, SamplingParams
from factrl.llm.models import DEFAULT_POLICY, load_model_and_tokenizer


def trim_at_stop(text: str, stop: Sequence[str], include_stop: bool) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string; return ``(text, stopped)``."""
    best: tuple[int, str] | None = None
    for s in stop:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, s)
    if best is None:
        return text, False
    i, s = best
    return (text[: i + len(s)] if include_stop else text[:i]), True


def _probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The sampling distribution ``[..., V]``: temperature, then nucleus (top-p) filtering."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token always survives)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p.masked_fill(drop, 0.0))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def _sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Pick one token per row of ``logits`` ``[B, V]``: argmax when greedy, else sample."""
    if params.temperature <= 0:
        return logits.argmax(dim=-1)
    return torch.multinomial(_probs(logits, params), 1, generator=generator).squeeze(-1)


def ngram_draft(context: Sequence[int], k: int, max_n: int = 3) -> list[int]:
    """Prompt-lookup drafting: the (up to ``k``) tokens that followed the most recent earlier
    occurrence of the context's last n-gram, trying the longest n first (vLLM's ``ngram``
    speculator). Small models copy names from passages and repeat themselves, so these drafts
    are often right; they cost no model call."""
    size = len(context)
    for n in range(min(max_n, size - 1), 0, -1):
        key = list(context[size - n :])
        last = key[-1]
        for start in range(size - n - 1, -1, -1):
            if context[start + n - 1] == last and list(context[start : start + n]) == key:
                return list(context[start + n : start + n + k])
    return []


def verify_draft(logits: torch.Tensor, draft: Sequence[int], params: SamplingParams,
                 generator: torch.Generator | None) -> tuple[list[int], int]:
    """The tokens one row emits after a verification pass, and how many of them are draft tokens.

    ``logits`` ``[len(draft) + 1, V]``: position ``j`` predicts the token after draft token ``j - 1``.
    Greedy: draft tokens are accepted while they equal the argmax; the first argmax that differs
    (or the one after a fully accepted draft) is emitted too, so the output equals plain greedy
    decoding. Sampling: draft token ``x`` is accepted with probability ``p(x)``; on rejection a
    token is drawn from ``p`` without ``x`` (renormalised). This is speculative sampling with a
    point-mass draft, so every emitted token follows the target distribution ``p`` exactly.
    """
    out: list[int] = []
    for j, x in enumerate(draft):
        if params.temperature <= 0:
            t = int(logits[j].argmax())
            if t != x:
                return out + [t], len(out)
        else:
            p = _probs(logits[j], params)
            if float(torch.rand((), generator=generator)) >= float(p[x]):
                p[x] = 0.0
                return out + [int(torch.multinomial(p / p.sum(), 1, generator=generator))], len(out)
        out.append(int(x))
    return out + [int(_sample(logits[len(draft)][None], params, generator)[0])], len(out)


FP32_ATTENTION = "factrl_sdpa_fp32"


def _sdpa_fp32(module, query, key, value, attention_mask, **kwargs):
    """SDPA in fp32 for a bf16 model: CPU bf16 attention is several times slower than fp32 (measured
    here: 4 ms vs 0.5 ms per layer at batch 16 over 500 cached tokens), while its FLOPs are few.
    Keys and values arrive in fp32 (see :func:`use_fp32_attention`); the query is cast here."""
    out, weights = sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)
    return out.to(query.dtype), weights


AttentionInterface.register(FP32_ATTENTION, _sdpa_fp32)
# the same masks as "sdpa" (an attention name without a mask function gets no mask at all)
AttentionMaskInterface.register(FP32_ATTENTION, sdpa_mask)


def use_fp32_attention(model) -> bool:
    """Run a bf16 model's attention and key/value cache in fp32 (the matrix products stay bf16).

    The key and value projections' outputs are cast to fp32 by forward hooks, so the cache stores
    fp32 states and attention never converts the whole cache; returns False (nothing changed) for
    architectures without ``k_proj`` / ``v_proj`` modules.
    """
    projections = [m for name, m in model.named_modules() if name.endswith(("k_proj", "v_proj"))]
    if not projections:
        return False
    for m in projections:
        m.register_forward_hook(lambda _module, _args, out: out.float())
    model.set_attn_implementation(FP32_ATTENTION)
    return True


# A prefix shorter than this is not worth a separate forward pass before the batch.
MIN_SHARED_PREFIX = 16


@dataclass
class _Entry:
    """The key/value states of one token sequence: per layer ``(keys, values)``, each
    ``[num_kv_heads, len(ids), head_dim]``."""

    ids: torch.Tensor  # [T] int64
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    nbytes: int


class PrefixCache:
    """A byte-bounded LRU store of key/value states keyed by token-id sequences.

    The states at position ``t`` depend only on tokens ``0..t``, so an entry serves any sequence
    that shares a prefix with it, not only sequences that extend it: :meth:`longest` returns the
    entry with the longest common prefix and its length. Entries that are a prefix of a newer
    entry are dropped (the newer one serves them), and the least recently used entries are
    evicted once ``max_bytes`` is exceeded.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._matrix: torch.Tensor | None = None  # [E, max_len] ids, -1 padded; rebuilt lazily
        self._keys: list[tuple[int, ...]] = []  # the entry of each matrix row

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0
        self._matrix, self._keys = None, []

    def _common_lengths(self, ids: torch.Tensor) -> torch.Tensor:
        """``[E]`` length of the common prefix of ``ids`` ``[T]`` with every entry (matrix order)."""
        if self._matrix is None:
            self._keys = list(self._entries)
            width = max(len(k) for k in self._keys)
            self._matrix = torch.full((len(self._keys), width), -1, dtype=torch.long)
            for r, key in enumerate(self._keys):
                self._matrix[r, : len(key)] = self._entries[key].ids
        m = min(self._matrix.shape[1], len(ids))
        same = self._matrix[:, :m] == ids[:m]
        return same.to(torch.int32).cumprod(dim=1).sum(dim=1)

    def longest(self, ids: torch.Tensor) -> tuple[_Entry | None, int]:
        """The entry sharing the longest prefix with ``ids`` ``[T]`` and that length (0: none)."""
        if not self._entries or len(ids) == 0:
            return None, 0
        lengths = self._common_lengths(ids)
        best = int(lengths.argmax())
        n = int(lengths[best])
        if n == 0:
            return None, 0
        key = self._keys[best]
        self._entries.move_to_end(key)
        return self._entries[key], n

    def put(self, ids: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Store the states of ``ids`` (``kv`` as in :class:`_Entry`) unless an entry covers them."""
        key = tuple(ids)
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if not key or nbytes > self.max_bytes:
            return
        t = torch.tensor(key, dtype=torch.long)
        if self._entries:
            lengths = self._common_lengths(t)
            covering = [self._keys[r] for r in (lengths == len(key)).nonzero().flatten().tolist()]
            if covering:  # an existing entry already extends this sequence
                self._entries.move_to_end(covering[0])
                return
            for r in (lengths == torch.tensor([len(k) for k in self._keys])).nonzero().flatten().tolist():
                self._drop(self._keys[r])  # a prefix of the new sequence: the new entry serves it
        self._entries[key] = _Entry(t, kv, nbytes)
        self.nbytes += nbytes
        self._matrix = None
        while self.nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        self.nbytes -= self._entries.pop(key).nbytes
        self._matrix = None


def row_seed(seed: int, row: int) -> int:
    """The sampler seed of row ``row`` of a call seeded with ``seed``: distinct per row, so the
    ``n`` samples of one prompt differ, and independent of the batch the row decodes in."""
    return (seed * 1_000_003 + row) % (2**63)


@dataclass
class GenerationRequest:
    """One row in the step-level engine: its prompt, sampling, sampler and output so far.
    ``completion`` is set when the row finishes."""

    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    out: list[int] = field(default_factory=list)
    finish_reason: str = "length"
    completion: Completion | None = None

    @property
    def done(self) -> bool:
        return self.completion is not None


def _left_pad(x: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Zero-pad ``x`` on the left of dimension ``dim`` up to ``width``."""
    missing = width - x.shape[dim]
    if missing <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


@dataclass
class _Batch:
    """The rows decoding together.

    ``past``: per layer keys/values ``[B, heads, W, head_dim]``; ``mask`` ``[B, W]`` aligned with it
    (0 on left padding); ``positions`` ``[B, 1]`` the position of each row's newest cached token;
    ``pending`` ``[B]`` the token each row sampled last, not yet run through the model.
    """

    requests: list[GenerationRequest]
    past: DynamicCache
    mask: torch.Tensor
    positions: torch.Tensor
    pending: torch.Tensor

    def select(self, keep: list[int], pending: torch.Tensor) -> None:
        """Keep batch rows ``keep`` (in order), drop the cache columns no kept row uses."""
        self.requests = [self.requests[b] for b in keep]
        self.pending = pending
        if not keep:
            return
        idx = torch.tensor(keep, dtype=torch.long)
        self.past.batch_select_indices(idx)
        self.mask, self.positions = self.mask[idx], self.positions[idx]
        used = self.mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first > 0:  # left padding that only retired rows needed: stop paying attention over it
            for layer in self.past.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
            self.mask = self.mask[:, first:]

    def merged(self, other: _Batch) -> _Batch:
        """This batch and ``other`` as one, the narrower cache left-padded to the wider one (rows
        joining a running batch: continuous batching)."""
        width = max(self.mask.shape[1], other.mask.shape[1])
        layers = [
            (torch.cat([_left_pad(a.keys, width, 2), _left_pad(b.keys, width, 2)]),
             torch.cat([_left_pad(a.values, width, 2), _left_pad(b.values, width, 2)]))
            for a, b in zip(self.past.layers, other.past.layers)
        ]
        return _Batch(
            self.requests + other.requests, DynamicCache(ddp_cache_data=layers),
            torch.cat([_left_pad(self.mask, width, 1), _left_pad(other.mask, width, 1)]),
            torch.cat([self.positions, other.positions]), torch.cat([self.pending, other.pending]),
        )


class LocalLLM:
    """The :class:`~factrl.llm.base.LLM` protocol on a local Hugging Face causal LM.

    ``model`` is an embedded name, a Hugging Face directory or a hub id; an already-loaded
    ``(model_obj, tokenizer)`` pair may be passed instead (tests and trainers share weights).
    ``bf16`` generates with bfloat16 weights (CPUs with AVX512-BF16 or AMX run bf16 matrix products
    natively: measured here, a decode step at batch 1-4 costs about half of fp32); when the given
    ``model_obj`` holds fp32 weights (a policy under training), the engine decodes with a bf16 copy
    that it re-syncs whenever the weights change, as verl syncs the actor's weights into its
    rollout engine. ``max_batch`` bounds the rows decoded together, which bounds memory.
    ``prefix_cache_bytes`` bounds the key/value states kept between calls (see
    :class:`PrefixCache`; 0 turns the cache off). While at most ``speculate_max_batch`` rows
    decode (the tail of a multi-turn batch), each step also verifies an n-gram draft of up to
    ``speculative_tokens`` tokens per row (:func:`ngram_draft`, :func:`verify_draft`: the output
    is unchanged, greedy or sampled); 0 turns it off. The cache is cleared by
    :meth:`clear_prefix_cache` and, automatically, whenever a parameter of the model was modified
    in place or replaced since the last call.
    """

    def __init__(
        self,
        model: str = DEFAULT_POLICY,
        *,
        model_obj=None,
        tokenizer=None,
        bf16: bool = False,
        max_batch: int = 32,
        model_name: str | None = None,
        prefix_cache_bytes: int = 2 * 1024**3,
        speculative_tokens: int = 5,
        speculate_max_batch: int = 4,
    ):
        if model_obj is None or tokenizer is None:
            model_obj, tokenizer = load_model_and_tokenizer(model, dtype="bfloat16" if bf16 else "float32")
        self.model = model_obj  # the weights of record (a trainer updates these)
        # what the engine decodes with: the model itself, or its bf16 copy re-synced at admission
        self.engine_model = model_obj
        if bf16 and next(model_obj.parameters()).dtype != torch.bfloat16:
            self.engine_model = copy.deepcopy(model_obj).to(torch.bfloat16).eval().requires_grad_(False)
        if next(self.engine_model.parameters()).dtype == torch.bfloat16:
            use_fp32_attention(self.engine_model)
        self.tokenizer = tokenizer
        self.model_name = model_name or model
        self.max_batch = max_batch
        self.speculative_tokens = speculative_tokens
        self.speculate_max_batch = speculate_max_batch
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        # one decode at a time: the model is shared and torch already uses every core
        self._lock = threading.Lock()
        self._waiting: deque[GenerationRequest] = deque()  # submitted, not yet in the batch
        self._batch: _Batch | None = None  # the rows decoding now
        self.prefix_cache = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        self._weights_seen: list[tuple[int, int]] | None = None
        # prompt tokens given to the engine vs. tokens it actually ran the model over
        self.stats = {"prompt_tokens": 0, "prefilled_tokens": 0, "decode_steps": 0, "decoded_rows": 0,
                      "draft_tokens": 0, "accepted_tokens": 0}

    def _eos_ids(self) -> set[int]:
        ids = set()
        for src in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(src, int):
                ids.add(src)
            elif src:
                ids.update(src)
        return ids

    def clear_prefix_cache(self) -> None:
        """Forget every cached key/value state (call after changing the weights out of place)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def _weights_signature(self) -> list[tuple[int, int]]:
        """Identity and in-place version counter of every parameter: optimizer steps and
        ``load_state_dict`` bump ``_version``, swapping a parameter changes its ``id``."""
        return [(id(p), p._version) for p in self.model.parameters()]

    def _check_weights(self) -> None:
        sig = self._weights_signature()
        if sig != self._weights_seen:
            self.clear_prefix_cache()
            if self.engine_model is not self.model:
                with torch.no_grad():
                    for copy_p, p in zip(self.engine_model.parameters(), self.model.parameters()):
                        copy_p.copy_(p)
            self._weights_seen = sig

    # ---- protocol -------------------------------------------------------------------------
    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of a conversation rendered by the tokenizer's chat template, ready to continue."""
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat(self, conversations: Sequence[Sequence[Message]], params: SamplingParams) -> list[list[Completion]]:
        return self.complete_tokens([self.encode_chat(c) for c in conversations], params)

    def complete_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Continue every prompt ``params.n`` times; rows run through the step-level engine, so a
        call with more than ``max_batch`` rows admits waiting rows as earlier ones finish."""
        requests = [
            self.submit(p, params, seed=None if params.seed is None else row_seed(params.seed, i * params.n + j))
            for i, p in enumerate(prompts) for j in range(params.n)
        ]
        while not all(r.done for r in requests):
            self.step()
        flat = [r.completion for r in requests]
        return [flat[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    # ---- step-level engine ----------------------------------------------------------------
    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int | None = None) -> GenerationRequest:
        """Queue one continuation of ``prompt`` (``params.n`` is ignored: one row per request).

        The row joins the running decode batch at the next :meth:`step` that has room for it.
        ``seed`` seeds this row's own sampler, so its sample does not depend on which other rows
        happen to share its batch.
        """
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        request = GenerationRequest(list(prompt), params, generator)
        if params.max_tokens <= 0:
            self._finish(request)
        else:
            with self._lock:
                self._waiting.append(request)
        return request

    def step(self) -> list[GenerationRequest]:
        """One engine step: every running row decodes one token, then waiting rows are admitted
        (prefilled; their first token sampled) while the batch has room. Returns the requests
        that finished during the step (EOS, a stop string or their token budget)."""
        with self._lock, torch.inference_mode():
            finished = self._decode() if self._batch is not None else []
            if self._waiting and (self._batch is None or len(self._batch.requests) < self.max_batch):
                finished += self._admit()
        return finished

    # ---- engine ---------------------------------------------------------------------------
    def _forward(self, input_ids, mask, positions, past, keep: int = 1):
        """One model call keeping the logits of the last ``keep`` positions (``[B, V]`` when
        ``keep`` is 1, else ``[B, keep, V]``) and the cache."""
        res = self.engine_model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            past_key_values=past, use_cache=True,
            logits_to_keep=keep,  # only these positions are sampled: skip the lm_head elsewhere
        )
        logits = res.logits[:, -1, :] if keep == 1 else res.logits
        return logits, res.past_key_values

    def _share_prefix(self, rows: list[list[int]]) -> None:
        """Prefill the prefix common to every row once (batch of one) and cache it, so that the
        batch below reuses it instead of computing it once per row."""
        if self.prefix_cache is None or len(rows) < 2:
            return
        width = min(len(r) for r in rows) - 1  # every row keeps at least one token to run
        if width < MIN_SHARED_PREFIX:
            return
        ids = torch.tensor([r[:width] for r in rows])
        n = int((ids == ids[0]).all(dim=0).to(torch.int32).cumprod(0).sum())
        if n < MIN_SHARED_PREFIX or self.prefix_cache.longest(ids[0, :n])[1] >= n:
            return
        mask = torch.ones(1, n, dtype=torch.long)
        _, past = self._forward(ids[:1, :n], mask, torch.arange(n)[None], None)
        self.stats["prefilled_tokens"] += n
        self.prefix_cache.put(rows[0][:n], [(layer.keys[0], layer.values[0]) for layer in past.layers])

    def _prefill(self, rows: list[list[int]]):
        """Run the model over every row, reusing cached prefixes; identical rows run once.

        Returns ``(logits [B, V], past, mask [B, W])`` where ``W`` is the cache length. Row ``i``'s
        cache is ``[pad][cached prefix][pad][suffix]``: its reused states are right-aligned in the
        first ``C`` columns and its new tokens right-aligned in the last ``S``, so every row's last
        token sits in the final column; the mask hides the padding and positions count real
        tokens only, so padding does not change the result.
        """
        index: dict[tuple[int, ...], int] = {}
        inverse = [index.setdefault(tuple(r), len(index)) for r in rows]
        uniq = [list(k) for k in index]
        self._share_prefix(uniq)
        reuse: list[tuple[_Entry | None, int]] = [(None, 0)] * len(uniq)
        if self.prefix_cache is not None:
            reuse = []
            for r in uniq:
                entry, n = self.prefix_cache.longest(torch.tensor(r))
                reuse.append((entry, max(0, min(n, len(r) - 1))))
        cached = max(n for _, n in reuse)
        suffixes = [r[n:] for r, (_, n) in zip(uniq, reuse)]
        width = max(len(s) for s in suffixes)
        input_ids = torch.tensor([[self.pad_id] * (width - len(s)) + s for s in suffixes])
        mask = torch.tensor([[0] * (cached - n) + [1] * n + [0] * (width - len(s)) + [1] * len(s)
                             for s, (_, n) in zip(suffixes, reuse)])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]
        past = self._assemble(reuse, cached) if cached else None
        self.stats["prefilled_tokens"] += sum(len(s) for s in suffixes)
        logits, past = self._forward(input_ids, mask, positions, past)
        if len(uniq) < len(rows):
            idx = torch.tensor(inverse)
            past.batch_select_indices(idx)
            logits, mask = logits[idx], mask[idx]
        return logits, past, mask

    @staticmethod
    def _assemble(reuse: list[tuple[_Entry | None, int]], width: int) -> DynamicCache:
        """A batched cache ``[B, heads, width, head_dim]`` per layer holding each row's first ``n``
        cached states right-aligned (zeros in the masked padding)."""
        ref = next(e for e, n in reuse if n)
        layers = []
        for layer, (k0, v0) in enumerate(ref.kv):
            keys = k0.new_zeros(len(reuse), k0.shape[0], width, k0.shape[2])
            values = v0.new_zeros(len(reuse), v0.shape[0], width, v0.shape[2])
            for b, (entry, n) in enumerate(reuse):
                if n:
                    keys[b, :, width - n :] = entry.kv[layer][0][:, :n]
                    values[b, :, width - n :] = entry.kv[layer][1][:, :n]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers)

    def _remember(self, past, mask: torch.Tensor, batch_rows: list[int], seqs: list[list[int]]) -> None:
        """Cache the states of batch rows ``batch_rows`` (their tokens so far: ``seqs``).

        ``mask`` ``[B, W]`` is aligned with the cache; the real columns of a row are its tokens in
        order, which are the first ``mask.sum()`` tokens of its sequence (the newest sampled token
        has not been run through the model yet).
        """
        for b, seq in zip(batch_rows, seqs):
            real = mask[b].bool()
            kv = [(layer.keys[b][:, real], layer.values[b][:, real]) for layer in past.layers]
            self.prefix_cache.put(seq[: int(real.sum())], kv)

    def _admit(self) -> list[GenerationRequest]:
        """Prefill waiting requests into the free rows of the batch and sample their first token."""
        room = self.max_batch - (len(self._batch.requests) if self._batch is not None else 0)
        new = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
        self._check_weights()
        self.stats["prompt_tokens"] += sum(len(r.prompt) for r in new)
        logits, past, mask = self._prefill([r.prompt for r in new])
        if self.prefix_cache is not None:
            # cache each prompt now, not only when its row finishes: rows admitted at later steps
            # (another search agent with the same system prompt) reuse it while this one decodes
            self._remember(past, mask, list(range(len(new))), [r.prompt for r in new])
        incoming = _Batch(new, past, mask, mask.sum(-1, keepdim=True) - 1, torch.zeros(len(new), dtype=torch.long))
        finished = self._emit(incoming, [[t] for t in self._sample_rows(logits, new)])
        if incoming.requests:
            self._batch = incoming if self._batch is None else self._batch.merged(incoming)
        return finished

    def _decode(self) -> list[GenerationRequest]:
        """Run every running row's newest token (and its draft, when speculating) through the model
        and emit the next token(s) of each row."""
        b = self._batch
        n = len(b.requests)
        drafts = self._drafts(b)
        width = 1 + max(len(d) for d in drafts)
        self.stats["decode_steps"] += 1
        self.stats["decoded_rows"] += n
        inputs = torch.full((n, width), self.pad_id, dtype=torch.long)
        inputs[:, 0] = b.pending
        new_cols = b.mask.new_zeros(n, width)
        new_cols[:, 0] = 1
        for i, d in enumerate(drafts):
            inputs[i, 1 : 1 + len(d)] = torch.tensor(d, dtype=torch.long)
            new_cols[i, 1 : 1 + len(d)] = 1
        b.mask = torch.cat([b.mask, new_cols], dim=-1)
        positions = b.positions + 1 + torch.arange(width)
        logits, b.past = self._forward(inputs, b.mask, positions, b.past, keep=width)
        if width == 1:
            emitted = [[t] for t in self._sample_rows(logits, b.requests)]
            accepted = [0] * n
        else:
            verified = [verify_draft(logits[i, : len(d) + 1], d, r.params, r.generator)
                        for i, (r, d) in enumerate(zip(b.requests, drafts))]
            emitted, accepted = [v[0] for v in verified], [v[1] for v in verified]
            self.stats["draft_tokens"] += sum(len(d) for d in drafts)
            self.stats["accepted_tokens"] += sum(accepted)
        finished = self._emit(b, emitted, accepted, width)
        if not b.requests:
            self._batch = None
        return finished

    def _drafts(self, b: _Batch) -> list[list[int]]:
        """An n-gram draft per row while the batch is small enough for verification to be nearly
        free (a decode step streams every weight once whatever the batch: at a few rows the extra
        positions cost little compute); none otherwise."""
        if self.speculative_tokens <= 0 or len(b.requests) > self.speculate_max_batch:
            return [[] for _ in b.requests]
        # a row emits at most its remaining budget: the draft plus the token after it
        return [ngram_draft(r.prompt + r.out, min(self.speculative_tokens, r.params.max_tokens - len(r.out) - 1))
                if r.params.max_tokens - len(r.out) > 1 else [] for r in b.requests]

    def _emit(self, batch: _Batch, emitted: list[list[int]], accepted: list[int] | None = None,
              width: int = 0) -> list[GenerationRequest]:
        """Append each row's emitted tokens; rows that finish leave ``batch`` (their key/value
        states go to the prefix cache first).

        After a decode step (``accepted`` given, ``width`` new cache columns per row) the cache
        holds the row's previous token and its accepted draft tokens: the columns of rejected
        draft tokens, or of tokens after the row finished, are masked out, and positions advance
        by the columns kept.
        """
        done, pending = [], []
        for i, (r, tokens) in enumerate(zip(batch.requests, emitted)):
            before = len(r.out)
            finished = any(self._advance(r, t) for t in tokens)  # any() stops at the first finish
            if accepted is not None:
                valid = 1 + min(len(r.out) - before, accepted[i])
                batch.mask[i, batch.mask.shape[1] - width + valid :] = 0
                batch.positions[i] += valid
            if finished:
                done.append(i)
            else:
                pending.append(tokens[-1])
        if not done:
            batch.pending = torch.tensor(pending, dtype=torch.long)
            return []
        if self.prefix_cache is not None:
            self._remember(batch.past, batch.mask, done, [batch.requests[i].prompt + batch.requests[i].out for i in done])
        finished_requests = [batch.requests[i] for i in done]
        for r in finished_requests:
            self._finish(r)
        ended = set(done)
        batch.select([i for i in range(len(batch.requests)) if i not in ended], torch.tensor(pending, dtype=torch.long))
        return finished_requests

    @staticmethod
    def _sample_rows(logits: torch.Tensor, requests: list[GenerationRequest]) -> list[int]:
        """One token per row; greedy rows in one argmax, sampled rows each with their own generator."""
        tokens = [0] * len(requests)
        greedy = [b for b, r in enumerate(requests) if r.params.temperature <= 0]
        if greedy:
            for b, tok in zip(greedy, logits[greedy].argmax(dim=-1).tolist()):
                tokens[b] = tok
        for b, r in enumerate(requests):
            if r.params.temperature > 0:
                tokens[b] = int(_sample(logits[b : b + 1], r.params, r.generator)[0])
        return tokens

    def _finish(self, r: GenerationRequest) -> None:
        text = self.tokenizer.decode(r.out, skip_special_tokens=True)
        if r.params.stop:
            text = trim_at_stop(text, r.params.stop, r.params.include_stop)[0]
        r.completion = Completion(text=text, token_ids=r.out, finish_reason=r.finish_reason,
                                  prompt_tokens=len(r.prompt), completion_tokens=len(r.out))

    @staticmethod
    @functools.cache  # called for every generated token with the request's (hashable) stop tuple
    def _stop_window(stop: Sequence[str]) -> int:
        """Tokens to decode when looking for a stop string that the newest token may complete.

        Every non-special token decodes to at least one UTF-8 byte, so a stop string of ``k`` bytes
        spans at most ``k`` tokens; one more covers a token that starts mid-character.
        """
        return max((len(s.encode()) for s in stop), default=0) + 2

    def _advance(self, r: GenerationRequest, tok: int) -> bool:
        """Append the row's sampled token; return whether the row is finished (EOS, a stop string
        or the token budget).

        Stop strings are searched in the decoded tail of the output only (a window covering the
        longest stop string), so the per-token cost does not grow with the output length; the text
        before the tail was already searched at earlier steps.
        """
        if tok in self.eos_ids and not r.params.ignore_eos:
            r.finish_reason = "stop"
            return True
        r.out.append(tok)
        if r.params.stop:
            tail = self.tokenizer.decode(r.out[-self._stop_window(r.params.stop):], skip_special_tokens=True)
            if any(s and s in tail for s in r.params.stop):
                r.finish_reason = "stop"
                return True
        return len(r.out) >= r.params.max_tokens
