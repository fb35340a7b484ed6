"""LocalLLM: padding-invariant greedy decoding, stop strings, n samples, seeds and the prefix cache."""

from dataclasses import replace

import pytest
import torch

from factrl.llm.base import LLM, SamplingParams
from factrl.llm.local import LocalLLM
from factrl.llm.tokens import trim_at_stop

Q1 = [{"role": "user", "content": "What is the capital of France?"}]
Q2 = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]


def test_trim_at_stop():
    assert trim_at_stop("a</s>b</x>", ("</x>", "</s>"), True) == ("a</s>", True)
    assert trim_at_stop("a</s>b", ("</s>",), False) == ("a", True)
    assert trim_at_stop("abc", ("z",), True) == ("abc", False)


def until_eos(ids: list[int], eos_ids) -> list[int]:
    """``model.generate``'s new ids up to and including the first EOS (then it pads), as the engine
    returns them."""
    for i, t in enumerate(ids):
        if t in eos_ids:
            return ids[: i + 1]
    return ids


def test_protocol_and_batch_matches_generate(local_llm):
    assert isinstance(local_llm, LLM)
    params = SamplingParams(max_tokens=12)
    batched = local_llm.chat([Q1, Q2], params)
    ids = local_llm.encode_chat(Q2)
    ref = local_llm.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):]
    ref = until_eos(ref.tolist(), local_llm.eos_ids)
    assert batched[1][0].token_ids == ref  # left padding does not change greedy output
    assert batched[1][0].text == local_llm.tokenizer.decode(ref, skip_special_tokens=True)
    assert len(batched[1][0].logprobs) == len(ref) and all(lp <= 0 for lp in batched[1][0].logprobs)
    assert "Paris" in batched[0][0].text and batched[0][0].finish_reason == "stop"
    solo = local_llm.complete_tokens([ids], params)[0][0]
    assert solo.token_ids == batched[1][0].token_ids and solo.prompt_tokens == len(ids)


def test_ignore_eos_generates_exactly_max_tokens(local_llm):
    """Q1 ends (EOS) well inside the budget; with ignore_eos it runs to the budget, same prefix."""
    short = local_llm.chat([Q1], SamplingParams(max_tokens=40))[0][0]
    assert short.finish_reason == "stop" and short.completion_tokens < 40
    full = local_llm.chat([Q1], SamplingParams(max_tokens=40, ignore_eos=True))[0][0]
    assert full.completion_tokens == 40 and full.finish_reason == "length"
    assert full.token_ids[: short.completion_tokens] == short.token_ids


def test_stop_strings(local_llm):
    base = local_llm.chat([Q2], SamplingParams(max_tokens=20))[0][0].text
    assert "2." in base
    kept = local_llm.chat([Q2], SamplingParams(max_tokens=20, stop=("2.", "zz")))[0][0]
    assert kept.text == base[: base.index("2.") + 2] and kept.finish_reason == "stop"
    assert kept.completion_tokens < 20
    cut = local_llm.chat([Q2], SamplingParams(max_tokens=20, stop=("2.",), include_stop=False))[0][0]
    assert cut.text == base[: base.index("2.")]


def test_n_samples_seeded(local_llm):
    p = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, n=3, seed=7)
    a = local_llm.chat([Q1, Q2], p)
    b = local_llm.chat([Q1, Q2], p)
    assert [len(x) for x in a] == [3, 3]
    assert [[c.token_ids for c in x] for x in a] == [[c.token_ids for c in x] for x in b]
    assert len({tuple(c.token_ids) for x in a for c in x}) > 1


