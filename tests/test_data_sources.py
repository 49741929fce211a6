"""Data as real sources ship it (issue 16, item 4): FlashRAG / Search-R1 rows of the multi-hop datasets, whose
context comes in two column layouts; malformed optional metadata; records without answers; unreadable
parquet files; over-long lines.

The FlashRAG and Search-R1 files are built from the shipped official records (2WikiMultiHopQA, HotpotQA,
MuSiQue) and the shipped Search-R1 parquet, in the layouts those projects publish: FlashRAG's 2Wiki rows
carry `metadata.context = {"title": [...], "content": [[sentence, ...], ...]}`, HotpotQA rows (FlashRAG and
Search-R1) `{"title": [...], "sentences": [[...], ...]}`; a parquet column holding both has the other key
null on each row."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from awarl.cli import main
from awarl.data import build_corpus, detect_format, load_examples
from awarl.data.loaders import shipped_path
from awarl.io import DataError

HOTPOT = shipped_path("hotpotqa")
WIKI2 = shipped_path("2wikimultihopqa")
MUSIQUE = shipped_path("musique")
SEARCHR1 = shipped_path("searchr1-train")


def _columns(pairs: list) -> tuple[list, list]:
    return [a for a, _ in pairs], [b for _, b in pairs]


def _flashrag_row(rec: dict, body_key: str) -> dict:
    """A FlashRAG row of an official HotpotQA / 2Wiki record (`body_key`: "content" for 2Wiki, "sentences"
    for HotpotQA)."""
    titles, bodies = _columns(rec["context"])
    sf_titles, sf_ids = _columns(rec["supporting_facts"])
    meta = {"type": rec["type"], "supporting_facts": {"title": sf_titles, "sent_id": sf_ids},
            "context": {"title": titles, body_key: bodies}}
    if "evidences" in rec:
        meta["evidences"] = rec["evidences"]
    if "level" in rec:
        meta["level"] = rec["level"]
    return {"id": rec["_id"], "question": rec["question"], "golden_answers": [rec["answer"]], "metadata": meta}


def _write_jsonl(path, rows: list[dict]):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def _same_evidence(got, want):
    assert [e.id for e in got] == [e.id for e in want]
    for g, w in zip(got, want, strict=True):
        assert g.question == w.question and g.answers == w.answers
        assert g.context == w.context and g.supporting_facts == w.supporting_facts
        assert g.metadata.get("evidences") == w.metadata.get("evidences")


def test_flashrag_2wiki_rows_with_content_layout_load_like_the_official_file(tmp_path):
    raw = json.loads(WIKI2.read_text())
    path = _write_jsonl(tmp_path / "2wikimultihopqa" / "dev.jsonl", [_flashrag_row(r, "content") for r in raw])
    res = load_examples(path)
    assert res.format == "flashrag" and not res.skipped and not res.warnings
    assert {e.dataset for e in res.examples} == {"2wikimultihopqa"}  # from the folder name
    _same_evidence(res.examples, load_examples(WIKI2).examples)
    ex = res.examples[0]
    assert ex.metadata["type"] == "bridge_comparison" and "context" not in ex.metadata
    assert {p.title for p in ex.context if p.is_supporting} == {"Forbidden Ground", "Free Guy", "Pál Gábor",
                                                                "Shawn Levy"}


def test_flashrag_hotpotqa_and_musique_rows_load_like_the_official_files(tmp_path):
    raw = json.loads(HOTPOT.read_text())
    path = _write_jsonl(tmp_path / "hotpotqa" / "dev.jsonl", [_flashrag_row(r, "sentences") for r in raw])
    res = load_examples(path)
    assert res.format == "flashrag" and not res.warnings
    _same_evidence(res.examples, load_examples(HOTPOT).examples)
    assert res.examples[0].metadata == {"type": raw[0]["type"], "level": raw[0]["level"]}
    mus = [json.loads(line) for line in MUSIQUE.read_text().splitlines()]
    rows = [{"id": r["id"], "question": r["question"], "golden_answers": [r["answer"], *r["answer_aliases"]],
             "metadata": {"paragraphs": r["paragraphs"], "question_decomposition": r["question_decomposition"]}}
            for r in mus]
    got = load_examples(_write_jsonl(tmp_path / "musique" / "dev.jsonl", rows)).examples
    want = load_examples(MUSIQUE).examples
    assert [(e.context, e.metadata) for e in got] == [(e.context, e.metadata) for e in want]


def _searchr1_row_of_2wiki(rec: dict, i: int) -> dict:
    row = _flashrag_row(rec, "content")
    return {"id": f"train_2wiki_{i}", "question": row["question"], "golden_answers": row["golden_answers"],
            "data_source": "2wikimultihopqa", "prompt": [{"content": f"Question: {row['question']}", "role": "user"}],
            "ability": "fact-reasoning",
            "reward_model": {"ground_truth": {"target": row["golden_answers"]}, "style": "rule"},
            "extra_info": {"index": i, "split": "train"}, "metadata": row["metadata"]}


def _mixed_parquet(tmp_path, n_2wiki: int = 40):
    """The shipped Search-R1 parquet (NQ + HotpotQA rows) plus 2Wiki rows, in one table whose
    `metadata.context` struct has both `sentences` (HotpotQA rows) and `content` (2Wiki rows)."""
    table = pq.read_table(SEARCHR1)
    wiki = json.loads(WIKI2.read_text())[:n_2wiki]
    meta_t = table.schema.field("metadata").type
    fields = [meta_t.field(i) for i in range(meta_t.num_fields)]
    ctx_t = meta_t.field("context").type
    ctx = pa.struct([*(ctx_t.field(i) for i in range(ctx_t.num_fields)),
                     pa.field("content", pa.list_(pa.list_(pa.string())))])
    evid = pa.field("evidences", pa.list_(pa.list_(pa.string())))
    meta = pa.struct([f if f.name != "context" else pa.field("context", ctx) for f in fields] + [evid])
    schema = pa.schema([f if f.name != "metadata" else pa.field("metadata", meta) for f in table.schema])
    rows = table.to_pylist() + [_searchr1_row_of_2wiki(r, i) for i, r in enumerate(wiki)]
    out = tmp_path / "train_mixed.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    return out, wiki


def test_searchr1_parquet_with_2wiki_rows_beside_hotpotqa_rows(tmp_path):
    path, wiki = _mixed_parquet(tmp_path)
    stored = pq.read_table(path).to_pylist()
    assert stored[-1]["metadata"]["context"]["sentences"] is None  # the layout real mixed files have
    assert stored[300]["metadata"]["context"]["content"] is None  # a HotpotQA row
    res = load_examples(path)
    assert res.format == "searchr1" and not res.skipped and not res.warnings
    assert len(res.examples) == 512 + len(wiki)
    shipped = load_examples(SEARCHR1).examples
    assert [(e.context, e.supporting_facts) for e in res.examples[:512]] == \
        [(e.context, e.supporting_facts) for e in shipped]
    got = [e for e in res.examples if e.dataset == "2wikimultihopqa"]
    want = load_examples(WIKI2).examples[:len(wiki)]
    for g, w in zip(got, want, strict=True):
        assert g.context == w.context and g.supporting_facts == w.supporting_facts
        assert g.metadata["evidences"] == w.metadata["evidences"] and g.metadata["data_source"] == "2wikimultihopqa"


def test_malformed_optional_metadata_keeps_the_record_with_one_counted_warning(tmp_path, caplog, capsys):
    raw = json.loads(WIKI2.read_text())[:7]
    rows = [_flashrag_row(r, "content") for r in raw]
    rows[1]["metadata"]["context"]["content"].pop()  # one paragraph short of its titles
    rows[2]["metadata"]["supporting_facts"]["sent_id"][0] = "first"
    rows[3]["metadata"]["evidences"] = "director"
    rows[4]["metadata"] = "not an object"
    rows[5]["metadata"]["context"]["content"][0] = [1, 2]
    path = _write_jsonl(tmp_path / "2wikimultihopqa" / "dev.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="awarl.data.loaders"):
        res = load_examples(path)  # on_error="fail": none of this costs a record
    official = load_examples(WIKI2).examples[:7]
    assert [(e.id, e.question, e.answers) for e in res.examples] == \
        [(e.id, e.question, e.answers) for e in official]
    by_line = {int(w.split(":")[1]): w for w in res.warnings}
    assert sorted(by_line) == [2, 3, 4, 5, 6]
    assert "metadata.context" in by_line[2] and "10 titles but 9 paragraphs" in by_line[2]
    assert "metadata.supporting_facts" in by_line[3] and "metadata.evidences" in by_line[4]
    assert "key 'metadata'" in by_line[5] and "metadata.context" in by_line[6]
    assert all(raw[n - 1]["_id"] in w for n, w in by_line.items())  # each names its record
    ex = res.examples
    assert ex[1].context == [] and ex[4].context == [] and ex[5].context == []
    assert ex[2].supporting_facts == [] and ex[2].context and not any(p.is_supporting for p in ex[2].context)
    assert "evidences" not in ex[3].metadata and ex[3].context == official[3].context
    assert ex[0].context == official[0].context and ex[6].context == official[6].context
    warned = [r for r in caplog.records if "optional metadata" in r.getMessage()]
    assert len(warned) == 1 and "5 record(s)" in warned[0].getMessage()
    out = tmp_path / "u.jsonl"
    assert main(["data", "prepare", str(path), "--out", str(out)]) == 0
    assert "wrote 7 examples to" in (o := capsys.readouterr().out) and "optional metadata of 5 record(s)" in o
    # the closed-corpus builder skips what was dropped
    assert build_corpus([ex[1]]) == [] and len(build_corpus(ex)) == len(build_corpus([ex[i] for i in (0, 2, 3, 6)]))


def test_malformed_optional_fields_of_official_records_are_dropped_not_fatal(tmp_path):
    hot = json.loads(HOTPOT.read_text())[:3]
    hot[1]["supporting_facts"] = [["Neil Peart", "one"]]
    p = tmp_path / "hotpot.json"
    p.write_text(json.dumps(hot))
    res = load_examples(p)
    assert len(res.examples) == 3 and len(res.warnings) == 1 and "record 1" in res.warnings[0]
    assert res.examples[1].supporting_facts == [] and len(res.examples[1].context) == len(hot[1]["context"])
    wiki = json.loads(WIKI2.read_text())[:3]
    wiki[2]["evidences"] = [["Free Guy", "director"]]
    p = tmp_path / "wiki.json"
    p.write_text(json.dumps(wiki))
    res = load_examples(p)
    assert len(res.examples) == 3 and "evidences" not in res.examples[2].metadata
    assert len(res.warnings) == 1 and "record 2" in res.warnings[0] and "evidences" in res.warnings[0]


def test_malformed_question_or_answer_still_costs_the_record(tmp_path):
    rows = [_flashrag_row(r, "content") for r in json.loads(WIKI2.read_text())[:4]]
    rows[1]["golden_answers"] = "Free Guy"
    rows[2]["question"] = 42
    path = _write_jsonl(tmp_path / "2wikimultihopqa" / "dev.jsonl", rows)
    with pytest.raises(DataError, match=r"dev\.jsonl:2: flashrag record: key 'golden_answers'"):
        load_examples(path)
    res = load_examples(path, on_error="skip")
    assert len(res.examples) == 2 and [s.split(":")[1] for s in res.skipped] == ["2", "3"]
    assert "key 'question'" in res.skipped[1]


def test_records_without_answers_are_refused_by_record_number(tmp_path):
    wiki = json.loads(WIKI2.read_text())[:5]
    wiki[3]["answer"] = " "
    p = tmp_path / "wiki.json"
    p.write_text(json.dumps(wiki))
    with pytest.raises(DataError, match=r"wiki\.json: record 3: 2wikimultihopqa record: no gold answer"):
        load_examples(p)
    res = load_examples(p, on_error="skip")
    assert len(res.examples) == 4 and len(res.skipped) == 1 and "record 3" in res.skipped[0]
    lines = MUSIQUE.read_text().splitlines()[:4]
    recs = [json.loads(x) for x in lines]
    recs[1]["answer"], recs[1]["answer_aliases"] = "", []
    recs[2]["answer"], recs[2]["answer_aliases"], recs[2]["answerable"] = "", [], False  # MuSiQue-Full style
    p = _write_jsonl(tmp_path / "musique.jsonl", recs)
    with pytest.raises(DataError, match=r"musique\.jsonl:2: musique record: no gold answer"):
        load_examples(p)
    res = load_examples(p, on_error="skip")
    assert [e.id for e in res.examples] == [recs[0]["id"], recs[2]["id"], recs[3]["id"]]
    assert res.examples[1].answers == [] and not res.examples[1].answerable  # abstaining is its right outcome


def test_unlabeled_test_split_loads_only_when_asked(tmp_path, capsys):
    # HotpotQA's official test set: no answer, no supporting facts
    test = [{k: v for k, v in r.items() if k not in ("answer", "supporting_facts", "type", "level")}
            for r in json.loads(HOTPOT.read_text())[:6]]
    p = tmp_path / "hotpot_test.json"
    p.write_text(json.dumps(test))
    with pytest.raises(DataError, match=r"record 0: .*no gold answer.*require_answers=False"):
        load_examples(p)
    res = load_examples(p, require_answers=False)
    assert len(res.examples) == 6 and all(e.answers == [] and e.context for e in res.examples)
    out = tmp_path / "test.unified.jsonl"
    assert main(["data", "prepare", str(p), "--out", str(out)]) == 2
    assert "--allow-no-answers" in capsys.readouterr().err and not out.exists()
    assert main(["data", "prepare", str(p), "--out", str(out), "--allow-no-answers"]) == 0
    assert "6 without a gold answer" in capsys.readouterr().out
    # where answers are needed (eval, estimate, train load with the default) the prepared file is refused
    with pytest.raises(DataError, match=r"test\.unified\.jsonl:1: unified record: no gold answer"):
        load_examples(out)
    assert load_examples(out, require_answers=False).examples == res.examples
    corpus = tmp_path / "c.jsonl"
    assert main(["data", "corpus", str(p), "--out", str(corpus)]) == 0  # a corpus needs no answers
    assert len(corpus.read_text().splitlines()) == len(build_corpus(res.examples)) > 0
    assert main(["data", "stats", str(p)]) == 0
    assert "hotpotqa: 6 question(s) without a gold answer" in capsys.readouterr().out


def test_truncated_or_fake_parquet_is_a_data_error_naming_the_file(tmp_path):
    data = SEARCHR1.read_bytes()
    bad = {"truncated.parquet": data[: len(data) // 2], "fake.parquet": b"PAR1" + b"\x00garbage" * 50}
    corrupt = bytearray(data)
    for i in range(1000, 300000, 7):
        corrupt[i] = 0x55  # footer intact, pages broken: fails while reading rows
    bad["corrupt.parquet"] = bytes(corrupt)
    for name, content in bad.items():
        p = tmp_path / name
        p.write_bytes(content)
        for call in (lambda p=p: detect_format(p), lambda p=p: load_examples(p, format="searchr1")):
            with pytest.raises(DataError, match=rf"{name}: not a readable parquet file"):
                call()
    html = tmp_path / "page.parquet"
    html.write_text("<html>404</html>")
    with pytest.raises(DataError, match=r"page\.parquet: not parquet"):
        load_examples(html)


@pytest.mark.slow
def test_dataset_lines_are_read_under_a_length_cap(tmp_path):
    from awarl.io import MAX_LINE_BYTES

    lines = MUSIQUE.read_bytes().splitlines()[:3]
    p = tmp_path / "huge_first.jsonl"
    with open(p, "wb") as f:
        f.write(b'{"id": "huge", "question": "' + b"a" * (MAX_LINE_BYTES + 10) + b'"}\n')
        f.write(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=rf"huge_first\.jsonl:1: .*longer than {MAX_LINE_BYTES} bytes"):
        load_examples(p)
    res = load_examples(p, on_error="skip")  # detection reads past the over-long first line
    assert res.format == "musique" and len(res.examples) == 3
    assert len(res.skipped) == 1 and res.skipped[0].startswith(f"{p}:1:")


def test_jsonl_whose_first_record_is_longer_than_the_detection_head(tmp_path):
    rec = json.loads(MUSIQUE.read_text().splitlines()[0])
    rec["paragraphs"][0]["paragraph_text"] += " padding" * 300_000  # a 2.4 MB record, valid JSON
    p = _write_jsonl(tmp_path / "long.jsonl", [rec])
    assert detect_format(p) == "musique"
    assert load_examples(p).examples[0].context[0].text.endswith("padding")


def test_detection_splits_lines_only_at_newlines(tmp_path):
    rec = json.loads(MUSIQUE.read_text().splitlines()[0])
    rec["question"] = "Where\u2028is it? " + rec["question"]  # a raw U+2028 (JSON allows it in strings)
    p = tmp_path / "sep.jsonl"
    p.write_text(json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    assert detect_format(p) == "musique" and load_examples(p).examples[0].question.startswith("Where\u2028is")


def test_a_parquet_row_with_a_timestamp_or_bytes_in_its_kept_metadata_is_prepared(tmp_path, capsys):
    """pyarrow gives a timestamp column as a datetime and a binary one as bytes; kept in the metadata they made
    `awarl data prepare` die with `TypeError: Object of type datetime is not JSON serializable`, naming no
    record or key. They are read as JSON holds them: ISO text, UTF-8 text (hex otherwise)."""
    import datetime

    rows = pq.read_table(shipped_path("searchr1-train")).slice(0, 2).to_pylist()
    for r in rows:
        r["extra_info"] = {**r["extra_info"], "crawled": datetime.datetime(2024, 1, 1, 12, 0),
                           "raw": b"\xff\x00", "note": b"ok"}
    src = tmp_path / "ts.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "out.jsonl")]) == 0
    extra = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])["metadata"]["extra_info"]
    assert (extra["crawled"], extra["raw"], extra["note"]) == ("2024-01-01T12:00:00", "ff00", "ok")


def test_hotpotqa_in_the_hugging_face_datasets_layout_is_read(tmp_path):
    """HF's hotpot_qa rows name the question id `id`, not `_id`: detection failed ("cannot detect the dataset
    format"), and with --format hotpotqa every record failed with "missing key '_id'", although formats.md
    says its column layouts of context and supporting_facts are read."""
    src = json.loads(shipped_path("hotpotqa").read_text())[:5]
    hf = [{"id": r["_id"], "question": r["question"], "answer": r["answer"], "type": r["type"],
           "level": r["level"],
           "supporting_facts": {"title": [t for t, _ in r["supporting_facts"]],
                                "sent_id": [i for _, i in r["supporting_facts"]]},
           "context": {"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]}}
          for r in src]
    p = tmp_path / "hf.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in hf))
    assert detect_format(p) == "hotpotqa"
    got = load_examples(p, dataset="hotpotqa").examples
    want = load_examples(shipped_path("hotpotqa"), dataset="hotpotqa", limit=None).examples[:5]
    assert [(e.id, e.answers, e.supporting_facts, e.context) for e in got] == \
        [(e.id, e.answers, e.supporting_facts, e.context) for e in want]
