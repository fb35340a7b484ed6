"""HARIS's training stages of round r, ``train_search@r`` and ``train_reason@r``, on the local
trainer or on verl (params ``train.backend``).

:func:`train_search` and :func:`train_reason` are the local runs on given inputs (what the tests
drive); :func:`run_train` is the stage of either agent: it reads the round's inputs from the current
directory's layout (``qa/``, ``segments/``, ``index/``, ``models/``), as ``dvc repro`` and
``factrl train`` run it, and hands the rows to the chosen backend. What differs between the agents
is one :class:`RoundRun` each in :data:`ROUND_RUNS`, by the agent registry's name. The rollout,
reward and prompt parts they wire are :mod:`factrl.recipes.haris.rounds`'s, shared with verl; the run around them (fingerprint, resume,
the saved model) is :func:`factrl.rl.runs.run_agent_training`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from factrl.agents.registry import agent
from factrl.io import model_digest, write_json
from factrl.model_names import RoundParams, RoundsParams, checkpoint_of
from factrl.recipes.haris import rounds as haris_rounds
from factrl.recipes.haris.params import ReasonTrainParams, SearchTrainParams, TrainParams
from factrl.registry import Registry
from factrl.rl import runs
from factrl.rl.gate import NO_GATE, figures_by_stratum, gate_passes, gate_sentence
from factrl.rl.runs import RunResult


def gate_path(round_id: int) -> Path:
    """Where stage ``train_reason@<round_id>`` writes its starting pair's gate figures."""
    return Path("metrics") / "gate" / f"reason_r{round_id}.json"


GATE_FILE = "gate.json"  # the run's gate figures, in its state directory


