"""BM25 at scale on real data: the sharded bounded-memory build writes bm25s's own index bytes, the scorer
returns bm25s's scores, memory-mapped loading, search workers, and the build-folder hygiene of issue 16."""

from __future__ import annotations

import array
import json
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import WIKI18_SAMPLE

from awarl.cli import main as cli_main
from awarl.config import RetrievalConfig
from awarl.io import shipped_data_dir
from awarl.retrieval import Passage, RetrievalIndexError, build_index, load_index, load_retriever, read_meta
from awarl.retrieval import index as index_module
from awarl.retrieval.bm25 import make_tokenizer, top_k

BM25_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json",
              "params.index.json")
HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"


def hotpot_questions() -> list[str]:
    return [q["question"] for q in json.loads(HOTPOT.read_text(encoding="utf-8"))]


def bm25s_reference(corpus: Path, out: Path) -> Path:
    """The index bm25s's own in-memory build makes of the same token ids (what awarl wrote until now)."""
    import bm25s

    tok = make_tokenizer("en", "s")
    vocab: dict[str, int] = {"": 0}
    docs = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        ids = array.array("i", [vocab.setdefault(t, len(vocab)) for t in tok(json.loads(line)["contents"])] or [0])
        docs.append(ids)
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    model.index((docs, vocab), show_progress=False)
    model.save(str(out), show_progress=False)
    return out


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(WIKI18_SAMPLE, "bm25", tmp_path_factory.mktemp("scale") / "bm25", show_progress=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bm25s_reference(WIKI18_SAMPLE, tmp_path_factory.mktemp("ref") / "bm25s")


# ------------------------------------------------------------------------------------ sharded build
@pytest.mark.parametrize("memory_mb", [1, 2048])
def test_sharded_build_writes_the_bytes_of_bm25s_in_memory_build(memory_mb: int, tmp_path: Path,
                                                                reference: Path) -> None:
    """1 MiB forces many shards and merge blocks on the shipped 1,000-passage wiki-18 sample; 2 GiB is one."""
    idx = build_index(WIKI18_SAMPLE, "bm25", tmp_path / "idx", show_progress=False, memory_mb=memory_mb,
                      chunk_size=50)
    meta = read_meta(idx)
    assert meta["build"]["memory_mb"] == memory_mb
    assert (meta["build"]["shards"] > 3) if memory_mb == 1 else meta["build"]["shards"] == 1
    for name in BM25_FILES:
        assert (idx / name).read_bytes() == (reference / name).read_bytes(), name
    assert not any(p.name.startswith(".") for p in idx.iterdir())  # shards removed
    assert not any(p.name.startswith(".idx.") for p in tmp_path.iterdir())


def test_build_memory_budget_is_validated(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["index", "build", "--corpus", str(WIKI18_SAMPLE), "--kind", "bm25", "--out",
                     str(tmp_path / "x"), "--memory-mb", "0"]) == 2
    assert "memory_mb must be an integer >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("dense_share", [0, 8, 10**9])  # candidates only / hybrid / whole accumulator
def test_scorer_returns_bm25s_scores_and_order(dense_share: int, sample_index: Path, reference: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import bm25s

    from awarl.retrieval import bm25 as bm25_module

    monkeypatch.setattr(bm25_module, "DENSE_SHARE", dense_share)
    ours = load_index(sample_index)
    theirs = bm25s.BM25.load(str(reference), load_vocab=True)
    rows = [json.loads(line)["contents"] for line in WIKI18_SAMPLE.read_text(encoding="utf-8").splitlines()]
    queries = hotpot_questions() + [" ".join(c.split()[:12]) for c in rows[::7]] + ["the city the city city"]
    for k in (1, 3, 10, 50):  # 50: more than the rarest term's passages, often
        for q in queries:
            ids = ours.query_ids(q)
            expected = top_k(theirs.get_scores_from_ids(ids), k) if ids else []
            assert ours.score(ids, k) == expected, q  # same passages, bitwise-equal float32 scores


@pytest.mark.parametrize("dense_share", [0, 10**9])
def test_accumulator_is_clean_between_queries(dense_share: int, sample_index: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from awarl.retrieval import bm25 as bm25_module

    monkeypatch.setattr(bm25_module, "DENSE_SHARE", dense_share)
    r = load_index(sample_index)
    qs = hotpot_questions()[:20]
    first = r.search(qs, 5)
    assert r.search(qs[::-1], 5)[::-1] == first
    assert not r._accumulators.get().any()  # every touched passage was reset


# ------------------------------------------------------------------------------------------- mmap
def test_mmap_loading_serves_the_same_answers_from_disk(sample_index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qs = hotpot_questions()[:30]
    in_ram = load_index(sample_index, mmap=False)
    mapped = load_index(sample_index, mmap=True)
    assert not isinstance(in_ram.data, np.memmap) and in_ram.docstore._map is None
    assert isinstance(mapped.data, np.memmap) and isinstance(mapped.indices, np.memmap)
    assert mapped.docstore._map is not None and isinstance(mapped.docstore.offsets, np.memmap)
    assert mapped.search(qs, 4) == in_ram.search(qs, 4)
    assert not isinstance(load_index(sample_index).data, np.memmap)  # auto: a small index is read into RAM
    monkeypatch.setattr(index_module, "MMAP_AUTO_BYTES", 1000)
    assert isinstance(load_index(sample_index).data, np.memmap)  # auto: a large one is mapped
    r = load_retriever(RetrievalConfig(index_dir=str(sample_index), mmap=False, workers=3))
    assert not isinstance(r.data, np.memmap) and r.workers == 3


# ---------------------------------------------------------------------------------------- workers
def test_search_workers_split_a_batch_and_are_thread_safe(sample_index: Path) -> None:
    one = load_index(sample_index, workers=1)
    many = load_index(sample_index, workers=3)
    qs = hotpot_questions()
    expected = one.search(qs, 3)
    assert many.search(qs, 3) == expected
    assert many.search(qs + qs[:5], 3) == expected + expected[:5]  # duplicates scored once, answered each time
    got: dict[int, list[list[Passage]]] = {}

    def worker(i: int) -> None:
        got[i] = many.search(qs[i::6], 3)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(6):
        assert got[i] == expected[i::6]


# ------------------------------------------------------------------- build folders (issue 16 item 3)
def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_build_folders_of_dead_processes_are_removed_and_reported(tmp_path: Path, wiki18_tiny: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "idx"
    host = index_module._HOST
    stale = [tmp_path / f".idx.building-{dead_pid()}", tmp_path / f".idx.building-{host}-{dead_pid()}",
             tmp_path / f".idx.replaced-{host}-{dead_pid()}"]
    live = tmp_path / f".idx.building-{host}-{_live_pid()}"  # a build still running: left alone
    other_host = tmp_path / f".idx.building-otherhost-{dead_pid()}"  # a shared filesystem's other machine
    for d in [*stale, live, other_host]:
        d.mkdir()
        (d / "docstore.jsonl").write_bytes(b"x" * 1000)
    with caplog.at_level(logging.WARNING, logger="awarl.retrieval.index"):
        build_index(wiki18_tiny, "bm25", out, show_progress=False)
    assert not any(d.exists() for d in stale)
    assert live.is_dir() and other_host.is_dir()
    said = [r.getMessage() for r in caplog.records if "did not finish" in r.getMessage()]
    assert len(said) == 3 and all(any(str(d) in m for m in said) for d in stale)
    assert read_meta(out)["passage_count"] == 40


_LIVE: list[subprocess.Popen] = []


def _live_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _LIVE.append(p)
    return p.pid


@pytest.fixture(autouse=True)
def _stop_live_processes():
    yield
    while _LIVE:
        p = _LIVE.pop()
        p.kill()
        p.wait()


def test_overwrite_never_leaves_the_index_folder_without_a_complete_index(tmp_path: Path, wiki18_tiny: Path,
                                                                          wiki18_small: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    out = build_index(wiki18_small, "bm25", tmp_path / "idx", show_progress=False)
    checks: list[int] = []
    real_rmtree = shutil.rmtree

    def checking_rmtree(path, *a, **kw):  # noqa: ANN001, ANN002, ANN003
        if Path(path).name.startswith(".idx.building") and not checks:
            pass  # the temporary folder is cleared before the build starts
        else:
            checks.append(load_index(out).meta["passage_count"])  # whatever is deleted, out is complete
        return real_rmtree(path, *a, **kw)

    monkeypatch.setattr(index_module.shutil, "rmtree", checking_rmtree)
    build_index(wiki18_tiny, "bm25", out, overwrite=True, show_progress=False)
    assert checks and checks[-1] == 40 and read_meta(out)["passage_count"] == 40
    # where the atomic exchange is unavailable, a failed rename puts the old index back
    monkeypatch.setattr(index_module, "_exchange", lambda a, b: False)
    real_rename = index_module.os.rename

    def failing_rename(src, dst):  # noqa: ANN001
        if Path(src).name.startswith(".idx.building"):
            raise OSError("simulated failure")
        return real_rename(src, dst)

    monkeypatch.setattr(index_module.os, "rename", failing_rename)
    with pytest.raises(OSError, match="simulated"):
        build_index(wiki18_small, "bm25", out, overwrite=True, show_progress=False)
    assert load_index(out).meta["passage_count"] == 40


# ----------------------------------------------------------------- index info (issue 16 item 5)
@pytest.mark.parametrize(("name", "damage"), [
    ("data.csc.index.npy", "truncate"), ("indices.csc.index.npy", "truncate"),
    ("vocab.index.json", "garbage"), ("vocab.index.json", "wrong"), ("indptr.csc.index.npy", "wrong"),
])
def test_index_info_refuses_what_loading_refuses(name: str, damage: str, bm25_index: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    idx = tmp_path / "i"
    shutil.copytree(bm25_index, idx)
    path = idx / name
    if damage == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - 100])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage{" * 50)
    elif name == "vocab.index.json":
        path.write_text(json.dumps({"only": 0}))
    else:
        np.save(path, np.arange(5, dtype=np.int64))
    with pytest.raises(RetrievalIndexError, match="unreadable"):
        load_index(idx)
    assert cli_main(["index", "info", str(idx)]) == 2
    err = capsys.readouterr().err
    assert "unreadable" in err and str(idx) in err and name in err
