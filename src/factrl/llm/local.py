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
tests. It decodes with a module of its own (:class:`~factrl.llm.engine_weights.EngineWeights`), so a trainer
sharing the weights keeps its model as it was.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from factrl.hardware import resolve_device, use_bf16
from factrl.llm.base import Completion, Message, SamplingParams
from factrl.llm.engine_rows import GenerationRequest, GreedyMemo
from factrl.llm.engine_stats import ENGINES, new_counters
from factrl.llm.engine_weights import EngineWeights
from factrl.llm.kv_slots import Segment, SlotCache, SlotPlan, cache_states
from factrl.llm.models import DEFAULT_POLICY, load_model_and_tokenizer
from factrl.llm.prefix_cache import PrefixCache, PrefixEntry
from factrl.llm.token_sampling import emitted_logprobs, ngram_draft, row_seed, verify_draft
from factrl.llm.tokens import encode_chat, eos_token_ids

# A prefix shorter than this is not worth a separate forward pass before the batch.
MIN_SHARED_PREFIX = 16

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
        self.weights = EngineWeights(model_obj, bf16)  # what the engine decodes with
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
        self.stats = new_counters()  # what it computed (factrl.llm.engine_stats)
        self.memoize_greedy = memoize_greedy
        self._memo = GreedyMemo()
        ENGINES.add(self)

    @property
    def engine_model(self) -> torch.nn.Module:
        """The module the engine decodes with (:class:`~factrl.llm.engine_weights.EngineWeights`)."""
        return self.weights.module

    def clear_prefix_cache(self) -> None:
        """Forget every cached key/value state (call after changing the weights out of place)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def _check_weights(self) -> None:
        """Before admitting rows: decode with the model's current weights and forget what older
        ones computed (cached key/value states, greedy answers)."""
        if self.weights.sync():
            self.clear_prefix_cache()
            self._memo.clear()

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
            request.finish(self.tokenizer)
            return request
        with self._lock:
            if self.memoize_greedy and params.greedy:
                self._check_weights()  # a memoised answer is only valid for the weights that gave it
                leader = self._memo.leader(request)
                if leader is not request:
                    self.stats["memo_hits"] += 1
                    leader.answer(request)
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
                getattr(config, "head_dim", None) or config.hidden_size // heads, self.weights.kv_dtype, self.device,
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
        self.prefix_cache.put(rows[0][:n], [(k[0], v[0]) for k, v in cache_states(past)])

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
                tokens, n = [r.sample(logits[slot][-1], greedy and greedy[last[slot]])], 0
            emitted.append(tokens)
            accepted.append(n)
            sources.append(logits[slot])
        for r, row in self._place_admitted(new, staged):
            emitted.append([r.sample(logits[row][-1], greedy and greedy[last[row]])])
            accepted.append(0)
            sources.append(logits[row])
        logprobs, watched = emitted_logprobs(sources, emitted, [r.params for r in self._running])
        return self._emit(emitted, accepted, logprobs, watched)

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
        :func:`~factrl.llm.token_sampling.emitted_logprobs`) in slot order; rows that finish
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
            # any() stops at the first finish
            if any(r.advance(t, lp, w, eos_ids=self.eos_ids, tokenizer=self.tokenizer) for t, lp, w in zip(tokens, lps, ws)):
                done.append((slot, (r.prompt + r.out)[:cached]))
        finished = []
        for slot, ids in sorted(done, reverse=True):  # from the last slot: moves never touch a finished row
            r = self._running[slot]
            self._remember(slot, ids)  # the next turn of a conversation continues this sequence
            followers = r.finish(self.tokenizer)  # identical greedy requests submitted meanwhile
            finished.extend([*followers[::-1], r])  # reversed below: r first, then its followers
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
