"""The warm start (stage ``warmup``): H_0 and L_0, the agents HARIS round 1 starts from.

Off (the paper's recipe), both agents are the base model as it is. On (the CPU demo), each agent is
the base model fine-tuned on reference trajectories of its own role (``factrl.data.reference``: the
demo world's gold chains, or an LLM teacher's rollouts kept when their verdict is right)::

    references (REFERENCES rows) --replay, agent's prompt style--> examples (ids, labels -100 where
    the GRPO loss mask is 0) --transformers Trainer--> models/reason_0, models/search_0

Each reference is replayed through the rollout loop (:func:`factrl.agents.rollout.replay`) under
the system prompt the warmed agent will keep (``warmup.prompt``), so its ids, truncated results
and loss mask are what a GRPO rollout of the same text holds. The style is saved in the
checkpoint's config (:data:`factrl.agents.haris.PROMPT_KEY`), which every later stage reads back.

A killed run resumes: the fine-tuning from its Trainer checkpoints (kept while the fingerprint of
params, base weights and examples matches, as the GRPO stages do), the teacher's rollouts from
per-chunk files in the factrl cache (paid calls are not repeated).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from factrl.agents import haris, m2r
from factrl.agents.registry import AGENTS as AGENT_REGISTRY
from factrl.agents.rollout import replay
from factrl.agents.tools import RetrieverTool
from factrl.data import reference
from factrl.data.schemas import REFERENCES, REFERENCES_REJECTED
from factrl.io import write_json
from factrl.llm.tokens import encode_chat
from factrl.model_names import checkpoint_of
from factrl.recipes.warmup_params import WarmupParams
from factrl.rl.params import SFTParams
from factrl.rl.runs import fingerprint, prepare_state_dir, save_model
from factrl.rl.sft import SFTResult, sft_example, train_sft

# the agents by their role, the tag of their rows and files here (references' agent column, loss_<role>.csv);
# their models are models/<name>_0 (factrl.agents.registry: reasoning -> reason)
AGENTS = tuple(spec.role for spec in AGENT_REGISTRY.values())
MODEL_NAMES = {spec.role: spec.name for spec in AGENT_REGISTRY.values()}
TEACHER_CHUNK = 32  # claims per resumable chunk of teacher rollouts


# --------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------


def teacher_references_resumable(claims: list[dict], teacher, retriever_tool: RetrieverTool, params: WarmupParams,
                                 work_dir: Path) -> tuple[list[dict], list[dict]]:
    """:func:`factrl.data.reference.teacher_references` chunk by chunk, each chunk's rows saved in
    ``work_dir`` (keyed by the teacher, its settings and the chunk's claims), so a rerun after a kill
    asks the teacher only about the claims it had not finished."""
    sampling = {"temperature": params.teacher_temperature, "seed": params.seed, "max_turns": params.teacher_max_turns,
                "max_new_tokens": params.teacher.max_tokens, "max_tool_response_tokens": params.max_tool_response_tokens}
    settings = {"teacher": dataclasses.asdict(params.teacher), "samples": params.teacher_samples, "top_k": params.top_k,
                "retrieval_mode": params.retrieval_mode, **sampling}
    kept: list[dict] = []
    rejected: list[dict] = []
    for start in range(0, len(claims), TEACHER_CHUNK):
        chunk = claims[start:start + TEACHER_CHUNK]
        key = hashlib.sha256(json.dumps([settings, [c["id"] for c in chunk]], sort_keys=True).encode()).hexdigest()
        path = work_dir / f"teacher-{key[:24]}.json"
        if path.exists():
            done = json.loads(path.read_text(encoding="utf-8"))
        else:
            k, r = reference.teacher_references(
                chunk, teacher, retriever_tool, samples=params.teacher_samples,
                reason_params=haris.default_reasoning_params(**sampling),
                search_params=haris.default_search_params(**sampling))
            done = {"kept": k, "rejected": r}
            write_json(done, path)
        kept += done["kept"]
        rejected += done["rejected"]
        print(f"warmup: teacher rollouts on {min(start + TEACHER_CHUNK, len(claims))}/{len(claims)} claims, "
              f"{sum(r['agent'] == 'reasoning' for r in kept)} reasoning references kept", flush=True)
    return kept, rejected


# --------------------------------------------------------------------------------------------
# examples
# --------------------------------------------------------------------------------------------


def _agent_setup(agent: str, style: str, params: WarmupParams) -> tuple[Callable, object, object, dict | None]:
    """(messages of a prompt, rollout params, tool stop tag(s), their result tags) of ``agent`` as its
    rollouts use them: HARIS's two agents, and M2R's (``factrl.agents.m2r``: three tools)."""
    limits = {"max_context_tokens": params.max_length, "max_tool_response_tokens": params.max_tool_response_tokens}
    if agent == "reasoning":
        return (lambda p: haris.reasoning_messages(p, style)), haris.default_reasoning_params(**limits), \
            "</question>", None
    if agent == "search":
        return (lambda p: haris.search_messages(p, style)), haris.default_search_params(**limits), "</search>", None
    if agent == m2r.AGENT:
        return (lambda p: m2r.m2r_messages(p, style)), m2r.default_m2r_params(**limits), m2r.STOP_TAGS, \
            m2r.RESULT_TAGS
    raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS + (m2r.AGENT,)}")


def agent_examples(rows: Sequence[dict], agent: str, tokenizer, params: WarmupParams) -> tuple[list[dict], Counter]:
    """The fine-tuning examples of ``agent``'s reference rows (:func:`factrl.rl.sft.sft_example` of
    each row's replayed trajectory under the warmed prompt style), and the rows left out by reason
    (``too_long``: beyond ``max_length`` tokens)."""
    messages, rollout_params, stop_tag, result_tags = _agent_setup(agent, params.prompt, params)
    return replay_examples([r for r in rows if r["agent"] == agent], tokenizer, lambda row: messages(row["prompt"]),
                           rollout_params, stop_tag, result_tags)


def replay_examples(rows: Sequence[dict], tokenizer, messages_of: Callable[[dict], list], rollout_params,
                    stop_tag, result_tags=None) -> tuple[list[dict], Counter]:
    """Fine-tuning examples of reference rows (``id``, ``turns``), each replayed through the rollout
    loop (:func:`factrl.agents.rollout.replay`) from the prompt ``messages_of(row)``, so its ids and
    loss mask are a rollout's; rows beyond ``rollout_params.max_context_tokens`` are left out
    (counted as ``too_long``). Every method's warm start goes through here (HARIS's and M2R's agents
    above, MARCH's roles in ``factrl.recipes.march``)."""
    examples: list[dict] = []
    left_out: Counter = Counter()
    for row in rows:
        turns = [(t["role"], t["text"]) for t in row["turns"]]
        try:
            traj = replay(tokenizer, encode_chat(tokenizer, messages_of(row)), turns, rollout_params, stop_tag,
                          result_tags)
        except ValueError as exc:
            if "max_context_tokens" not in str(exc):
                raise ValueError(f"reference {row['id']}: {exc}") from None
            left_out["too_long"] += 1
            continue
        examples.append(sft_example(traj) | {"id": row["id"]})
    return examples, left_out


def examples_digest(examples: Sequence[dict]) -> str:
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e["input_ids"], e["labels"]]).encode())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# the agents
# --------------------------------------------------------------------------------------------


