"""The verl backend's plain parts (factrl.rl.verl_backend, factrl.recipes.haris.verl_rounds.plan): the
overrides compose with verl's own ``ppo_trainer`` config and pass verl's own validation, with the
paper's numbers where the paper profile says so; the exported rows load in verl's ``RLHFDataset``
with the real SmolLM2 tokenizer; ``factrl train --dry-run`` prints a complete command; verl's FSDP
checkpoints merge back into a Hugging Face model; verl's logged metrics become factrl's curve.

verl is imported unconditionally: without it these tests fail, not skip.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.utils.dataset.rl_dataset import RLHFDataset

from factrl import config as factrl_config
from factrl.model_names import RoundParams
from factrl.profiles import apply_profile
from factrl.recipes.haris import verl_rounds
from factrl.recipes.haris.params import TrainParams
from factrl.rl import verl_backend, verl_run
from factrl.rl.verl_backend import MAIN_PPO
from factrl.testing.pipeline_repo import edit_params

ROUND = RoundParams(id=1, prev=0, segment="all")


def plan_for(agent, train=None, tmp_path=None, **kw):
    paths = {"checkpoints_dir": tmp_path / "ck", "models_dir": tmp_path / "models"} if tmp_path else {}
    return verl_rounds.plan(agent, ROUND, train or TrainParams(), **paths, **kw)


def paper_train(repo_root, tmp_path) -> TrainParams:
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    apply_profile("paper", params, repo_root / "profiles")
    return factrl_config.load_section(TrainParams, params)


# --------------------------------------------------------------------------------------------
# overrides -> verl's config
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["pkg://factrl.recipes.haris.verl_loops", "/abs/x.parquet", "~/a b", "it's", "back\\slash",
                                   "end\\", "a,b", "x=y", "[a]", "", "1e-6", "true", "null", "5", "inf", "token-mean"])
def test_strings_survive_hydras_override_grammar(value):
    parsed = OverridesParser.create().parse_override(f"key={verl_backend.hydra_value(value)}")
    assert parsed.value() == value


@pytest.mark.parametrize("agent", ["search", "reason"])
def test_overrides_compose_and_pass_verls_validation(agent, tmp_path, repo_root):
    """Every generated key exists in verl's config (Hydra rejects unknown ones), no required value is
    left missing, and verl's own checks (batch divisibility, dataclass configs) accept the result."""
    for train in (TrainParams(), paper_train(repo_root, tmp_path)):
        p = plan_for(agent, train, tmp_path)
        cfg = verl_backend.compose(p.overrides)
        OmegaConf.resolve(cfg)
        assert OmegaConf.missing_keys(cfg) <= {"reward.reward_model.rollout.name"}, OmegaConf.missing_keys(cfg)
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        assert not need_critic(cfg) and need_reference_policy(cfg)  # GRPO: no critic, a KL reference
        for section in (cfg.algorithm, cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor):
            omega_conf_to_dataclass(section)


def test_the_paper_profile_is_the_papers_recipe(tmp_path, repo_root):
    train = paper_train(repo_root, tmp_path)
    cfg = verl_backend.compose(plan_for("reason", train, tmp_path).overrides)
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == "grpo" and rollout.n == 5 and rollout.temperature == 1.0
    assert rollout.tensor_model_parallel_size == 2 and cfg.data.train_batch_size == 48
    assert actor.optim.lr == 1e-6 and actor.use_kl_loss and actor.kl_loss_coef == 0.001
    assert cfg.data.max_prompt_length + cfg.data.max_response_length == 8192
    assert cfg.reward.custom_reward_function.path == "pkg://factrl.recipes.haris.verl_loops"
    assert rollout.agent.default_agent_loop == "haris_reasoning" and rollout.multi_turn.max_user_turns == 4
    # the engine/trainer gap corrected as the local trainer does: token TIS capped at tis_cap
    assert cfg.algorithm.rollout_correction.rollout_is == "token" and rollout.calculate_log_probs
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == train.reasoning.tis_cap > 0
    assert cfg.reward.custom_reward_function.reward_kwargs == {"require_question": False}
    search = verl_backend.compose(plan_for("search", train, tmp_path).overrides)
    assert search.reward.custom_reward_function.reward_kwargs == {"judge": "llm", "judge_threshold": 0.8,
                                                                  "judge_model": "openai:gpt-4o-mini"}


