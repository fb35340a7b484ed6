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


def test_an_llm_spec_names_its_endpoint_wherever_a_model_is_opened():
    """``openai:MODEL@URL`` as the model of any open_llm caller (the warmup / synthesize teacher, an
    SC-MAKS pool member, the served search agent) opens that endpoint, token-level when the served
    model's tokenizer loads; the backend named beside it does not matter."""
    from factrl.recipes.scmaks import open_pool
    from factrl.recipes.scmaks_params import MemberParams
    from factrl.recipes.teacher import open_teacher
    from factrl.recipes.teacher_params import TeacherParams

    url = "http://127.0.0.1:9/v1"
    with open_llm(f"openai:smollm2-135m@{url}", "local") as llm:
        assert type(llm).__name__ == "OpenAICompatLLM" and (llm.model_name, llm.base_url) == ("smollm2-135m", url)
        assert llm.tokenizer is not None  # /v1/completions with token ids, as the local engine continues
    with open_teacher(TeacherParams(backend="server", model=f"openai:gpt-4o-mini@{url}")) as teacher:
        assert (teacher.model_name, teacher.base_url, teacher.tokenizer) == ("gpt-4o-mini", url, None)
    members = [MemberParams(name="Ada", system="rag", model=f"openai:smollm2-135m@{url}"),
               MemberParams(name="Ben", system="rag", model="smollm2-135m", backend="openai", base_url=url)]
    with open_pool(members) as pool:
        inner = [c.inner for c in pool.counters]
        assert [(x.model_name, x.base_url) for x in inner] == [("smollm2-135m", url)] * 2
