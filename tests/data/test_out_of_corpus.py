"""Out-of-corpus claims (factrl.data.out_of_corpus): what the corpus holds no evidence for, as NOT
ENOUGH INFO claims for the calibration's dev mix."""

from __future__ import annotations

import json

import pyarrow as pa

from factrl.agents.abstain import named_entities
from factrl.data.out_of_corpus import CorpusNames, out_of_corpus_claims
from factrl.data.params import WorldParams
from factrl.data.schemas import CLAIMS, validate
from factrl.data.world_build import iter_passage_batches
from factrl.verdicts import NOT_ENOUGH_INFO

WORLD = WorldParams(num_passages=200, num_claims=40)


def _passages() -> pa.Table:
    return pa.Table.from_batches(list(iter_passage_batches(WORLD)))


def test_generated_and_real_claims_name_nothing_the_corpus_holds(tmp_path):
    passages = _passages()
    corpus = CorpusNames(passages)
    assert corpus.mentions(passages.column("title")[0].as_py()) and not corpus.mentions("Paris")
    real = tmp_path / "real.jsonl"
    title = passages.column("title")[3].as_py()
    real.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "claim": "Paris is the capital of France.", "label": "SUPPORTS"},
        {"id": "b", "claim": f"{title} is famous.", "label": "SUPPORTS"},  # the corpus's own entity: left out
        {"id": "c", "claim": "the sky is blue", "label": "SUPPORTS"},  # no entity: left out
    ]) + "\n")
    claims = out_of_corpus_claims(passages, generated=12, real_files=[real, tmp_path / "missing.jsonl"], real=5,
                                  world=WORLD)
    validate(claims, CLAIMS, "out_of_corpus")
    rows = claims.to_pylist()
    assert {r["label"] for r in rows} == {NOT_ENOUGH_INFO}
    generated = [r for r in rows if r["source"].startswith("out_of_corpus:world")]
    assert len(generated) == 12 and {r["num_hops"] for r in generated} == {2, 3, 4}  # balanced over hops
    assert [r["claim"] for r in rows if r["source"] == "out_of_corpus:real.jsonl"] == ["Paris is the capital of France."]
    for r in generated:
        assert named_entities(r["claim"]) and not any(corpus.mentions(e) for e in named_entities(r["claim"]))
