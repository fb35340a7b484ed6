"""HARIS's training stages of round r, ``train_search@r`` and ``train_reason@r``, on the local
trainer or on verl (params ``train.backend``).

:func:`train_search` and :func:`train_reason` are the local runs on given inputs (what the tests
drive); :func:`run_train_search` and :func:`run_train_reason` are the stages: they read the round's
inputs from the current directory's layout (``qa/``, ``segments/``, ``index/``, ``models/``), as
``dvc repro`` and ``factrl train`` run them, and hand the rows to the chosen backend. The rollout,
reward and prompt parts they wire are :mod:`factrl.recipes.haris_rounds`'s, shared with verl; the run around them (fingerprint, resume,
the saved model) is :func:`factrl.rl.runs.run_agent_training`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from factrl.agents.registry import agent
from factrl.io import model_digest, write_json
from factrl.model_names import RoundsParams, checkpoint_of
from factrl.recipes import haris_rounds
from factrl.recipes.haris_params import ReasonTrainParams, SearchTrainParams, TrainParams
from factrl.rl import runs
from factrl.rl.gate import NO_GATE, figures_by_stratum, gate_passes, gate_sentence
from factrl.rl.runs import RunResult


def gate_path(round_id: int) -> Path:
    """Where stage ``train_reason@<round_id>`` writes its starting pair's gate figures."""
    return Path("metrics") / "gate" / f"reason_r{round_id}.json"


def measure_gate(claims: pa.Table, init_model: str, tool, rollout_params, params: ReasonTrainParams,
                 device: str) -> dict:
    """The gate figures of the reasoning agent ``init_model`` (with ``tool``, the round's search agent)
    on ``params.gate_claims`` of ``claims`` balanced by (label, hops): ``group_size`` rollouts each at
    the training temperature, seeded by ``params.seed``, scored by the round's reward. Returns
    ``pass_at_1`` (mean correctness), ``pass_at_<G>``, ``uniform_group_rate`` and the rest of
    :func:`factrl.rl.gate.group_figures`, overall and ``per_hop``, with ``claims`` and ``seconds``."""
    import time

    from factrl.data.splits import balanced_subset
    from factrl.llm.backends import open_llm
    from factrl.rl.sampling import seed_everything

    items = haris_rounds.reasoning_items(balanced_subset(claims, params.gate_claims))
    g = params.group_size
    score = haris_rounds.reasoning_reward_fn(params.reward, require_question=params.require_question)
    t0 = time.perf_counter()
    with open_llm(init_model, "local", precision=params.precision, device=device) as policy:
        seed_everything(params.seed)
        trajectories = haris_rounds.reasoning_rollout_fn(policy, tool, rollout_params)(items, g)
    results = score([item for item in items for _ in range(g)], trajectories)
    overall, per_hop = figures_by_stratum(results, g, [f"{int(item['num_hops'])}hop" for item in items])

    def with_pass_names(f: dict) -> dict:
        return {"pass_at_1": f["accuracy"], f"pass_at_{g}": f["pass_at_k"], **f}

    out = with_pass_names(overall)
    open_, sentence = gate_passes(out)
    return {**out, "open": open_, "decision": sentence, "claims": len(items), "group_size": g,
            "seconds": round(time.perf_counter() - t0, 1),
            "per_hop": {hop: with_pass_names(f) for hop, f in per_hop.items()}}


def make_judge(params: SearchTrainParams):
    """The usefulness judge of the reward (``rule`` needs no model; ``llm`` loads ``judge_model``)."""
    return haris_rounds.search_judge(params.judge, params.judge_threshold, params.judge_model,
                                     device=runs.train_device(params, agent("search").params_key))


def train_search(qa: pa.Table, init_model: str, retriever, params: SearchTrainParams, *, state_dir: Path,
                 out_model: Path, curves_dir: Path, judge=None, model_tokenizer=None, on_step=None) -> RunResult:
    """L_prev -> L_r on the answered pairs of ``qa`` (``retriever`` has ``search(queries, k)``)."""
    items = haris_rounds.search_prompts(qa, params)
    judge = judge if judge is not None else make_judge(params)
    tool = haris_rounds.RetrieverTool(retriever, k=params.top_k)
    rollout_params = haris_rounds.search_rollout_params(params)

    def make_fns(policy):
        return haris_rounds.search_rollout_fn(policy, tool, rollout_params), haris_rounds.search_reward_fn(judge)

    return runs.run_agent_training(
        agent="search", params_key=agent("search").params_key, init_model=init_model, items=items, cfg=params,
        make_fns=make_fns,
        state_dir=state_dir, out_model=out_model, curves_dir=curves_dir,
        extra_fingerprint={"judge": params.judge}, model_tokenizer=model_tokenizer, on_step=on_step)


