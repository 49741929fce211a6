"""Loaders on the real shipped samples, format detection, malformed records, corpus, stats, `awarl data`."""

from __future__ import annotations

import json
import re

import pytest

from awarl.cli import main
from awarl.data import SHIPPED_DEV, build_corpus, detect_format, load_examples, load_shipped, write_corpus
from awarl.data.corpus import shipped_closed_corpus
from awarl.data.loaders import SHIPPED_OTHER, shipped_path, subsample
from awarl.data.stats import dataset_stats
from awarl.data.types import Paragraph, QAExample
from awarl.io import DataError, shipped_data_dir

HOTPOT = shipped_path("hotpotqa")
WIKI2 = shipped_path("2wikimultihopqa")
MUSIQUE = shipped_path("musique")
FLASHRAG = shipped_path("flashrag-nq")
SEARCHR1 = shipped_path("searchr1-train")


def _raw_json(path):
    return json.loads(path.read_text())


def test_hotpotqa_loader_matches_raw_file():
    raw = _raw_json(HOTPOT)
    res = load_examples(HOTPOT)
    assert res.format == "hotpotqa" and not res.skipped
    assert len(res.examples) == len(raw) == 200
    ex = res.examples[0]
    assert ex.id == raw[0]["_id"] == "5a7f6fd75542992e7d278cfa"
    assert ex.dataset == "hotpotqa" and ex.answers == ["Rush"]
    assert ex.supporting_facts == [("Nobody's Hero", 0), ("Neil Peart", 1)]
    assert len(ex.context) == len(raw[0]["context"])
    porcaro = ex.context[0]
    assert porcaro.title == "Jeff Porcaro" and not porcaro.is_supporting
    # HotpotQA sentences carry their own leading space: joined with exactly one space, none doubled
    assert "the rock band Toto. Porcaro is one" in porcaro.text
    assert "  " not in porcaro.text and porcaro.text.startswith("Jeffrey Thomas Porcaro")
    assert {p.title for p in ex.context if p.is_supporting} == {"Nobody's Hero", "Neil Peart"}
    assert ex.metadata == {"type": raw[0]["type"], "level": raw[0]["level"]}
    yes_no = [e for e in res.examples if e.answers[0] in ("yes", "no")]
    assert len(yes_no) == sum(1 for r in raw if r["answer"] in ("yes", "no")) > 0


def test_2wiki_loader_matches_raw_file():
    raw = _raw_json(WIKI2)
    res = load_examples(WIKI2)
    assert res.format == "2wikimultihopqa" and len(res.examples) == 164
    ex = res.examples[0]
    assert ex.id == "b088d3ca08e211ebbda4ac1f6bf848b6" and ex.answers == ["Free Guy"]
    assert ex.supporting_facts[0] == ("Forbidden Ground", 0) and len(ex.supporting_facts) == 4
    assert ex.metadata["type"] == "bridge_comparison" and ex.metadata["evidences"][0][1] == "director"
    gabor = next(p for p in ex.context if p.title == "Pál Gábor")
    # 2Wiki sentences have no leading space: the loader inserts one between them
    assert "screenwriter. He directed 20 films" in gabor.text and gabor.is_supporting
    assert all(len(e.context) == len(r["context"]) for e, r in zip(res.examples, raw, strict=True))


def test_musique_loader_answers_aliases_support():
    raw = [json.loads(line) for line in MUSIQUE.read_text().splitlines()]
    res = load_examples(MUSIQUE)
    assert res.format == "musique" and len(res.examples) == 200
    ex = res.examples[0]
    assert ex.id == "2hop__574419_270105" and ex.answers == ["Stanley"] and ex.answerable
    assert len(ex.context) == 20
    assert [p.is_supporting for p in ex.context] == [p["is_supporting"] for p in raw[0]["paragraphs"]]
    assert ex.metadata["question_decomposition"][0]["answer"] == "Mountrail County"
    with_alias = next((e, r) for e, r in zip(res.examples, raw, strict=True) if r["answer_aliases"])
    e, r = with_alias
    assert e.answers[0] == r["answer"] and set(r["answer_aliases"]) <= set(e.answers)
    assert len(e.answers) == len(set(e.answers))