def test_the_single_gpu_recipe_of_the_docs_composes(tmp_path, repo_root):
    """docs/scale.md's one-GPU YAML, applied over the paper profile, is a config verl accepts."""
    import re

    import yaml

    text = (repo_root / "docs" / "scale.md").read_text()
    [block] = re.findall(r"```yaml\n(.*?)```", text.split("## One GPU", 1)[1].split("## ", 1)[0], re.S)
    params = tmp_path / "params.yaml"
    shutil.copy(repo_root / "params.yaml", params)
    apply_profile("paper", params, repo_root / "profiles")
    (tmp_path / "one_gpu.yaml").write_text(yaml.safe_dump(yaml.safe_load(block)))
    apply_profile(tmp_path / "one_gpu.yaml", params, repo_root / "profiles")
    train = factrl_config.load_section(TrainParams, params)
    cfg = verl_backend.compose(plan_for("reason", train, tmp_path).overrides)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.trainer.n_gpus_per_node == 1 and cfg.actor_rollout_ref.actor.fsdp_config.param_offload is True


def test_cluster_settings_reach_verl(tmp_path):
    import dataclasses

    cluster = dataclasses.replace(TrainParams().verl, n_gpus_per_node=4, nnodes=2, ray_address="ray://head:10001",
                                  rollout_engine="sglang", extra_overrides=("trainer.val_before_train=true",))
    cfg = verl_backend.compose(plan_for("search", TrainParams(verl=cluster), tmp_path).overrides)
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (4, 2)
    assert cfg.ray_kwargs.ray_init.address == "ray://head:10001" and cfg.actor_rollout_ref.rollout.name == "sglang"
    assert cfg.trainer.val_before_train is True  # extra overrides come last


def test_lora_settings_reach_verls_model_config(tmp_path):
    import dataclasses

    reasoning = dataclasses.replace(TrainParams().reasoning, lora_rank=16, lora_alpha=32, lora_targets="q_proj, v_proj")
    model = verl_backend.compose(plan_for("reason", TrainParams(reasoning=reasoning), tmp_path).overrides).actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha, list(model.target_modules)) == (16, 32, ["q_proj", "v_proj"])
    off = verl_backend.compose(plan_for("search", TrainParams(), tmp_path).overrides).actor_rollout_ref.model
    assert (off.lora_rank, off.target_modules) == (0, "all-linear")


def test_local_trainer_settings_without_a_verl_twin(tmp_path):
    """tis_cap 0 turns verl's rollout correction off too; require_question reaches the reward;
    dynamic sampling, which verl 0.9's main_ppo would silently ignore, is refused."""
    import dataclasses

    reasoning = dataclasses.replace(TrainParams().reasoning, tis_cap=0.0, require_question=True)
    cfg = verl_backend.compose(plan_for("reason", TrainParams(reasoning=reasoning), tmp_path).overrides)
    assert cfg.algorithm.rollout_correction.rollout_is is None
    assert cfg.reward.custom_reward_function.reward_kwargs == {"require_question": True}
    train = TrainParams(search=dataclasses.replace(TrainParams().search, dynamic_sampling=True))
    refused_sampling = "dynamic_sampling is not available on train.backend verl"
    with pytest.raises(ValueError, match=refused_sampling) as refused:
        plan_for("search", train, tmp_path)
    assert "set train.search.dynamic_sampling false" in str(refused.value)  # the section it lives in
    skipping = TrainParams(search=dataclasses.replace(TrainParams().search, skip_uniform_prompts=True))
    with pytest.raises(ValueError, match="skip_uniform_prompts is not available on train.backend verl"):
        plan_for("search", skipping, tmp_path)  # GRESO's filter is the local trainer's; verl 0.9 has none
    reasoning = TrainParams(reasoning=dataclasses.replace(TrainParams().reasoning, dynamic_sampling=True))
    with pytest.raises(ValueError, match="set train.reasoning.dynamic_sampling false"):
        plan_for("reason", reasoning, tmp_path)


def test_batch_that_splits_a_group_is_refused():
    import dataclasses

    train = TrainParams(search=dataclasses.replace(TrainParams().search, mini_batch_size=6, group_size=4))
    with pytest.raises(ValueError, match="mini_batch_size 6 is not a multiple of group_size 4"):
        plan_for("search", train)


# --------------------------------------------------------------------------------------------
# rows -> RLHFDataset
# --------------------------------------------------------------------------------------------


