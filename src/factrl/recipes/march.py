"""MARCH's run (stage ``train_march@<seed>``): warm start, held-out evaluation, joint GRPO, evaluation again.

One policy plays the three roles of :mod:`factrl.agents.march` on numeric RAG questions drawn from a
demo world's numeric facts (``factrl.data.world_numeric.numeric_questions``: years, counts, prices)::

    base model --warm start on reference episodes (optional)--> pi_0 --evaluate on held-out questions
        --GRPO: solver + checker trajectories, reward by name (march_ztr / march_err)--> pi_T --evaluate

The reward is an ``episode`` reward of the march family (``factrl.rewards.march``), chosen by name
(:func:`episode_reward`) and called with the episode's claims (``MarchEpisode.claims``); nothing here
knows which one it is. Each training episode trains as its
solver trajectory and its first checker sample (``train_roles``), each role in its own GRPO group per
question (``factrl.rl.sampling.joint_parts``). GRPO stands in for the paper's PPO with GAE (see
``TrainMarchParams``). With ``anchor_question`` the checker also answers the asked question, so an
answer is held to its question, not only to the facts it chose to state.

The warm start is the project's one mechanism (``factrl.recipes.warmup.replay_examples`` ->
``factrl.rl.sft.train_sft``) on reference episodes written from the world's facts: the solver states
the fact in one sentence, the proposer turns that sentence into its question / answer pair, the
checker quotes the passage's sentence and answers (every second reference also asks about an entity no
document mentions, answered "Cannot answer"). Each reference ends with the tokenizer's EOS, as a
sampled turn does.

Evaluation (greedy, on the held-out questions; ``factrl.agents.march.judge_answer``):
``hallucination_rate`` (answers stating a number that neither the documents nor the question contain,
or any number at all where the documents lack the answer: ``unanswerable`` questions), ``accuracy``
(the answer's first number not already in the question equals the gold number; on an unanswerable
question, no number), both also by kind, ``proposals_per_answer``, the reward's mean, and the format
failures by role. The stage's results file adds the per-step curves, wall time and peak memory.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from factrl.agents import march as agent
from factrl.config import ConfigError
from factrl.data.params import WorldParams
from factrl.data.world_numeric import numeric_questions
from factrl.recipes.march_params import TrainMarchParams
from factrl.rewards import march as march_rewards
from factrl.rewards.registry import RewardKind, RewardResult, choose_reward
from factrl.rl import verl_backend

ROLES_TRAINED = ("solver", "checker")  # the roles with a trajectory to train (the proposer only extracts)
WHERE = "params.yaml:train_march"
NO_TOOL = "</no-tool>"  # the roles call no tool: a stop tag no reference turn ends with
NO_EVIDENCE = "No document gives this number."  # the checker's evidence line when it cannot answer


# --------------------------------------------------------------------------------------------
# params
# --------------------------------------------------------------------------------------------


def episode_reward(name: str, key: str | None = "train_march.reward") -> Callable:
    """The ``episode`` reward ``name`` of the march family (``(solver, checker) -> RewardResult``); an
    :class:`~factrl.registry.UnknownName` (a KeyError) naming ``key`` when it is none: unknown, of
    another family, or of another kind (:class:`~factrl.rewards.registry.WrongRewardKind`)."""
    return choose_reward(name, RewardKind.EPISODE, march_rewards.REWARDS, key=key)


def check_params(p: TrainMarchParams, where: str = WHERE) -> None:
    """Names and sizes the section's dataclass cannot check; a :class:`ConfigError` naming the key."""
    try:
        episode_reward(p.reward, key=None)
    except KeyError as exc:
        raise ConfigError(f"{where}.reward: {exc}") from None
    unknown = [r for r in p.train_roles if r not in ROLES_TRAINED]
    if unknown or not p.train_roles:
        raise ConfigError(f"{where}.train_roles: {list(p.train_roles)} must be a non-empty subset of "
                          f"{list(ROLES_TRAINED)} (unknown: {unknown})")
    if p.checker_samples < 1:
        raise ConfigError(f"{where}.checker_samples: must be >= 1, got {p.checker_samples}")
    if not 0 < p.held_out < p.num_questions:
        raise ConfigError(f"{where}.held_out: must be between 1 and num_questions - 1 ({p.num_questions - 1}), "
                          f"got {p.held_out}")
    if p.num_documents < 1:
        raise ConfigError(f"{where}.num_documents: must be >= 1, got {p.num_documents}")
    if not 0.0 <= p.unanswerable < 1.0:
        raise ConfigError(f"{where}.unanswerable: must be a share in [0, 1), got {p.unanswerable}")
    if p.backend == "verl":  # what verl 0.9 cannot run (see TrainMarchParams.backend)
        if tuple(p.train_roles) != ("solver",):
            raise ConfigError(f"{where}.train_roles: {list(p.train_roles)} on backend verl; verl returns one "
                              "trajectory per row, so only [solver] trains there (or use backend local)")
        try:
            verl_backend.check_grpo(p, p.verl, section=where, cluster_section=f"{where}.verl",
                                    backend_key=f"{where}.backend")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def run_params(p: TrainMarchParams, seed: int) -> TrainMarchParams:
    """The params of the run with ``seed`` (it replaces ``seed`` everywhere the run draws)."""
    return dataclasses.replace(p, seed=seed)


