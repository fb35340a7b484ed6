"""Per-claim traces of a HARIS pair on the demo eval split: what the agents wrote, where they fail.

python trace_eval.py REPO REASON_DIR SEARCH_DIR OUT.jsonl [per_hop]
"""
import json, sys, time
from pathlib import Path
import pyarrow.parquet as pq
repo, reason, search, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
per_hop = int(sys.argv[5]) if len(sys.argv) > 5 else 60
from factrl.eval.sampling import stratified_sample
from factrl.eval.runner import BINARY_LABELS
from factrl.eval.systems import HarisSystem, load_llm
from factrl.retrieval.index import Retriever
table = stratified_sample(pq.read_table(repo / "data/claims/eval.parquet"), per_hop, 0, labels=BINARY_LABELS)
claims = table.to_pylist()
retriever = Retriever(repo / "index", mode="hybrid")
sysm = HarisSystem("x", load_llm(reason), load_llm(search), top_k=3, max_new_tokens=64, max_turns=5)
t = time.time()
runs = sysm.run([c["claim"] for c in claims], retriever)
print("wall", time.time() - t)
with out.open("w") as f:
    for c, r in zip(claims, runs):
        traj = r.trajectories[0][1]
        f.write(json.dumps({"id": c["id"], "hops": c["num_hops"], "label": c["label"], "claim": c["claim"],
                            "gold": [(h["question"], h["answer"]) for h in c["hops"]],
                            "verdict": r.verdict, "questions": r.questions,
                            "text": traj.response_text, "finish": traj.finish_reason}) + "\n")
acc = {}
for c, r in zip(claims, runs):
    acc.setdefault(c["num_hops"], []).append(r.verdict == c["label"])
print({h: sum(v) / len(v) for h, v in sorted(acc.items())})
