"""LocalLLM: padding-invariant greedy decoding, stop strings, n samples and seeds."""

import torch

from factrl.llm.base import LLM, SamplingParams
from factrl.llm.local import trim_at_stop

Q1 = [{"role": "user", "content": "What is the capital of France?"}]
Q2 = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]


def test_trim_at_stop():
    assert trim_at_stop("a</s>b</x>", ("</x>", "</s>"), True) == ("a</s>", True)
    assert trim_at_stop("a</s>b", ("</s>",), False) == ("a", True)
    assert trim_at_stop("abc", ("z",), True) == ("abc", False)


def test_protocol_and_batch_matches_generate(local_llm):
    assert isinstance(local_llm, LLM)
    params = SamplingParams(max_tokens=12)
    batched = local_llm.chat([Q1, Q2], params)
    ids = local_llm.encode_chat(Q2)
    ref = local_llm.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):]
    ref = [t for t in ref.tolist() if t not in local_llm.eos_ids]
    assert batched[1][0].token_ids == ref  # left padding does not change greedy output
    assert batched[1][0].text == local_llm.tokenizer.decode(ref, skip_special_tokens=True)
    assert "Paris" in batched[0][0].text and batched[0][0].finish_reason == "stop"
    solo = local_llm.complete_tokens([ids], params)[0][0]
    assert solo.token_ids == batched[1][0].token_ids and solo.prompt_tokens == len(ids)


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


def test_bf16_autocast_runs(local_llm):
    from factrl.llm.local import LocalLLM

    bf = LocalLLM(model_obj=local_llm.model, tokenizer=local_llm.tokenizer, bf16=True, model_name="x")
    out = bf.chat([Q1], SamplingParams(max_tokens=6))[0][0]
    assert out.completion_tokens > 0 and out.text


def test_finished_rows_leave_the_batch(local_llm):
    """A row retired early (stop string) does not change the rows still decoding."""
    params = SamplingParams(max_tokens=10, stop=("1.",))
    both = local_llm.chat([Q2, Q1], params)
    assert both[0][0].text == "1." and both[0][0].finish_reason == "stop"
    assert both[1][0].completion_tokens > both[0][0].completion_tokens
    assert both[1][0].token_ids == local_llm.chat([Q1], params)[0][0].token_ids


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
    llm = LocalLLM(directory)
    assert llm.model_name == directory
    params = SamplingParams(max_tokens=8)
    assert llm.chat([Q1], params)[0][0].token_ids == local_llm.chat([Q1], params)[0][0].token_ids


def test_unknown_models_fail_clearly(tmp_path, monkeypatch):
    import pytest

    from factrl.llm.local import LocalLLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match=r"'no-such-org/no-such-model'.*hub id.*HF_HUB_OFFLINE"):
        LocalLLM("no-such-org/no-such-model")
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        LocalLLM(str(tmp_path / "missing" / "model"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        LocalLLM(str(tmp_path))
