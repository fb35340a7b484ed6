"""M2R's recipe: the warm start, one curriculum stage of GRPO, and the QA evaluation.

Stage ``train_m2r@<id>`` (params ``m2r`` and ``m2r_stages``)::

    segments/<segment>.parquet --gold chains--> multi-hop questions (factrl.data.multihop)
    stage 0: m2r.base_model, warm-started on reference M2R trajectories (the warmup mechanism:
             factrl.data.reference.world_m2r_references -> factrl.recipes.warmup.warm_agent)
    m2r/model_<prev> --GRPO (factrl.rl.trainer), M2R rollouts (factrl.agents.m2r),
                        reward by name (m2r.reward) with the stage's format--> m2r/model_<id>

The trainer never sees which method it trains: this recipe hands it a rollout function and a
reward function, as HARIS's rounds do (``factrl.rl.runs.run_agent_training`` runs both).
Malformed rollouts are format failures (reward 0 or 0.1), counted by reason in the stage's results.

:func:`evaluate_qa` scores a system (``rag``: the top-k passages in the prompt and one boxed answer;
``m2r``: a greedy M2R rollout) by exact match and token F1 against the gold answers.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from factrl.agents import m2r
from factrl.agents.haris import prompt_style
from factrl.agents.loop import run_loops
from factrl.agents.protocol import extract_boxed
from factrl.agents.rollout import RolloutParams, agent_loop, chat_prompt_ids
from factrl.config import ConfigError
from factrl.model_names import chain_entry
from factrl.recipes.m2r_params import M2RParams, M2RStageParams
from factrl.recipes.warmup_params import WarmupParams
from factrl.rewards import m2r as m2r_rewards
from factrl.rewards.registry import RewardKind, choose_reward
from factrl.rl import runs
from factrl.text import first_sentence, max_token_f1, normalize_answer

AGENT = m2r.AGENT


def checkpoint_of(stage_id: int) -> Path:
    """Where M2R stage ``stage_id``'s model lives: m2r/model_<id>."""
    return Path("m2r") / f"model_{stage_id}"


def find_stage(stages: Sequence[M2RStageParams], stage_id: int) -> M2RStageParams:
    """Stage ``stage_id`` of ``m2r_stages``, after checking each stage starts from an earlier one
    from the file its ``start`` names."""
    stage = chain_entry(stages, stage_id, section="m2r_stages", noun="stage")
    for st in stages:
        if st.start != st.expected_start():
            raise ConfigError(f"params.yaml: m2r_stages.{st.id}.start: {st.start!r} must be {st.expected_start()!r} "
                              f"(prev {st.prev})")
    return stage


def reward_function(name: str) -> Callable:
    """The ``answer`` reward registered as ``name`` in the m2r family; another name is an error naming
    ``m2r.reward``."""
    return choose_reward(name, RewardKind.ANSWER, m2r_rewards.REWARDS, key="m2r.reward")


def rollout_params(p: M2RParams, **kw) -> RolloutParams:
    """M2R rollouts during training: sampled at the training temperature, seeded by the trainer."""
    return m2r.default_m2r_params(**{"max_turns": p.max_turns, "max_new_tokens": p.max_new_tokens,
                                     "max_context_tokens": p.max_context_tokens,
                                     "max_tool_response_tokens": p.max_tool_response_tokens,
                                     "temperature": p.temperature, **kw})


def rollout_fn(llm, macro_tool: m2r.MacroTool, params: RolloutParams, fmt: int) -> Callable:
    """``(items, n) -> trajectories``: ``n`` M2R rollouts per question, prompted in ``llm``'s style."""

    def rollout(items: list[dict], n: int) -> list:
        results = m2r.run_m2r(llm, [it["question"] for it in items], macro_tool, params, n=n, stage=fmt,
                              style=prompt_style(llm))
        return [r.trajectory for r in results]

    return rollout


def reward_fn(name: str, fmt: int, *, alpha: float, beta: float, failures: Counter | None = None) -> Callable:
    """``(items, trajectories) -> RewardResults``: reward ``name`` of each response's parse for format
    stage ``fmt``; format failures are counted by reason into ``failures``."""
    fn = reward_function(name)

    def score(items: list[dict], trajectories: list) -> list:
        out = []
        for it, t in zip(items, trajectories):
            parse = m2r.parse_m2r(t.response_text, fmt)
            if failures is not None:
                failures["total"] += 1
                if not parse.format_valid:
                    failures[failure_reason(parse.error)] += 1
            out.append(fn(parse.final_answer, it["answers"], format_valid=parse.format_valid,
                          key_info=parse.key_values, alpha=alpha, beta=beta))
        return out

    return score


def failure_reason(error: str | None) -> str:
    """A format error without its details (``key_info_save is not valid JSON: ...`` -> the head)."""
    return (error or "").split(":")[0].strip() or "unknown"


# --------------------------------------------------------------------------------------------
# the warm start
# --------------------------------------------------------------------------------------------