def save_base_agents(base_model: str, models_dir: Path, round_id: int = 0) -> None:
    """H_0 = L_0 = ``base_model`` as it is (the warm start off)."""
    from factrl.llm.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(base_model)
    for agent in AGENTS:
        save_model(model, tokenizer, models_dir / checkpoint_of(MODEL_NAMES[agent], round_id).name,
                   {"agent": agent, "base_model": base_model, "warm_start": False})


def warm_agent(agent: str, rows: Sequence[dict], params: WarmupParams, *, state_dir: Path, out_model: Path,
               curves_dir: Path, model_tokenizer: tuple | None = None,
               sft: SFTParams | None = None) -> tuple[SFTResult, Counter]:
    """Fine-tune the base model on ``agent``'s references into ``out_model`` (prompt style recorded
    in its config); the per-step losses are logged with DVCLive to ``curves_dir``
    (:func:`factrl.rl.sft.train_sft`). Resumes from ``state_dir``.
    ``sft``: the fine-tuning settings (default: ``params.<agent>``, the warmup section's)."""
    from factrl.llm.models import load_model_and_tokenizer

    model, tokenizer = model_tokenizer if model_tokenizer is not None else load_model_and_tokenizer(params.base_model)
    examples, left_out = agent_examples(rows, agent, tokenizer, params)
    if not examples:
        raise ValueError(f"warmup: no {agent} reference fits max_length={params.max_length}; nothing to train on")
    cfg = sft if sft is not None else getattr(params, agent)
    digest = fingerprint(cfg, params.base_model, [], {
        "agent": agent, "examples": examples_digest(examples), "seed": params.seed, "precision": params.precision})
    prepare_state_dir(state_dir, digest)
    result = train_sft(model, tokenizer, [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in examples],
                       cfg, state_dir / "trainer", seed=params.seed, precision=params.precision, curves_dir=curves_dir)
    setattr(model.config, haris.PROMPT_KEY, params.prompt)
    save_model(model, tokenizer, out_model, {
        "agent": agent, "base_model": params.base_model, "warm_start": True, "source": params.source,
        "prompt": params.prompt, "examples": len(examples), "steps": result.steps, "final_loss": result.final_loss,
        "params": dataclasses.asdict(cfg)})
    shutil.rmtree(state_dir / "trainer", ignore_errors=True)  # the model is the result
    return result, left_out


