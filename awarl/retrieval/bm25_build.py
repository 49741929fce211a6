"""Bounded-memory BM25 index build: stream, spill sorted posting shards, merge term block by term block.

wiki-18 has 21M passages and about 1.5 billion (term, passage) postings; holding every passage's token ids
and then the whole score matrix (what bm25s's in-memory `index()` does) would need about 63 GB. Here:

1. Passages are tokenized as they stream in; each one's (term id, term frequency) postings go to a buffer
   and its length to a compact array. When the buffer reaches its share of `memory_mb`, it is sorted by
   term (stable, so passages stay in corpus order within a term) and written to a shard on disk.
2. After the stream, document frequencies, idf and the average length are known. The output CSC arrays
   are written term block by term block: each block reads its slice of every shard (sequentially, shards
   in corpus order), scores it, and appends it to the output files. Peak memory is the vocabulary, the
   passage lengths and one buffer or block, whatever the corpus size.

The files are bm25s's (`data/indices/indptr.csc.index.npy`, `vocab.index.json`, `params.index.json`) and
their bytes are what bm25s's own build writes for the same token ids (a test compares them): every score is
computed with the same float64 operations, in the same order, rounded to float32 the same way (numpy >= 2
promotion rules). Term ids are assigned in order of first occurrence, with "" (id 0) as the term of passages
that have none, as before.
"""

from __future__ import annotations

import array
import itertools
import json
import logging
import math
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from awarl.retrieval.bm25 import make_tokenizer

log = logging.getLogger(__name__)

DEFAULT_MEMORY_MB = 2048
MIN_MEMORY_MB = 1
# bytes a buffered posting costs at its peak (the spill's sort: term/doc/tf arrays, their argsort, the
# permuted copies) and a merged one (read arrays, sort, float64 score temporaries)
_SPILL_BYTES_PER_POSTING = 40
_MERGE_BYTES_PER_POSTING = 72
_SHARE_BUFFER = 0.5  # of memory_mb; the rest is for the vocabulary, passage lengths and Python itself
_VOCAB_JSON_BATCH = 100_000


def _npy_writer(path: Path, dtype: npt.DTypeLike, n: int) -> BinaryIO:
    """An open file holding a .npy header for a 1-d array of n `dtype` items; the data are appended."""
    f = open(path, "wb")  # noqa: SIM115 - the caller closes it
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                             "fortran_order": False, "shape": (n,)})
    return f


class _Shard:
    """One spilled buffer: its distinct terms and their posting counts (in memory: small), and the postings'
    passage ids and term frequencies in files read front to back during the merge."""

    def __init__(self, folder: Path, tids: np.ndarray, docs: np.ndarray, tfs: np.ndarray) -> None:
        order = np.argsort(tids, kind="stable")
        tids, docs, tfs = tids[order], docs[order], tfs[order]
        del order
        starts = np.concatenate([[0], np.flatnonzero(np.diff(tids)) + 1])
        self.terms = tids[starts]
        self.counts = np.diff(np.append(starts, len(tids))).astype(np.int64)
        self.tf_dtype = np.dtype(np.uint16) if tfs.max(initial=0) < 1 << 16 else np.dtype(np.int32)
        self.docs_path, self.tfs_path = folder / "docs.bin", folder / "tfs.bin"
        folder.mkdir(parents=True)
        docs.astype(np.int32).tofile(self.docs_path)
        tfs.astype(self.tf_dtype).tofile(self.tfs_path)
        self.postings = int(len(docs))
        self._pos = 0  # index into terms of the next term the merge reads
        self._docs_f: BinaryIO | None = None
        self._tfs_f: BinaryIO | None = None

    def read_until(self, stop_term: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term ids, passage ids, tfs) of this shard's postings for terms below stop_term not read yet."""
        if self._docs_f is None or self._tfs_f is None:
            self._docs_f, self._tfs_f = open(self.docs_path, "rb"), open(self.tfs_path, "rb")  # noqa: SIM115
        end = int(np.searchsorted(self.terms, stop_term, side="left"))
        counts = self.counts[self._pos:end]
        n = int(counts.sum())
        tids = np.repeat(self.terms[self._pos:end], counts)
        self._pos = end
        docs = np.fromfile(self._docs_f, dtype=np.int32, count=n)
        tfs = np.fromfile(self._tfs_f, dtype=self.tf_dtype, count=n)
        if len(docs) != n or len(tfs) != n:
            raise OSError(f"{self.docs_path.parent}: shard file shorter than recorded (disk full?)")
        return tids, docs, tfs

    def close(self) -> None:
        for f in (self._docs_f, self._tfs_f):
            if f is not None:
                f.close()


