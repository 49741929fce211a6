"""Shared fixtures: small real corpora cut from the shipped data, indexes built once per session, and a
helper that runs an ASGI app with uvicorn on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from awarl.io import shipped_data_dir

# Tests never reach the network; a hub lookup must fail fast rather than hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WIKI18_SAMPLE = shipped_data_dir() / "wiki18" / "wiki18_sample1000.jsonl"


def head_lines(src: Path, dst: Path, n: int) -> Path:
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for i, line in enumerate(f):
            if i >= n:
                break
            out.write(line)
    return dst


@pytest.fixture(scope="session")
def wiki18_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 300 passages of the shipped wiki-18 sample."""
    return head_lines(WIKI18_SAMPLE, tmp_path_factory.mktemp("wiki18") / "wiki18_300.jsonl", 300)


@pytest.fixture(scope="session")
def wiki18_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 40 passages of the shipped wiki-18 sample (dense tests: CPU embedding is slow)."""
    return head_lines(WIKI18_SAMPLE, tmp_path_factory.mktemp("wiki18t") / "wiki18_40.jsonl", 40)


@pytest.fixture(scope="session")
def bm25_index(tmp_path_factory: pytest.TempPathFactory, wiki18_small: Path) -> Path:
    from awarl.retrieval import build_index

    return build_index(wiki18_small, "bm25", tmp_path_factory.mktemp("idx") / "bm25", show_progress=False)


@pytest.fixture(scope="session")
def dense_index(tmp_path_factory: pytest.TempPathFactory, wiki18_tiny: Path) -> Path:
    from awarl.retrieval import build_index

    return build_index(wiki18_tiny, "dense", tmp_path_factory.mktemp("idx") / "dense", show_progress=False,
                       batch_size=16)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(app) -> Iterator[str]:  # noqa: ANN001 - any ASGI app
    """Run `app` with uvicorn in a thread on 127.0.0.1; yields its base URL, stops it on exit."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-init Qwen2 model + tokenizer (`awarl model tiny`), built once per session."""
    from awarl.models.tiny import build_tiny_model

    path = tmp_path_factory.getbasetemp() / "tiny-model"
    if not (path / "config.json").exists():
        build_tiny_model(path, seed=0)
    return path


@pytest.fixture(scope="session")
def shipped_bm25_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BM25 index of the closed corpus of the three shipped dev samples (6,404 passages)."""
    from awarl.data.corpus import shipped_closed_corpus
    from awarl.retrieval import build_index

    root = tmp_path_factory.getbasetemp() / "shipped-closed"
    if not (root / "bm25" / "index_meta.json").exists():
        corpus = shipped_closed_corpus(root / "corpus.jsonl")
        build_index(corpus, "bm25", root / "bm25", show_progress=False)
    return root / "bm25"
