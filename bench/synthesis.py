"""Benchmark of pseudo-label synthesis -> bench/results/synthesis.json.

The default local teacher (SmolLM2-135M behind `factrl serve-llm`) answers the demo world's gold
hop questions (``hops[].question``) from the gold passages, through the same fan-out the stage uses
(Prefect tasks, disk cache, checkpoints). Measured in one run:

* teacher_accuracy: share of answers containing the gold hop answer (all hops, and 2-hop claims);
* none_rate: share of valid teacher answers that were None;
* server_vs_inprocess: questions/s over HTTP divided by questions/s in-process (same batch);
* rerun_teacher_calls: teacher calls made by an identical second run (must be 0).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# on a busy 2-core machine the ephemeral Prefect API needs longer than its 20 s default to start
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# as the Makefile: no telemetry from the temporary Prefect server (the machine may have no network)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from bench._measured import Measurement  # noqa: E402
from factrl import signatures  # noqa: E402
from factrl.data import synthesis  # noqa: E402
from factrl.data.params import WorldParams  # noqa: E402
from factrl.data.world_claims import generate_claims  # noqa: E402
from factrl.orchestration.teacher import run_teacher  # noqa: E402
from factrl.recipes.teacher import open_teacher  # noqa: E402
from factrl.recipes.teacher_params import TeacherParams  # noqa: E402

N_CLAIMS = 24  # per hop count


def items_for(claims):
    out = []
    for c in claims:
        for hop in c["hops"]:
            ev = synthesis.gold_evidence(c)  # the claim's passage texts
            out.append((c, hop, synthesis.teacher_item(c, hop["question"], ev)))
    return out


def main() -> None:
    claims = generate_claims(WorldParams(seed=21, num_passages=400, num_claims=4 * N_CLAIMS, hops=(2, 3))).to_pylist()
    work = items_for(claims[: 2 * N_CLAIMS])
    items = [w[2] for w in work]
    p_hash = signatures.pseudo_qa_prompt_hash()
    measured = Measurement()
    result: dict = {"teacher": "smollm2-135m via factrl serve-llm (greedy)", "questions": len(items)}
    with tempfile.TemporaryDirectory() as tmp:  # Prefect runs against its ephemeral API
        tmp = Path(tmp)
        with open_teacher(TeacherParams(backend="server"), concurrency=64) as server:
            t0 = time.perf_counter()
            answers, usage = run_teacher(items, server, prompt_hash=p_hash, cache_path=tmp / "c.sqlite",
                                         checkpoint_dir=tmp / "ck", batch_size=8, concurrency=4)
            server_s = time.perf_counter() - t0
            _, rerun = run_teacher(items, server, prompt_hash=p_hash, cache_path=tmp / "c.sqlite",
                                   checkpoint_dir=tmp / "ck", batch_size=8, concurrency=4)
            # a second fresh run (no checkpoints) is served from the disk cache alone
            _, cached = run_teacher(items, server, prompt_hash=p_hash, cache_path=tmp / "c.sqlite",
                                    checkpoint_dir=tmp / "ck2", batch_size=8, concurrency=4)
        with open_teacher(TeacherParams(backend="local")) as local:
            sub = items[:32]
            t0 = time.perf_counter()
            signatures.pseudo_answers(local, sub)
            local_s = time.perf_counter() - t0
        with open_teacher(TeacherParams(backend="server"), concurrency=64) as server:
            t0 = time.perf_counter()
            signatures.pseudo_answers(server, sub)
            server_sub_s = time.perf_counter() - t0
    ok = [(w, a) for w, a in zip(work, answers) if a.ok]
    valid = [(w, a) for w, a in ok if a.answer is not None]
    two_hop = [(w, a) for w, a in ok if w[0]["num_hops"] == 2]
    result |= {
        "teacher_accuracy": sum(synthesis.answer_matches(a.answer, w[1]["answer"]) for w, a in ok) / max(1, len(ok)),
        "teacher_accuracy_2hop": sum(synthesis.answer_matches(a.answer, w[1]["answer"]) for w, a in two_hop) / max(1, len(two_hop)),
        "teacher_error_rate": 1 - len(ok) / len(items),
        "none_rate": 1 - len(valid) / max(1, len(ok)),
        "server_vs_inprocess": (len(sub) / server_sub_s) / (len(sub) / local_s),
        "server_questions_per_s": len(sub) / server_sub_s,
        "inprocess_questions_per_s": len(sub) / local_s,
        "full_run_seconds": server_s,
        "usage_first_run": usage,
        "rerun_teacher_calls": rerun["teacher_calls"],
        "cache_only_rerun_teacher_calls": cached["teacher_calls"],
        "limits": ("a 135M model copying a name out of 2-4 short passages: it often picks a name of the "
                   "wrong relation when several entities appear, and accuracy is measured by containment "
                   "of the gold name"),
    }
    result = measured.write(result, ROOT / "bench" / "results" / "synthesis.json")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
