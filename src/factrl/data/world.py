"""The demo world: a generated fictional knowledge base with multi-hop fact-checking claims.

Every entity gets a name built from consonant-vowel syllables, so no pretrained model can know a
fact about it: a verifier has to read the passages. Entities are typed (people, cities,
countries, companies, films, albums, games) and linked by relations (born_in, located_in,
founded_by, headquartered_in, directed_by, produced_by, soundtrack, recorded_by, developed_by);
each also carries numeric facts (years, populations, track counts, prices), which
``numeric_questions`` turns into numeric RAG questions (MARCH's training data).

There is exactly one passage per entity (passage ``w-p{i+1:07d}`` describes entity ``i``), so a
claim can only cite passages that exist at the chosen scale. Passages are built column-wise with
pyarrow compute (no per-row Python) and streamed in record batches, which is what lets 1,000,000
passages be written in well under a minute and within a small memory budget.

Claims chain 2-4 relations from a named start entity to a named final entity; the bridging
entities in between are never named. REFUTES claims are hard negatives: one link of the chain is
swapped for another entity of the same type and the claim states where that altered chain ends.

Everything is a pure function of ``WorldParams`` (numpy ``default_rng(seed)``), so the same
parameters give byte-identical Parquet files.

The generator is layered, each module importing only those above it:

* ``factrl.data.world_entities``: the entity types, relations and :class:`World` container;
* ``factrl.data.world_hard``: the hard world's namesakes, wordings, cross mentions and decoys;
* ``factrl.data.world_build``: :func:`build_world` and the passages;
* ``factrl.data.world_claims``: the claims and their variants;
* this module: the files (:func:`write_world`) and a hard world's extra claim sets (:func:`variant_sets`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.data.params import WorldParams
from factrl.data.schemas import CLAIMS, PASSAGES
from factrl.data.world_build import iter_passage_batches
from factrl.data.world_claims import generate_claims_with_variants
from factrl.io import atomic_path


def variant_sets(splits: dict[str, pa.Table], variants: list[dict] | None) -> dict[str, pa.Table]:
    """The claim sets a hard world adds to the ``train`` / ``dev`` / ``eval`` splits:

    * ``warm``: the training claims the warm start may see (``clean`` variants: wording 0, no
      namesake to tell apart at the start, no near-miss refutation); all of ``train`` for a clean
      world (``variants`` None), so the warm start reads one file whatever the world;
    * ``heldout_wording`` (hard worlds with held-out wordings): every eval claim, same id, facts,
      passages and label, said in a wording no training claim uses;
    * ``heldout_combination`` (hard worlds with ``heldout_combination``): every claim, of any split,
      whose chain follows the held-out pair of relations; ``train``, ``dev`` and ``eval`` come back
      without them (so they replace the splits given).
    """
    if variants is None:
        return {"warm": splits["train"]}
    by_id = {v["id"]: v for v in variants}

    def where(table: pa.Table, key: str, value: bool = True) -> pa.Table:
        # a reviewer correction with an id the world did not generate (prepare.corrections) is
        # neither a clean variant nor held out
        return table.filter(pa.array([by_id.get(i, {}).get(key, False) == value for i in table.column("id").to_pylist()],
                                     pa.bool_()))

    sets: dict[str, pa.Table] = {}
    if any(v["heldout_combination"] for v in variants):
        sets["heldout_combination"] = pa.concat_tables([where(t, "heldout_combination") for t in splits.values()])
        splits = {name: where(t, "heldout_combination", False) for name, t in splits.items()}
        sets |= splits
    sets["warm"] = where(splits["train"], "clean")
    if any(v["heldout_claim"] is not None for v in variants):
        rows = splits["eval"].to_pylist()
        for row in rows:
            v = by_id[row["id"]]
            row["claim"], row["hops"] = v["heldout_claim"], v["heldout_hops"]
        sets["heldout_wording"] = pa.Table.from_pylist(rows, schema=CLAIMS)
    return sets


def write_world(params: WorldParams, passages_path: str | Path, claims_path: str | Path) -> dict:
    """Write passages (streamed) and claims as Parquet, each atomically; return counts and, under
    ``variants``, a hard world's claim variants (None for the clean world; see
    :func:`generate_claims_with_variants`)."""
    num_passages = 0
    with atomic_path(passages_path) as tmp:
        with pq.ParquetWriter(tmp, PASSAGES, compression="zstd") as writer:
            for batch in iter_passage_batches(params):
                writer.write_batch(batch)
                num_passages += batch.num_rows
    claims, variants = generate_claims_with_variants(params)
    with atomic_path(claims_path) as tmp:
        pq.write_table(claims, tmp, compression="zstd")
    labels = claims.column("label").to_pylist()
    hops = claims.column("num_hops").to_pylist()
    return {
        "num_passages": num_passages,
        "num_claims": claims.num_rows,
        "labels": {lab: labels.count(lab) for lab in sorted(set(labels))},
        "hops": {str(h): hops.count(h) for h in sorted(set(hops))},
        "passages_path": os.fspath(passages_path),
        "claims_path": os.fspath(claims_path),
        "variants": variants,
    }