def measure_gate(claims: pa.Table, init_model: str, tool, rollout_params, params: ReasonTrainParams,
                 device: str) -> dict:
    """The gate figures of the reasoning agent ``init_model`` (with ``tool``, the round's search agent)
    on ``params.gate_claims`` of ``claims`` balanced by (label, hops): ``gate_samples`` (at least
    ``group_size``) rollouts each at the training temperature, seeded by ``params.seed``, scored by the
    round's reward. Returns ``pass_at_1`` (mean correctness), ``pass_at_<samples>``, the all-equal
    rate of the round's groups of ``group_size`` (``uniform_group_rate``) and the rest of
    :func:`factrl.rl.gate.group_figures`, overall and ``per_hop``, with ``claims`` and ``seconds``."""
    import time

    from factrl.data.splits import balanced_subset
    from factrl.llm.backends import open_llm
    from factrl.rl.sampling import seed_everything

    items = haris_rounds.reasoning_items(balanced_subset(claims, params.gate_claims))
    g = params.group_size
    n = max(params.gate_samples, g)  # pass@n from n samples; the all-equal rate is for groups of g
    score = haris_rounds.reasoning_reward_fn(params.reward, require_question=params.require_question)
    t0 = time.perf_counter()
    with open_llm(init_model, "local", precision=params.precision, device=device) as policy:
        seed_everything(params.seed)
        trajectories = haris_rounds.reasoning_rollout_fn(policy, tool, rollout_params)(items, n)
    results = score([item for item in items for _ in range(n)], trajectories)
    overall, per_hop = figures_by_stratum(results, n, [f"{int(item['num_hops'])}hop" for item in items], group_size=g)

    def with_pass_names(f: dict) -> dict:
        return {"pass_at_1": f["accuracy"], f"pass_at_{n}": f["pass_at_k"], **f}

    out = with_pass_names(overall)
    open_, sentence = gate_passes(out)
    return {**out, "open": open_, "decision": sentence, "claims": len(items), "group_size": g, "samples": n,
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
    first, measured once per run (:func:`factrl.rl.runs.kept_in_state_dir`: a resumed stage does not
    measure them again)."""
    import contextlib

    from factrl.llm.backends import open_llm

    haris_rounds.reasoning_reward_fn(params.reward)  # a wrong reward name stops here, before any model loads
    items = haris_rounds.reasoning_prompts(claims, params)
    retriever_tool = haris_rounds.RetrieverTool(retriever, k=params.top_k)
    rollout_params = haris_rounds.reasoning_rollout_params(params)
    served = haris_rounds.served_search_params(params)
    device = str(runs.train_device(params, agent("reason").params_key))
    extra_fingerprint = {"search_model": model_digest(search_model)}
    with (open_llm(search_model, params.search_backend, precision=params.precision, device=device)
          if search_llm is None else contextlib.nullcontext(search_llm)) as llm:
        tool = haris_rounds.search_agent_tool(llm, retriever_tool, served)
        if gate_path is not None:
            gate = runs.kept_in_state_dir(
                state_dir, runs.fingerprint(params, init_model, items, extra_fingerprint), GATE_FILE,
                lambda: measure_gate(claims, init_model, tool, rollout_params, params, device)
                if params.gate_claims else NO_GATE)
            write_json(gate, gate_path)
            print(f"gate: {gate_sentence(gate)}", flush=True)

        def make_fns(policy):
            return (haris_rounds.reasoning_rollout_fn(policy, tool, rollout_params),
                    haris_rounds.reasoning_reward_fn(params.reward, require_question=params.require_question,
                                                     hop_reward=params.hop_reward,
                                                     hop_answers=haris_rounds.hop_answers_of(claims)))

        return runs.run_agent_training(
            agent="reason", params_key=agent("reason").params_key, init_model=init_model, items=items, cfg=params,
            make_fns=make_fns,
            state_dir=state_dir, out_model=out_model, curves_dir=curves_dir,
            extra_fingerprint=extra_fingerprint, model_tokenizer=model_tokenizer, on_step=on_step)


@dataclass(frozen=True)
class RoundRun:
    """What a round's stage ``train_<agent>@<r>`` does for one agent, apart from the run that is the
    same for every agent (:func:`run_train`).

    inputs(rnd, params): the round's rows for the agent, read from the checkout's layout.
    prompts(rows, params): the training items (what verl trains on).
    local(rows, rnd, params, paths): the local trainer's run on those rows.
    """

    inputs: Callable[[RoundParams, Any], Any]
    prompts: Callable[[Any, Any], list[dict]]
    local: Callable[[Any, RoundParams, Any, RoundPaths], RunResult]


@dataclass(frozen=True)
class RoundPaths:
    """Where an agent's round run reads and writes (the registry's layout, :class:`AgentSpec`)."""

    init_model: Path  # models/<agent>_<prev>
    out_model: Path  # models/<agent>_<r>
    state_dir: Path  # checkpoints/<agent>_r<id> (DVC persist: a killed run resumes)
    curves_dir: Path  # metrics/train/<agent>_r<id>

    @classmethod
    def of(cls, name: str, rnd: RoundParams) -> RoundPaths:
        spec = agent(name)
        return cls(checkpoint_of(name, rnd.prev), checkpoint_of(name, rnd.id), spec.state_dir(rnd.id),
                   spec.curves_dir(rnd.id))


def _search_inputs(rnd: RoundParams, params: SearchTrainParams) -> pa.Table:
    import pyarrow.parquet as pq

    from factrl.data.schemas import QA_PAIRS, validate

    qa_file = Path("qa") / f"qa_r{rnd.id}.parquet"
    return validate(pq.read_table(qa_file), QA_PAIRS, str(qa_file))


def _search_local(qa: pa.Table, rnd: RoundParams, params: SearchTrainParams, paths: RoundPaths) -> RunResult:
    from factrl.retrieval.index import Retriever

    return train_search(qa, str(paths.init_model), Retriever("index", mode=params.retrieval_mode), params,
                        state_dir=paths.state_dir, out_model=paths.out_model, curves_dir=paths.curves_dir)


def _reason_inputs(rnd: RoundParams, params: ReasonTrainParams) -> pa.Table:
    # keep the (label, hops) balance when only a few claims are used
    return haris_rounds.round_claims(rnd, params.max_prompts)


def _reason_local(claims: pa.Table, rnd: RoundParams, params: ReasonTrainParams, paths: RoundPaths) -> RunResult:
    from factrl.retrieval.index import Retriever

    return train_reason(claims, str(paths.init_model), str(checkpoint_of("search", rnd.id)),
                        Retriever("index", mode=params.retrieval_mode), params, state_dir=paths.state_dir,
                        out_model=paths.out_model, curves_dir=paths.curves_dir, gate_path=gate_path(rnd.id))


ROUND_RUNS: Registry[RoundRun] = Registry("round run")
ROUND_RUNS.add("search", RoundRun(_search_inputs, haris_rounds.search_prompts, _search_local))
ROUND_RUNS.add("reason", RoundRun(_reason_inputs, haris_rounds.reasoning_prompts, _reason_local))


def run_train(agent_name: str, round_id: int, params_file: str = "params.yaml", backend: str | None = None
              ) -> RunResult:
    """Stage ``train_<agent_name>@<round_id>`` in the current directory (a checkout's layout), for
    either agent of :mod:`factrl.agents.registry`: the agent's rows of the round in (``qa/qa_r<id>.parquet``
    for ``search``; the round's segment of ``segments/`` for ``reason``, which also reads
    ``models/search_<id>``), ``models/<agent>_<id>`` and ``metrics/train/<agent>_r<id>/`` out; on
    ``backend`` (default: params ``train.backend``): the local trainer, or verl on the same prompts."""
    from factrl.config import load_section

    spec = agent(agent_name)
    rnd = haris_rounds.find_round(load_section(RoundsParams, params_file).rounds, int(round_id))
    train = load_section(TrainParams, params_file)
    params = spec.train_params(train)
    recipe = ROUND_RUNS.lookup(spec.name)
    rows = recipe.inputs(rnd, params)
    if (backend or train.backend) == "verl":
        from factrl.recipes.haris import verl_rounds

        return verl_rounds.train(spec.name, rnd, train, recipe.prompts(rows, params))
    result = recipe.local(rows, rnd, params, RoundPaths.of(spec.name, rnd))
    print(runs.summary_line(f"{spec.train_stage}@{rnd.id}", result))
    return result