# --------------------------------------------------------------------------------------------
# questions and references
# --------------------------------------------------------------------------------------------


def question_rows(p: TrainMarchParams) -> tuple[list[dict], list[dict]]:
    """``(train, held_out)`` numeric question rows of the run's world (``numeric_questions``)."""
    world = WorldParams(seed=p.world_seed, num_passages=p.world_passages, num_claims=0, hops=(2,))
    rows = numeric_questions(world, p.num_questions, p.num_documents, seed=p.seed,
                             unanswerable=p.unanswerable)
    return rows[p.held_out:], rows[:p.held_out]


def to_item(row: dict) -> agent.MarchItem:
    return agent.MarchItem(row["id"], row["question"], tuple(agent.Document(d["title"], d["text"])
                                                              for d in row["documents"]), row["answer"],
                           row.get("answerable", True))


def _evidence(row: dict) -> str:
    """The sentence of the answer's passage that states the number."""
    for doc in row["documents"]:
        for sentence in re.split(r"(?<=\.)\s+", doc["text"]):
            if row["answer"] in agent.extract_numbers(sentence) and doc["title"] in row["question"]:
                return sentence
    raise ValueError(f"question {row['id']}: no sentence of its documents states {row['answer']}")


def reference_rows(rows: Sequence[dict], eos: str) -> list[dict]:
    """Reference episodes of the three roles (``id``, ``agent``, ``messages``, ``turns``), one model
    turn each, ending with ``eos``. Every second checker reference adds a question about an entity of
    another row that this row's documents do not mention, answered ``Cannot answer``. A row whose
    documents lack its number (``answerable`` false) has the solver say so, the proposer find no number
    (``None``) and the checker answer the row's own question ``Cannot answer``."""
    out = []
    for k, row in enumerate(rows):
        item = to_item(row)
        if item.answerable:
            pairs = [(row["question"], row["answer"])]
            checks = [(_evidence(row), row["answer"])]
            if k % 2:
                titles = {d["title"] for d in row["documents"]}
                unrelated = (r for r in rows[k + 1:] + rows[:k]
                             if not any(t in r["question"] for t in titles))
                other = next(unrelated, None)
                if other is not None:
                    pairs.append((other["question"], other["answer"]))
                    checks.append((NO_EVIDENCE, agent.CANNOT_ANSWER))
            proposed, questions = pairs[:1], [q for q, _ in pairs]
        else:  # the solver declines, so there is no number to propose; the checker is asked the question
            proposed, questions, checks = [], [row["question"]], [(NO_EVIDENCE, agent.CANNOT_ANSWER)]
        for role, messages, text in (
            ("solver", agent.solver_messages(row["question"], item.documents), row["statement"]),
            ("proposer", agent.proposer_messages(row["statement"]), agent.proposer_text(proposed)),
            ("checker", agent.checker_messages(item.documents, questions), agent.checker_text(checks)),
        ):
            out.append({"id": f"{row['id']}:{role}", "agent": role, "messages": messages,
                        "turns": [{"role": "model", "text": text + eos}]})
    return out


