"""One agent's training run as a pipeline stage needs it: the machinery every local training recipe
shares (HARIS's rounds, M2R, MARCH, the warm start, SC-MAKS's provenance), whatever the agent.

:func:`run_agent_training` wraps :func:`factrl.rl.trainer.train` with a fingerprint of the run's
inputs (:func:`fingerprint`: params, initial weights, prompts, extras) in the (DVC ``persist``) state
directory (:func:`prepare_state_dir`), so a killed stage resumes from its last checkpoint while a
changed input starts over; per-step curves logged with DVCLive into the run's curves directory
(:mod:`factrl.rl.step_log`: the DVC plots and metrics files); and the final policy saved
in Hugging Face format with an atomic rename (:func:`save_model`). A run with no prompts passes its
model on unchanged (:func:`pass_on_unchanged`). The recipe supplies the agent's rollout and reward
functions; :mod:`factrl.rl.verl_run` runs the same contract on verl.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from factrl.io import model_digest, write_json
from factrl.rl.defects import plant
from factrl.rl.lora import plain_state_dict
from factrl.rl.params import AgentTrainParams, GRPOParams

FINGERPRINT_FILE = "fingerprint.json"


def select_prompts(items: list[dict], max_prompts: int, seed: int) -> list[dict]:
    """At most ``max_prompts`` items (0 = all) after a seeded shuffle, so a cap keeps a fair sample."""
    order = np.random.default_rng(seed).permutation(len(items))
    picked = [items[i] for i in order]
    return picked[:max_prompts] if max_prompts > 0 else picked


def train_device(cfg: AgentTrainParams, params_key: str):
    """The ``torch.device`` of an agent's training run (policy, engine, trainer, reference, and the
    models that serve it: the judge, L_r in-process); errors name ``params_key``, the section ``cfg``
    was read from (the recipe knows it: this module names no method)."""
    from factrl.hardware import resolve_device

    return resolve_device(cfg.device, key=f"{params_key}.device")


def grpo_params(p: AgentTrainParams) -> GRPOParams:
    """The :class:`GRPOParams` part of an agent's train params (what the trainer validates and saves)."""
    return GRPOParams(**{f.name: getattr(p, f.name) for f in dataclasses.fields(GRPOParams)})


# Settings that change how long a run is or where it computes, not what its steps compute: a run killed
# on a GPU resumes on a CPU, and raising ``steps`` continues a run from its newest checkpoint. The
# latter holds because step k's prompts and samples depend only on (seed, k, draw) (sampling.sample_step)
# and the lr schedule is warm-up then constant, not a function of the total (GRPOTrainer).
NOT_FINGERPRINTED = ("device", "steps", "checkpoint_every", "keep_checkpoints", "keep_final_checkpoint")


def fingerprint(cfg: AgentTrainParams, init_model: str, items: Sequence[dict], extra: dict | None = None) -> str:
    """Hash of everything a run's result depends on: params, initial weights, prompts, extras
    (e.g. the serving search agent's weights)."""
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_FINGERPRINTED}
    blob = json.dumps({"cfg": settings, "init": model_digest(init_model), "items": list(items),
                       "extra": extra or {}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def prepare_state_dir(state_dir: Path, digest: str) -> bool:
    """Keep ``state_dir`` (resume) when it belongs to the same run, else empty it (start over).
    Returns True when existing checkpoints will be resumed."""
    marker = state_dir / FINGERPRINT_FILE
    if marker.exists() and json.loads(marker.read_text())["fingerprint"] == digest:
        return (state_dir / "checkpoints").is_dir()
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"fingerprint": digest}) + "\n")
    return False


def kept_in_state_dir(state_dir: Path, digest: str, name: str, measure: Callable[[], dict]) -> dict:
    """``measure()``, run once per run: kept as ``state_dir/name`` and read back while the run's
    fingerprint ``digest`` stays the same (:func:`prepare_state_dir` empties the
    directory when it changes). The state directory is DVC ``persist``, so a killed stage resumed by
    ``dvc repro`` finds it there, whereas its metrics outputs were removed before the rerun."""
    prepare_state_dir(Path(state_dir), digest)
    kept = Path(state_dir) / name
    if not kept.exists():
        write_json(measure(), kept)
    return json.loads(kept.read_text())