def test_bf16_engine_copy_follows_weight_updates(local_llm):
    """precision="bf16" on fp32 weights decodes with a bf16 copy, re-synced after an in-place update."""
    import copy

    from factrl.llm.local import LocalLLM

    model = copy.deepcopy(local_llm.model)
    bf = LocalLLM(model_obj=model, tokenizer=local_llm.tokenizer, precision="bf16", model_name="x")
    assert next(model.parameters()).dtype == torch.float32  # the weights of record stay fp32
    assert next(bf.engine_model.parameters()).dtype == torch.bfloat16
    params = SamplingParams(max_tokens=8)
    before = bf.chat([Q2], params)[0][0]
    assert before.completion_tokens > 0 and before.text
    # a continuation reuses the bf16 states cached by the first call
    again = bf.complete_tokens([bf.encode_chat(Q2) + before.token_ids], SamplingParams(max_tokens=4))[0][0]
    assert again.completion_tokens > 0 and bf.stats["prefilled_tokens"] < bf.stats["prompt_tokens"]
    torch.manual_seed(0)
    with torch.no_grad():  # an optimizer step
        for p in model.model.layers[:6].parameters():
            p.add_(torch.randn_like(p) * 0.05)
    after = bf.chat([Q2], params)[0][0].token_ids
    reference = LocalLLM(model_obj=copy.deepcopy(model).to(torch.bfloat16), tokenizer=local_llm.tokenizer,
                         precision="bf16", model_name="ref", prefix_cache_bytes=0)
    assert after == reference.chat([Q2], params)[0][0].token_ids != before.token_ids


def test_rows_join_a_running_batch(local_llm):
    """Continuous batching: a request submitted while another decodes joins the running batch
    (its cache left-padded to the batch's width) and both decode exactly what each decodes alone.
    The greedy memo is off: with it, the repeated requests would be answered from the first decode."""
    llm = _llm(local_llm, prefix_cache_bytes=0, memoize_greedy=False)
    params = SamplingParams(max_tokens=12)
    alone = [llm.chat([q], params)[0][0].token_ids for q in (Q1, Q2)]
    first = llm.submit(llm.encode_chat(Q2), params)
    for _ in range(4):
        llm.step()
    assert not first.done and len(first.out) == 4
    steps, rows = llm.stats["decode_steps"], llm.stats["decoded_rows"]
    second = llm.submit(llm.encode_chat(Q1), params)
    while not (first.done and second.done):
        llm.step()
    assert llm.stats["decoded_rows"] - rows > llm.stats["decode_steps"] - steps  # some steps ran both rows
    assert [second.completion.token_ids, first.completion.token_ids] == alone
    assert not llm._running and not llm._waiting


def test_finished_rows_leave_the_batch(local_llm):
    """A row retired early (stop string) does not change the rows still decoding."""
    params = SamplingParams(max_tokens=10, stop=("1.",))
    both = local_llm.chat([Q2, Q1], params)
    assert both[0][0].text == "1." and both[0][0].finish_reason == "stop"
    assert both[1][0].completion_tokens > both[0][0].completion_tokens
    assert both[1][0].token_ids == local_llm.chat([Q1], params)[0][0].token_ids


def test_rows_leaving_out_of_order_keep_the_others_exact(local_llm):
    """Rows finish at different steps (the last running row moves into each freed slot) while
    another row joins mid-way; every row decodes exactly what it decodes alone, and the slot
    storage is kept for the next burst until released."""
    prompts = [Q1, Q2, [{"role": "user", "content": "Name three colours."}],
               [{"role": "user", "content": "Say hello to Ada."}]]
    budgets = [3, 14, 6, 9]
    alone = [local_llm.chat([p], SamplingParams(max_tokens=b))[0][0].token_ids for p, b in zip(prompts, budgets)]
    requests = [local_llm.submit(local_llm.encode_chat(p), SamplingParams(max_tokens=b))
                for p, b in zip(prompts[:3], budgets[:3])]
    local_llm.step()
    local_llm.step()
    requests.append(local_llm.submit(local_llm.encode_chat(prompts[3]), SamplingParams(max_tokens=budgets[3])))
    while not all(r.done for r in requests):
        local_llm.step()
    assert [r.completion.token_ids for r in requests] == alone
    assert local_llm._cache is not None
    local_llm.release()
    assert local_llm._cache is None


