"""Passage retrieval: BM25 (bm25s) and dense (sentence-transformers + faiss) indexes, a Search-R1-compatible
HTTP server, and its client. Every retriever implements `search(queries, k) -> list[list[Passage]]`."""

from awarl.retrieval.client import RetrievalClient, RetrievalClientError
from awarl.retrieval.index import (
    META_FILE,
    RetrievalIndexError,
    build_index,
    load_index,
    load_retriever,
    read_meta,
    verify_index,
)
from awarl.retrieval.types import IndexRetriever, Passage, Retriever

__all__ = ["META_FILE", "IndexRetriever", "Passage", "RetrievalClient", "RetrievalClientError", "RetrievalIndexError", "Retriever",
           "build_index", "load_index", "load_retriever", "read_meta", "verify_index"]