def test_musique_unanswerable_flag(tmp_path):
    rec = json.loads(MUSIQUE.read_text().splitlines()[0])
    rec["answerable"] = False
    p = tmp_path / "musique_full.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    ex = load_examples(p).examples[0]
    assert ex.answerable is False and ex.dataset == "musique"


def test_flashrag_loader_and_dataset_name():
    res = load_examples(FLASHRAG)
    assert res.format == "flashrag" and len(res.examples) == 17
    ex = res.examples[0]
    assert ex.id == "test_0" and ex.answers == ["Wilhelm Conrad Röntgen"]
    assert ex.dataset == "nq"  # from the file name nq_test17.jsonl
    assert not ex.context
    assert load_examples(FLASHRAG, dataset="natural_questions").examples[0].dataset == "natural_questions"


def test_searchr1_parquet_loader():
    import pyarrow.parquet as pq

    table = pq.read_table(SEARCHR1, columns=["id", "data_source", "golden_answers"]).to_pylist()
    res = load_examples(SEARCHR1)
    assert res.format == "searchr1" and len(res.examples) == len(table) == 512
    assert [e.id for e in res.examples] == [r["id"] for r in table]
    assert {e.dataset for e in res.examples} == {"nq", "hotpotqa"}
    assert all(e.answers == r["golden_answers"] for e, r in zip(res.examples, table, strict=True))
    hp = next(e for e in res.examples if e.dataset == "hotpotqa")
    assert len(hp.context) == 10 and hp.supporting_facts
    assert {t for t, _ in hp.supporting_facts} == {p.title for p in hp.context if p.is_supporting}
    assert hp.metadata["data_source"] == "hotpotqa"
    nq = next(e for e in res.examples if e.dataset == "nq")
    assert not nq.context and not nq.supporting_facts


def test_unified_roundtrip_via_cli(tmp_path):
    out = tmp_path / "hotpot.unified.jsonl"
    assert main(["data", "prepare", str(HOTPOT), "--out", str(out), "--limit", "25", "--seed", "3"]) == 0
    assert detect_format(out) == "unified"
    back = load_examples(out)
    direct = load_examples(HOTPOT, limit=25, seed=3).examples
    assert back.format == "unified" and back.examples == direct
    assert isinstance(back.examples[0].supporting_facts[0], tuple)


def test_detect_format_on_every_shipped_file_and_container_independence(tmp_path):
    expected = {"hotpotqa": "hotpotqa", "2wikimultihopqa": "2wikimultihopqa", "musique": "musique",
                "flashrag-nq": "flashrag", "searchr1-train": "searchr1"}
    for name, fmt in expected.items():
        assert detect_format(shipped_path(name)) == fmt, name
    # a FlashRAG file saved as a JSON array, and MuSiQue lines with a blank first line
    lines = [json.loads(x) for x in FLASHRAG.read_text().splitlines()]
    arr = tmp_path / "nq.json"
    arr.write_text(json.dumps(lines, indent=1))
    assert detect_format(arr) == "flashrag" and len(load_examples(arr, dataset="nq").examples) == 17
    blank = tmp_path / "m.jsonl"
    blank.write_text("\n" + MUSIQUE.read_text())
    assert detect_format(blank) == "musique"
    broken_first = tmp_path / "b.jsonl"
    broken_first.write_text('{"id": \n' + MUSIQUE.read_text())
    assert detect_format(broken_first) == "musique"
    res = load_examples(broken_first, on_error="skip")
    assert len(res.examples) == 200 and res.skipped[0].startswith(f"{broken_first}:1:")