def warmup_params(p: M2RParams) -> WarmupParams:
    """The warmup mechanism's settings for M2R's warm start, all taken from the ``m2r`` section."""
    return WarmupParams(enabled=True, base_model=p.base_model, source="world", prompt=p.warm_prompt,
                        retrieval_mode=p.retrieval_mode, top_k=p.top_k,
                        max_tool_response_tokens=p.max_tool_response_tokens, max_length=p.warm_max_length,
                        precision=p.precision, seed=p.seed)


def warm_start(items: list[dict], p: M2RParams, macro_tool: m2r.MacroTool, *, state_dir: Path,
               out_model: Path, curves_dir: Path, model_tokenizer: tuple | None = None) -> dict:
    """The base model fine-tuned on reference M2R trajectories of ``items`` (demo-world gold chains)
    into ``out_model`` (the loss curve in the DVCLive directory ``curves_dir``); returns the summary (references,
    rejections, the fine-tuning's figures). Resumes from ``state_dir``."""
    from factrl.data import reference
    from factrl.recipes import warmup

    chosen = runs.select_prompts(items, p.warm_max_items, p.seed)
    kept, rejected = reference.world_m2r_references(chosen, macro_tool)
    reference.validate_references(kept, "m2r references")
    if not kept:
        raise ValueError(f"m2r warm start: no reference from {len(chosen)} questions "
                         f"(rejected: {dict(Counter(r['reason'] for r in rejected))}); it needs demo-world claims")
    start = time.perf_counter()
    result, left_out = warmup.warm_agent(AGENT, kept, warmup_params(p), state_dir=state_dir, out_model=out_model,
                                         curves_dir=curves_dir,
                                         model_tokenizer=model_tokenizer, sft=p.sft)
    return {"references": len(kept), "rejected": dict(Counter(r["reason"] for r in rejected)),
            **warmup.sft_summary(result, left_out), "wall_s": time.perf_counter() - start}


# --------------------------------------------------------------------------------------------
# one curriculum stage
# --------------------------------------------------------------------------------------------


def train_stage(items: list[dict], init_model: str, retriever, p: M2RParams, stage: M2RStageParams, *,
                state_dir: Path, out_model: Path, curves_dir: Path, model_tokenizer: tuple | None = None,
                on_step=None) -> tuple[runs.RunResult, dict]:
    """GRPO of M2R from ``init_model`` on ``items`` with stage ``stage``'s format; returns the run and
    what the results file records (steps, final row, format failures by reason)."""
    chosen = runs.select_prompts(items, p.max_prompts, p.seed)
    macro_tool = m2r.MacroTool(retriever, k=p.top_k)
    params = rollout_params(p)
    failures: Counter = Counter()

    def make_fns(policy):
        return (rollout_fn(policy, macro_tool, params, stage.format),
                reward_fn(p.reward, stage.format, alpha=p.alpha, beta=p.beta, failures=failures))

    run = runs.run_agent_training(
        agent=AGENT, params_key="m2r", init_model=init_model, items=chosen, cfg=p, make_fns=make_fns,
        state_dir=state_dir, out_model=out_model, curves_dir=curves_dir, extra_fingerprint={"stage": dataclasses.asdict(stage)},
        model_tokenizer=model_tokenizer, on_step=on_step)
    total = failures.pop("total", 0)
    record = {"stage": dataclasses.asdict(stage), "prompts": len(chosen), "steps": len(run.rows),
              "resumed": run.resumed, "final": run.rows[-1] if run.rows else {},
              "rollouts": total, "format_failures": sum(failures.values()),
              "format_failures_by_reason": dict(sorted(failures.items()))}
    return run, record


# --------------------------------------------------------------------------------------------
# evaluation: exact match and token F1 on QA items
# --------------------------------------------------------------------------------------------

RAG_SYSTEM = ("Answer the question from the passages. Think briefly, then give the answer as a short phrase "
              "inside \\boxed{ }.")


def run_stage(claims: pa.Table, warm_claims: pa.Table | None, retriever, params: M2RParams, stage: M2RStageParams, *,
              init_model: str, state_dir: Path, out_model: Path, curves_dir: Path,
              model_tokenizer: tuple | None = None) -> dict:
    """One M2R curriculum stage (``train_m2r@<id>``): warm start first when it starts from the base
    model and ``params.warm_start`` (references from ``warm_claims``), then GRPO on ``claims``; its
    record (steps, format failures, the warm start's figures, wall time, peak memory)."""
    from factrl.data.multihop import world_items
    from factrl.hardware import peak_rss_mib

    start = time.perf_counter()
    reward_function(params.reward)  # a wrong name stops here, before any model loads
    items = world_items(claims)
    warm = None
    warm_dir = state_dir.parent / f"{state_dir.name}_warm"  # apart: a new GRPO run empties state_dir
    warm_dir.mkdir(parents=True, exist_ok=True)  # a DVC out, also when there is no warm start
    if stage.prev == 0 and params.warm_start:
        init_model = str(warm_dir / "model")
        warm = warm_start(world_items(warm_claims if warm_claims is not None else claims), params,
                          m2r.MacroTool(retriever, k=params.top_k), state_dir=warm_dir / "sft",
                          out_model=Path(init_model), curves_dir=warm_dir / "loss", model_tokenizer=model_tokenizer)
        model_tokenizer = None  # the warm start trained those weights; GRPO loads the saved model
    run, record = train_stage(items, init_model, retriever, params, stage, state_dir=state_dir,
                              out_model=out_model, curves_dir=curves_dir, model_tokenizer=model_tokenizer)
    return {**record, "init_model": init_model, "warm_start": warm, "wall_s": time.perf_counter() - start,
            "peak_rss_mib": peak_rss_mib()}


