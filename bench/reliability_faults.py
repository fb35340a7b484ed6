"""Fault counts per stage -> the ``faults`` key of bench/results/reliability.json (issue 41).

Each stage or command that calls a model over HTTP runs its own code against the fault-injecting
OpenAI-compatible server of src/factrl/testing/fault_llm.py: the first attempt of every distinct message fails by
one of the fault kinds (429 with Retry-After, 500, 503, timeout, dropped connection, bad and truncated
JSON, a wrong number of choices, no choices) or none, drawn from the message's hash; later attempts
are answered with a well-formed verdict (VERDICT_REPLY), so records end as answered with
a verdict, or rejected with a stated reason: what matters here is that each ends up somewhere).

- ``warmup_teacher``: the warm start's teacher rollouts (``recipes.warmup.teacher_references_resumable``
  through ``open_teacher`` with backend ``openai``, as ``stages/warmup.py`` calls them) on 8 claims of
  the tiny world; records = claims x samples reasoning rollouts, each kept or rejected with a reason.
- ``debate_server_members``: ``factrl.recipes.scmaks.debate`` (Prefect fan-out, disk cache, checkpoints) with a
  pool of two ``openai`` members (``single_agent``, ``rag``) at the fault server; records = claims x
  members, each a transcript row.
- ``evaluate_openai``: ``factrl evaluate --backend openai`` (``eval.cli.main``) with every system;
  records = claims x systems predictions.
- ``serve_openai``: ``factrl serve`` (``service.app.build_service`` + ``create_app``, a real uvicorn
  server) whose checkpoint is an ``openai:MODEL@URL`` spec at the fault server; a batch job of claims;
  records = claims, each with a verdict or an error.

Per stage: records, answered, failed_with_reason (by reason), records_lost (must be 0),
identical_requests_resent (a request body sent again after it was answered, within the first run:
FaultyOpenAI.duplicated; a stage without a cache that asks the same prompt for two systems counts
here too, so this bounds duplicated records from above), the faults injected, and
``rerun_requests``: requests the same run sends again from its cache / work directory (0 = nothing is
paid twice; a stage without a cache says so).

The client's timeout is cut to 2 s (and its backoff to 0.05 s) so the ``timeout`` fault fires and the
run is short; the stages open their clients with 300 s.

Usage: nice -n 15 python -m bench.reliability_faults [--only warmup_teacher,serve_openai] [--claims 8]
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench._measured import Measurement  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "reliability.json"
MODEL = "fault-model"  # not a local model: the client runs chats only (no tokenizer)
# every answer: a well-formed verdict of HARIS's reasoning agent and the single-agent baseline (and a
# boxed verdict the other parsers read), so records end answered, or rejected for a stated reason
VERDICT_REPLY = "<think>The passages settle it.</think>\n<verification>\\boxed{Support}</verification>"


def shortened(init):
    """``OpenAICompatLLM.__init__`` with timeout at most 2 s and backoff base 0.05 s (see the docstring)."""
    def short(self, *args, **kwargs):
        kwargs["timeout"] = min(kwargs.get("timeout", 2.0), 2.0)
        kwargs["backoff_base"] = 0.05
        init(self, *args, **kwargs)

    return short


def short_client_timeouts() -> None:
    """Every OpenAICompatLLM made from here on gets :func:`shortened` settings."""
    from factrl.llm.openai_compat import OpenAICompatLLM

    OpenAICompatLLM.__init__ = shortened(OpenAICompatLLM.__init__)


def fault_server():
    from factrl.testing.fault_llm import FAULTS, FaultyOpenAI, first_attempt_fails_by_hash

    return FaultyOpenAI(first_attempt_fails_by_hash([*FAULTS, None, None]), reply=lambda body, k: VERDICT_REPLY,
                        timeout_sleep=3.0)


def world(root: Path, claims: int):
    """The tiny profile's world, its BM25 index and the first ``claims`` claims (balanced)."""
    import pyarrow.parquet as pq

    from bench._world import demo_world
    from factrl.data.params import WorldParams
    from factrl.data.splits import balanced_subset

    table = balanced_subset(demo_world(root, WorldParams(seed=4, num_passages=100, num_claims=40, hops=(2,)))[0],
                            claims)
    pq.write_table(table, root / "claims.parquet")
    return table


def counts(server, first: dict, records: int, answered: int, failed: dict, rerun_requests: int | None,
           **extra) -> dict:
    """The record of one scenario; ``first``: :func:`snapshot` of the server after the first run."""
    failed_n = sum(failed.values())
    return {"records": records, "answered": answered, "failed_with_reason": failed_n, "failed_by_reason": failed,
            "records_lost": records - answered - failed_n, "identical_requests_resent": first["duplicated"],
            "requests": first["requests"], "faults_injected": first["faults"],
            "rerun_requests": rerun_requests, **extra}


