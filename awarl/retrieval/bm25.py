"""BM25 over a passage corpus with `bm25s` (sparse, vectorised scoring), built from a stream.

Tokenization is ours (one function, used for the corpus, the queries, and the rank-bm25 baseline of the
benchmark, so comparisons are like for like): lower-case, `\\w\\w+` words, bm25s's English stopword list,
then a stemmer. Token ids are assigned while streaming and stored per passage as compact int32 arrays, so
the build holds the token ids the index is made from, never the passage texts.

Defaults k1=0.9, b=0.4 are Anserini/Pyserini's, the BM25 that Search-R1 and FlashRAG report with.
"""

from __future__ import annotations

import array
import json
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from awarl.retrieval.docstore import Docstore
from awarl.retrieval.types import Passage

STEMMERS = ("s", "snowball", "none")
BM25_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json",
              "params.index.json")
_WORD = re.compile(r"(?u)\b\w\w+\b")


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


def make_tokenizer(stopwords: str = "en", stemmer: str = "s") -> Callable[[str], list[str]]:
    """The tokenization every BM25 in awarl uses (index, queries, benchmark baseline)."""
    if stopwords == "en":
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


class BM25Builder:
    """Feed passage texts in chunks with `add`, then `finish(out_dir)` writes the bm25s index."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, method: str = "lucene", stopwords: str = "en",
                 stemmer: str = "s", show_progress: bool = False) -> None:
        if k1 <= 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.settings = {"k1": k1, "b": b, "method": method, "stopwords": stopwords, "stemmer": stemmer}
        self._tokenize = make_tokenizer(stopwords, stemmer)
        # "" is the empty token bm25s scores passages with no terms against; give it id 0 up front
        self.vocab: dict[str, int] = {"": 0}
        self.doc_ids: list[array.array] = []
        self.show_progress = show_progress

    def add(self, texts: Iterable[str]) -> None:
        vocab = self.vocab
        for text in texts:
            ids = array.array("i")
            for tok in self._tokenize(text):
                tid = vocab.get(tok)
                if tid is None:
                    tid = vocab[tok] = len(vocab)
                ids.append(tid)
            if not ids:
                ids.append(0)
            self.doc_ids.append(ids)

    def finish(self, out_dir: Path) -> dict[str, Any]:
        import bm25s

        if not self.doc_ids:
            raise ValueError("cannot build a BM25 index from an empty corpus")
        s = self.settings
        model = bm25s.BM25(k1=s["k1"], b=s["b"], method=s["method"])
        model.index((self.doc_ids, self.vocab), show_progress=self.show_progress)
        model.save(str(out_dir), show_progress=False)
        self.doc_ids = []
        return {**s, "vocab_size": len(self.vocab)}


class BM25Retriever:
    """Search a saved bm25s index; passages come from the index's docstore."""

    def __init__(self, index_dir: Path, settings: dict[str, Any], docstore: Docstore, mmap: bool = False) -> None:
        import bm25s

        self.model = bm25s.BM25.load(str(index_dir), mmap=mmap, load_vocab=True)
        self.num_docs = int(self.model.scores["num_docs"])
        self.vocab: dict[str, int] = self.model.vocab_dict
        self.docstore = docstore
        self._tokenize = make_tokenizer(settings.get("stopwords", "en"), settings.get("stemmer", "s"))

    def query_ids(self, query: str) -> list[int]:
        return [self.vocab[t] for t in self._tokenize(query) if t in self.vocab]

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        out: list[list[Passage]] = []
        for q in queries:
            ids = self.query_ids(q)
            if not ids or k <= 0:
                out.append([])
                continue
            scores = self.model.get_scores_from_ids(ids)
            out.append([self.docstore.get(i, s) for i, s in top_k(scores, k)])
        return out


def top_k(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and scores of the k best positive scores, best first; ties broken by index so results
    are deterministic (the server's batched answers must equal direct calls exactly)."""
    k = min(k, len(scores))
    cand = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    # widen to every passage tied with the k-th score, so the tie-break does not depend on argpartition
    kth = scores[cand].min()
    cand = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores > 0)
    order = np.lexsort((cand, -scores[cand]))[:k]
    return [(int(cand[j]), float(scores[cand[j]])) for j in order if scores[cand[j]] > 0]


def read_bm25_num_docs(index_dir: Path) -> int:
    return int(json.loads((index_dir / "params.index.json").read_text())["num_docs"])
