"""A complete warm-start fine-tuning run on the tiny random Llama (tests/rl/tiny.py).

Used by the SFT tests in-process and, for the kill/resume test, as a script:
``python -m tests.rl.tiny_sft OUT_DIR [KILL_AFTER_STEP]`` trains and, when asked, SIGKILLs itself
at the end of that optimizer step (after the checkpoint before it, before any of its own), as a
crash would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys

from transformers import TrainerCallback

from factrl.rl.params import SFTParams
from factrl.rl.sft import IGNORE_INDEX, SFTResult, train_sft
from tests.rl.tiny import tiny_model, tokenizer

TINY_SFT = SFTParams(epochs=2, lr=1e-3, lr_scheduler="linear", warmup_ratio=0.0, batch_size=3, grad_accum=2,
                     checkpoint_every=2, keep_checkpoints=2)  # 12 examples: 2 steps per epoch, 4 steps


def examples(tok) -> list[dict]:
    out = []
    for i in range(12):
        prompt = tok(f"Claim {i}:", add_special_tokens=False)["input_ids"]
        answer = tok(" supported" if i % 2 else " refuted because of fact " + str(i), add_special_tokens=False)["input_ids"]
        out.append({"input_ids": prompt + answer, "labels": [IGNORE_INDEX] * len(prompt) + answer})
    return out


class KillAt(TrainerCallback):
    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def run(out_dir: str, kill_after: int | None = None) -> tuple[SFTResult, object]:
    tok = tokenizer()
    model = tiny_model(tok)
    result = train_sft(model, tok, examples(tok), TINY_SFT, out_dir, seed=3, precision="fp32",
                       callbacks=[KillAt(kill_after)])
    model.save_pretrained(os.path.join(out_dir, "final"))
    with open(os.path.join(out_dir, "result.json"), "w", encoding="utf-8") as f:
        json.dump({k: v for k, v in dataclasses.asdict(result).items() if k != "losses"}, f)
    return result, model


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