def snapshot(server) -> dict:
    return {"requests": server.requests, "duplicated": server.duplicated(), "faults": dict(server.faults)}


def warmup_teacher(root: Path, n: int) -> dict:
    import dataclasses

    from factrl.agents.tools import RetrieverTool
    from factrl.recipes.teacher import open_teacher
    from factrl.recipes.teacher_params import TeacherParams
    from factrl.recipes.warmup import teacher_references_resumable
    from factrl.recipes.warmup_params import WarmupParams
    from factrl.retrieval.index import Retriever
    from factrl.testing.servers import running_app

    claims = world(root, n).to_pylist()
    server = fault_server()
    tool = RetrieverTool(Retriever(root / "index", mode="bm25"), k=3)
    with running_app(server.app) as url:
        teacher = TeacherParams(backend="openai", model=MODEL, base_url=f"{url}/v1", max_tokens=32)
        params = dataclasses.replace(WarmupParams(), source="teacher", teacher=teacher, teacher_max_turns=1,
                                     retrieval_mode="bm25")
        with open_teacher(params.teacher) as llm:
            kept, rejected = teacher_references_resumable(claims, llm, tool, params, root / "warm-work")
        first = snapshot(server)
        with open_teacher(params.teacher) as llm:  # the rerun after the stage finished: the chunk files answer
            kept2, _ = teacher_references_resumable(claims, llm, tool, params, root / "warm-work")
        rerun = server.requests - first["requests"]
    rows = [r for r in kept + rejected if r["agent"] == "reasoning"]
    reasons = collections.Counter(r.get("reason", "kept") for r in rows)
    records = len(claims) * params.teacher_samples
    answered = reasons.pop("kept", 0)
    out = counts(server, first, records, answered, dict(reasons), rerun, rerun_same_rows=len(kept2) == len(kept))
    # a rejected rollout was answered by the teacher and rejected on its content: both are "ended up somewhere"
    out["note"] = ("answered = rollouts kept; failed_with_reason = rejected with their reason (the fault "
                   "server always answers Support, so REFUTES claims end wrong_verdict)")
    return out