def sft_summary(result: SFTResult, left_out: Counter) -> dict:
    out = {k: v for k, v in dataclasses.asdict(result).items() if k != "losses"}
    return out | {"left_out": dict(left_out)}


def references_tables(kept: list[dict], rejected: list[dict]) -> tuple[pa.Table, pa.Table]:
    return (pa.Table.from_pylist(kept, schema=REFERENCES), pa.Table.from_pylist(rejected, schema=REFERENCES_REJECTED))


def reference_counts(kept: list[dict], rejected: list[dict]) -> dict:
    """How many references each agent got and why the others were rejected."""
    return {
        "references": {a: sum(r["agent"] == a for r in kept) for a in AGENTS},
        "rejected": {"total": len(rejected),
                     "by_agent": {a: sum(r["agent"] == a for r in rejected) for a in AGENTS},
                     "by_reason": dict(sorted(Counter(r["reason"] for r in rejected).items()))},
    }


def warm_start(kept: list[dict], params: WarmupParams, *, state_dir: Path, models_dir: Path,
               loss_dir: Path) -> dict:
    """Both agents fine-tuned on their references (``kept``); returns the per-agent summaries."""
    out = {}
    for agent in AGENTS:
        start = time.perf_counter()
        name = MODEL_NAMES[agent]
        result, left_out = warm_agent(agent, kept, params, state_dir=state_dir / name,
                                      out_model=models_dir / checkpoint_of(name, 0).name,
                                      curves_dir=loss_dir / f"loss_{agent}")
        out[agent] = sft_summary(result, left_out) | {"stage_wall_s": time.perf_counter() - start}
        print(f"warmup: {agent} agent {result.steps} steps on {result.examples} examples, loss "
              f"{result.first_loss:.3f} -> {result.final_loss:.3f}, {result.tokens_per_s:.1f} tokens/s "
              f"({result.precision})", flush=True)
    return out


