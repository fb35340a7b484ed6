"""``factrl evaluate --backend openai``: every agent and baseline on an OpenAI-compatible endpoint
(a real ``factrl serve-llm``) gives the in-process run's verdicts (greedy), and an endpoint that
fails a third of its requests (500, 429, a malformed body) loses no claim."""

from __future__ import annotations

import itertools

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from factrl.eval import cli, runner
from factrl.llm.backends import LLMSpec, parse_spec, route
from factrl.llm.serve import create_app
from factrl.testing.servers import running_app

SYSTEMS = ["haris", "single_agent", "rag", "decompose_verify"]


def fault_proxy(inner) -> FastAPI:
    """Forwards every request to ``inner``, except that every third one fails on its way."""
    app = FastAPI()
    count = itertools.count(1)
    failures = itertools.cycle([JSONResponse({"error": {"message": "boom"}}, 500),
                                JSONResponse({"error": {"message": "slow down"}}, 429, headers={"Retry-After": "0"}),
                                Response("{not json", media_type="application/json")])
    app.state.failed = 0

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def forward(path: str, request: Request):
        if request.method == "POST" and next(count) % 3 == 0:
            app.state.failed += 1
            return next(failures)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=inner), base_url="http://inner") as client:
            resp = await client.request(request.method, f"/{path}", content=await request.body(),
                                        headers={"content-type": "application/json"})
        return Response(resp.content, resp.status_code, media_type="application/json")

    return app


def test_llm_specs_parse_and_route():
    assert parse_spec("models/reason_1") == LLMSpec("local", "models/reason_1")
    assert parse_spec("openai:gpt-4o-mini") == LLMSpec("openai", "gpt-4o-mini")
    assert parse_spec("openai:/m/search_1@http://h:8001/v1") == LLMSpec("openai", "/m/search_1", "http://h:8001/v1")
    assert str(parse_spec("openai:/m/search_1@http://h:8001/v1")) == "openai:/m/search_1@http://h:8001/v1"
    assert route("smollm2-135m", "openai", "http://h/v1") == "openai:smollm2-135m@http://h/v1"
    assert route("smollm2-135m", "openai", "http://h/v1", "served") == "openai:served@http://h/v1"
    assert route("openai:gpt-4o", "openai", "http://h/v1") == "openai:gpt-4o"  # explicit specs stay
    assert route("smollm2-135m") == "smollm2-135m"
    for bad in ("openai:", "openai:m@ftp://x", ""):
        with pytest.raises(ValueError):
            parse_spec(bad)


@pytest.mark.slow
def test_evaluate_on_an_endpoint_gives_the_in_process_verdicts(tmp_path, local_llm, demo_world, monkeypatch):
    claims_dir = demo_world[1].parent
    results = []
    real_evaluate = runner.evaluate

    def keep(*args, **kwargs):
        results.append(real_evaluate(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(cli, "evaluate", keep)
    argv = ["--claims", str(claims_dir / "c.parquet"), "--passages", str(claims_dir / "p.parquet"), "--per-hop", "2",
            "--max-new-tokens", "24", "--max-turns", "1", "--n-boot", "20", "--systems", *SYSTEMS]
    assert cli.main([*argv, "--out", str(tmp_path / "local")], llm_loader=lambda spec: local_llm) == 0
    with running_app(create_app(local_llm)) as url:
        assert cli.main([*argv, "--out", str(tmp_path / "http"), "--backend", "openai", "--base-url", f"{url}/v1",
                            "--model", local_llm.model_name]) == 0
    proxy = fault_proxy(create_app(local_llm))
    with running_app(proxy) as url:
        assert cli.main([*argv, "--out", str(tmp_path / "faults"), "--backend", "openai",
                            "--base-url", f"{url}/v1"]) == 0
    local, http, faults = ([(p["system"], p["claim_id"], p["verdict"]) for p in r.predictions] for r in results)
    assert len(local) == 2 * len(SYSTEMS) and any(v is not None for _, _, v in local)
    assert http == local
    assert faults == local and proxy.state.failed >= 3
    # the HTTP run really went over the endpoint, token by token for the agents
    assert (tmp_path / "http" / "eval.md").read_text().count("openai:smollm2-135m@http://127.0.0.1") >= 1
