"""SC-MAKS's debate parameters: ``debate`` (the pool and the debate rounds, ``factrl.agents.debate``),
run by ``factrl.recipes.scmaks``; ``fit_consensus``'s section lives beside its code in
``factrl.consensus.params``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from factrl.config import params_section


@dataclass(frozen=True)
class MemberParams:
    """One debater of the SC-MAKS pool (an entry of ``debate.pool``).

    name: how the others address it in the debate and how results name it (unique in the pool).
    system: how it answers in the generation phase, a name of ``factrl.agents.systems_registry.system_names()``
        (the systems ``evaluate`` runs, with the same settings): ``haris`` (reasoning agent + search
        agent) or a registered baseline: ``single_agent``, ``rag``, ``decompose_verify``.
    model: its model (the reasoning agent's, for a ``haris`` member): a symbolic name (``base``, the
        default: params ``model.base``; ``warm``, ``last``, ``r<id>``: that round's models/reason_<id>;
        see :func:`resolve_model`), an embedded name, a Hugging Face directory or, with backend
        ``openai``, the API model name (``gpt-4o-mini``, a vLLM-served model); an ``openai:MODEL@URL``
        spec names its endpoint itself, whatever ``backend`` says. The debate stage depends on all of
        ``models/``, so a retrained checkpoint reruns it.
    search_model: the search agent of a ``haris`` member, the same way (``last``: models/search_<r>);
        empty = ``model``, read as the search agent's (``model: last`` alone pairs models/reason_<r>
        with models/search_<r>).
    backend: how the model runs, a name of ``factrl.llm.backends.BACKENDS``: ``local`` (in-process),
        ``server`` (factrl's own OpenAI-compatible server, started for the stage) or ``openai`` (any
        OpenAI-compatible endpoint).
    base_url: the ``openai`` backend's endpoint (empty = OpenAI's).
    api_key_env: environment variable holding that endpoint's key (read by the client, never stored).
    persona: a sentence that opens its debate prompts (the paper's heterogeneous roles).
    temperature: sampling temperature of its generation and debate turns (0 = greedy).
    seed: its sampling seed (sampled calls are seeded, hence cached and resumable).
    """

    name: str
    system: str
    model: str = "base"
    search_model: str = ""
    backend: str = "local"
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    persona: str = ""
    temperature: float = 0.0
    seed: int = 0


@params_section("debate")
@dataclass(frozen=True)
class DebateParams:
    """Stage ``debate``: SC-MAKS's generation phase and R debate rounds over the demo world's claims
    (``factrl.agents.debate``); writes debate/transcripts.parquet and debate/summary.json.

    pool: the debaters (see :class:`MemberParams`).
    splits: claim splits debated (``data/claims/<split>.parquet``): fit_consensus fits on ``train``,
        stops early on ``dev`` and scores ``eval``; its cross-validation pools them all.
    max_claims: claims per split, balanced by label and hops (0 = all).
    rounds: R, the debate rounds after the generation phase (the paper: 2-3).
    first_role: the role of round 1, ``cooperative`` or ``adversarial``; later rounds alternate.
    ablations: debate ablations switched on (``factrl.agents.debate.ABLATIONS``): ``no_adversary``
        (every round cooperative), ``no_coop`` (every round adversarial), ``fixed_agent`` (every
        member runs ``fixed_member``'s system and model). The consensus ablations are fit_consensus's.
    fixed_member: the member whose system and model ``fixed_agent`` gives everyone (empty = the first).
    samples: generation-phase answers per member: the first is its opening answer, the others (at
        ``sample_temperature``, seeds ``seed + 1``...) only feed the self-consistency feature.
    sample_temperature: the least temperature of those extra samples.
    retrieval_mode: how ``index/`` is searched (``bm25``, ``dense`` or ``hybrid``).
    top_k: passages per search in the generation phase (the papers' top-3).
    evidence_k: passages retrieved for the claim and shown, labelled [P1]..., to every debater.
    max_new_tokens: generation-phase tokens per agent turn.
    max_turns: generation-phase questions / searches per rollout.
    debate_max_tokens: tokens of one debate turn (critique and revised verdict).
    max_context_tokens: a debate turn's prompt + answer budget; above it the summarizer compresses the
        claim's earlier rounds, oldest first.
    summarizer: ``extractive`` (no model: stances, citations, first sentences) or ``llm``
        (``summarizer_member``'s model writes it), a name of ``factrl.agents.debate.SUMMARIZERS``.
    summarizer_member: the member whose model summarizes (empty = the first).
    summary_words: words of one round's summary.
    answer_chars: characters of an answer that the peers read.
    batch_size: claims per Prefect task (one checkpoint per batch and phase).
    concurrency: batches in flight (HTTP members; in-process models run one batch at a time).
    retries: Prefect retries of a batch on I/O errors (connection, timeout).
    precision: weights of in-process models: ``auto`` (bf16 only where the CPU computes it natively),
        ``bf16`` or ``fp32``.
    verifier_reward: MAPoRL's verifier-shaped reward of every member's answer at every turn (the
        generation phase and each round), reported per member in debate/summary.json: empty = off,
        or ``maporl_immediate``, ``maporl_cumulative``, ``maporl_influence``
        (the ``verifier_shape`` rewards, ``factrl.rewards.maporl.SHAPES``); the verifier is the rule one (1 for the gold verdict) and
        the hacking guards score -10.
    verifier_gamma: the discount of the cumulative and influence-aware shapes (the paper's 1).
    verifier_min_tokens: the too-short guard: answers with fewer whitespace tokens score -10 (the
        paper's 50 on math; debate answers are shorter).
    """

    pool: tuple[MemberParams, ...] = (
        MemberParams(name="Ada", system="haris"),
        MemberParams(name="Ben", system="single_agent"),
        MemberParams(name="Cyd", system="rag"),
    )
    splits: tuple[str, ...] = ("train", "dev", "eval")
    max_claims: int = 0
    rounds: int = 2
    first_role: Literal["cooperative", "adversarial"] = "cooperative"
    ablations: tuple[str, ...] = ()
    fixed_member: str = ""
    samples: int = 1
    sample_temperature: float = 0.7
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = "hybrid"
    top_k: int = 3
    evidence_k: int = 3
    max_new_tokens: int = 64
    max_turns: int = 1
    debate_max_tokens: int = 96
    max_context_tokens: int = 2048
    summarizer: str = "extractive"
    summarizer_member: str = ""
    summary_words: int = 60
    answer_chars: int = 320
    batch_size: int = 8
    concurrency: int = 1
    retries: int = 2
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    verifier_reward: str = ""
    verifier_gamma: float = 1.0
    verifier_min_tokens: int = 50
