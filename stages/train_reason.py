"""Stage `train_reason@r`: GRPO of the reasoning agent on round r's claims, L_r serving searches.

    python -m stages.train_reason <round id> [params.yaml]      # DVC: train_reason@<id>

H_prev (models/reason_<prev>) verifies each claim of segments/<segment>.parquet, asking questions
that the just-trained search agent L_r (models/search_<id>) answers over index/: in-process by
default, or behind ``factrl serve-llm`` (params ``train.reasoning.search_backend: server``), as the
paper serves it. The reward is ``haris_reasoning`` (verdict against the gold label). Outputs:
models/reason_<id> (Hugging Face format), metrics/train/reason_r<id>.csv (a DVC plot); checkpoints
in checkpoints/reason_r<id> (DVC ``persist``) for resuming after a kill. ``train.backend: verl``
trains the same rows on verl instead, L_r behind ``vllm serve`` (``factrl.recipes.verl_rounds``).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.config import ReasonTrainParams, load_section
from factrl.data.schemas import CLAIMS, validate
from factrl.data.splits import balanced_subset
from factrl.llm.backends import open_llm
from factrl.recipes import haris_rounds


def train_reason(claims: pa.Table, init_model: str, search_model: str, retriever, params: ReasonTrainParams, *,
                 state_dir: Path, out_model: Path, metrics_path: Path, search_llm=None, model_tokenizer=None,
                 on_step=None) -> haris_rounds.RunResult:
    """H_prev -> H_r on ``claims``; ``search_model`` (L_r) answers the questions. ``search_llm``
    overrides how L_r is run (default: params ``search_backend``)."""
    haris_rounds.reasoning_reward_fn(params.reward)  # a wrong reward name stops here, before any model loads
    items = haris_rounds.reasoning_prompts(claims, params)
    retriever_tool = haris_rounds.RetrieverTool(retriever, k=params.top_k)
    rollout_params = haris_rounds.reasoning_rollout_params(params)
    served = haris_rounds.served_search_params(params)
    device = str(haris_rounds.train_device("reason", params))
    with (open_llm(search_model, params.search_backend, precision=params.precision, device=device)
          if search_llm is None else contextlib.nullcontext(search_llm)) as llm:
        tool = haris_rounds.search_agent_tool(llm, retriever_tool, served)

        def make_fns(policy):
            return (haris_rounds.reasoning_rollout_fn(policy, tool, rollout_params),
                    haris_rounds.reasoning_reward_fn(params.reward, require_question=params.require_question,
                                                     hop_reward=params.hop_reward,
                                                     hop_answers=haris_rounds.hop_answers_of(claims)))

        return haris_rounds.run_agent_training(
            agent="reason", init_model=init_model, items=items, cfg=params, make_fns=make_fns,
            state_dir=state_dir, out_model=out_model, metrics_path=metrics_path,
            extra_fingerprint={"search_model": haris_rounds.model_digest(search_model)},
            model_tokenizer=model_tokenizer, on_step=on_step)


def main(round_id: str, params_file: str = "params.yaml", backend: str | None = None) -> haris_rounds.RunResult:
    from factrl.retrieval.index import Retriever

    rnd = haris_rounds.find_round(load_section("rounds", params_file).rounds, int(round_id))
    train = load_section("train", params_file)
    params: ReasonTrainParams = train.reasoning
    segment_file = Path("segments") / f"{rnd.segment}.parquet"
    if not segment_file.exists():
        raise FileNotFoundError(f"{segment_file}: no such curriculum piece (round {rnd.id} asks for segment "
                                f"{rnd.segment!r}; check curriculum.segments)")
    claims = validate(pq.read_table(segment_file), CLAIMS, str(segment_file))
    if params.max_prompts:  # keep the (label, hops) balance when only a few claims are used
        claims = balanced_subset(claims, params.max_prompts)
    if (backend or train.backend) == "verl":
        from factrl.recipes import verl_rounds

        return verl_rounds.train("reason", rnd, train, haris_rounds.reasoning_prompts(claims, params))
    result = train_reason(
        claims, str(haris_rounds.checkpoint_of("reason", rnd.prev)), str(haris_rounds.checkpoint_of("search", rnd.id)),
        Retriever("index", mode=params.retrieval_mode), params,
        state_dir=Path("checkpoints") / f"reason_r{rnd.id}", out_model=haris_rounds.checkpoint_of("reason", rnd.id),
        metrics_path=Path("metrics") / "train" / f"reason_r{rnd.id}.csv")
    print(haris_rounds.summary_line(f"train_reason@{rnd.id}", result))
    return result


if __name__ == "__main__":
    main(*sys.argv[1:3])