class BM25Builder:
    """Feed passage texts in chunks with `add`, then `finish(out_dir)` writes the bm25s-format index.

    memory_mb: the build's memory target (posting buffers and merge blocks take half of it; the
    vocabulary, one int32 per passage and the interpreter the rest). Shards go to `work_dir`, removed by
    `finish`."""

    def __init__(self, *, work_dir: Path, k1: float = 0.9, b: float = 0.4, method: str = "lucene",
                 stopwords: str = "en", stemmer: str = "s", show_progress: bool = False,
                 memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        if k1 <= 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        if method != "lucene":
            raise ValueError(f"BM25 method {method!r} is not supported; awarl builds the Lucene variant (lucene)")
        if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < MIN_MEMORY_MB:
            raise ValueError(f"memory_mb must be an integer >= {MIN_MEMORY_MB}, got {memory_mb!r}")
        self.settings: dict[str, Any] = {"k1": k1, "b": b, "method": method, "stopwords": stopwords, "stemmer": stemmer}
        self.memory_mb = memory_mb
        self._tokenize = make_tokenizer(stopwords, stemmer)
        self.vocab: dict[str, int] = {"": 0}
        self.doc_len = array.array("i")
        self.show_progress = show_progress
        budget = memory_mb * (1 << 20) * _SHARE_BUFFER
        self._spill_at = max(1 << 12, int(budget / _SPILL_BYTES_PER_POSTING))
        self._block_postings = max(1 << 12, int(budget / _MERGE_BYTES_PER_POSTING))
        self._buf: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._buffered = 0
        self._shards: list[_Shard] = []
        self.shards_written = 0
        self._work_dir = work_dir
        self._df = np.zeros(1, dtype=np.int64)

    # ------------------------------------------------------------------------------------- streaming
    def add(self, texts: Iterable[str]) -> None:
        vocab, tokenize = self.vocab, self._tokenize
        ids = array.array("i")
        lens = array.array("i")
        for text in texts:
            before = len(ids)
            for tok in tokenize(text):
                tid = vocab.get(tok)
                if tid is None:
                    tid = vocab[tok] = len(vocab)
                ids.append(tid)
            if len(ids) == before:
                ids.append(0)  # a passage without terms gets the empty term, as bm25s scores it
            lens.append(len(ids) - before)
        if not lens:
            return
        first_doc = len(self.doc_len)
        self.doc_len.extend(lens)
        term_ids = np.frombuffer(ids, dtype=np.int32)
        local = np.repeat(np.arange(len(lens), dtype=np.int64), np.frombuffer(lens, dtype=np.int32))
        keys, tfs = np.unique((local << 32) | term_ids.astype(np.int64), return_counts=True)  # by passage, then term
        self._buf.append(((keys & 0xFFFFFFFF).astype(np.int32), ((keys >> 32) + first_doc).astype(np.int32),
                          tfs.astype(np.int32)))
        self._buffered += len(keys)
        if self._buffered >= self._spill_at:
            self._spill()

    def _spill(self) -> None:
        if not self._buffered:
            return
        tids, docs, tfs = (np.concatenate(parts) for parts in zip(*self._buf, strict=True))
        self._buf, self._buffered = [], 0
        shard = _Shard(self._work_dir / f"shard-{len(self._shards):05d}", tids, docs, tfs)
        del tids, docs, tfs
        self._grow_df()
        self._df[shard.terms] += shard.counts
        self._shards.append(shard)
        self.shards_written += 1
        log.debug("spilled BM25 shard %d (%d postings)", len(self._shards), shard.postings)

    # --------------------------------------------------------------------------------------- merging
    def finish(self, out_dir: Path) -> dict[str, Any]:
        n_docs = len(self.doc_len)
        if not n_docs:
            raise ValueError("cannot build a BM25 index from an empty corpus")
        try:
            self._spill()
            self._write_arrays(out_dir, n_docs)
            self._write_vocab(out_dir / "vocab.index.json")
            self._write_params(out_dir / "params.index.json", n_docs)
        finally:
            for s in self._shards:
                s.close()
            shutil.rmtree(self._work_dir, ignore_errors=True)
        vocab_size = len(self.vocab)
        self.vocab, self.doc_len, self._shards = {"": 0}, array.array("i"), []
        return {**self.settings, "vocab_size": vocab_size}

    def _grow_df(self) -> None:
        """One document frequency per vocabulary term (terms seen since the last spill start at 0)."""
        if len(self._df) < len(self.vocab):
            self._df = np.concatenate([self._df, np.zeros(len(self.vocab) - len(self._df), dtype=np.int64)])

    def _idf(self, n_docs: int) -> np.ndarray:
        """float32 Lucene idf per term, computed like bm25s (Python float64 log, then rounded)."""
        df = self._df
        idf = np.zeros(len(df), dtype=np.float32)
        for start in range(0, len(df), 1 << 20):
            part = df[start:start + (1 << 20)].tolist()
            idf[start:start + len(part)] = [math.log(1 + (n_docs - d + 0.5) / (d + 0.5)) if d else 0.0 for d in part]
        return idf

    def _write_arrays(self, out_dir: Path, n_docs: int) -> None:
        from tqdm import tqdm

        k1, b = self.settings["k1"], self.settings["b"]
        self._grow_df()   # indptr below needs a frequency for every term
        idf = self._idf(n_docs)
        doc_len = np.frombuffer(self.doc_len, dtype=np.int32)
        avg_len = doc_len.astype(np.int64).mean()  # bm25s: np.array(lengths).mean()
        indptr = np.zeros(len(self._df) + 1, dtype=np.int64)
        np.cumsum(self._df, out=indptr[1:])
        nnz = int(indptr[-1])
        np.save(out_dir / "indptr.csc.index.npy", indptr)
        # term blocks of about _block_postings postings (a term larger than a block is a block of its own)
        starts = np.unique(np.searchsorted(indptr, np.arange(0, nnz, self._block_postings), side="right") - 1)
        bounds = [*starts[1:].tolist(), len(self._df)]
        with _npy_writer(out_dir / "data.csc.index.npy", np.float32, nnz) as data_f, \
                _npy_writer(out_dir / "indices.csc.index.npy", np.int32, nnz) as idx_f, \
                tqdm(total=nnz, unit="posting", unit_scale=True, desc="BM25 merge", disable=not self.show_progress,
                     mininterval=1.0) as bar:
            written = 0
            for stop in bounds:
                parts = [s.read_until(stop) for s in self._shards]
                tids, docs, tfs = (np.concatenate(p) for p in zip(*parts, strict=True))
                del parts
                order = np.argsort(tids, kind="stable")  # by term; shards (corpus order) stay in order
                tids, docs, tfs = tids[order], docs[order], tfs[order]
                del order
                # bm25s: tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf), float64, times the float32 idf
                tf = tfs.astype(np.float32).astype(np.float64)
                tfc = tf / (k1 * ((1 - b) + b * doc_len[docs].astype(np.float64) / avg_len) + tf)
                scores = (idf[tids].astype(np.float64) * tfc).astype(np.float32)
                scores.tofile(data_f)
                docs.tofile(idx_f)
                written += len(docs)
                bar.update(len(docs))
        if written != nnz:
            raise RuntimeError(f"BM25 merge wrote {written} postings, expected {nnz}")

    def _write_vocab(self, path: Path) -> None:
        """json.dumps(vocab, ensure_ascii=False), in pieces (wiki-18's vocabulary is millions of terms)."""
        items = iter(self.vocab.items())
        with open(path, "w", encoding="utf-8") as f:
            f.write("{")
            sep = ""
            while batch := dict(itertools.islice(items, _VOCAB_JSON_BATCH)):
                f.write(sep + json.dumps(batch, ensure_ascii=False)[1:-1])
                sep = ", "
            f.write("}")

    def _write_params(self, path: Path, n_docs: int) -> None:
        try:
            from awarl.retrieval.bm25 import import_bm25s_cpu_only

            import_bm25s_cpu_only()
            from bm25s import __version__ as bm25s_version
        except ImportError:  # pragma: no cover - bm25s is a dependency
            bm25s_version = "awarl"
        params = {"k1": self.settings["k1"], "b": self.settings["b"], "delta": 0.5, "method": "lucene",
                  "idf_method": "lucene", "dtype": "float32", "int_dtype": "int32", "num_docs": n_docs,
                  "version": bm25s_version, "backend": "numpy"}
        with open(path, "w") as f:
            json.dump(params, f, indent=4)
