"""The consensus's parameters, beside its code: the reward model (``factrl.consensus.reward_model``),
the PPO-trained aggregator (``factrl.consensus.aggregator``), the cross-validation protocol, and the
``fit_consensus`` section that nests them (run by ``factrl.recipes.scmaks``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from factrl.config import params_section


@dataclass(frozen=True)
class RewardModelParams:
    """The consensus reward model (``factrl.consensus.reward_model``): a feedforward network from one
    member's debate features on one claim to the probability that its final verdict is right.

    hidden: widths of the hidden layers.
    lr: Adam learning rate.
    weight_decay: Adam weight decay.
    epochs: full-batch epochs at most.
    patience: epochs without a better validation loss before training stops (the best is kept).
    """

    hidden: tuple[int, ...] = (32, 32)
    lr: float = 3e-3
    weight_decay: float = 1e-4
    epochs: int = 400
    patience: int = 40


@dataclass(frozen=True)
class AggregatorParams:
    """The consensus policy w_i(Q; theta) (``factrl.consensus.aggregator``): a softmax over the
    members of a claim, pre-trained towards historical accuracy, then PPO against the reward model.

    hidden: widths of the hidden layers of the per-member scorer.
    lr: Adam learning rate (pre-training and PPO).
    pretrain_steps: heuristic pre-training steps (cross-entropy to softmax(historical accuracy / T)).
    heuristic_temperature: T of that target.
    iterations: PPO iterations at most (each samples actions, then ``ppo_epochs`` updates).
    claims_per_iteration: training claims sampled per iteration (0 = all).
    samples_per_claim: actions (chosen members) sampled per claim and iteration.
    ppo_epochs: updates per iteration on its samples.
    clip_ratio: PPO's clip range: the probability ratio is clipped to [1 - clip, 1 + clip].
    entropy_coef: weight of the entropy bonus (keeps the weights from collapsing too early).
    patience: iterations without a better validation reward before PPO stops (the best is kept).
    """

    hidden: tuple[int, ...] = (32,)
    lr: float = 1e-2
    pretrain_steps: int = 200
    heuristic_temperature: float = 0.1
    iterations: int = 200
    claims_per_iteration: int = 0
    samples_per_claim: int = 4
    ppo_epochs: int = 4
    clip_ratio: float = 0.2
    entropy_coef: float = 0.01
    patience: int = 30


@dataclass(frozen=True)
class CrossValParams:
    """The paper's evaluation protocol: splits stratified by label, folds x seeds runs.

    folds: folds per seed; their test parts are disjoint (needs folds x test fraction <= 1).
    seeds: seeds of the stratified shuffles (one set of folds each).
    fractions: train / validation / test shares of every run (the paper's 70/15/15).
    """

    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)


@params_section("fit_consensus")
@dataclass(frozen=True)
class FitConsensusParams:
    """Stage ``fit_consensus``: debate features -> reward model -> PPO aggregator -> weighted vote,
    fitted on the debated ``train`` claims (``dev`` for early stopping) and scored on ``eval``, plus
    the paper's cross-validation; writes consensus/.

    ablations: consensus ablations switched on (``factrl.consensus.aggregator.ABLATIONS``):
        ``uniform_vote`` (w_i = 1/n instead of the learned weights), ``no_rlhf`` (the pre-trained
        heuristic weights, no PPO).
    reward_model: see :class:`RewardModelParams`.
    aggregator: see :class:`AggregatorParams`.
    cv: see :class:`CrossValParams`.
    seed: seeds the networks' initialisation and PPO's sampling.
    """

    ablations: tuple[str, ...] = ()
    reward_model: RewardModelParams = field(default_factory=RewardModelParams)
    aggregator: AggregatorParams = field(default_factory=AggregatorParams)
    cv: CrossValParams = field(default_factory=CrossValParams)
    seed: int = 0
