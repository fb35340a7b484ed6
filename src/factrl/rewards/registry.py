"""Reward families and their kinds: how params pick a reward by name (``reward: haris_reasoning``).

Every reward is a small pure function. Each reward module is a *family* (``haris``, ``m2r``,
``march``, ``maporl``) with its own :class:`RewardFamily` registry, ``REWARDS``, in which every
reward is registered with its name and its :class:`RewardKind`: the call convention it follows.
Code that chooses a reward by name imports the families it may choose among and asks for the kind
it will call (in the style of verl's ``register_adv_est`` and TRL's reward functions)::

    from factrl.rewards import haris, maporl
    from factrl.rewards.registry import RewardKind, choose_reward

    fn = choose_reward(name, RewardKind.CLAIM_VERDICT, haris.REWARDS, maporl.REWARDS,
                       key="train.reasoning.reward")

so that a stage's import closure (``factrl.devtools.deps``) names exactly the families it may run,
an edit to another family reruns none of its stages, and a bad name fails before training with a
:class:`WrongRewardKind` (the name is registered, as another kind) or an :class:`UnknownName` (no
family the caller loads has it; the message says which family the name would belong to). A reward's
name is its family's name or starts with it (``march_ztr``), which the registration checks.

``RewardResult`` is the common return type of the per-response kinds: the scalar the trainer uses,
its named parts (logged into the trajectories' ``reward_parts`` column) and whether the response
was well formed.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from factrl.registry import Registry, UnknownName

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class RewardResult:
    """One response's reward: ``score`` (what the policy sees), ``parts`` (for logs) and format validity."""

    score: float
    parts: dict[str, float] = field(default_factory=dict)
    format_valid: bool = True


class RewardKind(StrEnum):
    """A reward's call convention; :data:`KIND_CALLS` writes each one out, the Protocols below type it.

    - ``claim_verdict``: one verifier response against a claim's gold label (HARIS's reasoning agent).
    - ``search_report``: a batch of search reports judged against pseudo answers (HARIS's search agent).
    - ``answer``: one short answer against gold answers, with the saved key values (M2R).
    - ``episode``: one episode's claims, the solver's answers against the checker's samples (MARCH).
    - ``verifier_shape``: a ``[turns, agents]`` matrix of verifier scores shaped into rewards (MAPoRL).
    """

    CLAIM_VERDICT = "claim_verdict"
    SEARCH_REPORT = "search_report"
    ANSWER = "answer"
    EPISODE = "episode"
    VERIFIER_SHAPE = "verifier_shape"


KIND_CALLS: dict[RewardKind, str] = {
    RewardKind.CLAIM_VERDICT: "(response, label, *, num_hops=None, require_question=False) -> RewardResult",
    RewardKind.SEARCH_REPORT: "(responses, questions, answers, judge) -> list[RewardResult]",
    RewardKind.ANSWER: "(final_answer, gold_answers, *, format_valid, key_info=(), alpha, beta) -> RewardResult",
    RewardKind.EPISODE: "(solver_answers, checker_samples) -> RewardResult",
    RewardKind.VERIFIER_SHAPE: "(verifier[T, A], gamma=1.0) -> rewards[T, A]",
}


class ClaimVerdictReward(Protocol):
    """``claim_verdict``: ``response`` (generated text with injected results) against the gold ``label``;
    ``num_hops`` and ``require_question`` set the "ask before you decide" rule."""

    def __call__(self, response: str, label: str, *, num_hops: int | None = None,
                 require_question: bool | str = False) -> RewardResult: ...


class SearchReportReward(Protocol):
    """``search_report``: ``B`` responses, their ``B`` questions and pseudo answers, one judge call."""

    def __call__(self, responses: Sequence[str], questions: Sequence[str], answers: Sequence[str],
                 judge: Any) -> list[RewardResult]: ...


class AnswerReward(Protocol):
    """``answer``: the final answer (None when absent) against the gold answers, with key values."""

    def __call__(self, final_answer: str | None, gold_answers: Sequence[str], *, format_valid: bool,
                 key_info: Sequence[str] = (), alpha: float = ..., beta: float = ...) -> RewardResult: ...


