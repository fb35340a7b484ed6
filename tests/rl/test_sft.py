"""The warm start's fine-tuning (transformers' Trainer with the GRPO loss mask): padding, resuming
after a kill, and a real SmolLM2 run whose loss falls and whose checkpoint keeps its prompt style."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from factrl.rl.sft import CURVES_DIR, IGNORE_INDEX, collate, masked_lm_loss, shared_prefix_length
from factrl.rl.step_log import read_history, read_summary
from tests.rl.tiny_sft import examples, run

REPO = Path(__file__).resolve().parents[2]


def test_collate_right_pads_inputs_and_ignores_the_padding():
    batch = collate([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [8], "labels": [8]}], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]


def test_masked_lm_loss_equals_the_models_own_loss(tiny, tok):
    """Logits only where a trained token is predicted: the same token-mean loss as the full forward."""
    batch = collate(examples(tok)[:4], pad_id=tok.pad_token_id)
    with torch.no_grad():
        full = tiny(**batch).loss
        ours = masked_lm_loss(tiny, batch)
    assert torch.allclose(ours, full, atol=1e-5), (float(ours), float(full))
    n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
    assert torch.allclose(masked_lm_loss(tiny, batch, num_items=2 * n), full / 2, atol=1e-5)


def _chat_examples(tok) -> list[dict]:
    """Warm-start rows as the agents' are: one system prompt, a claim each, the agent's turn trained."""
    from factrl.llm.tokens import encode_chat

    system = {"role": "system", "content": "You verify claims by asking one question at a time. " * 3}
    rows = []
    for i, (claim, answer) in enumerate([("Ada was born in Paris.", "<question>Where was Ada born?</question>"),
                                         ("The bridge is older than the tower.", "<verdict>refuted</verdict>"),
                                         ("Bo wrote two novels in 1990 and 1992.", "<question>What did Bo write?</question>")]):
        prompt = encode_chat(tok, [system, {"role": "user", "content": claim}])
        reply = tok(answer + f" ({i})", add_special_tokens=False)["input_ids"]
        rows.append({"input_ids": list(prompt) + reply, "labels": [IGNORE_INDEX] * len(prompt) + reply})
    return rows


def test_a_shared_prompt_runs_once_with_the_same_loss_and_gradients(tok):
    """shared_prefix: the system prompt every row starts with is forwarded once (its key/values repeated
    for the rows), giving the plain layout's loss and gradients to fp32 rounding on real SmolLM2 chat
    rows, right-padded to different lengths."""
    from tests.rl.tiny import tiny_model

    batch = collate(_chat_examples(tok), pad_id=tok.pad_token_id)
    shared = shared_prefix_length(batch["input_ids"], batch["labels"])
    assert shared > 16 and (batch["input_ids"][:, :shared] == batch["input_ids"][:1, :shared]).all()
    results = []
    for on in (False, True):
        model = tiny_model(tok, seed=5)
        forwarded: list[int] = []
        model.get_input_embeddings().register_forward_pre_hook(
            lambda _m, args, seen=forwarded: seen.append(args[0].numel()))
        loss = masked_lm_loss(model, batch, shared_prefix=on)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}, sum(forwarded)))
    (plain_loss, plain_grads, plain_tokens), (loss, grads, tokens) = results
    torch.testing.assert_close(loss, plain_loss, rtol=1e-5, atol=1e-6)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    b, t = batch["input_ids"].shape
    assert plain_tokens == b * t and tokens == shared + b * (t - shared)


def test_the_shared_prefix_stops_before_any_trained_token():
    ids = torch.tensor([[1] * 20 + [2, 3], [1] * 20 + [2, 4]])
    no_labels = torch.full_like(ids, IGNORE_INDEX)
    labels = no_labels.clone()
    labels[:, 18:] = ids[:, 18:]  # token 18 is trained: position 17 predicts it
    assert shared_prefix_length(ids, no_labels) == 21  # rows differ at 21
    assert shared_prefix_length(ids, labels) == 17
    assert shared_prefix_length(ids, labels, min_tokens=18) == 0  # too short to be worth a pass
    assert shared_prefix_length(ids[:1], no_labels[:1]) == 0  # one row: nothing to share


def test_length_grouped_batches_come_in_a_random_order():
    """The warm start's batches group similar lengths as transformers' do, but not in its longest-first
    sweep: with references whose length grows with the claim's hops, that sweep trained runs of
    4-hop batches, then 3-hop, then 2-hop (every mega-batch of up to 50 batches sorted)."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from factrl.rl.sft import _shuffled_length_grouped_sampler

    lengths = [400 + i % 7 for i in range(210)] + [320 + i % 7 for i in range(210)] + [250 + i % 7 for i in range(210)]
    batch = 8
    ours = list(_shuffled_length_grouped_sampler()(batch, lengths=lengths, generator=torch.Generator().manual_seed(0)))
    theirs = get_length_grouped_indices(lengths, batch, generator=torch.Generator().manual_seed(0))
    assert sorted(ours) == list(range(len(lengths)))  # an epoch: every example once

    def batches(order):
        return [order[i:i + batch] for i in range(0, len(order), batch)]

    # the same groups, each whole where the data loader cuts the order (630 = 78 x 8 + 6: the short one last)
    assert sorted(map(sorted, batches(ours))) == sorted(map(sorted, batches(theirs)))
    assert len(batches(ours)[-1]) == 6
    first_megabatch = len(lengths) // (batch * 4)  # transformers' mega-batch: 19 batches here
    sweep = [max(lengths[i] for i in b) for b in batches(theirs)[1:first_megabatch]]
    assert sweep == sorted(sweep, reverse=True)  # what the random order replaces
    shuffled = [max(lengths[i] for i in b) for b in batches(ours)[1:first_megabatch]]
    assert shuffled != sorted(shuffled, reverse=True)
    assert len({v // 50 for v in shuffled}) == 3  # all three lengths in the first 18 steps


def _curve_files(out_dir: Path) -> dict[str, str]:
    """The text of each curve file of a run's DVCLive directory, and its summary."""
    live = out_dir / CURVES_DIR
    return {p.relative_to(live).as_posix(): p.read_text() for p in sorted(live.rglob("*")) if p.is_file()}


def _final(out_dir: Path) -> dict:
    return load_file(str(out_dir / "final" / "model.safetensors"))


def test_resume_after_kill_equals_uninterrupted_run(tmp_path, tok):
    straight = tmp_path / "straight"
    result, _ = run(str(straight))
    assert result.steps == 4 and result.resumed_from is None and len(result.losses) == 4
    assert result.trained_tokens == sum(sum(x != IGNORE_INDEX for x in e["labels"]) for e in examples(tok))
    assert result.tokens == 2 * sum(len(e["input_ids"]) for e in examples(tok))  # 2 epochs, padding not counted

    killed = tmp_path / "killed"
    # the worktree's src first, so the subprocess imports this factrl, not an installed one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    cmd = [sys.executable, "-m", "tests.rl.tiny_sft", str(killed)]
    first = subprocess.run([*cmd, "3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == -9, first.stderr[-2000:]  # SIGKILL at the end of step 3, checkpoint at 2
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-2"]
    # logged live through DVCLive, step by step: steps 1 and 2 (killed before step 3's log)
    assert [r["step"] for r in read_history(killed / CURVES_DIR)] == [1, 2]
    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads((killed / "result.json").read_text())["resumed_from"] == 2
    a, b = _final(straight), _final(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _curve_files(killed) == _curve_files(straight)  # the curve continues
    assert [r["step"] for r in read_history(straight / CURVES_DIR)] == [1, 2, 3, 4]
    assert read_summary(killed / CURVES_DIR)["loss"] == result.final_loss


def test_a_run_killed_after_its_last_checkpoint_reruns_to_the_same_model(tmp_path, tok):
    """Killed after the final checkpoint but before the caller saved the model (warmup killed late,
    line 34 of 39): the rerun resumes from that checkpoint and must train nothing more. transformers
    5.23 trains one step past ``max_steps`` when the run ends mid-epoch (here step 1 of 6 per epoch),
    which gave the warm start a different search agent, loss curve and summary."""
    import dataclasses

    from factrl.rl.sft import train_sft
    from tests.rl.tiny import tiny_model
    from tests.rl.tiny_sft import TINY_SFT

    cfg = dataclasses.replace(TINY_SFT, max_steps=1, batch_size=2, grad_accum=1, checkpoint_every=48, keep_checkpoints=1)
    straight = tiny_model(tok)
    first = train_sft(straight, tok, examples(tok), cfg, tmp_path, seed=0, precision="fp32")
    curve = _curve_files(tmp_path)
    assert first.steps == 1 and [p.name for p in tmp_path.glob("checkpoint-*")] == ["checkpoint-1"]

    resumed = tiny_model(tok)  # a fresh process's model: the base weights again
    again = train_sft(resumed, tok, examples(tok), cfg, tmp_path, seed=0, precision="fp32")
    assert again.resumed_from == 1 and again.steps == 1, again
    assert (again.final_loss, again.tokens) == (first.final_loss, first.tokens)
    assert _curve_files(tmp_path) == curve
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def _mean_loss(model, exs: list[dict], pad_id: int) -> float:
    """Token-mean loss of ``model`` over the trained tokens of ``exs``."""
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(exs), 4):
            batch = collate(exs[i:i + 4], pad_id)
            n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
            total += float(model(**batch).loss) * n
            count += n
    return total / count


@pytest.mark.slow  # a few minutes of SmolLM2 fine-tuning in fp32 on 2 cores
def test_warm_start_on_smollm2_lowers_the_loss_and_keeps_the_prompt_style(tmp_path):
    import copy

    import pyarrow.parquet as pq

    from factrl.agents.haris import prompt_style
    from factrl.agents.tools import RetrieverTool
    from factrl.data.params import WorldParams
    from factrl.data.reference import world_references
    from factrl.data.world import write_world
    from factrl.llm.local import LocalLLM
    from factrl.llm.models import load_model_and_tokenizer
    from factrl.recipes.warmup import agent_examples, warm_agent
    from factrl.recipes.warmup_params import WarmupParams
    from factrl.retrieval.index import Retriever, build_index
    from factrl.rl.params import SFTParams

    write_world(WorldParams(seed=9, num_passages=200, num_claims=16, hops=(2,)), tmp_path / "p.parquet",
                tmp_path / "c.parquet")
    build_index(tmp_path / "p.parquet", tmp_path / "index", embedder=None)
    kept, _ = world_references(pq.read_table(tmp_path / "c.parquet").to_pylist(),
                               RetrieverTool(Retriever(tmp_path / "index", mode="bm25"), k=3))
    params = WarmupParams(enabled=True, precision="fp32", seed=1, reasoning=SFTParams(
        max_steps=6, lr=2e-4, batch_size=4, warmup_ratio=0.0, lr_scheduler="constant", checkpoint_every=3))
    model, tok = load_model_and_tokenizer("smollm2-135m")
    before = copy.deepcopy(model)
    exs, left_out = agent_examples(kept, "reasoning", tok, params)
    assert len(exs) == 16 and not left_out
    result, _ = warm_agent("reasoning", kept, params, state_dir=tmp_path / "state", out_model=tmp_path / "reason_0",
                           curves_dir=tmp_path / "loss", model_tokenizer=(model, tok))
    assert result.steps == 6 and result.final_loss < result.first_loss
    assert [r["loss"] for r in read_history(tmp_path / "loss")] == [r["loss"] for r in result.losses]
    pad = tok.pad_token_id
    loss_before, loss_after = _mean_loss(before, exs, pad), _mean_loss(model, exs, pad)
    assert loss_after < 0.7 * loss_before, (loss_before, loss_after)
    assert prompt_style(LocalLLM(str(tmp_path / "reason_0"))) == "short"  # every later stage prompts it short
    assert not (tmp_path / "state" / "trainer").exists()  # checkpoints dropped once the model is saved


def test_a_checkpoint_cut_short_by_a_kill_is_skipped_and_removed(tmp_path):
    """A kill while the Trainer writes checkpoint-2 leaves it without trainer_state.json (written
    last): resuming must take checkpoint-1, and checkpoint-2 goes (else the rerun fails on the
    missing file: found by killing the warmup stage late)."""
    import json

    from factrl.rl.sft import last_complete_checkpoint

    done, cut, garbled = tmp_path / "checkpoint-1", tmp_path / "checkpoint-2", tmp_path / "checkpoint-3"
    for d in (done, cut, garbled):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"w")
    (done / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    (garbled / "trainer_state.json").write_text('{"global_st')
    assert last_complete_checkpoint(tmp_path) == str(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1"]
    assert last_complete_checkpoint(tmp_path / "missing") is None
