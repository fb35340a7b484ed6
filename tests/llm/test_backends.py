"""open_llm: every backend name the params accept opens the right client."""

import pytest

from factrl.llm.backends import open_llm


@pytest.mark.parametrize("backend", ["local", "inprocess"])  # train.reasoning.search_backend says inprocess
def test_in_process_backends_load_the_model(tmp_path, backend):
    from tests.rl.tiny import tiny_model, tokenizer

    tok = tokenizer()
    tiny_model(tok).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with open_llm(str(tmp_path), backend) as llm:
        assert type(llm).__name__ == "LocalLLM"


def test_openai_backend_reads_its_key_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("FACTRL_TEST_KEY", "sk-x")
    with open_llm("gpt-4o", "openai", base_url="http://127.0.0.1:9/v1", api_key_env="FACTRL_TEST_KEY") as llm:
        assert type(llm).__name__ == "OpenAICompatLLM" and llm.base_url == "http://127.0.0.1:9/v1"
        assert "sk-x" not in repr(llm)


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown LLM backend 'vllm'"), open_llm("m", "vllm"):
        pass
