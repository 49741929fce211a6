"""BM25 over a passage corpus: tokenization, and search over a bm25s-format index (built by bm25_build).

Tokenization is ours (one function, used for the corpus, the queries, and the rank-bm25 baseline of the
benchmark, so comparisons are like for like): lower-case, `\\w\\w+` words, bm25s's English stopword list,
then a stemmer.

Defaults k1=0.9, b=0.4 are Anserini/Pyserini's, the BM25 that Search-R1 and FlashRAG report with.
"""

from __future__ import annotations

import os
import queue
import re
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from awarl.io import loads_json
from awarl.retrieval.docstore import Docstore
from awarl.retrieval.types import Passage

STEMMERS = ("s", "snowball", "none")
BM25_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json",
              "params.index.json")
_WORD = re.compile(r"(?u)\b\w\w+\b")
# a query whose postings exceed 1/DENSE_SHARE of the passages is scored over the whole accumulator
DENSE_SHARE = 8


def s_stem(word: str) -> str:
    """Harman's S-stemmer (1991): folds plurals only, so it never conflates unrelated words and needs
    no external package. ies->y, es->e, s->'' with its exceptions."""
    if len(word) > 3 and word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if len(word) > 2 and word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def make_stemmer(name: str) -> Callable[[str], str] | None:
    if name == "none":
        return None
    if name == "s":
        return s_stem
    if name == "snowball":
        try:
            import Stemmer  # PyStemmer
        except ImportError:
            raise ValueError("stemmer 'snowball' needs the PyStemmer package (pip install PyStemmer); "
                             "or use stemmer='s' (built in)") from None
        return Stemmer.Stemmer("english").stemWord
    raise ValueError(f"unknown stemmer {name!r}; choose one of {', '.join(STEMMERS)}")


def import_bm25s_cpu_only() -> None:
    """Import bm25s without letting JAX take the GPU. bm25s imports JAX when it is installed, and JAX's default
    is to reserve 75% of every GPU's memory at its first use: on the H200 image (JAX installed) a training
    process that built or loaded a BM25 index had 106 of 140 GiB taken before the policy loaded, and the next
    process got the rest (CUDA out of memory at 33 GiB; docs/benchmarks.md, issue 46). awarl never runs JAX,
    so JAX is pinned to the CPU unless the user's program imported it first (then its settings stand)."""
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import bm25s  # noqa: F401


def make_tokenizer(stopwords: str = "en", stemmer: str = "s") -> Callable[[str], list[str]]:
    """The tokenization every BM25 in awarl uses (index, queries, benchmark baseline)."""
    if stopwords == "en":
        import_bm25s_cpu_only()
        from bm25s.stopwords import STOPWORDS_EN

        stop = frozenset(STOPWORDS_EN)
    elif stopwords == "none":
        stop = frozenset()
    else:
        raise ValueError(f"unknown stopwords {stopwords!r}; choose 'en' or 'none'")
    stem_fn = make_stemmer(stemmer)
    stem = lru_cache(maxsize=1 << 18)(stem_fn) if stem_fn else None

    def tokenize(text: str) -> list[str]:
        words = [w for w in _WORD.findall(text.lower()) if w not in stop]
        return [stem(w) for w in words] if stem else words

    return tokenize