def test_exported_rows_load_in_verls_dataset(tmp_path):
    from transformers import AutoTokenizer

    from factrl.llm.models import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))
    items = {"search": [{"id": "q1", "question": "Who founded Orlen Studios?", "answer": "Ilse Parrow"},
                        {"id": "q2", "question": "Where was Ilse Parrow born?", "answer": "Tessik"}],
             "reason": [{"id": "c1", "claim": "The founder of Orlen Studios was born in Varna.", "label": "REFUTES"}]}
    for agent, rows in items.items():
        p = plan_for(agent, tmp_path=tmp_path / agent)
        verl_run.export(p, rows, tok)
        cfg = verl_backend.compose(p.overrides).data
        dataset = RLHFDataset(data_files=[str(p.train_file)], tokenizer=tok, config=cfg)
        assert len(dataset) == len(rows)
        first = dataset[0]
        expected = verl_rounds.agent_rows(agent, rows)[0]
        assert list(first["raw_prompt"]) == expected["prompt"]
        assert first["agent_name"] == expected["agent_name"] and first["data_source"] == expected["data_source"]
        assert first["reward_model"]["ground_truth"] == expected["reward_model"]["ground_truth"]
        assert first["index"] == 0 and first["tools_kwargs"] == expected["extra_info"]["tools_kwargs"]
        assert set(expected["extra_info"]) >= {"index", "tools_kwargs", "need_tools_kwargs"}


def test_a_balanced_run_feeds_verl_the_local_trainers_draws_in_order(tmp_path):
    """balance_by on verl: the rows are written as the local trainer draws them step by step and verl
    reads them in order (data.shuffle false): each of verl's batches is that step's balanced draw."""
    import dataclasses

    from transformers import AutoTokenizer

    from factrl.llm.models import resolve_model_path
    from factrl.rl.sampling import prompt_strata, step_prompts

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))
    # 3 SUPPORTS for every REFUTES: an unbalanced shuffle would often draw a step of one label
    items = [{"id": f"c{i}", "claim": f"Claim number {i} about Orlen Studios.",
              "label": "REFUTES" if i % 4 == 0 else "SUPPORTS"} for i in range(16)]
    reasoning = dataclasses.replace(TrainParams().reasoning, balance_by="label", prompts_per_step=4, steps=3)
    p = plan_for("reason", TrainParams(reasoning=reasoning), tmp_path)
    cfg = verl_backend.compose(p.overrides).data
    assert cfg.shuffle is False and cfg.train_batch_size == 4
    verl_run.export(p, items, tok)
    dataset = RLHFDataset(data_files=[str(p.train_file)], tokenizer=tok, config=cfg)
    # verl's create_rl_sampler reads a data.shuffle false dataset with a SequentialSampler (not called
    # here: it imports torchdata, which the CPU install leaves out)
    assert len(dataset) == 12
    strata = prompt_strata(items, "label")
    for step in range(3):
        batch = [dataset[k]["reward_model"]["ground_truth"] for k in range(4 * step, 4 * step + 4)]
        local = [items[i]["label"] for i in step_prompts(16, 4, reasoning.seed, step, strata)]
        assert batch == local and batch.count("REFUTES") == 1  # the strata in proportion, every step
    # unbalanced runs keep verl's own shuffle over the rows as they are
    plain = plan_for("reason", tmp_path=tmp_path / "plain")
    assert "data.shuffle=False" not in plain.overrides
    assert verl_run.step_rows([{"i": 0}], [{"label": "S"}], TrainParams().reasoning) == [{"i": 0}]


def test_export_names_the_bad_row(tmp_path):
    from transformers import AutoTokenizer

    from factrl.llm.models import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))
    p = plan_for("search", tmp_path=tmp_path)
    with pytest.raises(ValueError, match=r"row 1, field 'reward_model.ground_truth': empty"):
        verl_run.export(p, [{"id": "a", "question": "Q?", "answer": "A"},
                               {"id": "b", "question": "Q?", "answer": " "}])
    long = [{"id": "a", "question": "word " * 2000, "answer": "A"}]
    with pytest.raises(ValueError, match=r"row 0, field 'prompt': \d+ tokens, more than train.verl.max_prompt_length"):
        verl_run.export(p, long, tok)
    assert not p.train_file.exists()


