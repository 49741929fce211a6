"""Default resources built on first use: the closed-corpus retrieval index of the shipped samples.

Evaluation and the demo need a retriever even when the user configured none; building the BM25 index of
the shipped closed corpus takes seconds, so it is built once into a cache folder and reused.
"""

from __future__ import annotations

import logging
from pathlib import Path

from awarl.cache import cache_dir
from awarl.config import AwarlConfig
from awarl.data.corpus import shipped_closed_corpus
from awarl.io import canonical_sha256, file_sha256, loads_json
from awarl.retrieval import build_index
from awarl.retrieval.index import build_settings

log = logging.getLogger(__name__)


def _digest(obj: object) -> str:
    """Twelve hex digits of `canonical_sha256`: enough to tell cached builds apart in a folder name."""
    return canonical_sha256(obj)[:12]


def shipped_samples_digest() -> str:
    """A hash of the shipped dev samples' contents: the cached closed corpus and its indexes are named by it,
    so other samples (AWARL_DATA_DIR, an updated data/) get their own, not the old ones."""
    from awarl.data.loaders import SHIPPED_DEV, shipped_path

    return _digest([(name, file_sha256(shipped_path(name))) for name in SHIPPED_DEV])


def shipped_corpus(path: Path | None = None) -> Path:
    """The closed corpus of the three shipped dev samples (their own context paragraphs), built once."""

    path = path or cache_dir() / "corpus" / f"shipped_closed-{shipped_samples_digest()}.jsonl"
    if not path.exists():
        log.info("building the closed corpus of the shipped dev samples -> %s", path)
        shipped_closed_corpus(path)
    return path


def ensure_index(corpus: Path, kind: str, out_dir: Path, **settings) -> Path:
    """Build the index unless a complete one is already there (load_index verifies it); another process building
    it is waited for."""

    if not (out_dir / "index_meta.json").exists():
        log.info("building the %s index of %s -> %s", kind, corpus, out_dir)
        build_index(corpus, kind, out_dir, wait=True, **settings)
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
        ensure_index(Path(r.corpus), r.kind, Path(r.index_dir), **build_settings(r))
        return cfg
    corpus = Path(r.corpus) if r.corpus else shipped_corpus()
    settings = build_settings(r)
    # Named by what the index is of and how it is built (not the file name alone: two corpus.jsonl in other
    # folders shared one cached index, and a dense index of another embedding model was taken as this one's);
    # the build's memory budget changes nothing in it.
    key = {"corpus": str(corpus.resolve()), "kind": r.kind,
           **{k: v for k, v in settings.items() if k != "memory_mb"}}
    index_dir = cache_dir() / "indexes" / f"{corpus.stem}-{_digest(key)}_{r.kind}"
    ensure_index(corpus, r.kind, index_dir, **settings)
    return cfg.model_copy(update={"retrieval": r.model_copy(update={"index_dir": str(index_dir),
                                                                    "corpus": str(corpus)})})
