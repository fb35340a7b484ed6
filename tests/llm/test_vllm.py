"""``factrl serve-agent``: the ``vllm serve`` command it prints (and runs where vLLM is installed)."""

from __future__ import annotations

import shlex

from factrl.llm import vllm


def test_serve_agent_prints_the_vllm_command(tmp_path, capsys, monkeypatch):
    ckpt = tmp_path / "models" / "search_1"
    ckpt.mkdir(parents=True)
    assert vllm.main([str(ckpt), "--port", "8002", "--max-model-len", "8192", "--dry-run", "--enforce-eager"]) == 0
    command, client = capsys.readouterr().out.splitlines()
    assert shlex.split(command) == ["vllm", "serve", str(ckpt), "--served-model-name", str(ckpt), "--host",
                                    "127.0.0.1", "--port", "8002", "--tensor-parallel-size", "1",
                                    "--generation-config", "vllm", "--max-model-len", "8192", "--enforce-eager"]
    assert client == f"# clients: openai:{ckpt}@http://127.0.0.1:8002/v1"
    monkeypatch.setattr(vllm.shutil, "which", lambda name: None)  # this CPU machine: no vLLM
    assert vllm.main([str(ckpt)]) == 2
    assert "pip install 'factrl[gpu]'" in capsys.readouterr().err


def test_hub_ids_are_served_under_their_own_name():
    assert vllm.served_name("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"