class BM25Retriever:
    """Search a saved bm25s-format index with awarl's own scorer; passages come from the index's docstore.

    A query's score of a passage is the float32 sum of its terms' precomputed scores, added in query-term
    order (bm25s's `get_scores_from_ids`, so results are bitwise bm25s's). A selective query (postings for
    under 1/DENSE_SHARE of the passages: names, rare words) touches only the passages in its terms' posting
    lists: the accumulator is reset where it was written and top-k selection runs over those candidates, not
    over all N passages. A broad query (common words: most questions) is scattered into the whole
    accumulator and selected over it, which costs less than tracking candidates (measured). Either way no
    N-sized array is allocated per query. With `mmap`, the posting arrays stay on disk and are paged in by
    the OS (one shared copy for every process serving the same index).

    `search` is batched: identical queries are scored once, and with `workers` > 1 the batch is split over
    that many threads, each with its own accumulator (4 bytes a passage); they run in parallel only where
    numpy releases the GIL in its scatter and gather loops.
    """

    def __init__(self, index_dir: Path, settings: dict[str, Any], docstore: Docstore, mmap: bool = False,
                 workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.data, self.indices, self.indptr, self.num_docs = load_bm25_arrays(index_dir, mmap=mmap)
        self.vocab: dict[str, int] = load_bm25_vocab(index_dir, len(self.indptr) - 1)
        self.docstore = docstore
        self.workers = workers
        self.meta: dict[str, Any] = {}  # the folder's meta.json, set by load_index
        self._tokenize = make_tokenizer(settings.get("stopwords", "en"), settings.get("stemmer", "s"))
        self._accumulators: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
        for _ in range(workers):  # np.zeros pages are only committed when a query first touches them
            self._accumulators.put(np.zeros(self.num_docs, dtype=np.float32))
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bm25") if workers > 1 else None

    def query_ids(self, query: str) -> list[int]:
        return [self.vocab[t] for t in self._tokenize(query) if t in self.vocab]

    def score(self, term_ids: Sequence[int], k: int) -> list[tuple[int, float]]:
        """(passage index, score) of the k best passages for one query's term ids, best first."""
        return self._score_many([term_ids], k)[0]

    def _score(self, term_ids: Sequence[int], k: int, acc: np.ndarray) -> list[tuple[int, float]]:
        if not term_ids or k <= 0:
            return []
        terms = np.asarray(term_ids, dtype=np.int64)
        bounds, ends = self.indptr[terms], self.indptr[terms + 1]
        if int((ends - bounds).sum()) * DENSE_SHARE > self.num_docs:
            return self._score_dense(bounds.tolist(), ends.tolist(), k, acc)
        seen: list[np.ndarray] = []
        for start, end in zip(bounds.tolist(), ends.tolist(), strict=True):
            if start == end:
                continue
            docs = self.indices[start:end].astype(np.intp)  # one index conversion, not one per gather
            # every term score is > 0, so 0 means "not reached yet"; the first term reaches only new ones
            seen.append(docs[acc[docs] == 0] if seen else docs)
            acc[docs] += np.asarray(self.data[start:end])
        if not seen:
            return []
        cand = np.concatenate(seen) if len(seen) > 1 else seen[0]
        scores = acc[cand]
        acc[cand] = 0
        return top_k_of(cand, scores, k)

    def _score_dense(self, bounds: list[int], ends: list[int], k: int, acc: np.ndarray) -> list[tuple[int, float]]:
        """For queries whose postings cover much of the corpus, scattering into the whole accumulator and
        selecting over it costs less than tracking candidates."""
        lists = []
        for start, end in zip(bounds, ends, strict=True):
            if start != end:
                docs = self.indices[start:end]
                np.add.at(acc, docs, self.data[start:end])
                lists.append(docs)
        try:
            # the k-th best score among any k passages bounds the overall k-th best from below: take it from
            # the shortest posting lists, then one comparison pass over N instead of a partition of N
            lists.sort(key=len)
            sub = lists[0]  # a posting list holds distinct passages
            for docs in lists[1:]:
                if len(sub) >= k:
                    break
                sub = np.union1d(sub, docs)
            if len(sub) < k:
                cand = np.flatnonzero(acc > 0)
            else:
                cand = np.flatnonzero(acc >= np.partition(acc[sub], len(sub) - k)[len(sub) - k])
            return top_k_of(cand, acc[cand], k)
        finally:
            acc.fill(0)

    def _score_many(self, batch: Sequence[Sequence[int]], k: int) -> list[list[tuple[int, float]]]:
        acc = self._accumulators.get()
        try:
            return [self._score(ids, k, acc) for ids in batch]
        finally:
            self._accumulators.put(acc)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        if k <= 0:
            return [[] for _ in queries]
        ids = [tuple(self.query_ids(q)) for q in queries]
        unique = list(dict.fromkeys(ids))  # rollout groups send the same query many times
        if self._pool is None or len(unique) < 2:
            hits = self._score_many(unique, k)
        else:
            n = min(self.workers, len(unique))
            parts = [unique[i::n] for i in range(n)]
            done = list(self._pool.map(self._score_many, parts, [k] * n))
            hits = [None] * len(unique)  # type: ignore[list-item]
            for i, part in enumerate(done):
                hits[i::n] = part
        by_ids = dict(zip(unique, hits, strict=True))
        return [self.docstore.get_many(by_ids[q]) for q in ids]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def load_bm25_arrays(index_dir: Path, mmap: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(data, indices, indptr, num_docs) of a bm25s-format index, checked for consistency: a truncated or
    mismatched array raises ValueError naming the file."""
    mode: Literal["r"] | None = "r" if mmap else None
    arrays = {}
    for name, kinds in (("data", "f"), ("indices", "iu"), ("indptr", "iu")):
        path = index_dir / f"{name}.csc.index.npy"
        try:
            arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise ValueError(f"{path.name}: {e}") from None
        if arr.ndim != 1 or arr.dtype.kind not in kinds:
            raise ValueError(f"{path.name}: expected a 1-d {kinds} array, got {arr.dtype} {arr.shape}")
        arrays[name] = arr
    data, indices, indptr = arrays["data"], arrays["indices"], arrays["indptr"]
    if len(indptr) < 2 or int(indptr[0]) != 0 or int(indptr[-1]) != len(data) or len(indices) != len(data):
        raise ValueError(f"indptr.csc.index.npy: ends at {int(indptr[-1]) if len(indptr) else None} but data has "
                         f"{len(data)} and indices {len(indices)} entries")
    return data, indices, indptr, read_bm25_num_docs(index_dir)


def load_bm25_vocab(index_dir: Path, n_terms: int) -> dict[str, int]:
    """The term -> id map, checked against the index: ValueError if it is not a JSON object of ids."""
    path = index_dir / "vocab.index.json"
    try:
        with open(path, encoding="utf-8") as f:
            vocab = loads_json(f.read())
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{path.name}: not valid JSON ({e})") from None
    if not isinstance(vocab, dict) or len(vocab) != n_terms:
        raise ValueError(f"{path.name}: expected an object of {n_terms} terms, got "
                         f"{len(vocab) if isinstance(vocab, dict) else type(vocab).__name__}")
    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab)) if all(
        type(v) is int for v in vocab.values()) else None
    if ids is None or (len(ids) and (ids.min() < 0 or ids.max() >= n_terms)):
        raise ValueError(f"{path.name}: term ids must be integers in [0, {n_terms})")
    return vocab


def top_k_of(ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best (id, score) pairs among candidates with positive scores, best first, ties broken by id
    (so results are deterministic: the server's batched answers must equal direct calls exactly)."""
    keep = scores > 0
    if not keep.all():
        ids, scores = ids[keep], scores[keep]
    if len(ids) > k:
        part = np.argpartition(-scores, k - 1)[:k]
        # widen to every candidate tied with the k-th score, so the tie-break does not depend on argpartition
        sel = np.flatnonzero(scores >= scores[part].min())
        ids, scores = ids[sel], scores[sel]
    order = np.lexsort((ids, -scores))[:k]
    return [(int(ids[j]), float(scores[j])) for j in order]


def top_k(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and scores of the k best positive scores of a dense score array, best first, ties by index."""
    return top_k_of(np.arange(len(scores)), scores, k) if k > 0 else []


def read_bm25_num_docs(index_dir: Path) -> int:
    return int(loads_json((index_dir / "params.index.json").read_text())["num_docs"])
