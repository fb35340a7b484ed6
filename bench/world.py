"""Benchmark: stream 1,000,000 demo-world passages to Parquet; compare with a naive per-row writer.

Each run happens in a fresh subprocess so ``ru_maxrss`` is that run's own peak memory. The
baseline builds one Python dict per passage and writes them with ``pq.write_table`` (on 100k
passages, since it is the slow path). Medians of 3 runs go to ``bench/results/world.json``.

    python -m bench.world [--passages 1000000] [--baseline-passages 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._measured import Measurement

RESULTS = Path(__file__).parent / "results" / "world.json"

# Runs in the child: the vectorised, streamed generator.
_FAST = """
import json, resource, sys, time
from factrl.data.params import WorldParams
from factrl.data.world import write_world
n, out = int(sys.argv[1]), sys.argv[2]
t = time.perf_counter()
write_world(WorldParams(seed=13, num_passages=n, num_claims=600), out + "/p.parquet", out + "/c.parquet")
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

# Runs in the child: the obvious approach, one dict per row with f-strings, then one write_table.
_NAIVE = """
import json, resource, sys, time
import pyarrow as pa, pyarrow.parquet as pq
from factrl.data.params import WorldParams
from factrl.data.world_build import build_world
from factrl.data.world_entities import TYPES
n, out = int(sys.argv[1]), sys.argv[2]
t = time.perf_counter()
world = build_world(WorldParams(seed=13, num_passages=n))
names = world.names.to_pylist()
rows = []
for i in range(n):
    kind = TYPES[int(world.types[i])]
    if kind == "person":
        text = f"{names[i]} was born in {names[world.targets['born_in'][i]]} in {world.numbers['year'][i]}."
    elif kind == "city":
        text = f"{names[i]} is a city in {names[world.targets['located_in'][i]]}."
    else:
        text = f"{names[i]} is a {kind} from {world.numbers['year'][i]}."
    rows.append({"id": f"w-p{i + 1:07d}", "title": names[i], "text": text, "source": "world"})
pq.write_table(pa.Table.from_pylist(rows), out + "/p.parquet", compression="zstd")
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _run(code: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", code, str(n), tmp], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure(code: str, n: int, runs: int) -> dict:
    results = [_run(code, n) for _ in range(runs)]
    seconds = statistics.median(r["seconds"] for r in results)
    return {
        "passages": n,
        "runs": runs,
        "seconds_median": round(seconds, 3),
        "passages_per_s": round(n / seconds, 1),
        "peak_rss_gib": round(max(r["rss_kib"] for r in results) / 2**20, 3),  # Linux: KiB
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--baseline-passages", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    measured = Measurement()
    fast = _measure(_FAST, args.passages, args.runs)
    naive = _measure(_NAIVE, args.baseline_passages, args.runs)
    result = {
        "bench": "world",
        "passages_per_s": fast["passages_per_s"],
        "peak_rss_gib": fast["peak_rss_gib"],
        "vectorised_streamed": fast,
        "baseline_naive_rows": naive,
        "speedup_vs_baseline": round(fast["passages_per_s"] / naive["passages_per_s"], 2),
        "targets": {"passages_per_s_min": 20_000, "peak_rss_gib_max": 2.0},
        "ok": fast["passages_per_s"] >= 20_000 and fast["peak_rss_gib"] <= 2.0,
    }
    print(json.dumps(measured.write(result, RESULTS), indent=2))


if __name__ == "__main__":
    main()