def warm_start(model, tokenizer, train_rows: Sequence[dict], p: TrainMarchParams, state_dir: Path) -> dict:
    """Fine-tune ``model`` in place on the reference episodes of ``train_rows`` (all three roles, one
    policy); resumes from ``state_dir``. Returns the summary (examples, steps, losses, wall time)."""
    from factrl.agents.rollout import RolloutParams
    from factrl.recipes.warmup import examples_digest, replay_examples
    from factrl.rl.runs import fingerprint, prepare_state_dir
    from factrl.rl.sft import train_sft

    refs = reference_rows(train_rows, tokenizer.eos_token or "")
    params = RolloutParams(max_turns=0, max_context_tokens=p.max_context_tokens)
    examples, left_out = replay_examples(refs, tokenizer, lambda row: row["messages"], params, stop_tag=NO_TOOL)
    if not examples:
        raise ValueError(f"train_march: no reference fits max_context_tokens={p.max_context_tokens}")
    digest = fingerprint(p.warmup_sft, p.base_model, [], {"examples": examples_digest(examples), "seed": p.seed,
                                                          "precision": p.precision})
    prepare_state_dir(state_dir, digest)
    result = train_sft(model, tokenizer, [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in examples],
                       p.warmup_sft, state_dir / "trainer", seed=p.seed, precision=p.precision)
    return {"references": dict(Counter(r["agent"] for r in refs)), "examples": result.examples,
            "steps": result.steps, "first_loss": result.first_loss, "final_loss": result.final_loss,
            "wall_s": result.wall_s, "tokens_per_s": result.tokens_per_s, "left_out": dict(left_out)}


# --------------------------------------------------------------------------------------------
# rollouts, rewards, evaluation
# --------------------------------------------------------------------------------------------


def march_params(p: TrainMarchParams, *, greedy: bool = False) -> agent.MarchParams:
    """The roles' sampling: training samples at ``temperature`` (the checker at ``checker_temperature``);
    evaluation is greedy. The proposer and the checker get twice the solver's token budget (they
    write one line per number)."""
    temperature = 0.0 if greedy else p.temperature
    checker_t = temperature if greedy or p.checker_temperature is None else p.checker_temperature
    return agent.default_march_params(max_new_tokens=p.max_new_tokens, max_context_tokens=p.max_context_tokens,
                                      temperature=temperature, checker_temperature=checker_t,
                                      checker_samples=p.checker_samples, anchor_question=p.anchor_question)


def rollout_fn(llm, params: agent.MarchParams, train_roles: Sequence[str]) -> Callable:
    """``(items, n) -> episodes``: ``n`` MARCH episodes per question, item-major."""

    def rollout(items: list[agent.MarchItem], n: int) -> list[agent.MarchEpisode]:
        return agent.run_march(llm, items, params, n=n, train_roles=train_roles)

    return rollout


def reward_fn(name: str, failures: Counter | None = None) -> Callable:
    """``(items, episodes) -> RewardResults`` of the reward registered as ``name``; format failures
    are counted by role into ``failures``."""
    reward = episode_reward(name)

    def score(items: list, episodes: list[agent.MarchEpisode]) -> list[RewardResult]:
        if failures is not None:
            failures.update(role for ep in episodes for role in ep.format_errors)
        return [agent.score_episode(reward, ep) for ep in episodes]

    return score


def evaluate(llm, items: Sequence[agent.MarchItem], p: TrainMarchParams) -> dict:
    """Greedy episodes on ``items``: hallucination rate, accuracy, proposals per answer, the reward's
    mean and format failures by role (see the module docstring)."""
    episodes = agent.run_march(llm, list(items), march_params(p, greedy=True))
    scored = [agent.score_episode(episode_reward(p.reward), ep) for ep in episodes]
    failures = Counter(role for ep in episodes for role in ep.format_errors)

    def by_kind(part: str) -> dict:
        """``part``'s rate on the answerable and the unanswerable questions apart (None: none of them)."""
        out = {}
        for kind, flag in (("answerable", 1.0), ("unanswerable", 0.0)):
            values = [r.parts[part] for r in scored if r.parts["answerable"] == flag]
            out[kind] = float(np.mean(values)) if values else None
        return out

    return {"questions": len(episodes),
            "unanswerable_questions": sum(not ep.item.answerable for ep in episodes),
            "hallucination_rate": float(np.mean([r.parts["hallucinated"] for r in scored])),
            "accuracy": float(np.mean([r.parts["correct"] for r in scored])),
            "hallucination_by_kind": by_kind("hallucinated"), "accuracy_by_kind": by_kind("correct"),
            "proposals_per_answer": float(np.mean([r.parts["proposals"] for r in scored])),
            "reward_mean": float(np.mean([r.score for r in scored])),
            "format_failures": {role: failures.get(role, 0) for role in agent.ROLES},
            "examples": [{"id": ep.item.id, "question": ep.item.question, "gold": ep.item.answer,
                          "answer": ep.response, "proposals": [list(x) for x in ep.proposals.pairs],
                          "audited": [list(x) for x in ep.audited], "checker": [c.answers for c in ep.checks],
                          "format_errors": ep.format_errors}
                         for ep in episodes[:4]]}


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


