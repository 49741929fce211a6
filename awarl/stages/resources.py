"""Default resources built on first use: the closed-corpus retrieval index of the shipped samples.

Evaluation and the demo need a retriever even when the user configured none; building the BM25 index of
the shipped closed corpus takes seconds, so it is built once into a cache folder and reused.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from awarl.config import AwarlConfig
from awarl.data.corpus import shipped_closed_corpus
from awarl.io import loads_json
from awarl.retrieval import build_index

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """AWARL_CACHE, else ~/.cache/awarl."""
    return Path(os.environ.get("AWARL_CACHE") or Path.home() / ".cache" / "awarl")


def shipped_corpus(path: Path | None = None) -> Path:
    """The closed corpus of the three shipped dev samples (their own context paragraphs), built once."""

    path = path or cache_dir() / "corpus" / "shipped_closed.jsonl"
    if not path.exists():
        log.info("building the closed corpus of the shipped dev samples -> %s", path)
        shipped_closed_corpus(path)
    return path


def ensure_index(corpus: Path, kind: str, out_dir: Path, **settings) -> Path:
    """Build the index unless a complete one is already there (load_index verifies it)."""

    if not (out_dir / "index_meta.json").exists():
        log.info("building the %s index of %s -> %s", kind, corpus, out_dir)
        build_index(corpus, kind, out_dir, **settings)
    return out_dir


def ensure_default_retrieval(cfg: AwarlConfig) -> AwarlConfig:
    """Fill in a retriever when none is configured: the shipped closed corpus's index of `retrieval.kind`.

    An index folder given by the user keeps its own kind (read from its index_meta.json)."""
    r = cfg.retrieval
    if r.kind == "server":
        return cfg
    if r.index_dir:
        meta = Path(r.index_dir) / "index_meta.json"
        if meta.exists():
            kind = loads_json(meta.read_text()).get("kind", r.kind)
            return cfg.model_copy(update={"retrieval": r.model_copy(update={"kind": kind})})
        if not r.corpus:
            raise FileNotFoundError(f"retrieval.index_dir={r.index_dir} has no index_meta.json and no "
                                    "retrieval.corpus is set to build it from")
        ensure_index(Path(r.corpus), r.kind, Path(r.index_dir))
        return cfg
    corpus = Path(r.corpus) if r.corpus else shipped_corpus()
    tag = "shipped_closed" if not r.corpus else Path(r.corpus).stem
    index_dir = cache_dir() / "indexes" / f"{tag}_{r.kind}"
    ensure_index(corpus, r.kind, index_dir)
    return cfg.model_copy(update={"retrieval": r.model_copy(update={"index_dir": str(index_dir),
                                                                    "corpus": str(corpus)})})