def build_references(claims: pa.Table, params: WarmupParams, retriever_tool, *, teacher=None,
                     work_dir: Path | None = None) -> tuple[list[dict], list[dict]]:
    """``(kept, rejected)`` reference rows of both agents on ``claims`` from ``params.source``."""
    records = claims.to_pylist()
    if params.source == "world":
        return reference.world_references(records, retriever_tool, max_searches=params.search_max_turns)
    if teacher is None or work_dir is None:
        raise ValueError("source 'teacher' needs a teacher LLM and a work directory")
    return teacher_references_resumable(records, teacher, retriever_tool, params, work_dir)


def run(params: WarmupParams, *, claims_file: Path, index_dir: Path, state_dir: Path, models_dir: Path,
        loss_dir: Path) -> tuple[list[dict], list[dict], dict]:
    """Stage ``warmup``'s whole run (``params.base_model`` already resolved): the references of both
    agents (``kept``, ``rejected``) from the claims of ``claims_file`` over ``index_dir``, both agents
    fine-tuned on them into ``models_dir`` (checkpoints in ``state_dir``, curves in
    ``loss_dir/loss_<agent>``), and the summary; off, both agents are the base model and the curves
    are empty."""
    import pyarrow.parquet as pq

    from factrl.data.schemas import CLAIMS, validate
    from factrl.data.splits import balanced_subset
    from factrl.hardware import hardware_record
    from factrl.rl.step_log import write_history

    start = time.perf_counter()
    summary: dict = {"enabled": params.enabled, "base_model": params.base_model}
    state_dir.mkdir(parents=True, exist_ok=True)  # a DVC out, also when nothing trains
    if not params.enabled:
        save_base_agents(params.base_model, models_dir)
        for agent in AGENTS:  # the DVC plots and metrics outs exist, empty: nothing was trained
            write_history([], loss_dir / f"loss_{agent}")
        print(f"warmup: off; models/reason_0 = models/search_0 = {params.base_model}")
        return [], [], summary | {"wall_s": time.perf_counter() - start}
    # what prepare says the warm start may see: all training claims, or a hard world's clean ones
    claims = balanced_subset(validate(pq.read_table(claims_file), CLAIMS, str(claims_file)), params.max_claims)
    kept, rejected = _references(claims, params, index_dir)
    reference.validate_references(kept, str(loss_dir / "references.parquet"))
    counts = reference_counts(kept, rejected)
    missing = [agent for agent, n in counts["references"].items() if n == 0]
    if missing:
        raise ValueError(f"warmup: source {params.source!r} gave no {' or '.join(missing)} reference from "
                         f"{claims.num_rows} claims of {claims_file} (rejected: {counts['rejected']['by_reason']}); "
                         "source 'world' needs the demo world's claims, use 'teacher' for other data")
    print(f"warmup: {counts['references']} references from {claims.num_rows} claims ({params.source}); "
          f"rejected {counts['rejected']['by_reason']}", flush=True)
    sft = warm_start(kept, params, state_dir=state_dir, models_dir=models_dir, loss_dir=loss_dir)
    summary |= {"source": params.source, "prompt": params.prompt, "claims": claims.num_rows, **counts, "sft": sft,
                "wall_s": time.perf_counter() - start, "hardware": hardware_record(params.precision)}
    return kept, rejected, summary


def _references(claims: pa.Table, params: WarmupParams, index_dir: Path) -> tuple[list[dict], list[dict]]:
    """:func:`build_references` over ``index_dir``, with the teacher opened for ``source: teacher``
    (its rollouts resumable from the factrl cache)."""
    from factrl.llm.models import cache_dir
    from factrl.recipes.teacher import open_teacher
    from factrl.retrieval.index import Retriever

    retriever_tool = RetrieverTool(Retriever(index_dir, mode=params.retrieval_mode), k=params.top_k)
    if params.source != "teacher":
        return build_references(claims, params, retriever_tool)
    with open_teacher(params.teacher) as teacher:
        return build_references(claims, params, retriever_tool, teacher=teacher, work_dir=cache_dir() / "warmup")
