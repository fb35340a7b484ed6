"""Stage ``train_march@<seed>``'s parameters: MARCH's solver / proposer / blinded checker trained
jointly (``factrl.recipes.march``; on verl: ``factrl.recipes.march_verl``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from factrl.config import params_section
from factrl.rl.params import GRPOParams, SFTParams, VerlParams


@params_section("train_march")
@dataclass(frozen=True)
class TrainMarchParams(GRPOParams):
    """Stage ``train_march@<seed>``: one policy plays MARCH's solver, proposer and blinded checker on
    numeric RAG questions of a demo world, and trains on the solver's and the checker's trajectories
    jointly (``factrl.recipes.march``). Every :class:`GRPOParams` field, flat (``dvc exp run -S
    train_march.lr=2e-5`` edits one key). The paper trains with PPO and GAE (a learned value head);
    the local trainer uses GRPO instead: each role's trajectories of a question form a group whose
    mean reward is the baseline, so no critic is trained (the paper's critic lr has no counterpart).
    GRPO's advantages do not move when every reward shifts by a constant, so ZTR's penalty form
    (-1 / 0) and its incentive form (0 / 1) train identically here.

    seeds: one run (DVC stage ``train_march@<seed>``) per seed; that seed replaces ``seed`` for the
        run's question split, warm start, sampling and prompt order. Empty (the default) = the stage
        is off, so ``make demo`` does not run it. The whole section is the stages' params
        dependency, so editing the list reruns every seed's stage.
    base_model: the policy the run starts from: ``base`` (params ``model.base``) or a model (an
        embedded name, HF directory or hub id); resolved by :func:`resolve_model`.
    backend: where the policy trains: ``local`` (``factrl.rl.trainer``, one device) or ``verl``
        (verl's ``main_ppo`` on a Ray GPU cluster, configured by ``verl``; each row one episode of
        ``factrl.recipes.march_verl``'s agent loop on verl's rollout server). verl 0.9 returns one
        trajectory per row, so on verl only the solver trains: ``train_roles`` must be ``[solver]``
        (the paper's solver-only ablation), and ``dynamic_sampling`` is local only (``balance_by``
        works on both: verl reads the rows in the local trainer's balanced order).
        The warm start and the before / after evaluation run in the stage's process either way.
    verl: the cluster settings of the ``verl`` backend (see :class:`VerlParams`; MARCH starts no
        server, so only its training fields apply).
    reward: an ``episode`` reward of the march family (``factrl.rewards.march``) scoring an episode
        from the solver's claims and the checker's votes: ``march_ztr`` (zero tolerance: every claim
        must hold) or ``march_err`` (minus the share of failed claims). Another name, or a reward of
        another kind or family, stops the stage with an error naming this key.
    train_roles: the roles whose trajectories are trained: ``[solver, checker]`` (the paper's joint
        training) or ``[solver]`` (its solver-only ablation). The proposer is never trained.
    checker_samples: checker samples per audited answer (k); a claim fails when the sum of their
        +1 (agrees with the solver's number) / -1 (anything else) votes is below 0.
    checker_temperature: the checker's sampling temperature in training (null = ``temperature``).
    anchor_question: audit the asked question itself as claim 0, claimed answered by the answer's
        number ("cannot answer" when it states none), before the proposer's pairs; the checker stays
        blind to the answer. Not in the paper (false = its setting): its strong proposer keeps the
        question's context, a 135M one does not, and then an answer stating true facts about another
        entity, or declining a question the documents answer, passes zero tolerance
        (``factrl.agents.march``; docs/runs/march-2026-11-25).
    world_seed / world_passages: the demo world the questions are asked about (its own, small).
    num_questions: numeric questions drawn (years, counts, prices of the world's entities).
    held_out: of those, questions kept apart for the before / after evaluation (never trained on).
    num_documents: documents given with each question: the answer's passage and same-type distractors.
    unanswerable: the share of questions (train and held out) whose own passage is swapped for another
        same-type one, as when retrieval misses: the right answer says the documents do not give the
        number, and stating any number is a hallucination. At 0 a warm solver hardly ever
        hallucinates (it copies a number its documents state; docs/runs/march-2026-11-25).
    max_context_tokens: prompt + response token cap of every role's turn.
    warmup: fine-tune the base model first on reference episodes of all three roles, built from the
        world's numeric facts (``factrl.recipes.march.reference_rows``), through the warm start's one
        mechanism (replay, loss mask, ``factrl.rl.sft``); a 135M model does not find the protocol alone.
    warmup_sft: that fine-tuning (see :class:`SFTParams`).
    """

    seeds: tuple[int, ...] = ()
    base_model: str = "base"
    backend: Literal["local", "verl"] = "local"
    verl: VerlParams = field(default_factory=VerlParams)
    reward: str = "march_ztr"
    train_roles: tuple[str, ...] = ("solver", "checker")
    checker_samples: int = 3
    checker_temperature: float | None = None
    anchor_question: bool = False
    world_seed: int = 13
    world_passages: int = 300
    num_questions: int = 64
    held_out: int = 16
    num_documents: int = 3
    unanswerable: float = 0.0
    max_context_tokens: int = 1024
    warmup: bool = True
    warmup_sft: SFTParams = field(default_factory=lambda: SFTParams(max_steps=12, lr=1e-4, batch_size=8))
