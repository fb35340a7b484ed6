"""What a model setting in params names: the ``model`` section (the base policy, named once), the
``rounds`` section (HARIS Algorithm 1, whose ids the checkpoint names count), and
:func:`resolve_model`, the one place the symbolic names (``base``, ``warm``, ``last``, ``r<id>``) are
resolved to a model."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from factrl.agents.registry import AGENTS as AGENT_REGISTRY
from factrl.config import PARAMS_FILE, ConfigError, load_section, params_section
from factrl.llm.models import DEFAULT_POLICY, EMBEDDED_MODELS

T = TypeVar("T")


@params_section("model")
@dataclass(frozen=True)
class ModelParams:
    """The ``model`` section: the base policy, the one place it is named. Every agent's model setting
    elsewhere defaults to it or names it, or a round's checkpoint, symbolically (:func:`resolve_model`).

    base: the base model: what both agents are before the warm start (H_0 = L_0 with ``warmup.enabled``
        off), the baselines' model, and what the symbolic name ``base`` means everywhere. An embedded
        name (``smollm2-135m``), a Hugging Face directory or a hub id ``org/name``.
    """

    base: str = DEFAULT_POLICY


@dataclass(frozen=True)
class RoundParams:
    """One round r of the coordinated training (synthesize@r -> train_search@r -> train_reason@r).

    id: the round number r (1 = epoch 1; 2..N+1 = the epoch-2 segments): its key in ``rounds``,
        which names the round's DVC stages (``train_search@1`` is round 1) and files.
    prev: the round whose agents this one starts from (0 = the base models H_0 / L_0).
    segment: the claims of the round: ``all`` (epoch 1 = all of T) or ``seg1`` .. ``segN``
        (a file ``segments/<segment>.parquet`` written by the curriculum stage).
    questions: how synthesis samples one question per claim from the reasoning agent's rollout:
        ``first`` (the rollout's first question; epoch 1, while the untrained agent's format is
        unreliable) or ``all`` (uniformly among all its questions; later rounds).
    """

    id: int
    prev: int
    segment: str
    questions: Literal["first", "all"] = "all"


@params_section("rounds")
@dataclass(frozen=True)
class RoundsParams:
    """The ``rounds`` mapping of params.yaml: round id -> that round's settings. DVC's ``foreach``
    over a mapping names each stage by its key, so ``synthesize@2`` is round 2 everywhere.

    rounds: the rounds in id order; round 1 must start from round 0 and each later one from an
        earlier round.
    """

    MAP_FIELD = "rounds"  # the section is a YAML mapping keyed by round id, loaded into this field
    rounds: tuple[RoundParams, ...] = ()


MODELS_DIR = Path("models")
AGENTS = tuple(AGENT_REGISTRY)
"""The HARIS agents whose checkpoints live in ``models/<agent>_<round id>`` (``factrl.agents.registry``)."""
CHECKPOINT_NAMES = {
    "base": "params model.base",
    "warm": "models/<agent>_0, the warm start's H_0 / L_0 (stage warmup)",
    "last": "models/<agent>_<r>, r the highest round id in params rounds",
    "r<id>": "models/<agent>_<id>, round <id> of params rounds (r0 = warm)",
}
"""The symbolic model names :func:`resolve_model` accepts, and what each names."""
_ROUND_NAME = re.compile(r"r([0-9]+)")


def checkpoint_of(agent: str, round_id: int) -> Path:
    """Where round ``round_id``'s agent lives: models/reason_<r> or models/search_<r> (round 0: the
    warm start's output)."""
    return MODELS_DIR / f"{agent}_{round_id}"


