"""The data contracts: one pyarrow schema per kind of file that moves between stages.

Every Parquet edge of the DVC graph has a schema here, and every reader validates against it
(``validate``), so a bad row is reported by file, row and field before anything downstream runs.

Kinds: claims, passages, questions / QA pairs (pseudo-labels), trajectories (rollouts with token
ids and loss masks), reference trajectories (the warm start's supervised targets), metrics rows,
and SC-MAKS's debate turns, consensus features and predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from factrl.verdicts import LABELS

# One hop of a multi-hop claim: the self-contained sub-question, its gold answer and the passages
# that state it. Kept for every demo-world claim so label quality and retrieval are measurable.
HOP = pa.struct(
    [
        pa.field("question", pa.string()),
        pa.field("answer", pa.string()),
        pa.field("passage_ids", pa.list_(pa.string())),
    ]
)

CLAIMS = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("claim", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("num_hops", pa.int32()),
        # evidence texts where the source has them, else evidence titles
        pa.field("evidence", pa.list_(pa.string())),
        # passage ids of the gold evidence in the corpus, where known (retrieval recall)
        pa.field("evidence_ids", pa.list_(pa.string())),
        pa.field("explanation", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("hops", pa.list_(HOP)),
        pa.field("split", pa.string()),
    ]
)

PASSAGES = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("text", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ]
)

# A question sampled from a reasoning-agent rollout and its teacher (pseudo) answer.
QA_PAIRS = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("claim_id", pa.string(), nullable=False),
        pa.field("claim", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("evidence", pa.list_(pa.string())),
        pa.field("rationale", pa.string()),
        pa.field("answer", pa.string()),  # null = the teacher judged it unanswerable
        pa.field("gold_answer", pa.string()),  # known in the demo world, else null
        pa.field("round", pa.int32(), nullable=False),
        pa.field("agent_checkpoint", pa.string()),
        pa.field("teacher_model", pa.string()),
        pa.field("prompt_hash", pa.string()),
    ]
)

TURN = pa.struct(
    [
        pa.field("role", pa.string()),  # "model" (generated) or "env" (injected by a tool)
        pa.field("text", pa.string()),
    ]
)

TRAJECTORIES = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),  # the claim or question id; groups for GRPO
        pa.field("agent", pa.string(), nullable=False),  # "reasoning" | "search" | ...
        pa.field("round", pa.int32()),
        pa.field("prompt_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_ids", pa.list_(pa.int32()), nullable=False),
        # 1 for tokens the policy generated, 0 for tokens injected by the environment
        pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),
        pa.field("turns", pa.list_(TURN)),
        pa.field("reward", pa.float32()),
        pa.field("reward_parts", pa.map_(pa.string(), pa.float32())),
        pa.field("format_valid", pa.bool_()),
        pa.field("num_tool_calls", pa.int32()),
    ]
)

# A reference trajectory of the supervised warm start (stage ``warmup``): what one agent should write
# for one prompt, in its own tag protocol. ``turns`` alternate the agent's own text ("model", trained
# on) and the raw tool answers it reads ("env": retrieved passages, search reports; wrapped in
# <result> and cut to the rollout's limit when replayed, never trained on). One contract for both
# sources: the demo world's gold chains and an LLM teacher's rejection-sampled rollouts.
REFERENCES = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("agent", pa.string(), nullable=False),  # "reasoning" | "search"
        pa.field("source", pa.string(), nullable=False),  # "world" | "teacher"
        pa.field("claim_id", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),  # the claim (reasoning) or the question (search)
        pa.field("label", pa.string()),  # the claim's gold label
        pa.field("num_hops", pa.int32()),
        pa.field("turns", pa.list_(TURN), nullable=False),
        pa.field("verdict", pa.string()),  # reasoning: the verdict the trajectory reaches
        pa.field("report", pa.string()),  # search: the report it ends with
        pa.field("teacher_model", pa.string()),  # who wrote it (null for the world's gold chains)
    ]
)
# Trajectories not kept for training, with why (wrong verdict, invalid format, retrieval miss, ...).
REFERENCES_REJECTED = REFERENCES.append(pa.field("reason", pa.string(), nullable=False))

METRICS = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("system", pa.string(), nullable=False),
        pa.field("num_hops", pa.int32()),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("ci_low", pa.float64()),
        pa.field("ci_high", pa.float64()),
        pa.field("n", pa.int64()),
    ]
)

# SC-MAKS debate transcripts: one row per member answer of every phase (round 0 = the generation
# phase, then the debate rounds), the extra self-consistency samples and the summaries made.
DEBATE_TURNS = pa.schema(
    [
        pa.field("claim_id", pa.string(), nullable=False),
        pa.field("claim", pa.string(), nullable=False),
        pa.field("split", pa.string()),
        pa.field("label", pa.string()),
        pa.field("num_hops", pa.int32()),
        pa.field("evidence_ids", pa.list_(pa.string())),  # the passages shown as [P1], [P2], ...
        pa.field("round", pa.int32(), nullable=False),
        pa.field("phase", pa.string(), nullable=False),  # generate | sample | cooperative | adversarial | summary
        pa.field("member", pa.string(), nullable=False),  # a pool member's name, or "summarizer"
        pa.field("system", pa.string()),
        pa.field("model", pa.string()),
        pa.field("sample", pa.int32(), nullable=False),  # 0 = the answer that enters the debate
        pa.field("verdict", pa.string()),  # this answer's verdict; null = none or a malformed output
        pa.field("stance", pa.string()),  # the member's verdict after this phase
        pa.field("text", pa.string()),  # what the peers read (or the summary)
        pa.field("format_valid", pa.bool_(), nullable=False),
        pa.field("error", pa.string()),  # the format failure, when there was one
        pa.field("cited", pa.list_(pa.string())),  # passage ids the answer quoted
        pa.field("addressed", pa.list_(pa.string())),  # peers it named
        pa.field("prompt_tokens", pa.int32()),
    ]
)

# One (claim, member) row of the consensus features (factrl.consensus.features.FEATURES by name).
CONSENSUS_FEATURES = pa.schema(
    [
        pa.field("claim_id", pa.string(), nullable=False),
        pa.field("split", pa.string()),
        pa.field("label", pa.string()),
        pa.field("member", pa.string(), nullable=False),
        pa.field("opening", pa.string()),  # the member's generation-phase verdict
        pa.field("stance", pa.string()),  # its verdict after the last round
        pa.field("correct", pa.bool_(), nullable=False),  # stance == label
        pa.field("features", pa.map_(pa.string(), pa.float64()), nullable=False),
    ]
)

# Verdicts of the consensus systems on the scored claims (one row per claim and system).
CONSENSUS_PREDICTIONS = pa.schema(
    [
        pa.field("claim_id", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("num_hops", pa.int32()),
        pa.field("system", pa.string(), nullable=False),  # scmaks | majority_vote | uniform_vote | best_single
        pa.field("verdict", pa.string()),
        pa.field("weights", pa.map_(pa.string(), pa.float64())),  # member -> w_i(Q), where weighted
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "claims": CLAIMS,
    "passages": PASSAGES,
    "qa_pairs": QA_PAIRS,
    "trajectories": TRAJECTORIES,
    "references": REFERENCES,
    "metrics": METRICS,
    "debate_turns": DEBATE_TURNS,
    "consensus_features": CONSENSUS_FEATURES,
    "consensus_predictions": CONSENSUS_PREDICTIONS,
}


@dataclass
class DataError(ValueError):
    """Bad input data, located by file, row (0-based record index) and field."""

    file: str
    row: int | None
    field: str | None
    problem: str

    def __str__(self) -> str:
        where = self.file
        if self.row is not None:
            where += f", row {self.row}"
        if self.field is not None:
            where += f", field {self.field!r}"
        return f"{where}: {self.problem}"


def validate(table: pa.Table, schema: pa.Schema, file: str) -> pa.Table:
    """Check ``table`` against ``schema`` and return it cast to the schema's column order and types.

    Raises :class:`DataError` naming the first bad row and field: a missing column, a value of the
    wrong type, a null in a non-nullable field, an empty claim/text, or an unknown label.
    """
    for f in schema:
        if f.name not in table.column_names:
            if f.nullable:
                table = table.append_column(f.name, pa.nulls(len(table), f.type))
            else:
                raise DataError(file, None, f.name, "required column is missing")
    table = table.select(schema.names)
    columns = []
    for f in schema:
        col = table.column(f.name)
        try:
            col = col.cast(f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:  # TypeError: a map column
            row = _first_uncastable_row(col, f.type)
            raise DataError(file, row, f.name, f"expected {f.type}, got {col.type} ({exc})") from None
        if not f.nullable and col.null_count:
            row = pc.index(pc.is_null(col), True).as_py()
            raise DataError(file, row, f.name, "required value is null")
        columns.append(col)
    table = pa.Table.from_arrays(columns, schema=schema)
    for name in ("claim", "text"):
        if name in schema.names:
            stripped = pc.utf8_trim_whitespace(table.column(name))
            empty = pc.equal(pc.utf8_length(stripped), 0)
            if pc.any(empty).as_py():
                raise DataError(file, pc.index(empty, True).as_py(), name, "empty text")
    if "label" in schema.names:
        bad = pc.invert(pc.is_in(table.column("label"), value_set=pa.array(LABELS)))
        bad = pc.fill_null(bad, False)
        if pc.any(bad).as_py():
            row = pc.index(bad, True).as_py()
            raise DataError(
                file, row, "label", f"unknown label {table.column('label')[row].as_py()!r}; expected {LABELS}"
            )
    return table


def _first_uncastable_row(col: pa.ChunkedArray, type_: pa.DataType) -> int | None:
    for i, value in enumerate(col.to_pylist()):
        try:
            pa.array([value]).cast(type_)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return i
    return None
