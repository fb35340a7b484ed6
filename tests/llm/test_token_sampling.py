"""The engine's token picking (``factrl.llm.token_sampling``): n-gram drafts and their verification."""

import torch

from factrl.llm.base import SamplingParams
from factrl.llm.token_sampling import ngram_draft, verify_draft


def test_ngram_draft_prefers_the_longest_recent_match():
    assert ngram_draft([1, 2, 3, 9, 1, 2, 3, 7, 5, 2, 3], k=2) == [7, 5]  # "2 3" last seen before 7 5
    assert ngram_draft([5, 6, 7, 5, 6], k=3) == [7, 5, 6]
    assert ngram_draft([1, 2, 3], k=3) == []  # the last token never occurred before
    assert ngram_draft([4, 4], k=0) == []


def test_verify_draft_keeps_the_target_distribution():
    """Speculative sampling with a point-mass draft: the first emitted token follows p exactly."""
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    logits = torch.log(p.clamp_min(1e-30))[None].repeat(2, 1)
    sampled = SamplingParams(temperature=1.0)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(6000):
        tokens, accepted = verify_draft(logits, [1], sampled, g)
        counts[tokens[0]] += 1
        assert accepted == (tokens[0] == 1) and len(tokens) == 1 + accepted
    assert torch.allclose(counts / counts.sum(), p, atol=0.02)
    # greedy: accept while the draft equals the argmax, then emit the argmax
    assert verify_draft(logits, [0], SamplingParams(), None) == ([0, 0], 1)
    assert verify_draft(logits, [2], SamplingParams(), None) == ([0], 0)
