"""`awarl estimate`: p_i from K trajectories per real training question, appended per batch, resumable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from awarl.config import config_from_dict  # noqa: E402
from awarl.data.estimates import estimate_row, join_p, read_estimates  # noqa: E402
from awarl.data.types import QAExample, example_key  # noqa: E402
from awarl.io import DataError, shipped_data_dir  # noqa: E402
from awarl.stages.estimate import run_estimate  # noqa: E402

HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"


@pytest.fixture(scope="session")
def index(tmp_path_factory):
    from awarl.data.corpus import build_corpus, write_corpus
    from awarl.data.loaders import load_examples
    from awarl.retrieval import build_index

    d = tmp_path_factory.mktemp("est-idx")
    exs = load_examples(HOTPOT, format="hotpotqa", limit=3, seed=0).examples
    write_corpus(build_corpus(exs), d / "corpus.jsonl")
    return build_index(d / "corpus.jsonl", "bm25", d / "bm25", show_progress=False)


def cfg_dict(tmp_path: Path, tiny_dir: Path, index: Path, **gen) -> dict:
    return {
        "run": {"out_dir": str(tmp_path / "run"), "seed": 0},
        "data": {"train": [{"path": str(HOTPOT), "format": "hotpotqa", "limit": 3}]},
        "retrieval": {"kind": "bm25", "index_dir": str(index), "topk": 2},
        "agent": {"max_turns": 1, "max_new_tokens_per_turn": 8, "max_trajectory_tokens": 40},
        "generation": {"batch_size": 2, **gen},
        "estimate": {"k": 2},
        "train": {"model": str(tiny_dir)},
    }


def test_cli_writes_p_per_question_and_resolved_config(tmp_path, tiny_dir, index, capsys):
    from awarl.cli import main

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg_dict(tmp_path, tiny_dir, index)))
    assert main(["estimate", "--config", str(path), "-k", "3"]) == 0
    said = capsys.readouterr().out
    assert "3 questions, mean p_i" in said and "`awarl train` with this config reads them" in said
    assert main(["estimate", "--config", str(path), "-k", "3", "train.p_estimates=/elsewhere/p.jsonl"]) == 0
    assert "train.p_estimates points to /elsewhere/p.jsonl" in capsys.readouterr().out
    out = tmp_path / "run" / "p_estimates.jsonl"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and len({r["qid"] for r in rows}) == 3
    for r in rows:
        assert set(r) == {"qid", "dataset", "question", "k", "correct", "p_i", "p_answered", "outcomes"}
        assert r["k"] == 3 and sum(r["outcomes"].values()) == 3
        assert r["p_i"] == pytest.approx(r["correct"] / 3) and r["correct"] == r["outcomes"]["correct"]
        assert r["dataset"] == "hotpotqa"
    resolved = yaml.safe_load((tmp_path / "run" / "estimate" / "resolved_config.yaml").read_text())
    assert resolved["estimate"]["k"] == 3


def write_script(path: Path, answers: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"question": q, "turns": [f"<answer> {a} </answer>"]}) + "\n"
                            for q, a in answers.items()))
    return path


def test_p_counts_correct_trajectories_and_resume_after_kill(tmp_path, tiny_dir, index):
    from awarl.data.loaders import load_examples

    exs = load_examples(HOTPOT, format="hotpotqa", limit=3, seed=0).examples
    # scripted: question 0 answered right, 1 abstains, 2 answered wrong -> p = 1, 0, 0
    script = write_script(tmp_path / "script.jsonl", {exs[0].question: exs[0].answers[0],
                                                      exs[1].question: "not enough information",
                                                      exs[2].question: "zebra crossing"})
    cfg = config_from_dict(cfg_dict(tmp_path, tiny_dir, index, backend="scripted", script=str(script)))
    out = Path(cfg.run.out_dir) / "p_estimates.jsonl"

    def kill_after_first(batch: int) -> None:
        raise KeyboardInterrupt

    # generation.batch_size=2, k=2 -> one question per batch; the kill comes right after the first append
    with pytest.raises(KeyboardInterrupt):
        run_estimate(cfg, on_batch=kill_after_first)
    assert len(out.read_text().splitlines()) == 1
    record = out.with_name("p_estimates.manifest.json")
    assert json.loads(record.read_text())["status"] == "running"  # training refuses a cut-short estimate
    with open(out, "a") as f:  # a torn line, as a kill in the middle of a write would leave
        f.write('{"qid": "x", "datas')
    seen = []
    run_estimate(cfg, on_batch=seen.append)
    assert seen == [0, 1]  # only the two unfinished questions were generated
    rows = read_estimates(out)
    assert len(out.read_text().splitlines()) == 3
    p = {k: r["p_i"] for k, r in rows.items()}
    assert p == {example_key("hotpotqa", exs[0].id): 1.0, example_key("hotpotqa", exs[1].id): 0.0,
                 example_key("hotpotqa", exs[2].id): 0.0}
    assert rows[example_key("hotpotqa", exs[1].id)]["outcomes"]["abstain"] == 2
    assert rows[example_key("hotpotqa", exs[2].id)]["outcomes"]["wrong"] == 2
    assert json.loads(record.read_text())["status"] == "complete"
    # a finished run is a no-op, and one killed after its last batch but before the record said so is marked
    record.write_text(json.dumps({**json.loads(record.read_text()), "status": "running"}))
    run_estimate(cfg, on_batch=seen.append)
    assert seen == [0, 1] and json.loads(record.read_text())["status"] == "complete"


def test_a_rerun_under_other_settings_is_refused_finished_or_not(tmp_path, tiny_dir, index):
    """A finished estimate made a rerun a no-op whatever it asked for, so a new estimate.model (or template,
    temperature, retrieval...) got the old model's p_i; now the file's settings record refuses it."""
    from awarl.data.estimates import settings_path
    from awarl.data.loaders import load_examples

    exs = load_examples(HOTPOT, format="hotpotqa", limit=3, seed=0).examples
    script = write_script(tmp_path / "script.jsonl", {e.question: e.answers[0] for e in exs})
    base = cfg_dict(tmp_path, tiny_dir, index, backend="scripted", script=str(script))
    out = run_estimate(config_from_dict(base))
    record = json.loads(settings_path(out).read_text())
    assert settings_path(out).name == "p_estimates.manifest.json"
    assert record["sampling"]["temperature"] == 1.0 and record["k"] == 2
    assert record["model"]["name"] == str(tiny_dir) and record["retrieval"]["index"]["kind"] == "bm25"
    rows_before = out.read_text()
    resolved = out.parent / "estimate" / "resolved_config.yaml"
    resolved_before = resolved.read_text()
    for key, value, named in [("estimate", {"k": 2, "temperature": 0.7}, "sampling.temperature: 1.0 -> 0.7"),
                              ("agent", {**base["agent"], "max_turns": 2}, "agent:"),
                              ("retrieval", {**base["retrieval"], "topk": 3}, "retrieval.topk: 2 -> 3"),
                              # before: any of em / f1 / cover_em passed as "recomputable", but a row keeps counts,
                              # not answers, so a rerun graded the rest by another rule
                              ("metrics", {"correctness": "cover_em"}, "correctness: {'rule': 'em'"),
                              ("metrics", {"correctness": "f1", "f1_threshold": 0.3}, "'rule': 'f1'")]:
        with pytest.raises(ValueError, match="holds p_i estimates made with other settings") as e:
            run_estimate(config_from_dict({**base, key: value}))
        assert named in str(e.value) and "set estimate.out to another file" in str(e.value)
        assert out.read_text() == rows_before
        assert resolved.read_text() == resolved_before  # before: overwritten with the refused settings
    # another k is not a conflict: those rows are sampled again (docs/training.md)
    seen: list[int] = []
    run_estimate(config_from_dict({**base, "estimate": {"k": 1}}), on_batch=seen.append)
    assert seen and json.loads(settings_path(out).read_text())["k"] == 1
    # rows without their record (deleted, or from an awarl that kept none) cannot be checked: refused, as eval
    # refuses predictions without a manifest (issue 44: such a folder was resumed under any settings)
    settings_path(out).unlink()
    with pytest.raises(ValueError, match="holds p_i estimates .* but no p_estimates.manifest.json"):
        run_estimate(config_from_dict({**base, "estimate": {"k": 1, "temperature": 0.7}}))


def test_a_kill_during_the_first_append_is_replayed_before_the_settings_check(tmp_path, tiny_dir, index):
    """The settings check skipped an empty rows file and ran before the journal's replay: after a kill during
    the first append, a rerun at another temperature was not refused and counted the replayed rows done."""
    from awarl.data.estimates import settings_path
    from awarl.data.loaders import load_examples

    exs = load_examples(HOTPOT, format="hotpotqa", limit=3, seed=0).examples
    script = write_script(tmp_path / "script.jsonl", {e.question: e.answers[0] for e in exs})
    base = cfg_dict(tmp_path, tiny_dir, index, backend="scripted", script=str(script))
    out = run_estimate(config_from_dict(base))
    first = out.read_text().splitlines(keepends=True)[0]
    # the state a kill inside the first batch's append leaves: its journal written, the rows file empty
    (out.parent / f".{out.name}.append-0").write_text(first)
    out.write_text("")
    with pytest.raises(ValueError, match=r"sampling\.temperature: 1\.0 -> 0\.0"):
        run_estimate(config_from_dict({**base, "estimate": {"k": 2, "temperature": 0.0}}))
    assert out.read_text() == first  # the journaled batch completed, as made
    assert json.loads(settings_path(out).read_text())["sampling"]["temperature"] == 1.0


def test_an_unanswerable_question_gets_p_0_whatever_answer_its_record_keeps(tmp_path, tiny_dir, index):
    """MuSiQue-Full's `answerable: false` records keep the answer strings of the question they were made
    from; answering them was counted correct, so p_i said "answer" where only abstaining is right."""
    import dataclasses

    from awarl.data.estimates import read_estimates
    from awarl.data.loaders import load_examples

    exs = load_examples(HOTPOT, format="hotpotqa", limit=2, seed=0).examples
    exs[1] = dataclasses.replace(exs[1], answerable=False)
    script = write_script(tmp_path / "script.jsonl", {e.question: e.answers[0] for e in exs})
    out = run_estimate(config_from_dict(cfg_dict(tmp_path, tiny_dir, index, backend="scripted",
                                                 script=str(script))), examples=exs)
    rows = read_estimates(out)
    assert rows[f"hotpotqa/{exs[0].id}"]["p_i"] == 1.0
    assert rows[f"hotpotqa/{exs[1].id}"]["p_i"] == 0.0 and rows[f"hotpotqa/{exs[1].id}"]["outcomes"]["wrong"] == 2


def ex(i: str, ds: str = "nq") -> QAExample:
    return QAExample(id=i, dataset=ds, question=f"q{i}?", answers=["a"])


def test_estimates_summary():
    from awarl.data.estimates import estimates_summary

    rows = {str(i): {"p_i": p} for i, p in enumerate([0.0, 0.0, 1.0, 0.5])}
    assert estimates_summary(rows) == ("4 questions, mean p_i 0.375; never solved (p_i = 0): 2 (50%), "
                                       "always solved (p_i = 1): 1 (25%)")
    assert estimates_summary({}) == "no estimates"


def test_estimate_row_and_join():
    row = estimate_row(ex("1"), ["correct", "wrong", "abstain", "correct"])
    assert row["p_i"] == 0.5 and row["outcomes"] == {"correct": 2, "wrong": 1, "abstain": 1, "invalid": 0}
    with pytest.raises(ValueError, match="unknown outcome"):
        estimate_row(ex("1"), ["right"])
    # ids repeat across datasets (Search-R1's train_N): the join key includes the dataset
    est = {example_key("nq", "1"): {"p_i": 0.25}, example_key("hotpotqa", "1"): {"p_i": 0.75}}
    ps, missing = join_p([ex("1", "nq"), ex("1", "hotpotqa"), ex("2", "nq")], est)
    assert ps == [0.25, 0.75, None] and missing == 1


def test_read_estimates_errors_name_file_and_line(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"qid": "1", "dataset": "nq", "p_i": 0.5}\n{"qid": "2", "dataset": "nq", "p_i": 1.5}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:2: p_i must be a number in \[0, 1\]"):
        read_estimates(p)
    p.write_text('{"qid": "1", "dataset": "nq", "p_i": 0.5}\nnot json\n{"qid": "2", "dataset": "nq", "p_i": 1}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:2"):
        read_estimates(p)
    p.write_text('{"qid": "1", "p_i": 0.5}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:1: estimate row lacks \['dataset'\]"):
        read_estimates(p)


@pytest.mark.parametrize("value", ["runs/ckpt #3/final", "2024.10", "null", "a: b"])
def test_cli_model_and_out_are_taken_literally(tmp_path, monkeypatch, value):
    """--model / --out used to go through the YAML override parser unquoted: `ckpt #3` lost everything after
    the `#`, `2024.10` became a float (a validation error), `null` became None."""
    import awarl.stages.estimate as est
    from awarl.cli import main

    seen = {}
    monkeypatch.setattr(est, "run_estimate", lambda cfg: seen.setdefault("cfg", cfg) and Path(cfg.estimate.out))
    assert main(["estimate", "--model", value, "--out", str(tmp_path / value / "p.jsonl")]) == 0
    assert seen["cfg"].estimate.model == value
    assert seen["cfg"].estimate.out == str(tmp_path / value / "p.jsonl")


def test_resume_keeps_a_whole_last_row_that_lacks_its_newline(tmp_path):
    """`awarl estimate`'s resume (finish_interrupted_append, read_estimates, append_jsonl) counted a whole last
    row without its newline done, then the append's repair cut it as torn: that question was lost for good."""
    from awarl.io import append_jsonl, finish_interrupted_append

    out = tmp_path / "p_estimates.jsonl"
    rows = [estimate_row(ex(q), outs) for q, outs in (("a", ["correct", "wrong"]), ("b", ["abstain", "wrong"]))]
    out.write_text("\n".join(json.dumps(r) for r in rows))  # written the common way, or stopped before the "\n"
    finish_interrupted_append(out)
    assert set(read_estimates(out)) == {"nq/a", "nq/b"}  # b counts as done: the resume will not sample it
    append_jsonl(out, [estimate_row(ex("c"), ["correct", "correct"])])
    assert set(read_estimates(out)) == {"nq/a", "nq/b", "nq/c"}
    # a torn last row (a kill mid-line) is still not counted, and is cut before the next batch
    out.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1])[:-9])
    assert set(read_estimates(out)) == {"nq/a"}
    append_jsonl(out, [rows[1]])
    assert [json.loads(x) for x in out.read_text().splitlines()] == rows


