"""In-process LLM backend on transformers: batched, left-padded generation with a KV cache.

The engine runs its own decode loop instead of ``model.generate`` so that it can stop each row as
soon as one of the request's stop strings appears in its decoded text (the rollout engine stops on
closing tags such as ``</search>``), and return the exact generated token ids the policy produced.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import torch

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


def _sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Pick one token per row: argmax when greedy, else temperature + nucleus sampling."""
    if params.temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token always survives)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_p, 1, generator=generator)
        return idx.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class LocalLLM:
    """The :class:`~factrl.llm.base.LLM` protocol on a local Hugging Face causal LM.

    ``model`` is an embedded name, a Hugging Face directory or a hub id; an already-loaded
    ``(model_obj, tokenizer)`` pair may be passed instead (tests and trainers share weights).
    ``bf16`` runs the forward passes under CPU bf16 autocast. ``max_batch`` bounds the rows decoded
    together (after expanding ``n``), which bounds memory.
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
    ):
        if model_obj is None or tokenizer is None:
            model_obj, tokenizer = load_model_and_tokenizer(model)
        self.model = model_obj
        self.tokenizer = tokenizer
        self.model_name = model_name or model
        self.bf16 = bf16
        self.max_batch = max_batch
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        # one decode at a time: the model is shared and torch already uses every core
        self._lock = threading.Lock()

    def _eos_ids(self) -> set[int]:
        ids = set()
        for src in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(src, int):
                ids.add(src)
            elif src:
                ids.update(src)
        return ids

    # ---- protocol -------------------------------------------------------------------------
    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of a conversation rendered by the tokenizer's chat template, ready to continue."""
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat(self, conversations: Sequence[Sequence[Message]], params: SamplingParams) -> list[list[Completion]]:
        return self.complete_tokens([self.encode_chat(c) for c in conversations], params)

    def complete_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        rows = [list(p) for p in prompts for _ in range(params.n)]
        flat: list[Completion] = []
        generator = None
        if params.seed is not None:
            generator = torch.Generator().manual_seed(params.seed)
        with self._lock:
            for start in range(0, len(rows), self.max_batch):
                flat.extend(self._generate_batch(rows[start : start + self.max_batch], params, generator))
        return [flat[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    # ---- engine ---------------------------------------------------------------------------
    def _autocast(self):
        if self.bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _generate_batch(
        self, rows: list[list[int]], params: SamplingParams, generator: torch.Generator | None
    ) -> list[Completion]:
        width = max(len(r) for r in rows)
        # left padding keeps every row's last prompt token in the final column
        input_ids = torch.tensor([[self.pad_id] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        # positions count real tokens only, so padded rows see the same positions as unpadded
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out: list[list[int]] = [[] for _ in rows]
        reasons = ["length"] * len(rows)
        alive = list(range(len(rows)))  # batch row b decodes original row alive[b]
        window = self._stop_window(params.stop)
        past = None
        step_ids = input_ids
        with torch.inference_mode(), self._autocast():
            for _ in range(params.max_tokens):
                res = self.model(
                    input_ids=step_ids, attention_mask=mask, position_ids=positions,
                    past_key_values=past, use_cache=True,
                    logits_to_keep=1,  # only the last position is sampled: skip the lm_head elsewhere
                )
                past = res.past_key_values
                nxt = _sample(res.logits[:, -1, :], params, generator).tolist()
                keep = [b for b, i in enumerate(alive) if not self._advance(i, nxt[b], out, reasons, params, window)]
                if not keep:
                    break
                if len(keep) < len(alive):
                    # retire finished rows from the batch and the KV cache: no compute is spent on them
                    idx = torch.tensor(keep)
                    past.batch_select_indices(idx)
                    mask, positions = mask[idx], positions[idx]
                    alive = [alive[b] for b in keep]
                step_ids = torch.tensor([[nxt[b]] for b in keep])
                mask = torch.cat([mask, mask.new_ones(len(keep), 1)], dim=-1)
                positions = positions[:, -1:] + 1
        texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in out]
        if params.stop:
            texts = [trim_at_stop(t, params.stop, params.include_stop)[0] for t in texts]
        return [
            Completion(
                text=texts[i], token_ids=out[i], finish_reason=reasons[i],
                prompt_tokens=len(rows[i]), completion_tokens=len(out[i]),
            )
            for i in range(len(rows))
        ]

    @staticmethod
    def _stop_window(stop: Sequence[str]) -> int:
        """Tokens to decode when looking for a stop string that the newest token may complete.

        Every non-special token decodes to at least one UTF-8 byte, so a stop string of ``k`` bytes
        spans at most ``k`` tokens; one more covers a token that starts mid-character.
        """
        return max((len(s.encode()) for s in stop), default=0) + 2

    def _advance(self, i: int, tok: int, out, reasons, params: SamplingParams, window: int) -> bool:
        """Append row ``i``'s sampled token; return whether the row is finished (EOS or stop string).

        Stop strings are searched in the decoded tail of the output only (a window covering the
        longest stop string), so the per-token cost does not grow with the output length; the text
        before the tail was already searched at earlier steps.
        """
        if tok in self.eos_ids:
            reasons[i] = "stop"
            return True
        out[i].append(tok)
        if params.stop:
            tail = self.tokenizer.decode(out[i][-window:], skip_special_tokens=True)
            if any(s and s in tail for s in params.stop):
                reasons[i] = "stop"
                return True
        return False
