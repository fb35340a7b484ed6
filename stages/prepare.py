"""Stage `prepare`: read the claim source from params, validate it, write stratified splits.

Outputs: data/claims/{train,dev,eval}.parquet and data/passages.parquet (CLAIMS / PASSAGES).
Reviewer corrections (params ``prepare.corrections``, claim files) are merged into train after the
split (``factrl.data.corrections``). DVC tracks them as deps of this stage only when dvc.yaml lists
them: it cannot derive deps from a params list, so list each file there too (docs/parameters.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.data import sources
from factrl.data.corrections import merge_corrections
from factrl.data.params import PrepareParams
from factrl.data.schemas import CLAIMS, PASSAGES, validate
from factrl.data.splits import stratified_split
from factrl.io import atomic_path, write_json, write_parquet

OUT = Path("data")


def load_source(params: PrepareParams, workdir: Path) -> tuple[pa.Table, pa.Table | None, Path | None,
                                                                list[dict] | None]:
    """Claims and passages from the configured source.

    Returns ``(claims, passages, passages_file, variants)``; the demo world streams its passages
    straight to ``passages_file`` instead of holding them in memory (it scales to a million
    passages); ``variants``: a hard world's claim variants (``factrl.data.world``), else None.
    """
    if params.source == "world":
        from factrl.data import world

        passages_file = workdir / "world_passages.parquet"
        claims_file = workdir / "world_claims.parquet"
        written = world.write_world(params.world, passages_file, claims_file)
        claims = validate(pq.read_table(claims_file), CLAIMS, str(claims_file))
        return claims, None, passages_file, written["variants"]
    if params.source == "files":
        if not params.files.claims:
            raise ValueError("prepare.files.claims is empty: name at least one claim file")
        claims = pa.concat_tables([sources.read_claims(p) for p in params.files.claims])
        passages = (
            pa.concat_tables([sources.read_passages(p) for p in params.files.passages])
            if params.files.passages
            else PASSAGES.empty_table()
        )
        return claims, passages, None, None
    claims = pa.concat_tables(
        [sources.load_hub_claims(name, params.hub.split, params.hub.limit) for name in params.hub.datasets]
    )
    return claims, PASSAGES.empty_table(), None, None


def prepare(claims: pa.Table, params: PrepareParams) -> dict[str, pa.Table]:
    """The pure part: de-duplicate ids, then split stratified by label and hops."""
    ids = claims.column("id").to_pylist()
    if len(set(ids)) != len(ids):
        seen, dup = set(), None
        for i, x in enumerate(ids):
            if x in seen:
                dup = (i, x)
                break
            seen.add(x)
        raise ValueError(f"claims: duplicate id {dup[1]!r} at row {dup[0]}")
    return stratified_split(claims, params.split_fractions, params.seed)


def main(params_file: str = "params.yaml", out: Path = OUT) -> None:
    params: PrepareParams = load_section(PrepareParams, params_file)
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".prepare-work"
    work.mkdir(exist_ok=True)
    # Read and validate everything before writing anything, so bad input leaves no output.
    claims, passages, passages_file, variants = load_source(params, work)
    splits = prepare(claims, params)
    # reviewer corrections replace or join the training claims; read (and validated) before writing
    splits, merged = merge_corrections(splits, params.corrections)
    # warm.parquet: what the warm start reads (all of train, or a hard world's clean claims);
    # heldout_wording.parquet: a hard world's eval claims in a wording no training claim uses;
    # heldout_combination.parquet: its claims along a pair of relations no training claim chains
    from factrl.data.world import variant_sets

    sets = splits | variant_sets(splits, variants)
    for name, table in sets.items():
        write_parquet(table, out / "claims" / f"{name}.parquet", CLAIMS)
    if passages_file is not None:
        with atomic_path(out / "passages.parquet") as tmp:
            passages_file.replace(tmp)
    else:
        write_parquet(passages, out / "passages.parquet", PASSAGES)
    for leftover in work.iterdir():
        leftover.unlink()
    work.rmdir()
    write_json(
        {name: {"claims": t.num_rows} for name, t in sets.items()}
        | {"passages": pq.ParquetFile(out / "passages.parquet").metadata.num_rows}
        | ({"corrections": merged} if params.corrections else {}),
        out / "prepare_summary.json",
    )


if __name__ == "__main__":
    main(*sys.argv[1:2])
