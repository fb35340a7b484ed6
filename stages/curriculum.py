"""Stage `curriculum`: split the train claims into epoch-1 / epoch-2 segments and M2R stages.

Input: data/claims/train.parquet. Outputs: segments/{all,seg1..segN,m2r_stage1,m2r_stage2}.parquet
(CLAIMS) and segments/manifest.json (rows and label x hops counts per piece, the seed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

from factrl.config import load_section
from factrl.data.curriculum import CurriculumParams, build_curriculum, manifest
from factrl.data.schemas import CLAIMS, validate
from factrl.io import write_json, write_parquet


def main(params_file: str = "params.yaml", train: Path = Path("data/claims/train.parquet"),
         out: Path = Path("segments")) -> dict:
    params: CurriculumParams = load_section(CurriculumParams, params_file)
    claims = validate(pq.read_table(train), CLAIMS, str(train))
    pieces = build_curriculum(claims, params.segments, params.m2r_stage1_fraction, params.seed,
                              params.m2r_split)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.parquet"):  # fewer segments than last time: drop the extra files
        if stale.stem not in pieces:
            stale.unlink()
    for name, table in pieces.items():
        write_parquet(table, out / f"{name}.parquet", CLAIMS)
    info = manifest(pieces, segments=params.segments, stage1_fraction=params.m2r_stage1_fraction,
                    seed=params.seed, m2r_split=params.m2r_split)
    write_json(info, out / "manifest.json")
    print("curriculum: " + ", ".join(f"{n}={p['rows']}" for n, p in info["pieces"].items()))
    return info


if __name__ == "__main__":
    main(*sys.argv[1:2])