def _row(**over):
    return {**estimate_row(ex("b"), ["correct", "wrong", "abstain", "invalid"]), **over}


@pytest.mark.parametrize("over, problem", [
    ({"correct": 5, "outcomes": {"correct": 5, "wrong": 0, "abstain": 0, "invalid": 0}},
     r"key 'correct': expected an integer in \[0, 4\], got 5"),
    ({"k": "four"}, r"key 'k': expected an integer >= 1, got 'four'"),
    ({"k": 0, "correct": 0}, r"key 'k': expected an integer >= 1, got 0"),
    ({"k": 4.0}, r"key 'k': expected an integer >= 1, got 4\.0"),
    ({"correct": True}, r"key 'correct': expected an integer"),
    ({"outcomes": [1, 1, 1, 1]}, r"key 'outcomes': expected an object of counts, got list"),
    ({"outcomes": {"correct": 1, "wrong": "1"}}, r"key 'outcomes': counts must be integers >= 0"),
    ({"outcomes": {"correct": 1, "wrong": -1}}, r"key 'outcomes': counts must be integers >= 0"),
    ({"outcomes": {"correct": 1, "right": 3}}, r"key 'outcomes': unknown outcome\(s\) \['right'\]"),
    ({"outcomes": {"correct": 1, "wrong": 0, "abstain": 0, "invalid": 4}},
     r"key 'outcomes': counts sum to 5, more than k=4"),
    ({"outcomes": {"correct": 2, "wrong": 0, "abstain": 0, "invalid": 2}},
     r"key 'outcomes': 2 correct, but the row's 'correct' is 1"),
    # p_i against its own counts (accepted before: share_of_k trained on 0.9, among_answered on the counts)
    ({"p_i": 0.9}, r"p_i is 0\.9, but the row's counts give correct/k = 1/4 = 0\.25"),
])
def test_read_estimates_refuses_malformed_counts_naming_file_and_line(tmp_path, over, problem):
    """k / correct / outcomes were not checked on reading: a bad row loaded, then failed in join_p (training)
    with a bare ValueError naming neither the file nor the line."""
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps(estimate_row(ex("a"), ["correct"])) + "\n" + json.dumps(_row(**over)) + "\n")
    with pytest.raises(DataError, match=rf"p\.jsonl:2: {problem}"):
        read_estimates(p)


