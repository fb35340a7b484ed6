"""What one GRPO step trains on: its prompts, their rollouts and rewards (the trainer's sampling side).

:func:`sample_step` picks the step's prompts (:func:`draw_prompts`: consecutive slices of a seeded,
optionally stratified per-epoch order), rolls out ``G`` trajectories per prompt through a rollout
function and scores them with a reward function; with ``dynamic_sampling`` (DAPO; verl's
``algorithm.filter_groups``) it drops the groups whose rewards are all equal and draws again until
``prompts_per_step`` groups with signal are kept or ``max_sampling_draws`` draws were made. Every
draw's prompt choice and sampling seed are functions of ``(seed, step, draw)`` alone, which is what
lets a killed run resume exactly (:func:`factrl.rl.trainer.train`). :func:`joint_parts` expands
rollouts that train as several trajectories (MARCH's solver and checker) into their parts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from factrl.rl.advantages import uniform_group_rate
from factrl.rl.params import GRPOParams
from factrl.rl.prompt_skip import PromptSkipper


class TrajectoryLike(Protocol):
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]


RolloutFn = Callable[[list[Any], int], list[TrajectoryLike]]
"""``(prompt items, n) -> trajectories``: ``n`` per item, item-major (item 0's n first)."""

RewardFn = Callable[[list[Any], list[TrajectoryLike]], list[Any]]
"""``(items repeated per trajectory, trajectories) -> rewards``: floats, or objects with ``score``
and ``format_valid`` (``factrl.rewards`` results)."""


def epoch_order(num_prompts: int, rng: np.random.Generator, strata: Sequence | None = None) -> list[int]:
    """A random order of ``range(num_prompts)``; with ``strata`` (one label per prompt), a stratified
    one: each stratum's prompts, in random order, are spread evenly over the whole order (the j-th of a
    stratum of n sits at ``(j + u) / n`` for a random offset u per stratum), so every consecutive
    slice holds the strata in about their overall proportions (equal strata alternate)."""
    if strata is None:
        return rng.permutation(num_prompts).tolist()
    if len(strata) != num_prompts:
        raise ValueError(f"{len(strata)} strata for {num_prompts} prompts")
    groups: dict = {}
    for i, s in enumerate(strata):
        groups.setdefault(s, []).append(i)
    keyed = []
    for members in (groups[s] for s in sorted(groups, key=str)):  # sorted: the order is seed-determined
        offset = rng.random()
        keyed += [((j + offset) / len(members), int(i)) for j, i in enumerate(rng.permutation(members))]
    return [i for _, i in sorted(keyed)]


def step_prompts(num_prompts: int, per_step: int, seed: int, step: int,
                 strata: Sequence | None = None) -> list[int]:
    """Indices of the prompts of ``step``: consecutive slices of a per-epoch order (:func:`epoch_order`;
    stratified by ``strata`` when given, so each step holds the strata in proportion).

    A pure function of its arguments, so a resumed run sees the same prompts as an unbroken one.
    """
    if num_prompts < 1:
        raise ValueError("train() needs at least one prompt")
    orders: dict[int, list[int]] = {}
    out = []
    for k in range(step * per_step, (step + 1) * per_step):
        epoch, pos = divmod(k, num_prompts)
        if epoch not in orders:
            orders[epoch] = epoch_order(num_prompts, np.random.default_rng([seed, epoch]), strata)
        out.append(int(orders[epoch][pos]))
    return out


def draw_prompts(num_prompts: int, per_step: int, seed: int, step: int, draw: int,
                 drawn: set[int] = frozenset(), strata: Sequence | None = None) -> list[int]:
    """Indices of the prompts of draw ``draw`` of ``step``: draw 0 is :func:`step_prompts`; a later
    draw (dynamic sampling) is an order seeded by ``(seed, step, draw)`` (stratified by ``strata`` when
    given), prompts not ``drawn`` earlier in the step first. A pure function of its arguments, so a
    resumed run draws the same."""
    if draw == 0:
        return step_prompts(num_prompts, per_step, seed, step, strata)
    order = epoch_order(num_prompts, np.random.default_rng([seed, step, draw]), strata)
    ranked = [i for i in order if i not in drawn] + [i for i in order if i in drawn]
    return [int(ranked[k % num_prompts]) for k in range(per_step)]


def prompt_strata(prompts: Sequence[Any], key: str) -> list | None:
    """Each prompt's ``key``: a dict prompt's field or an object prompt's attribute (a MARCH
    question's ``answerable``); None when ``key`` is empty: no stratification."""
    if not key:
        return None
    missing = [i for i, p in enumerate(prompts) if not (key in p if isinstance(p, dict) else hasattr(p, key))]
    if missing:
        raise KeyError(f"balance_by: {key!r} is not a field of training prompt {missing[0]} "
                       f"({len(missing)} of {len(prompts)} prompts lack it)")
    return [p[key] if isinstance(p, dict) else getattr(p, key) for p in prompts]


SKIP_STREAM = 0x5C1F  # the pre-rollout filter's own random stream of a draw (apart from the draw's order)


def draw_seed(seed: int, step: int, draw: int) -> int:
    """The global seed of a draw's rollouts: draw 0 keeps the seed every step has always had."""
    if draw == 0:
        return seed * 1_000_003 + step
    return int(np.random.SeedSequence([seed, step, draw]).generate_state(1)[0])


def mixed_groups(scores: Sequence[float], group_size: int) -> list[int]:
    """Indices of the groups (consecutive runs of ``group_size`` scores) whose rewards differ, i.e.
    whose GRPO advantages are not all 0. A group of one is kept, as verl keeps it (its advantage
    is its reward)."""
    groups = [scores[k : k + group_size] for k in range(0, len(scores), group_size)]
    return [g for g, values in enumerate(groups) if len(values) == 1 or max(values) != min(values)]


@dataclass
class StepBatch:
    """Everything one step drew: ``trajectories``, ``scores``, ``results``, ``valid`` (format validity
    or None), ``group_ids`` (one per draw's prompt: ``draw * prompts_per_step + k``) over all draws;
    ``kept`` the trajectory indices trained on; ``draws`` how many draws were made; ``skipped`` how
    many prompts the pre-rollout filter passed over (:mod:`factrl.rl.prompt_skip`)."""

    trajectories: list
    results: list
    scores: list[float]
    valid: list[float] | None
    group_ids: list[int]
    kept: list[int]
    draws: int
    rollout_time: float
    reward_time: float
    skipped: int = 0


def sample_step(cfg: GRPOParams, prompts: Sequence[Any], rollout_fn: RolloutFn, reward_fn: RewardFn,
                step: int, skipper: PromptSkipper | None = None) -> StepBatch:
    """Roll out and score one step's prompts; with ``cfg.dynamic_sampling``, draw again (up to
    ``cfg.max_sampling_draws`` draws) until ``prompts_per_step`` groups with signal are kept, as
    DAPO does (verl ``algorithm.filter_groups``), and keep the first ``prompts_per_step`` of them. A
    later draw rolls out ``prompts_per_step`` prompts, or with ``cfg.redraw`` ``missing`` only as many
    as groups are still missing. With a ``skipper`` (``cfg.skip_uniform_prompts``), a drawn prompt
    whose recent groups were all-equal may give its place to one not drawn in the step yet, before any
    rollout (:class:`~factrl.rl.prompt_skip.PromptSkipper`, which records every group's outcome)."""
    g, per_step = cfg.group_size, cfg.prompts_per_step
    batch = StepBatch([], [], [], [], [], [], 0, 0.0, 0.0)
    drawn: set[int] = set()
    strata = prompt_strata(prompts, cfg.balance_by)
    max_draws = cfg.max_sampling_draws if cfg.dynamic_sampling else 1
    while batch.draws < max_draws and len(batch.kept) < per_step * g:
        t0 = time.perf_counter()
        seed_everything(draw_seed(cfg.seed, step, batch.draws))
        missing = per_step - len(batch.kept) // g
        size = missing if batch.draws and cfg.redraw == "missing" else per_step
        picked = draw_prompts(len(prompts), size, cfg.seed, step, batch.draws, drawn, strata)
        if skipper is not None:
            rng = np.random.default_rng([cfg.seed, step, batch.draws, SKIP_STREAM])
            spare = [i for i in epoch_order(len(prompts), rng, strata) if i not in drawn and i not in picked]
            picked, skipped = skipper.choose(picked + spare, size, rng)
            batch.skipped += skipped
        drawn.update(picked)
        items = [prompts[i] for i in picked]
        trajectories = rollout_fn(items, g)
        if len(trajectories) != len(items) * g:
            raise RuntimeError(f"rollout_fn returned {len(trajectories)} trajectories for {len(items)} prompts x G={g}")
        t1 = time.perf_counter()
        results = reward_fn([item for item in items for _ in range(g)], trajectories)
        scores, valid = _scores(results)
        if skipper is not None:
            skipper.record(picked, scores, g)
        batch.rollout_time += t1 - t0
        batch.reward_time += time.perf_counter() - t1
        offset = len(batch.trajectories)
        keep = mixed_groups(scores, g) if cfg.dynamic_sampling else range(len(items))
        room = per_step * g - len(batch.kept)  # the step trains on at most prompts_per_step groups
        batch.kept += [offset + k * g + j for k in keep for j in range(g)][:room]
        batch.trajectories += trajectories
        batch.results += results
        batch.scores += scores
        batch.valid = batch.valid + valid if batch.valid is not None and valid is not None else None
        batch.group_ids += [batch.draws * per_step + k for k in range(len(items)) for _ in range(g)]
        batch.draws += 1
    return batch


def joint_parts(trajectories: Sequence[Any], scores: Sequence[float], group_ids: Sequence
                ) -> tuple[list, list[float], list]:
    """Expand rollouts that train as several trajectories into those trajectories.

    A rollout with ``parts`` (``[(role, trajectory)]``; MARCH's episode: the solver's answer and the
    checker's audit) is replaced by each part, with the rollout's reward and the group id
    ``(group id, role)``: every role's trajectories of one prompt form their own GRPO group, so their
    advantages are estimated apart (MARCH eq. 8) while one update trains them jointly. Any other
    trajectory passes through unchanged. Returns ``(trajectories, scores, group_ids)``.
    """
    out_t, out_s, out_g = [], [], []
    for t, score, gid in zip(trajectories, scores, group_ids):
        parts = getattr(t, "parts", None)
        for role, part in parts if parts is not None else [(None, t)]:
            out_t.append(part)
            out_s.append(score)
            out_g.append(gid if role is None else (gid, role))
    return out_t, out_s, out_g


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (sampling in rollouts uses torch's global generator)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _scores(results: Sequence[Any]) -> tuple[list[float], list[float] | None]:
    scores, valid = [], []
    for r in results:
        if isinstance(r, (int, float)):
            scores.append(float(r))
            valid.append(None)
        else:
            scores.append(float(r.score))
            valid.append(getattr(r, "format_valid", None))
    known = [float(v) for v in valid if v is not None]
    return scores, (known if len(known) == len(valid) else None)


def step_row(step: int, metrics: Mapping[str, Any], batch: StepBatch, cfg: GRPOParams, *, updated: bool,
             train_time: float, step_time: float, cuda_peak_gib: float | None = None) -> dict[str, Any]:
    """One GRPO step's row: ``step`` (1-based), the update's ``metrics`` (``GRPOTrainer.step``), then
    what the step's ``batch`` drew (rewards, format validity, reward parts, tool calls) and its
    timings; ``cuda_peak_gib`` where the step ran on a GPU."""
    row = {"step": step, **metrics}
    if cuda_peak_gib is not None:
        row["cuda_peak_gib"] = cuda_peak_gib
    if cfg.dynamic_sampling or not updated:
        # what the policy did on every prompt drawn, not only on the groups it trained on
        spread = float(np.std(batch.scores, ddof=1)) if len(batch.scores) > 1 else 0.0
        row.update(reward_mean=float(np.mean(batch.scores)), reward_std=spread,
                   response_length=float(np.mean([len(t.response_ids) for t in batch.trajectories])))
    if cfg.skip_uniform_prompts:
        row["skipped_prompts"] = float(batch.skipped)
    if cfg.dynamic_sampling:
        row.update(kept_groups=float(len(batch.kept) // cfg.group_size), sampling_draws=float(batch.draws))
    if batch.valid is not None:  # only reward functions that judge format report it
        row["format_valid_rate"] = float(np.mean(batch.valid))
    row.update(part_rates(batch.results))
    row["uniform_group_rate"] = uniform_group_rate(batch.scores, batch.group_ids)
    row.update(group_pass_rate(batch.results, batch.group_ids))
    row["tool_calls"] = float(np.mean([getattr(t, "num_tool_calls", 0) for t in batch.trajectories]))
    row.update(rollout_time=batch.rollout_time, reward_time=batch.reward_time, train_time=train_time,
               step_time=step_time)
    return row


def group_pass_rate(results: Sequence[Any], group_ids: Sequence) -> dict[str, float]:
    """``pass_at_group``: the share of a step's groups with at least one right rollout (pass@G from
    G samples; beside ``correct_rate``, pass@1), where every result reports a ``correct`` part; {}
    otherwise. On step 1 it is the gate's pass@G of the starting policy (``factrl.rl.gate``)."""
    parts = [getattr(r, "parts", None) or {} for r in results]
    if not parts or any("correct" not in p for p in parts):
        return {}
    right: dict = {}
    for p, g in zip(parts, group_ids):
        right[g] = right.get(g, False) or bool(p["correct"])
    return {"pass_at_group": sum(right.values()) / len(right)}


def part_rates(results: Sequence[Any]) -> dict[str, float]:
    """Mean of each reward part over a batch, as ``<part>_rate`` columns (``correct_rate``: the
    reasoning agent's training accuracy; ``useful_rate``: the search agent's judged-useful share).

    Only parts every result reports are averaged; ``format`` is left out (``format_valid_rate``
    already reports it) and plain-float rewards have no parts.
    """
    parts = [getattr(r, "parts", None) or {} for r in results]
    if not parts:
        return {}
    common = set(parts[0]).intersection(*parts[1:]) - {"format"}
    return {f"{name}_rate": float(np.mean([p[name] for p in parts])) for name in sorted(common)}