def test_detect_format_unknown_and_explicit_override(tmp_path, capsys):
    p = tmp_path / "odd.jsonl"
    p.write_text(json.dumps({"query": "q", "label": "a"}) + "\n")
    with pytest.raises(DataError, match=r"odd\.jsonl.*cannot detect.*query"):
        detect_format(p)
    # the command's error names the flag that overrides detection, and writes nothing
    assert main(["data", "prepare", str(p), "--out", str(tmp_path / "out.jsonl")]) == 2
    assert "name it with --format (awarl data)" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        detect_format(empty)
    # explicit format: the 2Wiki file read with the HotpotQA converter loses 2Wiki-only metadata
    ex = load_examples(WIKI2, format="hotpotqa").examples[0]
    assert ex.dataset == "hotpotqa" and "evidences" not in ex.metadata
    with pytest.raises(DataError, match="unknown dataset format .squad."):
        load_examples(WIKI2, format="squad")
    with pytest.raises(FileNotFoundError):
        load_examples(tmp_path / "missing.json")


def _bad_hotpot(tmp_path):
    raw = _raw_json(HOTPOT)[:5]
    del raw[2]["question"]
    raw[4]["context"] = "not a list"
    p = tmp_path / "bad_hotpot.json"
    p.write_text(json.dumps(raw))
    return p


def test_malformed_json_record_fail_names_file_and_index(tmp_path):
    p = _bad_hotpot(tmp_path)
    with pytest.raises(DataError, match=r"bad_hotpot\.json: record 2: .*missing key 'question'"):
        load_examples(p, format="hotpotqa")


def test_malformed_records_skip_counts(tmp_path):
    res = load_examples(_bad_hotpot(tmp_path), format="hotpotqa", on_error="skip")
    assert len(res.examples) == 3 and len(res.skipped) == 2
    assert "record 2" in res.skipped[0] and "record 4" in res.skipped[1] and "context" in res.skipped[1]


def test_malformed_jsonl_line_numbers(tmp_path):
    lines = MUSIQUE.read_text().splitlines()[:4]
    bad = json.loads(lines[1])
    bad["answer_aliases"] = "Stanley"  # must be a list
    text = "\n".join([lines[0], json.dumps(bad), '{"id": "x", "paragr', lines[2], lines[2]]) + "\n"
    p = tmp_path / "bad_musique.jsonl"
    p.write_text(text)
    with pytest.raises(DataError, match=r"bad_musique\.jsonl:2: .*answer_aliases"):
        load_examples(p, format="musique")
    res = load_examples(p, format="musique", on_error="skip")
    assert len(res.examples) == 2
    assert len(res.skipped) == 3
    joined = "\n".join(res.skipped)
    assert "bad_musique.jsonl:2:" in joined and "bad_musique.jsonl:3:" in joined
    assert "bad_musique.jsonl:5:" in joined and "duplicate id" in joined  # line 5 repeats line 4


def test_limit_is_seeded_and_keeps_order():
    a = load_examples(HOTPOT, limit=20, seed=1).examples
    b = load_examples(HOTPOT, limit=20, seed=1).examples
    c = load_examples(HOTPOT, limit=20, seed=2).examples
    full = [e.id for e in load_examples(HOTPOT).examples]
    assert [e.id for e in a] == [e.id for e in b] and [e.id for e in a] != [e.id for e in c]
    positions = [full.index(e.id) for e in a]
    assert positions == sorted(positions) and len(set(positions)) == 20
    assert subsample([1, 2, 3], 10, 0) == [1, 2, 3]