def test_read_estimates_takes_what_the_writer_and_older_files_hold(tmp_path):
    p = tmp_path / "p.jsonl"
    rows = [estimate_row(ex("a"), ["abstain"] * 3), _row(), {"qid": "c", "dataset": "nq", "p_i": 0.5},
            {"qid": "d", "dataset": "nq", "p_i": 0.5, "k": 2, "correct": 1},        # counts without outcomes
            {"qid": "e", "dataset": "nq", "p_i": 0.5, "k": 4, "outcomes": {"correct": 2, "abstain": 1}}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    est = read_estimates(p)
    assert len(est) == 5
    p.write_text(json.dumps({"qid": "e", "dataset": "nq", "p_i": 0.9, "k": 4, "outcomes": {"correct": 2}}) + "\n")
    with pytest.raises(DataError, match=r"p_i is 0\.9, but the row's counts give correct/k = 2/4"):
        read_estimates(p)  # the counts without a 'correct' key
    assert join_p([ex(q) for q in "abcde"], est) == ([0.0, 0.25, 0.5, 0.5, 0.5], 0)
    ps, missing = join_p([ex(q) for q in "abe"], est, "among_answered")  # the rows with outcome counts
    assert ps == [0.0, pytest.approx(1 / 3), pytest.approx(2 / 3)] and missing == 0


def test_estimates_record_of_a_deeply_nested_manifest_names_the_file(tmp_path, caplog):
    """estimates_record used json.loads: a corrupt record nested too deeply raised RecursionError (a traceback
    out of `awarl train` / `awarl estimate`), not the {} of any other unreadable record."""
    from awarl.data.estimates import estimates_record, settings_path

    est = tmp_path / "p_estimates.jsonl"
    est.write_text("")
    assert estimates_record(est) == {}  # none (an older awarl): nothing logged
    assert not caplog.records
    settings_path(est).write_text("[" * 100000 + "]" * 100000)
    assert estimates_record(est) == {}
    assert f"{settings_path(est)}: unreadable settings record (nested too deeply" in caplog.text
    settings_path(est).write_text('{"status": "running"}')
    assert estimates_record(est) == {"status": "running"}


def test_two_training_questions_under_one_id_are_refused_naming_both_files(tmp_path):
    """Two data.train files of one dataset whose ids overlap: both questions were sampled and written under one
    key, and training gave both the later one's p_i (and one GRPO qid)."""
    from awarl.config import DataConfig
    from awarl.stages.questions import load_train_examples

    src = json.loads(HOTPOT.read_text())
    a, b = dict(src[0]), {**src[1], "_id": src[0]["_id"]}
    (tmp_path / "one.json").write_text(json.dumps([a]))
    (tmp_path / "two.json").write_text(json.dumps([b]))
    files = [{"path": str(tmp_path / n), "format": "hotpotqa", "dataset": "hotpotqa"} for n in ("one.json", "two.json")]
    with pytest.raises(DataError, match=rf"hotpotqa/{a['_id']} names two questions: .*one\.json.*two\.json"):
        load_train_examples(DataConfig.model_validate({"train": files}), 0)
    files[1]["dataset"] = "hotpotqa_extra"  # told apart by dataset: fine
    assert len(load_train_examples(DataConfig.model_validate({"train": files}), 0)) == 2