# --------------------------------------------------------------------------------------------
# factrl train --dry-run
# --------------------------------------------------------------------------------------------


def test_dry_run_prints_a_complete_command(tmp_path, repo_root):
    shutil.copy(repo_root / "params.yaml", tmp_path / "params.yaml")
    # the demo samples dynamically, which verl 0.9's main_ppo cannot (a clear error); a verl run turns it off
    plain = {"dynamic_sampling": False}
    edit_params(tmp_path, {"train": {"search": plain, "reasoning": plain}})
    proc = subprocess.run([sys.executable, "-m", "factrl.cli", "train", "--backend", "verl", "--stage",
                           "train_reason@1", "--dry-run"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    [ppo] = [line for line in lines if "-m verl.trainer.main_ppo" in line]
    argv = shlex.split(ppo)
    assert argv[0].startswith("VERL_FILE_LOGGER_PATH=") and argv[1] == sys.executable and tuple(argv[2:4]) == MAIN_PPO
    overrides = argv[4:]
    cfg = verl_backend.compose(overrides)  # the printed command composes as it stands
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "models" / "reason_0")
    assert list(cfg.data.train_files) == [str(tmp_path / "checkpoints" / "reason_r1" / "train.parquet")]
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "haris_reasoning"
    # the servers the stage starts, before main_ppo: the retriever and L_r behind vllm serve
    assert any("serve-retriever --index" in line for line in lines)
    assert any(line.startswith(f"vllm serve {tmp_path / 'models' / 'search_1'}") for line in lines)
    # and the composed config, as YAML after the commands
    config = proc.stdout.split("# verl's ppo_trainer config with these overrides:\n", 1)[1]
    assert OmegaConf.create(config).actor_rollout_ref.rollout.n == 4


# --------------------------------------------------------------------------------------------
# checkpoints and metrics
# --------------------------------------------------------------------------------------------


def fake_fsdp_checkpoint(model, tok, actor_dir):
    """What verl's FSDP checkpoint manager writes at world size 1: the state dict, the FSDP config,
    and the config + tokenizer under huggingface/."""
    actor_dir.mkdir(parents=True)
    torch.save(model.state_dict(), actor_dir / "model_world_size_1_rank_0.pt")
    (actor_dir / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    model.config.architectures = [type(model).__name__]  # as a config saved with its model says
    model.config.save_pretrained(actor_dir / "huggingface")
    tok.save_pretrained(actor_dir / "huggingface")


def test_latest_checkpoint_merges_into_a_hugging_face_model(tmp_path):
    from transformers import AutoModelForCausalLM

    from tests.rl.tiny import tiny_model, tokenizer

    tok = tokenizer()
    local_dir = tmp_path / "verl"
    assert verl_backend.latest_checkpoint(local_dir) is None
    old, new = tiny_model(tok, seed=1), tiny_model(tok, seed=2)
    fake_fsdp_checkpoint(old, tok, local_dir / "global_step_2" / "actor")
    fake_fsdp_checkpoint(new, tok, local_dir / "global_step_4" / "actor")
    (local_dir / "global_step_6" / "actor").mkdir(parents=True)  # a checkpoint still being written
    (local_dir / verl_backend.LATEST).write_text("4")
    actor = verl_backend.latest_checkpoint(local_dir)
    assert actor == local_dir / "global_step_4" / "actor"
    merged = AutoModelForCausalLM.from_pretrained(verl_backend.merge_checkpoint(actor, tmp_path / "hf"))
    for (name, got), want in zip(merged.state_dict().items(), new.state_dict().values()):
        assert torch.equal(got.float(), want.bfloat16().float()), name  # verl's merger saves bf16
    assert (tmp_path / "hf" / "tokenizer.json").exists()


def test_metrics_rows_take_the_last_line_of_a_step():
    lines = [json.dumps({"step": 1, "data": {"critic/score/mean": 0.2, "actor/kl_loss": 0.01, "other": 3}}),
             json.dumps({"step": 2, "data": {"critic/score/mean": 0.1}}), "",
             json.dumps({"step": 2, "data": {"critic/score/mean": 0.4, "timing_s/step": 12.5,
                                              "response_length/mean": float("nan")}})]
    assert verl_backend.metrics_rows(lines) == [{"step": 1, "reward_mean": 0.2, "kl": 0.01},
                                                {"step": 2, "reward_mean": 0.4, "step_time": 12.5}]
