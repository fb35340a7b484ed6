"""``factrl train --stage train_reason@1 [--backend local|verl] [--dry-run]``: one training stage
outside DVC, on the backend of params ``train.backend`` or the one given.

``--dry-run`` runs nothing: for ``verl`` it prints the servers the stage would start, the
``python -m verl.trainer.main_ppo ...`` command, and verl's config composed with those overrides
(Hydra, verl's own config files: a key verl does not know fails here, not on the cluster); for
``local`` the stage command and the agent's params.
"""

from __future__ import annotations

import argparse
import re

import yaml

from factrl.agents.registry import AGENTS, by_stage
from factrl.config import PARAMS_FILE, load_section, to_dict
from factrl.model_names import RoundsParams
from factrl.recipes.haris.params import TrainParams

STAGES = {spec.train_stage: spec.name for spec in AGENTS.values()}  # train_reason -> reason


def parse_stage(stage: str) -> tuple[str, int]:
    """``train_reason@1`` -> ``("train_reason", 1)``."""
    m = re.fullmatch(r"(\w+)@(\d+)", stage)
    if m is None or m.group(1) not in STAGES:
        raise ValueError(f"--stage {stage!r}: expected " + " or ".join(f"{s}@<round>" for s in sorted(STAGES)))
    return m.group(1), int(m.group(2))


def dry_run(stage: str, round_id: int, backend: str, params_file: str) -> str:
    """What the stage would run (see the module docstring)."""
    from factrl.recipes.haris.rounds import find_round

    rnd = find_round(load_section(RoundsParams, params_file).rounds, round_id)
    train = load_section(TrainParams, params_file)
    spec = by_stage(stage)
    agent = spec.name
    if backend == "local":
        return f"python -m stages.{stage} {rnd.id} {params_file}\n# {spec.params_key}:\n" + yaml.safe_dump(
            to_dict(spec.train_params(train)), sort_keys=False)
    from omegaconf import OmegaConf

    from factrl.recipes.haris import verl_rounds
    from factrl.rl import verl_backend

    p = verl_rounds.plan(agent, rnd, train)
    config = OmegaConf.to_yaml(verl_backend.compose(p.overrides), resolve=False)
    return f"{p.describe()}\n\n# verl's ppo_trainer config with these overrides:\n{config}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="factrl train", description=__doc__.splitlines()[0])
    ap.add_argument("--stage", required=True, help="train_search@<round> or train_reason@<round>")
    ap.add_argument("--backend", choices=("local", "verl"), default=None, help="default: params train.backend")
    ap.add_argument("--params", default=PARAMS_FILE)
    ap.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    args = ap.parse_args(argv)
    try:
        stage, round_id = parse_stage(args.stage)
    except ValueError as exc:
        ap.error(str(exc))
    backend = args.backend or load_section(TrainParams, args.params).backend
    if args.dry_run:
        print(dry_run(stage, round_id, backend, args.params))
        return 0
    # the stage's recipe, in the current directory's layout (qa/, segments/, index/, models/), as DVC runs it
    from factrl.recipes.haris import train as haris_train

    haris_train.run_train(by_stage(stage).name, round_id, args.params, backend=backend)
    return 0