def train_reason(claims: pa.Table, init_model: str, search_model: str, retriever, params: ReasonTrainParams, *,
                 state_dir: Path, out_model: Path, curves_dir: Path, search_llm=None, model_tokenizer=None,
                 on_step=None, gate_path: Path | None = None) -> RunResult:
    """H_prev -> H_r on ``claims``; ``search_model`` (L_r) answers the questions. ``search_llm``
    overrides how L_r is run (default: params ``search_backend``). With ``gate_path`` and
    ``params.gate_claims``, the starting pair's gate figures (:func:`measure_gate`) are written there
    first (kept: a resumed stage does not measure them again)."""
    import contextlib

    from factrl.llm.backends import open_llm

    haris_rounds.reasoning_reward_fn(params.reward)  # a wrong reward name stops here, before any model loads
    items = haris_rounds.reasoning_prompts(claims, params)
    retriever_tool = haris_rounds.RetrieverTool(retriever, k=params.top_k)
    rollout_params = haris_rounds.reasoning_rollout_params(params)
    served = haris_rounds.served_search_params(params)
    device = str(runs.train_device(params, agent("reason").params_key))
    with (open_llm(search_model, params.search_backend, precision=params.precision, device=device)
          if search_llm is None else contextlib.nullcontext(search_llm)) as llm:
        tool = haris_rounds.search_agent_tool(llm, retriever_tool, served)
        if gate_path is not None and not gate_path.exists():
            write_json(measure_gate(claims, init_model, tool, rollout_params, params, device) if params.gate_claims
                       else NO_GATE, gate_path)
            print(f"gate: {gate_sentence(json.loads(gate_path.read_text()))}", flush=True)

        def make_fns(policy):
            return (haris_rounds.reasoning_rollout_fn(policy, tool, rollout_params),
                    haris_rounds.reasoning_reward_fn(params.reward, require_question=params.require_question,
                                                     hop_reward=params.hop_reward,
                                                     hop_answers=haris_rounds.hop_answers_of(claims)))

        return runs.run_agent_training(
            agent="reason", params_key=agent("reason").params_key, init_model=init_model, items=items, cfg=params,
            make_fns=make_fns,
            state_dir=state_dir, out_model=out_model, curves_dir=curves_dir,
            extra_fingerprint={"search_model": model_digest(search_model)},
            model_tokenizer=model_tokenizer, on_step=on_step)


def run_train_search(round_id: int, params_file: str = "params.yaml", backend: str | None = None) -> RunResult:
    """Stage ``train_search@<round_id>`` in the current directory (a checkout's layout): qa/qa_r<id>.parquet
    and index/ in, models/search_<id> and metrics/train/search_r<id>/ out; on ``backend`` (default:
    params ``train.backend``)."""
    import pyarrow.parquet as pq

    from factrl.config import load_section
    from factrl.data.schemas import QA_PAIRS, validate
    from factrl.retrieval.index import Retriever

    rnd = haris_rounds.find_round(load_section(RoundsParams, params_file).rounds, int(round_id))
    train = load_section(TrainParams, params_file)
    params: SearchTrainParams = train.search
    qa_file = Path("qa") / f"qa_r{rnd.id}.parquet"
    qa = validate(pq.read_table(qa_file), QA_PAIRS, str(qa_file))
    if (backend or train.backend) == "verl":
        from factrl.recipes import verl_rounds

        return verl_rounds.train("search", rnd, train, haris_rounds.search_prompts(qa, params))
    result = train_search(
        qa, str(checkpoint_of("search", rnd.prev)), Retriever("index", mode=params.retrieval_mode), params,
        state_dir=Path("checkpoints") / f"search_r{rnd.id}", out_model=checkpoint_of("search", rnd.id),
        curves_dir=Path("metrics") / "train" / f"search_r{rnd.id}")
    print(runs.summary_line(f"train_search@{rnd.id}", result))
    return result


def run_train_reason(round_id: int, params_file: str = "params.yaml", backend: str | None = None) -> RunResult:
    """Stage ``train_reason@<round_id>`` in the current directory: segments/<segment>.parquet, index/ and
    models/search_<id> in, models/reason_<id> and metrics/train/reason_r<id>/ out; on ``backend``
    (default: params ``train.backend``)."""
    from factrl.config import load_section
    from factrl.retrieval.index import Retriever

    rnd = haris_rounds.find_round(load_section(RoundsParams, params_file).rounds, int(round_id))
    train = load_section(TrainParams, params_file)
    params: ReasonTrainParams = train.reasoning
    claims = haris_rounds.round_claims(rnd, params.max_prompts)  # keep the (label, hops) balance when only a few are used
    if (backend or train.backend) == "verl":
        from factrl.recipes import verl_rounds

        return verl_rounds.train("reason", rnd, train, haris_rounds.reasoning_prompts(claims, params))
    result = train_reason(
        claims, str(checkpoint_of("reason", rnd.prev)), str(checkpoint_of("search", rnd.id)),
        Retriever("index", mode=params.retrieval_mode), params,
        state_dir=Path("checkpoints") / f"reason_r{rnd.id}", out_model=checkpoint_of("reason", rnd.id),
        curves_dir=Path("metrics") / "train" / f"reason_r{rnd.id}", gate_path=gate_path(rnd.id))
    print(runs.summary_line(f"train_reason@{rnd.id}", result))
    return result