def rag_messages(question: str, passages: str) -> list[dict]:
    return [{"role": "system", "content": RAG_SYSTEM},
            {"role": "user", "content": f"Passages:\n{passages}\n\nQuestion: {question}"}]


def exact_match(prediction: str | None, answers: Sequence[str]) -> float:
    return float(prediction is not None and any(normalize_answer(prediction) == normalize_answer(a) for a in answers))


def score_answers(predictions: Sequence[str | None], items: Sequence[dict]) -> dict:
    """Mean exact match and token F1 (a missing answer scores 0 on both)."""
    n = max(len(items), 1)
    return {"em": sum(exact_match(p, it["answers"]) for p, it in zip(predictions, items)) / n,
            "f1": sum(max_token_f1(p or "", list(it["answers"])) for p, it in zip(predictions, items)) / n,
            "n": len(items)}


def rag_answers(llm, items: Sequence[dict], macro_tool: m2r.MacroTool, max_new_tokens: int) -> list[str | None]:
    """Naive RAG: the question's top-k passages in the prompt, one greedy generation, its answer
    (:func:`rag_prediction`)."""
    passages = macro_tool([it["question"] for it in items])
    convs = [rag_messages(it["question"], p) for it, p in zip(items, passages)]
    params = RolloutParams(max_turns=0, max_new_tokens=max_new_tokens, max_context_tokens=4096)
    trajs = run_loops([agent_loop(llm, chat_prompt_ids(llm, c), c, None, params, stream=i)
                       for i, c in enumerate(convs)])
    return [rag_prediction(t.response_text) for t in trajs]


def rag_prediction(reply: str, words: int = 30) -> str | None:
    """The naive RAG baseline's answer in ``reply``: its last ``\\boxed{}`` value; failing that, its
    first sentence (at most ``words`` words, a lead-in up to ``answer ...:`` or ``answer is`` dropped);
    None for an empty reply.

    The baseline is scored on what it said: a base 135M model almost never boxes, and boxed-only
    scoring gave it EM and F1 of exactly 0 on every set, which measured the format rather than the
    retrieval. The base model restates the question before the answer ("The founder of the developer
    of Medath: Arena was born in the city of Tessik"), so the cap is loose enough to reach the answer
    at the end of such a sentence (12 words cut it off); token F1 still charges the restated words.
    M2R's own answers stay boxed-only: the box is part of the protocol it is trained on.
    """
    boxed = extract_boxed(reply)
    if boxed:
        return boxed[-1]
    lines = [line.strip() for line in reply.replace("<think>", "\n").replace("</think>", "\n").splitlines()]
    first = next((line for line in lines if line), "")
    lead_in = r"^[^.!?]*?\banswer\b[^:.!?]*?(?:\bis\b\s*:?|:)\s*"  # "The answer to this question is:"
    first = re.sub(lead_in, "", first, count=1, flags=re.IGNORECASE)
    return first_sentence(first, words).rstrip(".!? ") or None


def evaluate_qa(system: str, llm, items: Sequence[dict], macro_tool: m2r.MacroTool, *,
                params: RolloutParams | None = None, fmt: int = 2) -> dict:
    """EM / F1 of ``system`` (``rag`` or ``m2r``) on ``items``, greedy; for ``m2r`` also the format
    failures (counted, by reason: a malformed answer scores 0, it never stops the run)."""
    params = dataclasses.replace(params or m2r.default_m2r_params(), temperature=0.0)
    if system == "rag":
        return score_answers(rag_answers(llm, items, macro_tool, params.max_new_tokens), items)
    if system != "m2r":
        raise ValueError(f"unknown QA system {system!r}; expected rag or m2r")
    results = m2r.run_m2r(llm, [it["question"] for it in items], macro_tool, params, stage=fmt,
                          style=prompt_style(llm))
    failures = Counter(failure_reason(r.parse.error) for r in results if not r.parse.format_valid)
    return score_answers([r.answer for r in results], items) | {
        "format_failures": sum(failures.values()), "format_failures_by_reason": dict(sorted(failures.items()))}