def run(p: TrainMarchParams, *, state_dir: Path, out_model: Path, curves_dir: Path,
        model_tokenizer: tuple | None = None, on_step: Callable[[dict], None] | None = None) -> dict:
    """One MARCH run with ``p`` (its ``seed`` already the run's): warm start (when ``p.warmup``),
    evaluation, GRPO into ``out_model``, evaluation. Returns the results (see the module docstring).
    A killed run resumes: the warm start and GRPO from their checkpoints under ``state_dir``."""
    from factrl.hardware import hardware_record, peak_rss_mib, resolve_device
    from factrl.llm.local import LocalLLM
    from factrl.llm.models import load_model_and_tokenizer
    from factrl.rl.runs import run_agent_training, save_model

    check_params(p)
    start = time.perf_counter()
    state_dir = Path(state_dir)
    train_rows, held_rows = question_rows(p)
    device = resolve_device(p.device, key=f"{WHERE}.device")
    model, tok = model_tokenizer if model_tokenizer is not None else load_model_and_tokenizer(p.base_model,
                                                                                                device=device)
    warm = {"enabled": p.warmup}
    init = p.base_model
    if p.warmup:
        warm |= warm_start(model, tok, train_rows, p, state_dir / "warmup")
        init = str(state_dir / "warm_model")  # what GRPO starts from (its fingerprint reads these weights)
        save_model(model, tok, Path(init), {"base_model": p.base_model, "warm_start": True, **warm})
        print(f"train_march: warm start {warm['steps']} steps on {warm['examples']} examples, loss "
              f"{warm['first_loss']:.3f} -> {warm['final_loss']:.3f}", flush=True)
    held = [to_item(r) for r in held_rows]
    before = evaluate(LocalLLM(model_obj=model, tokenizer=tok, precision=p.precision), held, p)
    print(f"train_march: before: hallucination {before['hallucination_rate']:.2f}, accuracy "
          f"{before['accuracy']:.2f}, proposals {before['proposals_per_answer']:.2f}", flush=True)
    failures: Counter = Counter()

    def make_fns(policy):
        return rollout_fn(policy, march_params(p), p.train_roles), reward_fn(p.reward, failures)

    if p.backend == "verl":  # the solver trains on the cluster; the evaluation reads the merged model
        from factrl.recipes import march_verl

        result = march_verl.train(p, [to_item(r) for r in train_rows], init_model=init, out_model=out_model,
                                  curves_dir=curves_dir, work_dir=state_dir / "verl")
        model, tok = load_model_and_tokenizer(str(out_model), device=device)
    else:
        result = run_agent_training(agent="march", params_key="train_march", init_model=init,
                                    items=[to_item(r) for r in train_rows], cfg=p,
                                    make_fns=make_fns, state_dir=state_dir / "grpo", out_model=out_model,
                                    curves_dir=curves_dir, model_tokenizer=(model, tok), on_step=on_step)
    after = evaluate(LocalLLM(model_obj=model, tokenizer=tok, precision=p.precision), held, p)
    print(f"train_march: after: hallucination {after['hallucination_rate']:.2f}, accuracy "
          f"{after['accuracy']:.2f}, proposals {after['proposals_per_answer']:.2f}", flush=True)
    rows = result.rows
    return {
        "seed": p.seed, "reward": p.reward, "train_roles": list(p.train_roles), "base_model": p.base_model,
        "questions": {"train": len(train_rows), "held_out": len(held_rows)},
        "warmup": warm, "before": before, "after": after,
        "training": {"steps": len(rows), "resumed": result.resumed,
                     "reward_mean": [r.get("reward_mean") for r in rows],
                     "proposals_per_answer": [r.get("proposals_rate") for r in rows],
                     "correct_rate": [r.get("correct_rate") for r in rows],
                     "format_valid_rate": [r.get("format_valid_rate") for r in rows],
                     # counted in this session (a resumed run counts from its restart)
                     "format_failures": {role: failures.get(role, 0) for role in agent.ROLES}},
        "wall_seconds": time.perf_counter() - start, "peak_rss_mib": peak_rss_mib(),
        "hardware": hardware_record(p.precision, device),
    }


def write_results(results: dict, path: Path) -> None:
    from factrl.io import write_json

    write_json(json.loads(json.dumps(results, default=str)), path)
