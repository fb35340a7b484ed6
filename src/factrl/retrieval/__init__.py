"""Retrieval: embedders (embed), BM25 / FAISS / hybrid indexes (index), the retrieval server and
its client, and the ``index`` section (params)."""