def resolve_model(spec: str, agent: str | None, *, where: str, params_file: str | Path = PARAMS_FILE,
                  api: bool = False) -> str:
    """The model that ``spec`` (read at params key ``where``) names for ``agent`` (``reason`` or
    ``search``), the one place symbolic names are resolved:

    ``base`` -> params ``model.base``; ``warm`` -> models/<agent>_0; ``last`` -> models/<agent>_<r>
    with r the highest id in params ``rounds``; ``r<id>`` -> models/<agent>_<id> (a round of
    ``rounds``, or 0). Anything else is returned as it is if it is a model: an embedded name, a path
    (with a ``/``, or starting with ``.`` or ``~``) or a hub id ``org/name``; with ``api`` (the
    model of an OpenAI-compatible endpoint) any name. ``agent`` None (a model that is no agent's
    checkpoint: the baselines', the warm start's base) accepts ``base`` alone of the symbolic names.
    Reads the ``model`` and ``rounds`` sections of ``params_file``; a stage that resolves names lists
    them in its dvc.yaml ``params``. A wrong name is a :class:`ConfigError` naming ``params_file:where``.
    """
    here = f"{params_file}:{where}"
    if spec == "base":
        base = load_section(ModelParams, params_file).base
        if _is_symbolic(base):
            raise ConfigError(f"{params_file}:model.base: {base!r} is a symbolic name; the base must name a model")
        return _concrete(base, f"{params_file}:model.base")
    if not _is_symbolic(spec):
        return spec if api else _concrete(spec, here)
    if agent is None:
        raise ConfigError(f"{here}: {spec!r} names an agent's checkpoint; this model belongs to no agent: "
                          "use 'base' or a model")
    if agent not in AGENTS:
        raise ValueError(f"agent {agent!r} is not one of {AGENTS}")  # a programming error, not a params one
    if spec == "warm":
        return str(checkpoint_of(agent, 0))
    ids = [r.id for r in load_section(RoundsParams, params_file).rounds]
    if spec == "last":
        if not ids:
            raise ConfigError(f"{here}: 'last' names the last round's {agent} agent, but params rounds is empty "
                              "(use 'warm' or 'base')")
        return str(checkpoint_of(agent, ids[-1]))
    round_id = int(_ROUND_NAME.fullmatch(spec).group(1))
    if round_id != 0 and round_id not in ids:
        raise ConfigError(f"{here}: {spec!r}: round {round_id} is not in params rounds (ids: {ids}; r0 = warm)")
    return str(checkpoint_of(agent, round_id))


def load_with_base_model(cls: type[T], params_file: str | Path = PARAMS_FILE) -> T:
    """Section ``cls`` of ``params_file`` with its ``base_model`` resolved (:func:`resolve_model`, no
    agent's checkpoint: ``base`` or a model), the errors naming ``<section>.base_model``: what every
    stage that trains from a base model reads first (warmup, train_m2r, train_march, evaluate)."""
    params = load_section(cls, params_file)
    where = f"{cls.PARAMS_KEY}.base_model"  # type: ignore[attr-defined]  # set by @params_section
    base = resolve_model(params.base_model, None, where=where, params_file=params_file)
    return dataclasses.replace(params, base_model=base)


def chain_entry(entries: Sequence[Any], entry_id: int, *, section: str, noun: str) -> Any:
    """Entry ``entry_id`` of a keyed chain of params (``rounds``, ``m2r_stages``: each entry has ``id``
    and ``prev``), after checking that every entry starts from 0 or an earlier entry; a broken chain or
    a missing id is a :class:`ConfigError` naming ``section``."""
    known = {0}
    for entry in entries:
        if entry.prev not in known:
            raise ConfigError(f"params.yaml: {section}.{entry.id}.prev: prev {entry.prev} is not an earlier {noun}")
        known.add(entry.id)
    for entry in entries:
        if entry.id == entry_id:
            return entry
    raise ConfigError(f"params.yaml: {section} has no {noun} {entry_id} (ids: {[e.id for e in entries]})")


def _is_symbolic(spec: str) -> bool:
    return spec in ("base", "warm", "last") or _ROUND_NAME.fullmatch(spec) is not None


def _concrete(spec: str, here: str) -> str:
    """``spec`` if it names a model itself (embedded, a path, a hub id org/name), else a ConfigError."""
    if spec in EMBEDDED_MODELS or "/" in spec or spec.startswith((".", "~", "openai:")):
        return spec
    symbolic = "; ".join(f"{name} = {meaning}" for name, meaning in CHECKPOINT_NAMES.items())
    raise ConfigError(f"{here}: unknown model name {spec!r}; use a symbolic name ({symbolic}), an embedded "
                      f"model ({', '.join(EMBEDDED_MODELS)}), a model directory (./name) or a hub id org/name")

