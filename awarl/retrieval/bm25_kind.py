"""The registered retrieval kind `bm25` (retrieval.kind: bm25): what awarl.retrieval.kinds asks of it, from the
search side (awarl.retrieval.bm25) and the build side (awarl.retrieval.bm25_build). In a module of its own so that
neither of those two imports the other's way back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from awarl.retrieval.bm25 import (
    BM25_FILES,
    BM25Retriever,
    load_bm25_arrays,
    load_bm25_vocab,
    read_bm25_num_docs,
)
from awarl.retrieval.bm25_build import DEFAULT_MEMORY_MB, BM25Builder
from awarl.retrieval.docstore import Docstore
from awarl.retrieval.index import RetrievalIndexError, open_index
from awarl.retrieval.kinds import IndexKind, RetrievalKind

# ----------------------------------------------------------------- the registered kind (retrieval.kind: bm25)
BM25_ONLY = ("k1", "b", "stemmer", "stopwords", "method", "chunk_size", "memory_mb")  # build settings of bm25 alone


def _builder(settings: dict[str, Any], show_progress: bool, work_dir: Path) -> tuple[Any, int]:
    settings = dict(settings)
    chunk = int(settings.pop("chunk_size", 10_000))
    if settings.get("memory_mb") is None:
        settings["memory_mb"] = DEFAULT_MEMORY_MB
    return BM25Builder(show_progress=show_progress, work_dir=work_dir, **settings), chunk


def _check(index_dir: Path, meta: dict[str, Any]) -> None:
    """The passage count of the bm25s params against the meta's (one small JSON read)."""
    n = int(meta["passage_count"])
    try:
        got = read_bm25_num_docs(index_dir)
    except (ValueError, KeyError, TypeError) as e:
        raise RetrievalIndexError(f"{index_dir}: unreadable BM25 params: {e}") from None
    if got != n:
        raise RetrievalIndexError(f"{index_dir}: meta says {n} passages but the BM25 index has {got}")


def _open(index_dir: Path, meta: dict[str, Any], *, mmap: bool, workers: int, device: str | None = None,
          docstore: Docstore | None = None) -> BM25Retriever | None:
    try:
        if docstore is None:
            _, _, indptr, _ = load_bm25_arrays(index_dir, mmap=True)
            load_bm25_vocab(index_dir, len(indptr) - 1)
            return None
        return BM25Retriever(index_dir, meta["settings"], docstore, mmap=mmap, workers=workers)
    except (ValueError, OSError, KeyError, TypeError) as e:  # truncated .npy, corrupt vocab/params JSON
        raise RetrievalIndexError(f"{index_dir}: the BM25 index files are unreadable ({type(e).__name__}: "
                                  f"{str(e)[:300]}); rebuild the index") from None


def _from_args(args: Any) -> dict[str, Any]:
    """`awarl index build --kind bm25`'s flags."""
    return {"k1": args.k1, "b": args.b, "stemmer": args.stemmer, "stopwords": args.stopwords,
            "memory_mb": args.memory_mb}


def _record(builder: Any) -> dict[str, Any]:
    """What the meta records of a build (`build`): its memory target and the shards it spilled."""
    return {"memory_mb": builder.memory_mb, "shards": builder.shards_written}


KIND = RetrievalKind(open_index, identity=("index_dir", "corpus"), index=IndexKind(
    _builder, BM25_ONLY, BM25_FILES, _open, _from_args, lambda cfg: {"memory_mb": cfg.build_memory_mb},
    check=_check, record=_record))