def test_multi_token_stop_string(local_llm):
    base = local_llm.chat([Q2], SamplingParams(max_tokens=16))[0][0].text
    stop = base[base.index("2"): base.index("4") + 1]  # "2. 2\n3. 3\n4": spans several tokens
    assert len(local_llm.tokenizer(stop)["input_ids"]) > 3
    out = local_llm.chat([Q2], SamplingParams(max_tokens=16, stop=(stop,)))[0][0]
    assert out.text == base[: base.index(stop) + len(stop)] and out.finish_reason == "stop"


def test_load_from_hf_directory(local_llm):
    from factrl.llm.local import LocalLLM
    from factrl.llm.models import resolve_model_path

    directory = resolve_model_path("smollm2-135m")  # the converted checkpoint is a plain HF dir
    llm = LocalLLM(directory, precision=local_llm.precision)
    assert llm.model_name == directory
    params = SamplingParams(max_tokens=8)
    assert llm.chat([Q1], params)[0][0].token_ids == local_llm.chat([Q1], params)[0][0].token_ids


def test_unknown_models_fail_clearly(tmp_path, monkeypatch):
    from factrl.llm.local import LocalLLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match=r"'no-such-org/no-such-model'.*hub id.*HF_HUB_OFFLINE"):
        LocalLLM("no-such-org/no-such-model")
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        LocalLLM(str(tmp_path / "missing" / "model"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        LocalLLM(str(tmp_path))


# ---- prefix cache -------------------------------------------------------------------------------
SYSTEM = ("You check facts. Think inside <think> </think>, ask one question inside <question> "
          "</question>, read the answer inside <result> </result>, and finish with <verification> "
          "</verification>. Example: <think>I need the founder.</think><question>Who founded Orlen "
          "Studios?</question>")
CLAIMS = ["The Eiffel Tower is in Berlin.", "Water boils at 100 degrees Celsius at sea level."]


def _conv(claim: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": claim}]


def _ids(llm, text: str) -> list[int]:
    return llm.tokenizer(text, add_special_tokens=False)["input_ids"]


def _multi_turn(llm, turns: int = 2, max_tokens: int = 12) -> list[list[int]]:
    """Generate, inject a result, continue (as the rollout engine does); every row's generated ids."""
    prompts = [llm.encode_chat(_conv(c)) for c in CLAIMS]
    inject = _ids(llm, "\n<result>\nThe tower stands in Paris.\n</result>\n")
    generated = []
    for _ in range(turns):
        outs = llm.complete_tokens(prompts, SamplingParams(max_tokens=max_tokens, stop=("</question>",)))
        generated.append([o[0].token_ids for o in outs])
        prompts = [p + o[0].token_ids + inject for p, o in zip(prompts, outs)]
    return generated


def _llm(local_llm, model=None, **kw):
    from factrl.llm.local import LocalLLM

    kw.setdefault("precision", local_llm.precision)  # fp32 (the fixture's): exactness tests compare outputs
    return LocalLLM(model_obj=model or local_llm.model, tokenizer=local_llm.tokenizer, model_name="x", **kw)


@pytest.mark.slow  # minutes of real SmolLM2 decoding on 2 cores
def test_prefix_cache_multi_turn_matches_uncached(local_llm):
    cached, plain = _llm(local_llm), _llm(local_llm, prefix_cache_bytes=0)
    assert plain.prefix_cache is None
    assert _multi_turn(cached) == _multi_turn(plain)
    # the shared system prompt ran once and later turns ran only their new tokens
    assert cached.stats["prefilled_tokens"] < 0.5 * cached.stats["prompt_tokens"]
    assert plain.stats["prefilled_tokens"] == plain.stats["prompt_tokens"]
    # a continuation of a cached sequence equals model.generate on the full context
    prompt = cached.encode_chat(_conv(CLAIMS[0]))
    first = cached.complete_tokens([prompt], SamplingParams(max_tokens=6))[0][0].token_ids
    context = prompt + first + _ids(cached, "\n<result>\nok\n</result>\n")
    before = cached.stats["prefilled_tokens"]
    got = cached.complete_tokens([context], SamplingParams(max_tokens=8))[0][0].token_ids
    assert cached.stats["prefilled_tokens"] - before < len(context) - len(prompt) + 2
    ref = cached.model.generate(torch.tensor([context]), max_new_tokens=8, do_sample=False)[0, len(context):]
    assert got == until_eos(ref.tolist(), cached.eos_ids)


@pytest.mark.slow  # minutes of real SmolLM2 decoding on 2 cores
def test_prefix_cache_tiny_budget_stays_bounded_and_exact(local_llm):
    params = SamplingParams(max_tokens=8)
    plain = _llm(local_llm, prefix_cache_bytes=0).chat([Q1, Q2], params)
    one_row = 30 * 2 * 3 * 64 * 4 * 60  # SmolLM2-135M states of ~60 tokens (30 layers, 3 kv heads)
    tiny = _llm(local_llm, prefix_cache_bytes=one_row)
    for _ in range(2):
        out = tiny.chat([Q1, Q2], params)
        assert [c[0].token_ids for c in out] == [c[0].token_ids for c in plain]
        assert 0 < tiny.prefix_cache.nbytes <= one_row and len(tiny.prefix_cache) == 1


def test_prefix_cache_invalidated_by_in_place_weight_update(local_llm):
    import copy

    model = copy.deepcopy(local_llm.model)
    cached, fresh = _llm(local_llm, model), _llm(local_llm, model, prefix_cache_bytes=0)
    params = SamplingParams(max_tokens=10)
    before = cached.chat([Q2], params)[0][0].token_ids
    assert len(cached.prefix_cache) == 1
    torch.manual_seed(0)
    with torch.no_grad():  # what an optimizer step does: update the parameters in place
        for p in model.model.layers[:6].parameters():
            p.add_(torch.randn_like(p) * 0.05)
    reference = fresh.chat([Q2], params)[0][0].token_ids
    assert reference != before  # the update changes the output, so stale states would show
    assert cached.chat([Q2], params)[0][0].token_ids == reference
    # the test can fail: with the version guard off, a second update leaves stale states in use
    stale = _llm(local_llm, model)
    stale.chat([Q2], params)
    with torch.no_grad():
        for p in model.model.layers[:6].parameters():
            p.sub_(torch.randn_like(p) * 0.05)
    stale._check_weights = lambda: None
    assert stale.chat([Q2], params)[0][0].token_ids != fresh.chat([Q2], params)[0][0].token_ids
    cleared = _llm(local_llm, model)
    cleared.chat([Q2], params)
    cleared.clear_prefix_cache()
    assert len(cleared.prefix_cache) == 0


def test_speculative_decoding_changes_no_output(local_llm):
    """Drafts on a repetitive answer are mostly accepted, and greedy and seeded sampled outputs
    equal decoding without speculation, for a batch of one and a mixed batch."""
    # the greedy memo off: the second batch repeats Q2, which the memo would answer without decoding
    spec = _llm(local_llm, prefix_cache_bytes=0, memoize_greedy=False)
    plain = _llm(local_llm, prefix_cache_bytes=0, speculative_tokens=0, memoize_greedy=False)
    greedy = SamplingParams(max_tokens=40)
    for batch in ([Q2], [Q1, Q2]):
        assert [c[0].token_ids for c in spec.chat(batch, greedy)] == [c[0].token_ids for c in plain.chat(batch, greedy)]
    assert spec.stats["accepted_tokens"] > 10 and spec.stats["decode_steps"] < plain.stats["decode_steps"]
    stopped = SamplingParams(max_tokens=40, stop=("7,",))
    assert spec.chat([Q2], stopped)[0][0].token_ids == plain.chat([Q2], stopped)[0][0].token_ids


# ---- seeded sampling does not depend on the batch ------------------------------------------------
def _seeded_alone_and_busy(llm, prompt, params, seed, others):
    """The seeded row's tokens decoded alone, inside a busy batch (``others``: ``(prompt, budget)``
    rows that finish at different steps, so speculation is off while more than
    ``speculate_max_batch`` rows decode and on after), and joining that batch two steps late; and
    the draft tokens verified for it alone."""
    def run(late: bool) -> list[int]:
        rows = [llm.submit(p, replace(params, max_tokens=b), seed=100 + i) for i, (p, b) in enumerate(others)]
        if late:
            llm.step()
            llm.step()
        target = llm.submit(prompt, params, seed=seed)
        while not all(r.done for r in (*rows, target)):
            llm.step()
        return target.completion.token_ids

    drafts = llm.stats["draft_tokens"]
    alone = llm.submit(prompt, params, seed=seed)
    while not alone.done:
        llm.step()
    drafted = llm.stats["draft_tokens"] - drafts
    return alone.completion.token_ids, run(late=False), run(late=True), drafted


def test_seeded_sampling_does_not_depend_on_the_batch():
    """A seeded sampled row decodes the same tokens alone (speculating at every step), in a batch
    too busy to speculate until its other rows finish, and without speculation at all."""
    from tests.rl.tiny import tiny_model, tokenizer

    tok = tokenizer()
    model = tiny_model(tok, vocab_size=24, init_std=1.0)  # 24 ids repeat: n-gram drafts at most steps
    params = SamplingParams(max_tokens=40, temperature=1.0, ignore_eos=True)
    prompt = [5, 6, 7, 8, 5, 6]
    others = [([3 + i, 9, 4 + i, 9], 4 + 3 * i) for i in range(7)]
    spec = LocalLLM(model_obj=model, tokenizer=tok, model_name="tiny", precision="fp32")
    alone, busy, late, drafted = _seeded_alone_and_busy(spec, prompt, params, 11, others)
    assert drafted > 10  # the row alone verified drafts, so the two sampling paths were both taken
    plain = LocalLLM(model_obj=model, tokenizer=tok, model_name="tiny", precision="fp32", speculative_tokens=0)
    assert alone == busy == late == _seeded_alone_and_busy(plain, prompt, params, 11, others)[0]
    assert len(alone) == 40 and len(set(alone)) > 5


@pytest.mark.slow  # ~1 min of SmolLM2 sampling on 2 cores
def test_seeded_sampling_does_not_depend_on_the_batch_smollm2(local_llm):
    params = SamplingParams(max_tokens=40, temperature=0.8, top_p=0.95)
    others = [(local_llm.encode_chat(q), b) for q, b in zip([Q1, Q1, Q2, Q1, Q2, Q1], [4, 8, 12, 16, 20, 24])]
    alone, busy, late, drafted = _seeded_alone_and_busy(local_llm, local_llm.encode_chat(Q2), params, 5, others)
    assert drafted > 0
    assert alone == busy == late


# ---- the engine leaves the trainer's model alone --------------------------------------------------
def _hooks(model) -> list[int]:
    return [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_engine_leaves_the_trainers_model_alone(precision):
    """Constructing and running the engine on a model (as the GRPO recipe does) keeps the model's
    attention implementation, hooks and training forward as they were; the engine still follows
    in-place updates and replaced parameters. bf16 weights under bf16 take the fp32 key/value hooks."""
    import copy

    from tests.rl.tiny import tiny_model, tokenizer

    tok = tokenizer()
    model = tiny_model(tok).to(torch.bfloat16 if precision == "bf16" else torch.float32).train()
    ids = torch.tensor([[5, 17, 300, 42, 9, 1000, 7]])
    attn, hooks, logits = model.config._attn_implementation, _hooks(model), model(ids).logits.detach()
    llm = LocalLLM(model_obj=model, tokenizer=tok, model_name="tiny", precision=precision)
    params = SamplingParams(max_tokens=6, ignore_eos=True)

    def decode(engine) -> list[int]:
        return engine.complete_tokens([[5, 17, 300]], params)[0][0].token_ids

    def reference() -> list[int]:  # a fresh engine on a copy of the weights as they are now
        return decode(LocalLLM(model_obj=copy.deepcopy(model), tokenizer=tok, model_name="ref", precision=precision))

    outputs = [decode(llm)]
    assert model.config._attn_implementation == attn and _hooks(model) == hooks and model.training
    assert torch.equal(model(ids).logits, logits)
    with torch.no_grad():  # an optimizer step (in place)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    outputs.append(decode(llm))
    assert outputs[-1] == reference()
    model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()}, assign=True)
    outputs.append(decode(llm))  # a checkpoint loaded into new tensors
    assert outputs[-1] == reference() and len({tuple(o) for o in outputs}) == 3


def test_watched_ids_report_their_log_probs_at_every_position(local_llm):
    """SamplingParams.watch_ids: at each generated position the log-probs of the watched ids under the
    distribution the token was drawn from (the sampled token's own log-prob where it is watched),
    on the plain and the speculating path alike; the output itself does not change."""
    params = SamplingParams(max_tokens=10)
    plain = local_llm.chat([Q1, Q2], params)
    watch = tuple(dict.fromkeys(t for c in plain for t in c[0].token_ids))  # every id any row emits
    watched = local_llm.chat([Q1, Q2], replace(params, watch_ids=watch))
    for [a], [b] in zip(plain, watched):
        assert b.token_ids == a.token_ids and a.watched_logprobs is None
        assert len(b.watched_logprobs) == len(b.token_ids) and all(len(w) == len(watch) for w in b.watched_logprobs)
        for tok, lp, row in zip(b.token_ids, b.logprobs, b.watched_logprobs):
            assert row[watch.index(tok)] == pytest.approx(lp, abs=1e-5)
            assert max(row) <= 0.0


def _tiny_engine(memoize: bool):
    from tests.rl.tiny import tiny_model, tokenizer

    tok = tokenizer()
    # a small vocabulary and sharp distributions: greedy rows repeat themselves and run long
    return LocalLLM(model_obj=tiny_model(tok, vocab_size=300, init_std=0.2), tokenizer=tok, precision="fp32",
                    model_name="tiny", memoize_greedy=memoize)


def test_greedy_memo_answers_repeated_requests_with_the_same_completion():
    """A greedy request identical to one still decoding, or to one that finished, gets its
    completion without decoding again, and every completion is what a memo-less engine decodes;
    sampled requests and other settings never share."""
    greedy = SamplingParams(max_tokens=8, ignore_eos=True)
    shorter = replace(greedy, max_tokens=5)
    sampled = SamplingParams(max_tokens=8, temperature=1.0, ignore_eos=True)
    prompts = [[5, 6, 7, 8], [9, 10, 11], [5, 6, 7, 8]]
    outcomes = []
    for memoize in (False, True):
        llm = _tiny_engine(memoize)
        first = [llm.submit(p, greedy) for p in prompts]  # the third repeats the first, both waiting
        llm.step()
        during = [llm.submit(prompts[0], greedy), llm.submit(prompts[0], shorter)]  # first is decoding
        samples = [llm.submit(prompts[1], sampled, seed=s) for s in (1, 2)]
        while not all(r.done for r in first + during + samples):
            llm.step()
        after = llm.submit(prompts[1], greedy)  # finished long ago
        while not after.done:
            llm.step()
        outcomes.append(([r.completion.token_ids for r in first + during + [after]],
                         [r.completion.token_ids for r in samples], llm.stats))
    (plain, plain_samples, plain_stats), (memo, memo_samples, memo_stats) = outcomes
    assert memo == plain and memo_samples == plain_samples
    assert plain_stats["memo_hits"] == 0 and memo_stats["memo_hits"] == 3  # 3rd of first, during[0], after
    assert memo_stats["decoded_tokens"] == plain_stats["decoded_tokens"] - 3 * 8


def test_greedy_memo_is_forgotten_on_release_and_weight_change():
    llm = _tiny_engine(True)
    greedy = SamplingParams(max_tokens=4, ignore_eos=True)
    llm.complete_tokens([[5, 6, 7]], greedy)
    llm.complete_tokens([[5, 6, 7]], greedy)
    assert llm.stats["memo_hits"] == 1
    llm.release()
    llm.complete_tokens([[5, 6, 7]], greedy)
    assert llm.stats["memo_hits"] == 1
    with torch.no_grad():
        next(llm.model.parameters()).add_(0.5)  # an optimizer step
    before = llm.complete_tokens([[5, 6, 7]], greedy)
    assert llm.stats["memo_hits"] == 1 and before  # decoded again with the new weights
