"""Stage `train_search@r`: GRPO of the search agent on round r's pseudo-labelled questions.

    python -m stages.train_search <round id> [params.yaml]      # DVC: train_search@<id>

L_prev (models/search_<prev>) answers each question of qa/qa_r<id>.parquet by searching index/
(<search> -> top-k passages -> <report>); the reward is ``haris_search`` with the judge named in
params ``train.search.judge`` (``rule`` by default) comparing the report to the teacher's answer.
``train.backend: verl`` trains the same rows on verl instead (``factrl.recipes.verl_rounds``).
Outputs: models/search_<id> (Hugging Face format), metrics/train/search_r<id>.csv (one row per
step; a DVC plot). Checkpoints go to checkpoints/search_r<id> (DVC ``persist``), so a killed run
resumes where its last checkpoint left it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.config import SearchTrainParams, load_section
from factrl.data.schemas import QA_PAIRS, validate
from factrl.recipes import haris_rounds


def make_judge(params: SearchTrainParams):
    """The usefulness judge of the reward (``rule`` needs no model; ``llm`` loads ``judge_model``)."""
    return haris_rounds.search_judge(params.judge, params.judge_threshold, params.judge_model,
                                     device=haris_rounds.train_device("search", params))


def train_search(qa: pa.Table, init_model: str, retriever, params: SearchTrainParams, *, state_dir: Path,
                 out_model: Path, metrics_path: Path, judge=None, model_tokenizer=None, on_step=None
                 ) -> haris_rounds.RunResult:
    """L_prev -> L_r on the answered pairs of ``qa`` (``retriever`` has ``search(queries, k)``)."""
    items = haris_rounds.search_prompts(qa, params)
    judge = judge if judge is not None else make_judge(params)
    tool = haris_rounds.RetrieverTool(retriever, k=params.top_k)
    rollout_params = haris_rounds.search_rollout_params(params)

    def make_fns(policy):
        return haris_rounds.search_rollout_fn(policy, tool, rollout_params), haris_rounds.search_reward_fn(judge)

    return haris_rounds.run_agent_training(
        agent="search", init_model=init_model, items=items, cfg=params, make_fns=make_fns,
        state_dir=state_dir, out_model=out_model, metrics_path=metrics_path,
        extra_fingerprint={"judge": params.judge}, model_tokenizer=model_tokenizer, on_step=on_step)


def main(round_id: str, params_file: str = "params.yaml", backend: str | None = None) -> haris_rounds.RunResult:
    from factrl.retrieval.index import Retriever

    rnd = haris_rounds.find_round(load_section("rounds", params_file).rounds, int(round_id))
    train = load_section("train", params_file)
    params: SearchTrainParams = train.search
    qa_file = Path("qa") / f"qa_r{rnd.id}.parquet"
    qa = validate(pq.read_table(qa_file), QA_PAIRS, str(qa_file))
    if (backend or train.backend) == "verl":
        from factrl.recipes import verl_rounds

        return verl_rounds.train("search", rnd, train, haris_rounds.search_prompts(qa, params))
    result = train_search(
        qa, str(haris_rounds.checkpoint_of("search", rnd.prev)), Retriever("index", mode=params.retrieval_mode), params,
        state_dir=Path("checkpoints") / f"search_r{rnd.id}", out_model=haris_rounds.checkpoint_of("search", rnd.id),
        metrics_path=Path("metrics") / "train" / f"search_r{rnd.id}.csv")
    print(haris_rounds.summary_line(f"train_search@{rnd.id}", result))
    return result


if __name__ == "__main__":
    main(*sys.argv[1:3])
