"""How the in-process engine (``factrl.llm.local``) picks tokens: sampling, per-row seeds, speculation.

:func:`sample_tokens` picks one token per row (argmax when greedy, else temperature and nucleus
sampling from the row's own generator); :func:`row_seed` gives each row of a seeded call a seed of
its own, so a row's sample does not depend on the rows decoding beside it. While few rows decode,
the engine drafts tokens by prompt lookup (:func:`ngram_draft`, no model call) and
:func:`verify_draft` keeps the draft tokens the model would have picked itself, drawing from each
row's generator exactly as a plain decode step does: the output is the same with or without
speculation. :func:`emitted_logprobs` scores what was picked, as the trainer will.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from factrl.llm.base import SamplingParams


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


def sample_tokens(logits: torch.Tensor, params: SamplingParams,
                  generator: torch.Generator | None) -> torch.Tensor:
    """Pick one token per row of ``logits`` ``[B, V]``: argmax when greedy, else sample."""
    if params.greedy:
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
    Each position picks its token exactly as a plain decode step would (:func:`sample_tokens`: the
    argmax, or one draw from the row's sampler); draft tokens are accepted while they equal the
    pick, and the first pick that differs (or the one after a fully accepted draft) is emitted too.

    So every emitted token costs the same draws of ``generator`` as on the plain path, and a seeded
    row emits the same tokens whether it speculated or not, i.e. whatever the number of rows
    decoding beside it. For sampling this is still exact speculative sampling with a point-mass
    draft ``x``: ``x`` is accepted with probability ``p(x)``, and a rejection emits a sample of
    ``p`` given that it is not ``x``, which is ``p`` without ``x``, renormalised (Leviathan et al.).
    """
    def pick(j: int) -> int:
        return int(sample_tokens(logits[j][None], params, generator)[0])

    out: list[int] = []
    for j, x in enumerate(draft):
        out.append(pick(j))
        if out[j] != x:
            return out, j
    return out + [pick(len(draft))], len(draft)


def row_seed(seed: int, row: int) -> int:
    """The sampler seed of row ``row`` of a call seeded with ``seed``: distinct per row, so the
    ``n`` samples of one prompt differ, and independent of the batch the row decodes in."""
    return (seed * 1_000_003 + row) % (2**63)


def emitted_logprobs(sources: Sequence[torch.Tensor], emitted: Sequence[Sequence[int]],
                     params: Sequence[SamplingParams]) -> tuple[list[list[float]], list[list[list[float]] | None]]:
    """The log-prob of every emitted token, per row, and, for rows whose params watch ids
    (``SamplingParams.watch_ids``), the log-probs of those ids at each emitted position (None for
    the other rows).

    Row ``i``'s token ``j`` was sampled from ``sources[i][j]`` (``[>= len(emitted[i]), V]`` logits: a
    speculating row's draft positions, else one row), at the row's temperature (1 when greedy), as
    the trainer scores it. One batched log-softmax for the whole step; watched ids are a gather from
    it (a few columns: free next to the softmax).
    """
    rows = torch.cat([src[: len(toks)] for src, toks in zip(sources, emitted)]).float()
    temps = [p.temperature if p.temperature > 0 else 1.0 for p in params]
    temp = torch.tensor([t for t, toks in zip(temps, emitted) for _ in toks], device=rows.device)
    picked = torch.tensor([t for toks in emitted for t in toks], device=rows.device)
    logp = torch.log_softmax(rows / temp[:, None], dim=-1)
    flat = logp.gather(1, picked[:, None])[:, 0].tolist()
    out, watched, start = [], [], 0
    for p, toks in zip(params, emitted):
        out.append(flat[start : start + len(toks)])
        ids = p.watch_ids
        watched.append(logp[start : start + len(toks), list(ids)].tolist() if ids else None)
        start += len(toks)
    return out, watched
