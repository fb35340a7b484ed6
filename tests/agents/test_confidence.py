"""The raw confidence of a verifier run: the verdict token's probability, from the engine's log-probs."""

from __future__ import annotations

import math

import pytest
import torch

from factrl.agents.confidence import VerdictWatch, verdict_confidence, verdict_position
from factrl.agents.haris import Haris, default_reasoning_params, default_search_params, reasoning_messages
from factrl.agents.rollout import Trajectory

FORCED = "<think>I know it.</think>\n<verification>\\boxed{"


def _traj(tokenizer, generated: str, prefix: str = "", watched=None, logprobs=None) -> Trajectory:
    pre = tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
    gen = tokenizer(generated, add_special_tokens=False)["input_ids"]
    ids = pre + gen
    return Trajectory(prompt_ids=[1], response_ids=ids, loss_mask=[0] * len(pre) + [1] * len(gen),
                      turns=[], response_text=prefix + generated, num_tool_calls=0, finish_reason="stop",
                      response_logprobs=logprobs(len(ids)) if logprobs else None,
                      response_watched_logprobs=watched(len(ids)) if watched else None)


def test_watch_has_a_first_token_per_verdict_spelling(tokenizer):
    watch = VerdictWatch.for_tokenizer(tokenizer)
    assert watch.usable
    support = tokenizer("\\boxed{Support", add_special_tokens=False)["input_ids"][-1]
    refute = tokenizer("\\boxed{Refute", add_special_tokens=False)["input_ids"][-2]  # Ref + ute
    assert watch.verdicts[watch.ids.index(support)] == "SUPPORTS"
    assert watch.verdicts[watch.ids.index(refute)] == "REFUTES"
    assert len(set(watch.ids)) == len(watch.ids)


def test_position_is_the_last_generated_token_after_boxed(tokenizer):
    t = _traj(tokenizer, "<think>\\boxed{x} no</think><verification>\\boxed{Refute}</verification>")
    j = verdict_position(t.response_ids, t.loss_mask, tokenizer)
    assert tokenizer.decode(t.response_ids[j:j + 2]) == "Refute"
    # an injected "\boxed{" (mask 0) is no decision; the first generated token after it is
    t = _traj(tokenizer, "Support}</verification>", prefix=FORCED)
    j = verdict_position(t.response_ids, t.loss_mask, tokenizer)
    assert t.loss_mask[j] == 1 and tokenizer.decode([t.response_ids[j]]) == "Support"
    t = _traj(tokenizer, "<think>no box here</think>")
    assert verdict_position(t.response_ids, t.loss_mask, tokenizer) is None


def test_confidence_normalises_over_the_verdicts_and_falls_back(tokenizer):
    watch = VerdictWatch.for_tokenizer(tokenizer)
    # at every position: p(Support-ish) = 0.3 spread, p(Refute-ish) = 0.1 spread -> 0.75 / 0.25
    support = [v == "SUPPORTS" for v in watch.verdicts]
    ns, nr = sum(support), len(support) - sum(support)
    row = [math.log(0.3 / ns) if s else math.log(0.1 / nr) for s in support]
    watched = lambda n: [list(row)] * n  # noqa: E731
    t = _traj(tokenizer, "Support}</verification>", prefix=FORCED, watched=watched)
    assert verdict_confidence(t, "SUPPORTS", tokenizer, watch) == (pytest.approx(0.75), "verdict_tokens")
    assert verdict_confidence(t, "REFUTES", tokenizer, watch) == (pytest.approx(0.25), "verdict_tokens")
    assert verdict_confidence(t, None, tokenizer, watch) == (0.0, "no_verdict")
    # no watched log-probs: the chosen token's probability; none at all: uninformative 0.5
    t = _traj(tokenizer, "Support}</verification>", prefix=FORCED, logprobs=lambda n: [math.log(0.6)] * n)
    assert verdict_confidence(t, "SUPPORTS", tokenizer, watch) == (pytest.approx(0.6), "chosen_token")
    t = _traj(tokenizer, "Support}</verification>", prefix=FORCED)
    assert verdict_confidence(t, "SUPPORTS", tokenizer, watch) == (0.5, "uninformative")


def _reference_confidence(llm, claim: str, verdict: str, watch: VerdictWatch) -> float:
    """The same probability from a plain transformers forward over prompt + forced prefix."""
    ids = llm.encode_chat(reasoning_messages(claim)) + llm.tokenizer(FORCED, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = llm.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    probs = torch.softmax(logits, -1)[list(watch.ids)].tolist()
    return sum(p for p, v in zip(probs, watch.verdicts) if v == verdict) / sum(probs)


def test_real_smollm2_confidence_is_the_verdict_token_probability(local_llm, demo_world, demo_retriever):
    """SmolLM2, batched: the forced-verdict rollouts' raw confidence is the normalised verdict-token
    probability that an independent forward pass gives, and it does not depend on the batch."""
    claims = [c["claim"] for c in demo_world[0][:2]]
    params = default_reasoning_params(max_turns=0, max_new_tokens=4, response_prefix=FORCED)
    haris = Haris(local_llm, demo_retriever, reason_params=params,
                  search_params=default_search_params(max_turns=1, max_new_tokens=8))
    batched = haris.verify(claims)
    watch = VerdictWatch.for_tokenizer(local_llm.tokenizer)
    for res in batched:
        assert res.verdict in ("SUPPORTS", "REFUTES"), res.trajectory.response_text
        assert res.confidence_source == "verdict_tokens"
        assert 0.0 <= res.raw_confidence <= 1.0
    first = batched[0]
    assert first.raw_confidence == pytest.approx(_reference_confidence(local_llm, claims[0], first.verdict, watch),
                                                 abs=2e-3)
    [alone] = haris.verify(claims[1:])
    assert alone.raw_confidence == pytest.approx(batched[1].raw_confidence, abs=1e-4)
