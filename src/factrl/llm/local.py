"""In-process LLM backend on transformers: a step-level (continuous batching) engine with a KV cache.

The engine runs its own decode loop instead of ``model.generate`` so that it can stop each row as
soon as one of the request's stop strings appears in its decoded text (the rollout engine stops on
closing tags such as ``</search>``), and return the exact generated token ids the policy produced.

Requests are submitted (:meth:`LocalLLM.submit`) and the engine advances in steps
(:meth:`LocalLLM.step`): every running row decodes one token, finished rows leave the batch and
waiting rows are prefilled and join it, so agent loops that pause for a tool re-enter the batch
without waiting for the others. Each running row keeps its key/value states in its own slot of a
preallocated cache (:mod:`factrl.llm.kv_slots`): joining or leaving the batch copies only that row.
:meth:`LocalLLM.complete_tokens` is submit-all-then-step on the same engine.

Multi-turn rollouts continue the whole context so far at every turn, and many prompts share a
long system prompt; re-running the model over those tokens (prefill) would dominate the cost. The
engine therefore keeps a bounded :class:`~factrl.llm.prefix_cache.PrefixCache` of the key/value
states of every prompt it prefilled and every sequence it decoded, and prefills a prefix shared by
all rows admitted together once: each row then runs the model only over the tokens after its
longest cached prefix.
The cache is dropped whenever the weights change (trainers update them in place between steps).
Tokens are picked, and drafted and verified while few rows decode, by :mod:`factrl.llm.token_sampling`.

Why a home-made engine and not transformers' own continuous batching (``generate_batch`` /
``ContinuousBatchingManager``, paged cache): measured with ``bench/llm.py``
(``transformers_cb_vs_local`` in ``bench/results/llm.json``) on the same weights, greedy, same
prompts and token counts (both engines decoded identical ids), fp32 with one torch thread on a
quiet 2-core AVX2 CPU (load 0.7-1.0, transformers 5.23.0, 3 interleaved repeats, at b44de05), the
library reached 0.72 of this engine's tokens/s on plain batched generation (16 chat prompts x 64
tokens: 69.6 vs 97.1) and 0.33 on the turns of 16 HARIS rollouts (13.7 vs 41.6: 27k prompt tokens
whose shared prefixes this engine prefills once), where the project's rule asks for 0.85 on
both. On CPU its sdpa path attends each packed forward through one dense mask over every key the batch's rows read, it has
no stop strings (agent turns end on closing tags), and it has no speculation for the tail of a
multi-turn batch. The engine therefore stays, on an exact transformers pin (``pyproject.toml``):
it builds on transformers internals, so moving the pin means re-running ``bench/llm.py`` and the
tests. It decodes with a module of its own (:meth:`LocalLLM._engine_module`), so a trainer
sharing the weights keeps its model as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from factrl.hardware import resolve_device, use_bf16
from factrl.llm.base import Completion, Message, SamplingParams
from factrl.llm.kv_slots import SLOT_ATTENTION, Segment, SlotCache, SlotPlan, use_fp32_attention
from factrl.llm.models import DEFAULT_POLICY, load_model_and_tokenizer
from factrl.llm.prefix_cache import PrefixCache, PrefixEntry
from factrl.llm.token_sampling import ngram_draft, row_seed, sample_tokens, verify_draft
from factrl.llm.tokens import decode_completion, encode_chat, eos_token_ids

# A prefix shorter than this is not worth a separate forward pass before the batch.
MIN_SHARED_PREFIX = 16

# Greedy answers kept for memoize_greedy, oldest dropped first: an engine that is never released (a
# server) must not grow without bound; a training step's search agent asks a few hundred questions.
MEMO_ENTRIES = 4096

# Every engine alive in this process, so a training loop can read what each one computed during a
# step (engine_counters) without the rollout functions having to hand their engines over.
_ENGINES: weakref.WeakSet = weakref.WeakSet()
# the counters a step's row reports per engine (see engine_step_metrics)
COUNTERS = ("prompt_tokens", "prefilled_tokens", "decoded_tokens", "decode_steps", "decoded_rows", "draft_tokens",
            "accepted_tokens", "memo_hits", "seconds")


def engine_counters() -> dict[str, dict[str, float]]:
    """A snapshot of every live engine's cumulative :attr:`LocalLLM.stats`, by a short label (the
    last component of its ``model_name``, non-alphanumerics as ``_``; a repeated label gets ``_2``...)."""
    out: dict[str, dict[str, float]] = {}
    for engine in sorted(_ENGINES, key=id):
        label = re.sub(r"[^A-Za-z0-9]+", "_", str(engine.model_name).rstrip("/").rsplit("/", 1)[-1]).strip("_")
        label = label or "engine"
        k, unique = 2, label
        while unique in out:
            unique, k = f"{label}_{k}", k + 1
        out[unique] = {c: float(engine.stats.get(c, 0)) for c in COUNTERS}
    return out


def engine_step_metrics(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, float]:
    """What each engine computed between two :func:`engine_counters` snapshots, as flat metrics
    ``engine_<label>_<name>``: ``prefill_tokens`` (tokens the model ran over to admit prompts, after
    the prefix cache), ``decode_tokens`` (tokens emitted), ``mean_batch`` (rows per decode step),
    ``memo_hits`` (greedy requests answered by an identical one), ``time`` (seconds inside its
    steps) and ``decode_tokens_per_s``. Engines that did nothing are left out."""
    out: dict[str, float] = {}
    for label, now in after.items():
        then = before.get(label, dict.fromkeys(COUNTERS, 0.0))
        d = {c: now[c] - then[c] for c in COUNTERS}
        if d["decode_steps"] == 0 and d["prefilled_tokens"] == 0 and d["memo_hits"] == 0:
            continue
        key = f"engine_{label}_"
        out.update({key + "prefill_tokens": d["prefilled_tokens"], key + "decode_tokens": d["decoded_tokens"],
                    key + "mean_batch": d["decoded_rows"] / max(d["decode_steps"], 1.0),
                    key + "memo_hits": d["memo_hits"], key + "time": d["seconds"],
                    key + "decode_tokens_per_s": d["decoded_tokens"] / d["seconds"] if d["seconds"] > 0 else 0.0})
    return out


@dataclass
class GenerationRequest:
    """One row in the step-level engine: its prompt, sampling, sampler and output so far (the
    sampled ids, an ending EOS included, and the engine's log-prob of each, with the log-probs of
    ``params.watch_ids`` at each position when asked for). ``completion`` is set when the row finishes."""

    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    watched: list[list[float]] = field(default_factory=list)
    finish_reason: str = "length"
    ended_by_eos: bool = False
    completion: Completion | None = None
    followers: list[GenerationRequest] = field(default_factory=list)  # identical greedy requests it answers

    @property
    def done(self) -> bool:
        return self.completion is not None


class LocalLLM:
    """The :class:`~factrl.llm.base.LLM` protocol on a local Hugging Face causal LM.

    ``model`` is an embedded name, a Hugging Face directory or a hub id; an already-loaded
    ``(model_obj, tokenizer)`` pair may be passed instead (tests and trainers share weights).
    ``precision`` (``auto``, ``bf16``, ``fp32``; see :mod:`factrl.hardware`) chooses the weights the
    engine decodes with: ``auto`` is bf16 only on CPUs that compute it natively (AVX512-BF16 or
    AMX: a decode step at batch 1-4 costs about half of fp32 there) and fp32 on AVX2-only CPUs,
    where bf16 is emulated and several times slower. Under bf16, when the given
    ``model_obj`` holds fp32 weights (a policy under training), the engine decodes with a bf16 copy
    that it re-syncs whenever the weights change, as verl syncs the actor's weights into its
    rollout engine. ``max_batch`` bounds the rows decoded together and so the key/value slot
    storage (kept between calls until :meth:`release`). ``prefix_cache_bytes`` bounds the key/value
    states kept between calls (see :class:`~factrl.llm.prefix_cache.PrefixCache`; 0 turns the cache
    off). While at most ``speculate_max_batch`` rows decode (the tail of a multi-turn batch), each step
    also verifies an n-gram draft of up to ``speculative_tokens`` tokens per row
    (:func:`~factrl.llm.token_sampling.ngram_draft`, :func:`~factrl.llm.token_sampling.verify_draft`: the output is
    unchanged, greedy or sampled, and a seeded row's tokens do not depend on whether it speculated); 0
    turns it off. The cache
    is cleared by :meth:`clear_prefix_cache` and, automatically, whenever a parameter of the model
    was modified in place or replaced since the last call. ``device`` (``auto``, ``cpu``,
    ``cuda[:n]``) is where a model loaded here runs; a given ``model_obj`` is decoded where its
    weights are, and every tensor the engine creates (key/value slots, inputs, samplers) is put
    there too. ``memoize_greedy``: a greedy request whose prompt and sampling settings equal those
    of one submitted earlier (since the last :meth:`release` or weight change) gets that request's
    completion instead of decoding again; one still decoding answers both when it finishes. Greedy
    decoding is a function of the prompt, so this changes no output: the frozen search agent that
    answers a training policy's questions sees the same question from several rollouts of a
    group, whose policy repeats itself at low entropy. Sampled requests never share.

    Each :class:`Completion` carries every sampled token id, an EOS that ended it included (models
    such as Qwen3 have several EOS ids: the one sampled is the one returned), and ``logprobs``: the
    engine's log-prob of each at the sampling temperature (temperature 1 when greedy), which the
    trainer compares with its own (``GRPOParams.tis_cap``).
    """

    def __init__(
        self,
        model: str = DEFAULT_POLICY,
        *,
        model_obj=None,
        tokenizer=None,
        precision: str = "auto",
        max_batch: int = 32,
        model_name: str | None = None,
        prefix_cache_bytes: int = 2 * 1024**3,
        speculative_tokens: int = 5,
        speculate_max_batch: int = 4,
        device: str | torch.device = "auto",
        memoize_greedy: bool = True,
    ):
        load = model_obj is None or tokenizer is None
        self.device = resolve_device(device) if load else next(model_obj.parameters()).device
        bf16 = use_bf16(precision, self.device)
        self.precision = "bf16" if bf16 else "fp32"
        if load:
            model_obj, tokenizer = load_model_and_tokenizer(model, dtype="bfloat16" if bf16 else "float32",
                                                            device=self.device)
        self.model = model_obj  # the weights of record (a trainer updates these)
        # bf16 decoding of fp32 weights (a policy under training): a bf16 copy, re-synced at admission
        self._owns_weights = bf16 and next(model_obj.parameters()).dtype != torch.bfloat16
        self.engine_model = self._engine_module()
        self.tokenizer = tokenizer
        self.model_name = model_name or model
        self.max_batch = max_batch
        self.speculative_tokens = speculative_tokens
        self.speculate_max_batch = speculate_max_batch
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = eos_token_ids(tokenizer, getattr(model_obj, "generation_config", None))
        # one decode at a time: the model is shared and torch already uses every core
        self._lock = threading.Lock()
        self._waiting: deque[GenerationRequest] = deque()  # submitted, not yet in the batch
        self._running: list[GenerationRequest] = []  # the rows decoding now; row i is in slot i
        self._cache: SlotCache | None = None  # their key/value states (kept until release())
        self.prefix_cache = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        self._weights_seen: list[tuple[int, int]] | None = None
        # prompt tokens given to the engine vs. tokens it actually ran the model over
        self.stats = {"prompt_tokens": 0, "prefilled_tokens": 0, "decode_steps": 0, "decoded_rows": 0,
                      "draft_tokens": 0, "accepted_tokens": 0, "decoded_tokens": 0, "memo_hits": 0, "seconds": 0.0}
        self.memoize_greedy = memoize_greedy
        self._memo: dict[tuple, GenerationRequest] = {}  # (prompt, params) -> the greedy request that answers it
        _ENGINES.add(self)

    def clear_prefix_cache(self) -> None:
        """Forget every cached key/value state (call after changing the weights out of place)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def _weights_signature(self) -> list[tuple[int, int]]:
        """Identity and in-place version counter of every parameter: optimizer steps and
        ``load_state_dict`` bump ``_version``, swapping a parameter changes its ``id``."""
        return [(id(p), p._version) for p in self.model.parameters()]

    def _engine_module(self):
        """The module the engine decodes with, set up for packed slot attention (and fp32 key/value
        states under bf16, :func:`use_fp32_attention`).

        Never the caller's module itself: a trainer runs plain forwards and backwards on that one,
        so its attention implementation and hooks must stay as they are. Under bf16 on fp32 weights
        it is a bf16 copy of the weights; otherwise a module tree of its own whose parameters and
        buffers *are* the model's (no memory copied, in-place updates seen at once).
        """
        if self._owns_weights:
            engine = copy.deepcopy(self.model).to(torch.bfloat16).requires_grad_(False)
        else:
            shared = {id(t): t for t in (*self.model.parameters(), *self.model.buffers())}
            engine = copy.deepcopy(self.model, memo=shared)
        engine.eval()  # its own training flags: a trainer's model.train() does not reach it
        dtype = next(engine.parameters()).dtype
        fp32_states = dtype == torch.bfloat16 and use_fp32_attention(engine)
        self._kv_dtype = torch.float32 if fp32_states else dtype
        engine.set_attn_implementation(SLOT_ATTENTION)  # packed forwards over slots
        return engine

    def _check_weights(self) -> None:
        sig = self._weights_signature()
        if sig != self._weights_seen:
            self.clear_prefix_cache()
            self._memo.clear()  # answers of the old weights
            if self._owns_weights:
                with torch.no_grad():
                    for copy_p, p in zip(self.engine_model.parameters(), self.model.parameters()):
                        copy_p.copy_(p)
            elif self._weights_seen is not None and [i for i, _ in sig] != [i for i, _ in self._weights_seen]:
                self.engine_model = self._engine_module()  # parameters replaced: share the new ones
            self._weights_seen = sig

    # ---- protocol -------------------------------------------------------------------------
    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of a conversation rendered by the tokenizer's chat template, ready to continue."""
        return encode_chat(self.tokenizer, messages)

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
        generator = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        request = GenerationRequest(list(prompt), params, generator)
        if params.max_tokens <= 0:
            self._finish(request)
            return request
        with self._lock:
            if self.memoize_greedy and params.greedy:
                self._check_weights()  # a memoised answer is only valid for the weights that gave it
                key = (tuple(request.prompt), params)
                leader = self._memo.setdefault(key, request)
                if len(self._memo) > MEMO_ENTRIES:
                    del self._memo[next(iter(self._memo))]
                if leader is not request:
                    self.stats["memo_hits"] += 1
                    if leader.done:
                        request.completion = dataclasses.replace(leader.completion)
                    else:
                        leader.followers.append(request)
                    return request
            self._waiting.append(request)
        return request

    def step(self) -> list[GenerationRequest]:
        """One engine step: one forward in which every running row decodes a token and waiting
        rows (as many as the batch has room for) are prefilled and sample their first token.
        Returns the requests that finished during the step (EOS, a stop string or their token
        budget)."""
        with self._lock, torch.inference_mode():
            t0 = time.perf_counter()
            room = self.max_batch - len(self._running)
            new = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
            finished = self._step(new) if self._running or new else []
            if self.device.type == "cuda":  # seconds of work, not of kernel launches
                torch.cuda.synchronize(self.device)
            self.stats["seconds"] += time.perf_counter() - t0
            return finished

    # ---- engine ---------------------------------------------------------------------------
    def _forward(self, input_ids, mask, positions, past, keep: int | torch.Tensor = 1, **kwargs) -> torch.Tensor:
        """One model call; the logits ``[B, K, V]`` of the last ``keep`` positions (or of the
        positions listed in ``keep``). ``past`` receives the new key/value states."""
        return self.engine_model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            past_key_values=past, use_cache=True,
            logits_to_keep=keep,  # only these positions are sampled: skip the lm_head elsewhere
            **kwargs,
        ).logits

    def _slots(self) -> SlotCache:
        if self._cache is None:
            config = self.engine_model.config
            heads = config.num_attention_heads
            self._cache = SlotCache(
                config.num_hidden_layers, getattr(config, "num_key_value_heads", None) or heads,
                getattr(config, "head_dim", None) or config.hidden_size // heads, self._kv_dtype, self.device,
            )
        return self._cache

    def _run_packed(self, rows: list[tuple[int, list[int], int]], keep_all: int) -> tuple[torch.Tensor, list[int]]:
        """One packed forward over ``rows`` = ``(slot, tokens, start)``: each row's tokens take
        positions (and cache columns) ``start, start + 1, ...`` of its slot. Returns the kept
        logits ``[K, V]`` and how many belong to each row, in order: all of its tokens' for the
        first ``keep_all`` rows (verifying drafts), the last token's for the others."""
        segments, offset = [], 0
        for slot, tokens, start in rows:
            segments.append(Segment(slot, start, len(tokens), offset))
            offset += len(tokens)
        cache = self._slots()
        plan = SlotPlan(cache, segments)
        cache.reserve(max(s.slot for s in segments) + 1, plan.span(), self.max_batch)
        cache.begin(plan)
        keep = torch.tensor([j for i, s in enumerate(segments)
                             for j in (range(s.offset, s.offset + s.length) if i < keep_all
                                       else [s.offset + s.length - 1])], device=self.device)
        input_ids = torch.tensor([t for _, tokens, _ in rows for t in tokens], device=self.device)[None]
        # transformers returns a 4-D mask as given instead of building one over the packed
        # sequence; slot_attention ignores it and masks each segment itself
        mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=self.device)
        logits = self._forward(input_ids, mask, plan.positions[None], cache, keep=keep, slot_plan=plan)[0]
        return logits, [s.length if i < keep_all else 1 for i, s in enumerate(segments)]

    def _share_prefix(self, rows: list[list[int]]) -> None:
        """Prefill the prefix common to every row once (batch of one) and cache it, so that the
        rows below reuse it instead of computing it once per row."""
        if self.prefix_cache is None or len(rows) < 2:
            return
        width = min(len(r) for r in rows) - 1  # every row keeps at least one token to run
        if width < MIN_SHARED_PREFIX:
            return
        ids = torch.tensor([r[:width] for r in rows])
        n = int((ids == ids[0]).all(dim=0).to(torch.int32).cumprod(0).sum())
        if n < MIN_SHARED_PREFIX or self.prefix_cache.longest(ids[0, :n])[1] >= n:
            return
        past = DynamicCache()
        dev = self.device
        self._forward(ids[:1, :n].to(dev), torch.ones(1, n, dtype=torch.long, device=dev),
                      torch.arange(n, device=dev)[None], past)
        self.stats["prefilled_tokens"] += n
        self.prefix_cache.put(rows[0][:n], [(layer.keys[0], layer.values[0]) for layer in past.layers])

    def _cached_prefix(self, ids: Sequence[int]) -> tuple[PrefixEntry | None, int]:
        """The prefix-cache entry to reuse for ``ids`` and how many of its tokens (at least one
        token of ``ids`` is left to run, for its logits)."""
        if self.prefix_cache is None:
            return None, 0
        entry, n = self.prefix_cache.longest(torch.tensor(ids))
        return entry, max(0, min(n, len(ids) - 1))

    def _remember(self, slot: int, ids: Sequence[int]) -> None:
        """Put the states of ``ids`` (the tokens cached in ``slot``) in the prefix cache."""
        if self.prefix_cache is not None and not self.prefix_cache.covers(ids):
            self.prefix_cache.put(ids, self._cache.read(slot, len(ids)))

    def _step(self, new: list[GenerationRequest]) -> list[GenerationRequest]:
        """One packed forward: every running row's newest token (and its draft, when speculating)
        and the uncached part of every admitted prompt; then emit each row's next token(s)."""
        running = self._running
        drafts = self._drafts(running)
        # a running row's cache holds its prompt and output except the newest token, which runs now
        rows = [(i, [r.out[-1], *d], len(r.prompt) + len(r.out) - 1) for i, (r, d) in enumerate(zip(running, drafts))]
        if running:
            self.stats["decode_steps"] += 1
            self.stats["decoded_rows"] += len(running)
        staged = self._stage_prompts(new, rows) if new else {}
        kept, sizes = self._run_packed(rows, keep_all=len(running))
        logits = list(kept.split(sizes))  # per row of ``rows``
        last = (torch.tensor(sizes).cumsum(0) - 1).tolist()  # each row's last kept logit
        # one argmax for every greedy row below (none at all for sampled rollouts)
        greedy = kept.argmax(dim=-1).tolist() if any(r.params.greedy for r in (*running, *new)) else None
        emitted, accepted, sources = [], [], []
        for slot, (r, d) in enumerate(zip(running, drafts)):
            if d:
                tokens, n = verify_draft(logits[slot], d, r.params, r.generator)
                self.stats["draft_tokens"] += len(d)
                self.stats["accepted_tokens"] += n
            else:
                tokens, n = [self._sample_row(logits[slot][-1], r, greedy and greedy[last[slot]])], 0
            emitted.append(tokens)
            accepted.append(n)
            sources.append(logits[slot])
        for r, row in self._place_admitted(new, staged):
            emitted.append([self._sample_row(logits[row][-1], r, greedy and greedy[last[row]])])
            accepted.append(0)
            sources.append(logits[row])
        return self._emit(emitted, accepted, *self._logprobs(sources, emitted))

    def _logprobs(self, sources: list[torch.Tensor], emitted: list[list[int]]
                  ) -> tuple[list[list[float]], list[list[list[float]] | None]]:
        """The engine's log-prob of every emitted token, per row of ``emitted`` (slot order), and,
        for rows whose request watches ids (``SamplingParams.watch_ids``), the log-probs of those ids
        at each emitted position (None for the other rows).

        Row ``i``'s token ``j`` was sampled from ``sources[i][j]`` (``[>= len(emitted[i]), V]``
        logits: a speculating row's draft positions, else one row), at the row's temperature (1
        when greedy), as the trainer scores it. One batched log-softmax for the whole step; watched
        ids are a gather from it (a few columns: free next to the softmax).
        """
        rows = torch.cat([src[: len(toks)] for src, toks in zip(sources, emitted)]).float()
        temps = [r.params.temperature if r.params.temperature > 0 else 1.0 for r in self._running]
        temp = torch.tensor([t for t, toks in zip(temps, emitted) for _ in toks], device=rows.device)
        picked = torch.tensor([t for toks in emitted for t in toks], device=rows.device)
        logp = torch.log_softmax(rows / temp[:, None], dim=-1)
        flat = logp.gather(1, picked[:, None])[:, 0].tolist()
        out, watched, start = [], [], 0
        for r, toks in zip(self._running, emitted):
            out.append(flat[start : start + len(toks)])
            ids = r.params.watch_ids
            watched.append(logp[start : start + len(toks), list(ids)].tolist() if ids else None)
            start += len(toks)
        return out, watched

    def _stage_prompts(self, new: list[GenerationRequest], rows: list) -> dict[tuple[int, ...], bool]:
        """Give each distinct prompt of ``new`` the next free slot, load its longest cached prefix
        there and append its uncached tokens to ``rows`` (identical prompts, e.g. the ``n``
        samples of one prompt, run once). Returns the distinct prompts in slot order, each mapped
        to whether most of it is prefilled here (fresh)."""
        self._check_weights()
        self.stats["prompt_tokens"] += sum(len(r.prompt) for r in new)
        uniq = list(dict.fromkeys(tuple(r.prompt) for r in new))
        self._share_prefix([list(u) for u in uniq])
        first = len(self._running)
        cache = self._slots()
        cache.reserve(first + len(new), max(len(u) for u in uniq), self.max_batch)
        staged = {}
        for u, ids in enumerate(uniq):
            entry, n = self._cached_prefix(ids)
            if n:
                cache.load(first + u, entry.kv, n)
            rows.append((first + u, list(ids[n:]), n))
            staged[ids] = n < len(ids) // 2
            self.stats["prefilled_tokens"] += len(ids) - n
        return staged

    def _place_admitted(self, new: list[GenerationRequest], staged: dict[tuple[int, ...], bool]):
        """After the forward: the admitted requests join the running rows (the distinct prompts in
        their staged slots, each repeat in a copy of its prompt's slot). Yields ``(request, row)``
        in slot order, ``row`` being the row of the forward whose logits the request samples from."""
        first = len(self._running)
        slot_of = {ids: first + u for u, ids in enumerate(staged)}
        admitted: list[GenerationRequest | None] = [None] * len(staged)
        source = list(slot_of.values())
        for r in new:
            slot = slot_of[tuple(r.prompt)]
            if admitted[slot - first] is None:
                admitted[slot - first] = r
                continue
            self._cache.move(slot, first + len(admitted), len(r.prompt))
            admitted.append(r)
            source.append(slot)
        for (ids, fresh), slot in zip(staged.items(), slot_of.values()):
            # A prompt mostly computed here (a new system prompt) is cached now, not only when its
            # row finishes, so rows admitted at later steps (the next search agent) reuse it. One
            # mostly served from the cache differs from it by a suffix (an injected tool answer)
            # that other rows do not share; copying it out would cost more than it could save.
            if fresh:
                self._remember(slot, ids)
        self._running.extend(admitted)
        return zip(admitted, source)

    def _drafts(self, rows: list[GenerationRequest]) -> list[list[int]]:
        """An n-gram draft per row while the batch is small enough for verification to be nearly
        free (a decode step streams every weight once whatever the batch: at a few rows the extra
        positions cost little compute); none otherwise."""
        if self.speculative_tokens <= 0 or len(rows) > self.speculate_max_batch:
            return [[] for _ in rows]
        # a row emits at most its remaining budget: the draft plus the token after it
        return [ngram_draft(r.prompt + r.out, min(self.speculative_tokens, r.params.max_tokens - len(r.out) - 1))
                if r.params.max_tokens - len(r.out) > 1 else [] for r in rows]

    def _emit(self, emitted: list[list[int]], accepted: list[int], logprobs: list[list[float]],
              watched: list[list[list[float]] | None]) -> list[GenerationRequest]:
        """Append each running row's emitted tokens and their log-probs (and watched log-probs, see
        :meth:`_logprobs`) in slot order; rows that finish
        leave the batch (their states go to the prefix cache first) and the last running rows move
        into their slots.

        ``accepted[i]``: how many draft tokens row ``i``'s cache now holds past its previous
        output, so a finished row's cache holds its prompt, its previous output and those.
        """
        done: list[tuple[int, list[int]]] = []  # (slot, the tokens its cache holds)
        self.stats["decoded_tokens"] += sum(map(len, emitted))
        for slot, (tokens, n, lps, ws) in enumerate(zip(emitted, accepted, logprobs, watched)):
            r = self._running[slot]
            cached = len(r.prompt) + len(r.out) + n
            ws = ws if ws is not None else [None] * len(tokens)
            if any(self._advance(r, t, lp, w) for t, lp, w in zip(tokens, lps, ws)):  # any() stops at the first finish
                done.append((slot, (r.prompt + r.out)[:cached]))
        finished = []
        for slot, ids in sorted(done, reverse=True):  # from the last slot: moves never touch a finished row
            r = self._running[slot]
            self._remember(slot, ids)  # the next turn of a conversation continues this sequence
            self._finish(r)
            for follower in r.followers:  # identical greedy requests submitted meanwhile
                follower.completion = dataclasses.replace(r.completion)
            finished.extend([*r.followers[::-1], r])  # reversed below: r first, then its followers
            r.followers = []
            last = len(self._running) - 1
            if slot != last:
                moved = self._running[last]
                self._cache.move(last, slot, len(moved.prompt) + len(moved.out) - 1)
                self._running[slot] = moved
            self._running.pop()
        return finished[::-1]

    def release(self) -> None:
        """Free the key/value slot storage while no row is running (callers that finished a burst
        of requests: a trainer needs the memory for its update). It is kept otherwise, because
        allocating it again costs a first touch of every page (measured: ~0.4 s per gigabyte)."""
        with self._lock:
            if not self._running:
                self._cache = None
                self._memo.clear()  # a burst of requests is over: its answers are not kept past it

    def free_memory(self) -> None:
        """:meth:`release` and drop the prefix cache too: what a trainer calls before an update,
        which changes the weights the cache was computed with (it would be cleared at the next
        admission anyway)."""
        self.release()
        with self._lock:
            if not self._running:
                self.clear_prefix_cache()

    @staticmethod
    def _sample_row(logits: torch.Tensor, r: GenerationRequest, argmax: int | None) -> int:
        """One token from one row's logits ``[V]``: ``argmax`` (precomputed) when greedy, else a
        sample from the row's own sampler."""
        if r.params.greedy:
            return int(argmax)
        return int(sample_tokens(logits[None], r.params, r.generator)[0])

    def _finish(self, r: GenerationRequest) -> None:
        r.completion = decode_completion(self.tokenizer, r.out, r.finish_reason, r.params, ended_by_eos=r.ended_by_eos,
                                         prompt_tokens=len(r.prompt), logprobs=r.logprobs,
                                         watched_logprobs=r.watched if r.params.watch_ids else None)

    @staticmethod
    @functools.cache  # called for every generated token with the request's (hashable) stop tuple
    def _stop_window(stop: Sequence[str]) -> int:
        """Tokens to decode when looking for a stop string that the newest token may complete.

        Every non-special token decodes to at least one UTF-8 byte, so a stop string of ``k`` bytes
        spans at most ``k`` tokens; one more covers a token that starts mid-character.
        """
        return max((len(s.encode()) for s in stop), default=0) + 2

    def _advance(self, r: GenerationRequest, tok: int, logprob: float, watched: list[float] | None = None) -> bool:
        """Append the row's sampled token, its log-prob (and the watched ids' log-probs at its position,
        when the request asked for them); return whether the row is finished (EOS,
        a stop string or the token budget). An EOS is kept: it is the token the policy sampled, and
        training teaches the policy to stop with it.

        Stop strings are searched in the decoded tail of the output only (a window covering the
        longest stop string), so the per-token cost does not grow with the output length; the text
        before the tail was already searched at earlier steps.
        """
        r.out.append(tok)
        r.logprobs.append(logprob)
        if watched is not None:
            r.watched.append(watched)
        if tok in self.eos_ids and not r.params.ignore_eos:
            r.finish_reason, r.ended_by_eos = "stop", True
            return True
        if r.params.stop:
            tail = self.tokenizer.decode(r.out[-self._stop_window(r.params.stop):], skip_special_tokens=True)
            if any(s and s in tail for s in r.params.stop):
                r.finish_reason = "stop"
                return True
        return len(r.out) >= r.params.max_tokens