def test_load_shipped(monkeypatch, tmp_path):
    assert set(SHIPPED_DEV) == {"hotpotqa", "2wikimultihopqa", "musique"}
    assert all((shipped_data_dir() / rel).is_file() for rel in list(SHIPPED_DEV.values()) + list(SHIPPED_OTHER.values()))
    exs = load_shipped("musique", limit=7, seed=0)
    assert len(exs) == 7 and all(e.dataset == "musique" for e in exs)
    with pytest.raises(DataError, match="choose one of"):
        load_shipped("squad")
    monkeypatch.setenv("AWARL_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        load_shipped("hotpotqa")


def _ex(i, paras):
    return QAExample(id=str(i), dataset="t", question="q?", answers=["a"],
                     context=[Paragraph(title=t, text=x) for t, x in paras])


def test_build_corpus_dedupes_and_ids_are_stable():
    a = _ex(1, [("Paris", "Paris is the capital of France."), ("Lyon", "Lyon is a city.")])
    b = _ex(2, [("Paris", "Paris is the capital of France."), ("Paris", "Paris is also a Texas town."),
                ("Empty", "   ")])
    rows = build_corpus([a, b])
    assert len(rows) == 3  # the shared paragraph once, the blank one dropped
    assert rows == build_corpus([b, a])  # independent of input order
    contents = {r["contents"] for r in rows}
    assert '"Paris"\nParis is the capital of France.' in contents
    assert all(r["id"].startswith("p-") and len(r["id"]) == 18 for r in rows)
    assert len({r["id"] for r in rows}) == 3
    # same title, different text -> different ids; same (title, text) in a new run -> same id
    again = build_corpus([_ex(9, [("Lyon", "Lyon is a city.")])])
    lyon = next(r for r in rows if r["contents"].startswith('"Lyon"'))
    assert again[0]["id"] == lyon["id"]


def test_shipped_closed_corpus(tmp_path):
    path = shipped_closed_corpus(tmp_path / "closed.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    exs = [e for name in SHIPPED_DEV for e in load_shipped(name)]
    n_par = sum(len(e.context) for e in exs)
    assert 0 < len(rows) < n_par  # the datasets share paragraphs across questions
    assert len({r["id"] for r in rows}) == len(rows)
    # every supporting paragraph of every question is retrievable from the closed corpus
    contents = {r["contents"] for r in rows}
    for e in exs:
        for p in e.context:
            if p.is_supporting:
                assert f'"{p.title}"\n{" ".join(p.text.split())}' in contents
    assert write_corpus(rows[:3], tmp_path / "three.jsonl") == 3


def test_dataset_stats_hand_checked():
    exs = [
        QAExample(id="1", dataset="x", question="one two three", answers=["a", "b"],
                  supporting_facts=[("T", 0), ("U", 1)],
                  context=[Paragraph("T", "t", True), Paragraph("U", "u", True), Paragraph("V", "v")]),
        QAExample(id="2", dataset="x", question="one", answers=[], answerable=False),
        QAExample(id="3", dataset="y", question="a b", answers=["c"], metadata={"type": "bridge"}),
    ]
    st = dataset_stats(exs)
    assert list(st) == ["x", "y", "all"]
    x = st["x"]
    assert x["n"] == 2 and x["answerable_share"] == 0.5 and x["mean_question_words"] == 2.0
    assert x["mean_answers"] == 1.0 and x["no_answer"] == 1 and x["mean_context_paragraphs"] == 1.5
    assert x["mean_supporting_paragraphs"] == 1.0 and x["mean_supporting_facts"] == 1.0
    assert st["y"]["types"] == {"bridge": 1} and st["all"]["n"] == 3


@pytest.mark.slow
def test_cli_data_stats_and_corpus(tmp_path, capsys):
    assert main(["data", "stats", str(HOTPOT), str(MUSIQUE)]) == 0
    out = capsys.readouterr().out
    assert "hotpotqa" in out and "musique" in out and "200" in out
    unified = tmp_path / "u.jsonl"
    assert main(["data", "prepare", str(WIKI2), "--out", str(unified)]) == 0
    assert main(["data", "stats", str(unified)]) == 0
    assert "164" in capsys.readouterr().out
    corpus = tmp_path / "c.jsonl"
    assert main(["data", "corpus", str(HOTPOT), "--out", str(corpus)]) == 0
    n_hot = len(corpus.read_text().splitlines())
    assert n_hot == len(build_corpus(load_examples(HOTPOT).examples))
    default = tmp_path / "all.jsonl"
    assert main(["data", "corpus", "--out", str(default)]) == 0
    assert len(default.read_text().splitlines()) > n_hot


def test_cli_data_errors(tmp_path, capsys):
    bad = _bad_hotpot(tmp_path)
    assert main(["data", "prepare", str(bad), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "record 2" in capsys.readouterr().err
    assert main(["data", "prepare", str(bad), "--out", str(tmp_path / "o.jsonl"), "--on-error", "skip"]) == 0
    out = capsys.readouterr().out
    assert "skipped 2 malformed" in out and len((tmp_path / "o.jsonl").read_text().splitlines()) == 3
    assert main(["data", "prepare", str(tmp_path / "nope.json"), "--out", str(tmp_path / "x.jsonl")]) == 2
    # every record skipped, or no context to build a corpus from: an error, and the earlier output stays
    worse = tmp_path / "worse.jsonl"
    worse.write_text('{"question": "q", "golden_answers": ["a"]}\n{"question": "r", "golden_answers": ["b"]}\n')
    kept = tmp_path / "kept.jsonl"
    kept.write_text("earlier\n")
    capsys.readouterr()
    assert main(["data", "prepare", str(worse), "--out", str(kept), "--format", "flashrag", "--on-error", "skip"]) == 2
    err = capsys.readouterr().err
    assert f"{worse}: no examples; 2 malformed record(s) skipped, first: {worse}:1:" in err and "nothing written" in err
    no_context = tmp_path / "no_context.jsonl"
    no_context.write_text('{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    assert main(["data", "corpus", str(no_context), "--out", str(kept)]) == 2
    assert "no context paragraphs in 1 question(s)" in capsys.readouterr().err
    assert kept.read_text() == "earlier\n"
    # --out naming the input (or, through a link, the same file): the dataset would be replaced by its conversion
    copy = tmp_path / "hotpot.json"
    copy.write_bytes(HOTPOT.read_bytes())
    (tmp_path / "link.json").symlink_to(copy)
    for cmd in (["prepare", str(copy)], ["corpus", str(MUSIQUE), str(copy)]):
        for out in (copy, tmp_path / "link.json"):
            assert main(["data", *cmd, "--out", str(out)]) == 2
            assert f"is the input file {copy}: writing it would replace the dataset" in capsys.readouterr().err
    assert copy.read_bytes() == HOTPOT.read_bytes()


def test_jsonl_with_bom_and_non_utf8_line(tmp_path):
    lines = MUSIQUE.read_bytes().splitlines()[:3]
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    res = load_examples(p)
    assert res.format == "musique" and len(res.examples) == 3 and not res.skipped  # first record kept
    bad = json.loads(lines[1])
    bad["id"] = "latin1"
    bad["question"] = "Où est caf\u00e9?"
    p2 = tmp_path / "latin.jsonl"
    latin = json.dumps(bad).encode().replace(b"caf\\u00e9", b"caf\xe9")  # a raw Latin-1 byte, not UTF-8
    p2.write_bytes(b"\n".join([lines[0], latin, lines[2]]) + b"\n")
    with pytest.raises(DataError, match=r"latin\.jsonl:2: .*utf-8"):
        load_examples(p2)
    res = load_examples(p2, on_error="skip")
    assert [e.id for e in res.examples] == [json.loads(lines[0])["id"], json.loads(lines[2])["id"]]
    assert len(res.skipped) == 1 and res.skipped[0].startswith(f"{p2}:2:")


def test_unified_rejects_mistyped_fields(tmp_path):
    ex = load_shipped("hotpotqa", limit=1)[0].to_dict()
    for key, value, where in [("answerable", "false", "answerable"), ("metadata", "x", "metadata"),
                              ("context", {"t": 1}, "context")]:
        p = tmp_path / f"u_{key}.jsonl"
        p.write_text(json.dumps({**ex, key: value}) + "\n")
        with pytest.raises(DataError, match=rf"u_{key}\.jsonl:1: unified record: key '{where}'"):
            load_examples(p, format="unified")


def test_unified_refuses_unknown_keys_and_offsets_outside_the_text(tmp_path):
    """The reader ignored a misspelt top-level key (`answer` for `answers`: the record loaded without it) and
    took any integers as sentence offsets (a negative one read a sentence from the end of the text, so the gold
    evidence named other sentences than the source's)."""
    ex = load_shipped("hotpotqa", limit=1)[0].to_dict()
    para = ex["context"][0]
    n = len(para["text"])
    cases = {"typo": ({**ex, "contexts": ex["context"]}, r"unknown keys \['contexts'\]"),
             "negative": (_with_starts(ex, [0, -5]), r"key 'context'\[0\]\.sentence_starts: expected non-decreasing"),
             "past_end": (_with_starts(ex, [0, n + 1]), rf"in \[0, {n}\]"),
             "unsorted": (_with_starts(ex, [0, 20, 10]), "non-decreasing")}
    for name, (rec, error) in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text(json.dumps(ex) + "\n" + json.dumps({**rec, "id": "x2"}) + "\n")
        with pytest.raises(DataError, match=rf"{name}\.jsonl:2: unified record: .*{error}"):
            load_examples(p, format="unified")
        assert [e.id for e in load_examples(p, format="unified", on_error="skip").examples] == [ex["id"]]
    # what prepare writes still loads: offsets at the text's end (an empty last sentence) and repeated ones
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps(_with_starts(ex, [0, 0, n])) + "\n")
    assert load_examples(ok, format="unified").examples[0].context[0].sentence_starts == [0, 0, n]


def _with_starts(ex: dict, starts: list[int]) -> dict:
    return {**ex, "context": [{**ex["context"][0], "sentence_starts": starts}, *ex["context"][1:]]}


@pytest.mark.parametrize("first", ["null", "[]", "[1, 2]", "7", '"a string"'])
def test_a_first_line_that_is_no_record_does_not_block_json_lines(tmp_path, first):
    """A valid JSON first line that is not an object made the whole file unreadable even with on_error="skip":
    `[]` read the file as one JSON array ("Extra data"), `null` or a number as no known container."""
    p = tmp_path / "m.jsonl"
    p.write_text(first + "\n" + MUSIQUE.read_text())
    assert detect_format(p) == "musique"
    with pytest.raises(DataError, match=r"m\.jsonl:1: .*expected a JSON object"):
        load_examples(p)
    res = load_examples(p, on_error="skip")
    assert len(res.examples) == 200 and res.skipped[0].startswith(f"{p}:1:")
    # a JSON array whose first element is no record: detected from the first that is, that element skipped
    arr = tmp_path / "m.json"
    arr.write_text(json.dumps([json.loads(first), *map(json.loads, MUSIQUE.read_text().splitlines())]))
    assert detect_format(arr) == "musique"
    assert len(load_examples(arr, on_error="skip").examples) == 200


def test_unified_answerable_null_is_answerable_as_when_absent(tmp_path):
    """The reader took `"answerable": null` as absent, then from_dict's bool(None) made the question
    unanswerable: its gold answers dropped, any answer scored wrong (MuSiQue reads null as true)."""
    ex = load_shipped("hotpotqa", limit=1)[0].to_dict()
    p = tmp_path / "u.jsonl"
    p.write_text(json.dumps({**ex, "answerable": None}) + "\n")
    (got,) = load_examples(p, format="unified").examples
    assert got.answerable and got.gold_answers == ex["answers"]


@pytest.mark.parametrize("answers", [[None], [["Rush"]], [{"text": "Rush"}], [True], ["Rush", 1984]])
def test_unified_refuses_answers_that_are_not_strings(tmp_path, answers):
    """from_dict str()ed each answer: null became the gold answer "None", a nested list "['Rush']"."""
    ex = load_shipped("hotpotqa", limit=1)[0].to_dict()
    p = tmp_path / "u.jsonl"
    p.write_text(json.dumps(ex) + "\n" + json.dumps({**ex, "id": "x2", "answers": answers}) + "\n")
    i = len(answers) - 1
    with pytest.raises(DataError, match=rf"u\.jsonl:2: unified record: key 'answers'\[{i}\]: expected a string"):
        load_examples(p)
    res = load_examples(p, on_error="skip")
    assert [e.id for e in res.examples] == [ex["id"]] and len(res.skipped) == 1


def _blank_question_files() -> dict[str, tuple[str, list]]:
    """name -> (format, [a record with a blank question, a good one]) in each format's container."""
    hotpot = _raw_json(HOTPOT)[:2]
    musique = [json.loads(x) for x in MUSIQUE.read_text().splitlines()[:2]]
    flash = [json.loads(x) for x in FLASHRAG.read_text().splitlines()[:2]]
    unified = [e.to_dict() for e in load_shipped("hotpotqa", limit=2)]
    return {"hotpot.json": ("hotpotqa", hotpot), "musique.jsonl": ("musique", musique),
            "nq_test.jsonl": ("flashrag", flash), "unified.jsonl": ("unified", unified)}


@pytest.mark.parametrize("blank", ["", "  ", "\n"])
def test_blank_question_is_a_malformed_record_in_every_format(tmp_path, blank):
    """A blank question loaded as question '' (sent to the model, written by prepare) in every format."""
    for name, (fmt, recs) in _blank_question_files().items():
        recs[0]["question"] = blank
        p = tmp_path / name
        p.write_text(json.dumps(recs) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in recs))
        where = f"{name}: record 0" if name.endswith(".json") else f"{name}:1"  # as malformed ids are named
        with pytest.raises(DataError, match=re.escape(f"{where}: {fmt} record: key 'question': empty")):
            load_examples(p)
        res = load_examples(p, on_error="skip")
        assert len(res.examples) == 1 and res.examples[0].question == recs[1]["question"].strip()
        assert len(res.skipped) == 1 and "key 'question': empty" in res.skipped[0]


def test_flashrag_dataset_from_a_relative_path(tmp_path, monkeypatch):
    """FlashRAG's <dataset>/<split>.jsonl read as `dev.jsonl` inside its folder took the dataset name from the
    path as given: '' (then the split name, 'dev') instead of the folder's 'hotpotqa'."""
    folder = tmp_path / "hotpotqa"
    folder.mkdir()
    (folder / "dev.jsonl").write_text(FLASHRAG.read_text().splitlines()[0] + "\n")
    assert load_examples(folder / "dev.jsonl").examples[0].dataset == "hotpotqa"
    monkeypatch.chdir(folder)
    for rel in ("dev.jsonl", "./dev.jsonl", "../hotpotqa/dev.jsonl"):
        assert load_examples(rel).examples[0].dataset == "hotpotqa", rel
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert load_examples("../hotpotqa/dev.jsonl").examples[0].dataset == "hotpotqa"


@pytest.mark.parametrize("flag", ["false", "true", 0, 1, [], None])
def test_musique_is_supporting_must_be_a_bool(tmp_path, flag):
    """is_supporting was bool()ed: "false" (a re-exported file) made the paragraph gold evidence. Now a
    non-bool costs the record, as `answerable`; absent (null) is not supporting."""
    rec = json.loads(MUSIQUE.read_text().splitlines()[0])
    rec["paragraphs"][0]["is_supporting"] = flag
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    if flag is None:
        assert load_examples(p).examples[0].context[0].is_supporting is False
        return
    with pytest.raises(DataError, match=r"m\.jsonl:1: musique record: key 'paragraphs'\[0\]\.is_supporting: "
                                        r"expected a bool"):
        load_examples(p)
    # in a FlashRAG row's metadata the paragraphs are optional: dropped with a warning, the row kept
    row = {"id": "f1", "question": rec["question"], "golden_answers": [rec["answer"]],
           "metadata": {"paragraphs": rec["paragraphs"]}}
    f = tmp_path / "musique_dev.jsonl"
    f.write_text(json.dumps(row) + "\n")
    res = load_examples(f, format="flashrag")
    assert res.examples[0].context == [] and "metadata.paragraphs'[0].is_supporting" in res.warnings[0]
