"""MARCH on verl (factrl.recipes.march_verl): the episode the local trainer runs, on a stand-in for
verl's rollout server, scored in the loop; the rows round-trip; bad config is a clear error.

verl is imported unconditionally (tests.verl_standin): without it these tests fail, not skip.
"""

from __future__ import annotations

import pytest

from factrl.agents import march
from factrl.agents.march import run_march, score_episode
from factrl.recipes.march_verl import MARCH, item_of, march_row
from factrl.rewards.march import zero_tolerance_reward
from tests.agents.test_march import ITEM, MISSING, answering_checker, scripted
from tests.verl_standin import StandInServer, build_loop, cpu_config, run_loops

SOLVERS = {ITEM.id: "Kavelo Works was founded in 1987.", MISSING.id: "Orlen Studios was founded in 1990."}
PROPOSER = {"1987": "- Question: In which year was Kavelo Works founded? [Answer: 1987]",
            "1990": "- Question: In which year was Sutar Labs founded? [Answer: 1990]"}


def solver_reply(prompt: str) -> str:
    return SOLVERS[ITEM.id] if ITEM.question in prompt else SOLVERS[MISSING.id]


def proposer_reply(prompt: str) -> str:
    return PROPOSER["1987"] if "1987" in prompt else PROPOSER["1990"]


@pytest.fixture(scope="module")
def config():
    return cpu_config("actor_rollout_ref.rollout.prompt_length=512",
                      "actor_rollout_ref.rollout.response_length=512")


def verl_episodes(config, llm, items, **march_config):
    server = StandInServer(llm)
    rows = [march_row(i, it) for i, it in enumerate(items)]
    outs = run_loops([(lambda: build_loop(MARCH, config, server, llm.tokenizer, [], march=march_config),
                       {"raw_prompt": row["prompt"], "index": i, "extra_info": row["extra_info"],
                        "reward_model": row["reward_model"]}) for i, row in enumerate(rows)])
    return outs, server


@pytest.mark.parametrize("anchor", [False, True])
def test_the_verl_loop_plays_the_local_episode_and_scores_it_in_the_loop(config, anchor):
    replies = {"solver": solver_reply, "proposer": proposer_reply, "checker": answering_checker}
    llm, _ = scripted(replies)
    params = march.default_march_params(checker_samples=3, anchor_question=anchor)
    local = run_march(llm, [ITEM, MISSING], params)
    verl_llm, seen = scripted(replies)
    outs, server = verl_episodes(config, verl_llm, [ITEM, MISSING], checker_samples=3, anchor_question=anchor)
    ztr = zero_tolerance_reward
    for out, episode in zip(outs, local):
        assert out.prompt_ids == episode.solver.prompt_ids  # the solver's trajectory is the row's sequence
        assert out.response_ids == episode.solver.response_ids
        assert out.response_mask == episode.solver.loss_mask
        scored = score_episode(ztr, episode)
        assert out.reward_score == scored.score
        assert out.extra_fields["reward_extra_info"] == pytest.approx(scored.parts)
    # Kavelo's year holds; an answer about Sutar Labs to a question about Orlen Studios passes only
    # unanchored
    assert [o.reward_score for o in outs] == ([1.0, 0.0] if anchor else [1.0, 1.0])
    assert outs[1].extra_fields["reward_extra_info"]["hallucinated"] == 1.0
    # every role ran on verl's server: solver, proposer and 3 checker samples per question
    assert len(server.requests) == 2 * 5
    for role, prompt in seen:
        if role == "checker":  # blind on verl too
            assert not any(s in prompt for s in SOLVERS.values())


def test_rows_round_trip_and_name_what_is_missing():
    for index, item in enumerate([ITEM, MISSING]):
        row = march_row(index, item)
        assert row["agent_name"] == MARCH and row["reward_model"]["ground_truth"] == item.answer
        assert item_of(row["extra_info"], row["reward_model"]["ground_truth"]) == item
    no_answer = march.MarchItem("q9", "How many?", ITEM.documents, None, answerable=False)
    row = march_row(0, no_answer)
    assert row["reward_model"]["ground_truth"] == march.CANNOT_ANSWER  # verl refuses an empty ground truth
    assert item_of(row["extra_info"], row["reward_model"]["ground_truth"]) == no_answer
    with pytest.raises(ValueError, match="a march row needs extra_info.documents"):
        item_of({"id": "q1", "question": "?"}, "1")


def test_bad_loop_config_is_a_clear_error(config):
    llm, _ = scripted({"solver": "", "proposer": "", "checker": ""})
    # Hydra wraps what the loop's constructor raises (InstantiationException), keeping its message
    with pytest.raises(Exception, match="unknown key march.checkers"):
        verl_episodes(config, llm, [ITEM], checkers=3)
    with pytest.raises(Exception, match="march_zero"):
        verl_episodes(config, llm, [ITEM], reward="march_zero")


def test_the_stage_plan_is_a_verl_config_with_the_march_loop_and_no_tool(tmp_path):
    from factrl.recipes.march_params import TrainMarchParams
    from factrl.recipes.march_verl import REWARD_MODULE, plan
    from factrl.rl import verl_backend

    p = TrainMarchParams(backend="verl", train_roles=("solver",), max_context_tokens=1536, steps=5, seed=2)
    vp = plan(p, init_model="/models/warm", out_model=tmp_path / "out", curves_dir=tmp_path / "curves",
              work_dir=tmp_path / "work", device="cpu")
    assert vp.stage == "train_march@2" and vp.tools == [] and not vp.servers
    cfg = verl_backend.compose(vp.overrides)  # verl's own config files accept every override
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == MARCH
    assert cfg.reward.custom_reward_function.path == REWARD_MODULE
    assert cfg.trainer.total_training_steps == 5 and cfg.actor_rollout_ref.rollout.n == p.group_size
    assert cfg.data.max_response_length == p.max_context_tokens - p.verl.max_prompt_length