def evaluate_openai(root: Path, n: int) -> dict:
    from factrl.eval import cli
    from factrl.testing.servers import running_app

    world(root, n)
    systems = ["haris", "single_agent", "rag", "decompose_verify"]
    got = []
    real = cli.evaluate

    def keep(*args, **kwargs):
        got.append(real(*args, **kwargs))
        return got[-1]

    cli.evaluate = keep
    server = fault_server()
    argv = ["--claims", str(root / "claims.parquet"), "--passages", str(root / "p.parquet"), "--per-hop", str(n // 2),
            "--max-new-tokens", "16", "--max-turns", "1", "--n-boot", "10", "--systems", *systems,
            "--backend", "openai", "--model", MODEL]
    try:
        with running_app(server.app) as url:
            assert cli.main([*argv, "--base-url", f"{url}/v1", "--out", str(root / "eval")]) == 0
            first = snapshot(server)
            assert cli.main([*argv, "--base-url", f"{url}/v1", "--out", str(root / "eval")]) == 0
            rerun = server.requests - first["requests"]
    finally:
        cli.evaluate = real
    preds = got[0].predictions
    claims = len({p["claim_id"] for p in preds})
    answered = sum(p["verdict"] is not None for p in preds)
    failed = collections.Counter(f"{p['system']}: no verdict parsed" for p in preds if p["verdict"] is None)
    return counts(server, first, claims * len(systems), answered, dict(failed), rerun,
                  rerun_note="the rerun asked again: the LLM cache missed" if rerun else "")


def serve_openai(root: Path, n: int) -> dict:
    import httpx

    from factrl.eval.params import CheckpointParams
    from factrl.service.app import build_service, create_app
    from factrl.service.params import ServeParams
    from factrl.testing.servers import running_app

    claims = world(root, n).to_pylist()
    server = fault_server()
    with running_app(server.app) as url:
        spec = f"openai:{MODEL}@{url}/v1"
        params = ServeParams(checkpoints=(CheckpointParams("fault", spec, spec),), index=str(root / "index"),
                             retrieval_mode="bm25", max_turns=1, max_new_tokens=16,
                             calibration_dir=str(root / "calibration"), corrections_db=str(root / "corr.sqlite"))
        service = build_service(params, root / "params.yaml")
        body = "\n".join(json.dumps({"id": c["id"], "claim": c["claim"]}) for c in claims).encode()

        def run_job(http) -> list[dict]:
            job = http.post("/v1/verify/batch", content=body, headers={"content-type": "application/x-ndjson"})
            job.raise_for_status()
            job_id = job.json()["job_id"] if "job_id" in job.json() else job.json()["id"]
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                state = http.get(f"/v1/jobs/{job_id}").json()
                if state.get("status") in ("done", "failed", "finished", "completed"):
                    break
                time.sleep(0.5)
            lines = http.get(f"/v1/jobs/{job_id}/results.jsonl").text.splitlines()
            return [json.loads(x) for x in lines if x.strip()]

        try:
            with running_app(create_app(service)) as app_url, httpx.Client(base_url=app_url, timeout=120) as http:
                results = run_job(http)
                first = snapshot(server)
                again = run_job(http)
                rerun = server.requests - first["requests"]
        finally:
            service.worker.stop() if hasattr(service.worker, "stop") else None
    answered = sum(r.get("verdict") is not None for r in results)
    failed = collections.Counter(str(r.get("error") or "no verdict parsed")[:80] for r in results
                                 if r.get("verdict") is None)
    return counts(server, first, len(claims), answered, dict(failed), rerun, rerun_results=len(again),
                  rerun_note="the same claims sent again were asked again: the LLM cache missed" if rerun else "")


def debate_server_members(root: Path, n: int) -> dict:
    import dataclasses

    from factrl.llm.cache import DiskCache
    from factrl.recipes.scmaks import debate
    from factrl.recipes.scmaks_params import DebateParams, MemberParams
    from factrl.retrieval.index import Retriever
    from factrl.testing.prefect_harness import prefect_harness
    from factrl.testing.servers import running_app

    table = world(root, n)
    server = fault_server()
    with running_app(server.app) as url:
        pool = tuple(MemberParams(name, system, model=MODEL, backend="openai", base_url=f"{url}/v1")
                     for name, system in (("a", "single_agent"), ("b", "rag")))
        params = dataclasses.replace(DebateParams(), pool=pool, splits=("eval",), rounds=1, max_new_tokens=16,
                                     max_turns=1, debate_max_tokens=16, retrieval_mode="bm25", batch_size=4,
                                     concurrency=2)
        retriever = Retriever(root / "index", mode="bm25")
        with prefect_harness():
            transcripts, _ = debate({"eval": table}, params, retriever=retriever, work_dir=root / "debate-work",
                                    cache=DiskCache(root / "cache.sqlite"))
            first = snapshot(server)
            again, _ = debate({"eval": table}, params, retriever=retriever, work_dir=root / "debate-work",
                              cache=DiskCache(root / "cache.sqlite"))
            rerun = server.requests - first["requests"]
    rows = transcripts.to_pylist()
    last: dict[tuple, dict] = {}
    for r in rows:  # each member's last row per claim: its final verdict
        last[(r["claim_id"], r["member"])] = r
    records = table.num_rows * len(pool)
    answered = sum(r.get("verdict") is not None for r in last.values())
    failed = collections.Counter(str(r.get("error") or "no verdict parsed")[:80] for r in last.values()
                                 if r.get("verdict") is None)
    return counts(server, first, records, answered, dict(failed), rerun, transcript_rows=len(rows),
                  rerun_same=again.equals(transcripts))


SCENARIOS = {"warmup_teacher": warmup_teacher, "debate_server_members": debate_server_members,
             "evaluate_openai": evaluate_openai, "serve_openai": serve_openai}


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    ap.add_argument("--claims", type=int, default=8)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    measured = Measurement()
    short_client_timeouts()
    names = args.only.split(",") if args.only else list(SCENARIOS)
    done = {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            try:
                done[name] = SCENARIOS[name](Path(tmp), args.claims)
            except Exception as exc:  # noqa: BLE001 - a broken scenario is a finding, recorded
                import traceback

                where = traceback.extract_tb(exc.__traceback__)[-4:]
                done[name] = {"error": f"{type(exc).__name__}: {exc}"[:600],
                              "where": [f"{f.filename.split('/src/')[-1]}:{f.lineno} {f.name}" for f in where]}
            done[name]["seconds"] = round(time.monotonic() - t0, 1)
            done[name]["commit"] = measured.git["commit"]
        print(name, json.dumps(done[name]), flush=True)
        result = json.loads(args.out.read_text()) if args.out.exists() else {}
        result.setdefault("faults", {}).update(done)
        lost = [v.get("records_lost", 0) for v in result["faults"].values() if isinstance(v, dict)]
        result["records_lost"] = sum(x for x in lost if isinstance(x, int))
        measured.write(result, args.out)  # the file's measured block: its latest writer's
    return done


if __name__ == "__main__":
    main()