class EpisodeReward(Protocol):
    """``episode``: ``N`` solver answers and, per claim, the checker's sample (or k samples)."""

    def __call__(self, solver: Sequence[str], checker: Sequence[str | Sequence[str]]) -> RewardResult: ...


class VerifierShape(Protocol):
    """``verifier_shape``: ``[T, A]`` verifier scores -> ``[T, A]`` rewards, discounted by ``gamma``."""

    def __call__(self, verifier: np.ndarray, gamma: float = 1.0) -> np.ndarray: ...


@dataclass(frozen=True)
class RewardSpec:
    """One registered reward: its ``name``, ``kind`` (call convention), ``family`` and function."""

    name: str
    kind: RewardKind
    family: str
    fn: Callable[..., Any]


class RewardFamily(Registry[RewardSpec]):
    """One reward module's rewards by name (``factrl.rewards.<family>.REWARDS``)."""

    def __init__(self, family: str) -> None:
        super().__init__(f"{family} reward")
        self.family = family

    def register(self, name: str, kind: RewardKind) -> Callable:  # type: ignore[override]
        """Decorator registering a function as reward ``name`` of ``kind``; the name must be the
        family's or start with ``<family>_``, so a name tells which module registers it."""
        if not isinstance(kind, RewardKind):
            raise TypeError(f"reward {name!r}: kind must be a RewardKind, got {kind!r}")
        if name != self.family and not name.startswith(f"{self.family}_"):
            raise ValueError(f"reward {name!r} of family {self.family!r} must be named {self.family!r} "
                             f"or start with '{self.family}_'")

        def deco(fn: Callable) -> Callable:
            existing = self.get(name)
            if existing is not None and existing.fn is fn and existing.kind is kind:
                return fn  # re-registering the same function (a module reloaded) is a no-op
            self.add(name, RewardSpec(name, kind, self.family, fn))
            return fn

        return deco

    def names(self, kind: RewardKind | None = None) -> list[str]:
        """The names registered here (of ``kind`` only, when given), sorted."""
        return sorted(n for n, spec in self.items() if kind is None or spec.kind is kind)


class WrongRewardKind(UnknownName):
    """A reward chosen by name that is registered, but as another kind than the caller calls (to code
    that catches a bad name, it is one: a KeyError and a ValueError)."""


def family_modules() -> list[str]:
    """The reward families that exist: the modules of ``factrl.rewards`` beside this one (listed
    from the package directory, not imported)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name != "registry")


def family_of(name: str) -> str | None:
    """The family a reward name belongs to by the naming rule (``march_ztr`` -> ``march``), or None."""
    fits = [f for f in family_modules() if name == f or name.startswith(f"{f}_")]
    return max(fits, key=len, default=None)


def choose_reward(name: str, kind: RewardKind, *families: RewardFamily, key: str | None = None) -> Callable[..., Any]:
    """The function of reward ``name``, looked up in ``families`` (those the caller imports), checked to
    be of ``kind``. ``key``: the params key the name came from (``train_march.reward``), named in errors.

    Raises :class:`WrongRewardKind` when ``name`` is registered there as another kind, and
    :class:`UnknownName` when none of ``families`` has it; both list the rewards of ``kind`` the
    families offer, and the second names the family the name would belong to."""
    if not families:
        raise TypeError("choose_reward needs at least one reward family to choose from")
    where = f"params {key}: " if key else ""
    offered = sorted(n for fam in families for n in fam.names(kind))
    loaded = [fam.family for fam in families]
    for fam in families:
        spec = fam.get(name)
        if spec is None:
            continue
        if spec.kind is not kind:
            raise WrongRewardKind(
                f"{where}reward {name!r} is a {spec.kind} reward, called {KIND_CALLS[spec.kind]}; this needs a "
                f"{kind} reward, called {KIND_CALLS[kind]}: {offered}")
        return spec.fn
    family = family_of(name)
    if family is not None and family not in loaded:
        raise UnknownName(
            f"{where}reward {name!r} would be of the {family!r} family (factrl.rewards.{family}), which is not "
            f"loaded here: this chooses among the {kind} rewards of {loaded}: {offered}")
    raise UnknownName(f"{where}unknown reward {name!r}; the {kind} rewards of {loaded}: {offered}")
