"""Warm only the search agent (from exp's references) with other SFT settings: search_only.py EXP SEED BS STEPS OUT"""
import dataclasses, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from factrl.config import load_section, SFTParams
from factrl.recipes import warmup as recipe
exp, seed, bs, steps, out = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
params = load_section("warmup", exp / "params.yaml")
params = dataclasses.replace(params, base_model=str(exp / ".cache/factrl/models/smollm2-135m"), seed=seed,
                             search=dataclasses.replace(params.search, batch_size=bs, max_steps=steps, checkpoint_every=1000))
rows = pq.read_table(exp / "warmup/references.parquet").to_pylist()
t = time.time()
res, _ = recipe.warm_agent("search", rows, params, state_dir=Path("/tmp/search_state"), out_model=out, loss_path=Path("/tmp/search_loss.csv"))
print("search", steps, bs, "wall", time.time() - t, res.tokens_per_s, res.final_loss)
