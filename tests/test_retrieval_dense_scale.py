"""Compressed dense indexes: IVF-PQ trained on a sample of the stream, against exact flat search."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from awarl.cli import main as cli_main
from awarl.retrieval import load_index, read_meta
from awarl.retrieval.dense import VectorIndexBuilder, default_nlist, default_pq_m


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(0).standard_normal((50, dim)).astype(np.float32)
    x = centers[rng.integers(0, 50, n)] + 0.5 * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_ivfpq_is_trained_on_the_first_vectors_and_finds_what_flat_finds() -> None:
    import faiss

    base, queries = clustered(6000, 32, 1), clustered(50, 32, 2)
    vb = VectorIndexBuilder(32, "ivfpq", nlist=32, pq_m=16, train_size=3000, use_gpu=False)
    vb.add(base[:2000])
    assert vb.index is None  # still holding the training sample
    vb.add(base[2000:4000])
    assert vb.index is not None and vb.index.is_trained and vb.index.ntotal == 4000  # trained, sample added
    vb.add(base[4000:])
    index = vb.finish()
    # 4,000 training vectors are too few for 256 codes a sub-quantizer (faiss wants 39 a centroid): 2**6
    assert index.ntotal == 6000 and vb.settings == {"nlist": 32, "pq_m": 16, "pq_bits": 6, "nprobe": 32,
                                                    "train_size": 4000}
    flat = faiss.IndexFlatIP(32)
    flat.add(base)
    _, exact = flat.search(queries, 10)
    index.nprobe = 32
    _, got = index.search(queries, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(got, exact, strict=True)])
    assert recall >= 0.5, recall  # exact search finds 10 of 6,000: chance would be 0.002
    assert faiss.serialize_index(index).nbytes < base.nbytes / 2  # 16 six-bit codes a vector instead of 128 bytes


def test_ivfpq_defaults() -> None:
    assert default_pq_m(768) == 64 and default_pq_m(384) == 64
    assert 768 % default_pq_m(768) == 0 and 100 % default_pq_m(100) == 0
    assert default_nlist(1_000_000) == 4096 and default_nlist(21_000_000) == 16384 and default_nlist(10) == 16


@pytest.mark.slow
def test_cli_builds_a_compressed_dense_index_that_serves(tmp_path: Path, wiki18_tiny: Path,
                                                         capsys) -> None:  # noqa: ANN001
    out = tmp_path / "ivfpq"
    assert cli_main(["index", "build", "--corpus", str(wiki18_tiny), "--kind", "dense", "--out", str(out),
                     "--index-type", "ivfpq", "--pq-m", "8", "--batch-size", "16"]) == 0
    meta = read_meta(out)
    assert meta["settings"]["faiss_type"] == "IndexIVFPQ" and meta["settings"]["pq_m"] == 8
    assert meta["settings"]["train_size"] == 40  # a corpus smaller than the sample trains on all of it
    r = load_index(out)
    [res] = r.search(["American lobbyist for a pharmaceutical company"], 4)
    assert len(res) == 4 and [p.score for p in res] == sorted((p.score for p in res), reverse=True)
    assert cli_main(["index", "info", str(out)]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["settings"]["faiss_type"] == "IndexIVFPQ"
    assert cli_main(["index", "build", "--corpus", str(wiki18_tiny), "--kind", "dense", "--out", str(out),
                     "--hnsw", "--index-type", "ivfpq", "--overwrite"]) == 2