def save_model(model, tokenizer, target: Path, info: dict) -> None:
    """Save in Hugging Face format beside ``target`` and rename into place (never half written)."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=plain_state_dict(model))  # LoRA adapters merged in: a plain model
    tokenizer.save_pretrained(tmp)
    (tmp / "factrl_train.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)


@dataclasses.dataclass
class RunResult:
    rows: list[dict]  # per-step metrics rows
    resumed: bool  # the run continued from checkpoints of a killed earlier run


def run_agent_training(
    *,
    agent: str,
    params_key: str,
    init_model: str,
    items: list[dict],
    cfg: AgentTrainParams,
    make_fns: Callable[[Any], tuple[Callable, Callable]],
    state_dir: Path,
    out_model: Path,
    curves_dir: Path,
    extra_fingerprint: dict | None = None,
    model_tokenizer: tuple | None = None,
    on_step: Callable[[dict], None] | None = None,
) -> RunResult:
    """GRPO of one agent from ``init_model`` on ``items`` (``cfg`` read from params section
    ``params_key``, which errors name); ``make_fns(policy_llm)`` returns the
    ``(rollout_fn, reward_fn)`` pair (the policy LLM shares the trained weights).

    Resumes from ``state_dir/checkpoints`` when the fingerprint of (params, initial weights,
    prompts, extras) matches; logs every step to the DVCLive directory ``curves_dir``
    (:mod:`factrl.rl.step_log`; rebuilt from the checkpoint's rows on a resume) and writes
    the final policy to ``out_model``; then drops the checkpoints (the model is the result) unless
    ``cfg.keep_final_checkpoint`` (a later, longer run continues from them). The
    policy, its engine, the trainer and the reference model run on ``cfg.device``; a given
    ``model_tokenizer`` pair is moved there.
    """
    from factrl.hardware import hardware_record, module_bytes
    from factrl.llm.local import LocalLLM
    from factrl.llm.models import load_model_and_tokenizer
    from factrl.rl.step_log import StepLog  # DVCLive: imported by a run, not by the rollout recipes
    from factrl.rl.trainer import GRPOTrainer, train

    state_dir = Path(state_dir)
    curves_dir = Path(curves_dir)
    if not items:
        return pass_on_unchanged(agent=agent, init_model=init_model, items=items, cfg=cfg, state_dir=state_dir,
                                 out_model=out_model, curves_dir=curves_dir, extra_fingerprint=extra_fingerprint,
                                 model_tokenizer=model_tokenizer)
    device = train_device(cfg, params_key)
    resumed = prepare_state_dir(state_dir, fingerprint(cfg, init_model, items, extra_fingerprint))
    if model_tokenizer is not None:
        model, tok = model_tokenizer
        model.to(device)
    else:
        model, tok = load_model_and_tokenizer(init_model, device=device)
    gcfg = grpo_params(cfg)
    trainer = GRPOTrainer(model, tok, gcfg)
    policy = LocalLLM(model_obj=model, tokenizer=tok, precision=gcfg.precision, model_name=f"{agent}-policy")
    # a planted defect (the learning benchmark's ablations; none by default) wraps what the agent returns;
    # a section without the field (MARCH's flat GRPOParams) plants none
    rollout_fn, reward_fn = plant(getattr(cfg, "planted_defect", ""), *make_fns(policy), seed=cfg.seed)
    memory = {**trainer.memory(), "engine_copy": module_bytes(policy.engine_model) if policy.engine_model
              is not model else 0}
    hardware = hardware_record(gcfg.precision, device)
    print(f"{agent}: {hardware['device']}, {hardware['precision']}; memory (GiB): "
          + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in memory.items())
          + f"; total {sum(memory.values()) / 2**30:.2f} before activations", flush=True)

    def step_done(row: dict) -> None:
        print(f"{agent} step {row['step']}/{gcfg.steps}: reward={row['reward_mean']:.3f} "
              f"format={row.get('format_valid_rate', float('nan')):.2f} kl={row.get('kl', 0.0):.4f} "
              f"len={row['response_length']:.0f} ({row['step_time']:.1f}s)", flush=True)
        if on_step is not None:
            on_step(row)

    # the policy engine's key/value slots hold every rollout's context until released: free them
    # before each update, which needs the memory (LocalLLM.release's own contract); with
    # free_caches its prefix cache too, which the update makes stale anyway
    rows = train(trainer, items, rollout_fn, reward_fn, state_dir, curves=functools.partial(StepLog, curves_dir),
                 on_step=step_done,
                 after_rollouts=policy.free_memory if gcfg.free_caches else policy.release)
    save_model(model, tok, out_model, {"agent": agent, "init": str(init_model), "steps": gcfg.steps,
                                       "prompts": len(items), "params": dataclasses.asdict(cfg),
                                       "final": rows[-1] if rows else {}, "hardware": hardware,
                                       "memory_bytes": memory})
    if not cfg.keep_final_checkpoint:
        shutil.rmtree(state_dir / "checkpoints", ignore_errors=True)
    return RunResult(rows=rows, resumed=resumed)


def pass_on_unchanged(*, agent: str, init_model: str, items: list[dict], cfg: AgentTrainParams, state_dir: Path,
                      out_model: Path, curves_dir: Path, extra_fingerprint: dict | None = None,
                      model_tokenizer: tuple | None = None) -> RunResult:
    """No training prompts this round (e.g. synthesis kept no question): the agent passes on
    unchanged (``out_model`` = ``init_model``), loudly, with empty curves, rather than stopping
    the whole pipeline."""
    from factrl.llm.models import load_model_and_tokenizer
    from factrl.rl.step_log import write_history

    print(f"WARNING: {agent}: no training prompts this round; {out_model} = {init_model} unchanged", flush=True)
    prepare_state_dir(Path(state_dir), fingerprint(cfg, init_model, items, extra_fingerprint))  # DVC's out exists
    model, tok = model_tokenizer if model_tokenizer is not None else load_model_and_tokenizer(init_model)
    write_history([], curves_dir)  # no curve, but the DVC outputs exist
    save_model(model, tok, out_model, {"agent": agent, "init": str(init_model), "steps": 0, "prompts": 0,
                                       "skipped": "no training prompts", "params": dataclasses.asdict(cfg)})
    return RunResult(rows=[], resumed=False)


def summary_line(stage: str, result: RunResult) -> str:
    """One line for a training stage's log: steps run, final mean reward, whether it resumed."""
    last = result.rows[-1] if result.rows else {"reward_mean": float("nan")}
    return (f"{stage}: {len(result.rows)} steps, final reward {last['reward_mean']:.3f}"
            + (" (resumed)" if result.resumed else ""))
