"""Fault injection, round 4 (issue 44): a resume reuses only what it can check.

An evaluation folder with predictions but no manifest, a scripted run resumed on another script (or on a model),
a conflicting duplicate line, a reward state whose Ē could not have been written by the reward, and a citation
judge that was down during the first run. Each case is the issue's own; docs/reliability.md (round 4) gives
what each did before. Real parts: the `awarl` command line in process, the scripted backend over the tiny
tokenizer, the shipped BM25 index, a loopback OpenAI-compatible endpoint (fake: no LLM runs here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import fake_chat_app, serve_app

from awarl.cli import main
from awarl.config import RewardConfig, load_config
from awarl.data.loaders import load_shipped
from awarl.io import file_sha256
from awarl.rewards.trl_reward import STATE_FILE, AwaRLReward, load_reward_state
from awarl.stages.predictions import read_done
from awarl.stages.score import read_predictions, score_predictions


def write_script(path: Path, answers: list[str], n: int = 4) -> Path:
    """Replay turns for the first `n` shipped HotpotQA questions (seed 0): search, cite 1, answer answers[i]."""
    exs = load_shipped("hotpotqa", limit=n, seed=0)
    path.write_text("".join(json.dumps({"question": e.question, "turns": [
        f"<search> {e.question} </search>", f"<cite> 1 </cite> <answer> {a} </answer>"]}) + "\n"
        for e, a in zip(exs, answers, strict=True)))
    return path


def gold_script(path: Path, n: int = 4) -> Path:
    return write_script(path, [e.answers[0] for e in load_shipped("hotpotqa", limit=n, seed=0)], n)


def eval_argv(tiny_dir, index, out: Path, script: Path | None, limit: int, *extra: str) -> list[str]:
    return ["eval", "--model", str(tiny_dir), "--index", str(index), "--datasets", "hotpotqa", "--limit", str(limit),
            "--out", str(out), "metrics.bootstrap_samples=0", "critic.judge=lexical", "generation.batch_size=2",
            *(["generation.backend=scripted", f"generation.script={script}"] if script else
              ["agent.max_turns=1", "agent.max_new_tokens_per_turn=8", "agent.max_trajectory_tokens=120"]),
            *extra]


def one_error(capsys) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if " error: " in x or "Traceback" in x]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_predictions_without_a_manifest_are_not_resumed(tmp_path, tiny_dir, shipped_bm25_dir, capsys):
    """Before: a folder whose manifest was gone was resumed under any model (a scripted run's RA-F1 reported
    under a random one, exit 0)."""
    out = tmp_path / "run"
    assert main(eval_argv(tiny_dir, shipped_bm25_dir, out, gold_script(tmp_path / "s.jsonl"), 4)) == 0
    (out / "manifest.json").unlink()
    before = file_sha256(out / "predictions.jsonl")
    capsys.readouterr()
    assert main(eval_argv(tiny_dir, shipped_bm25_dir, out, None, 4)) == 2
    line = one_error(capsys)
    assert "holds predictions (predictions.jsonl) but no manifest.json" in line
    assert f"delete {out / 'predictions.jsonl'} to start over" in line
    assert file_sha256(out / "predictions.jsonl") == before and not (out / "manifest.json").exists()


def test_a_p_i_file_without_its_settings_record_is_not_resumed(tmp_path, tiny_dir, shipped_bm25_dir, capsys):
    from awarl.data.estimates import settings_path

    out = tmp_path / "p.jsonl"
    hotpot = Path(__file__).resolve().parent.parent / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
    argv = ["estimate", "--model", str(tiny_dir), "--out", str(out), "-k", "1", f"run.out_dir={tmp_path}",
            f"data.train=[{{path: {hotpot}, limit: 2}}]", f"retrieval.index_dir={shipped_bm25_dir}",
            "agent.max_turns=1", "agent.max_new_tokens_per_turn=8", "agent.max_trajectory_tokens=120"]
    assert main(argv) == 0
    settings_path(out).unlink()
    capsys.readouterr()
    assert main(argv) == 2
    line = one_error(capsys)
    assert "holds p_i estimates (p.jsonl) but no p.manifest.json" in line and f"delete {out}" in line


def test_a_scripted_run_is_not_resumed_on_another_script_or_on_a_model(tmp_path, tiny_dir, shipped_bm25_dir,
                                                                         capsys):
    """Before: `generation.script` was no recorded setting: a run on script A resumed on script B, exit 0,
    two runs' answers in one file."""
    out = tmp_path / "run"
    a = gold_script(tmp_path / "a.jsonl")
    b = write_script(tmp_path / "b.jsonl", ["I don't know"] * 4)
    assert main(eval_argv(tiny_dir, shipped_bm25_dir, out, a, 2)) == 0
    capsys.readouterr()
    assert main(eval_argv(tiny_dir, shipped_bm25_dir, out, b, 4)) == 2
    assert f"generation.script: 'script sha256 {file_sha256(a)}' -> 'script sha256 {file_sha256(b)}'" \
        in one_error(capsys)
    assert main(eval_argv(tiny_dir, shipped_bm25_dir, out, None, 4)) == 2
    assert f"generation.script: 'script sha256 {file_sha256(a)}' -> 'model'" in one_error(capsys)
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 2
    # the same script finishes it
    assert main(eval_argv(tiny_dir, shipped_bm25_dir, out, a, 4)) == 0
    assert len(read_done(out / "predictions.jsonl")) == 4


def test_estimate_inputs_name_the_script_of_a_scripted_estimate():
    from awarl.stages.estimate import estimate_inputs

    scripted = load_config(None, ["generation.backend=scripted", "generation.script=x.jsonl"])
    assert estimate_inputs(scripted)["generation.script"] == "x.jsonl"
    assert "generation.script" not in estimate_inputs(load_config(None, ["generation.script=x.jsonl"]))


def test_eval_and_score_keep_the_same_copy_of_a_question_written_twice(tmp_path, tiny_dir, shipped_bm25_dir,
                                                                        caplog):
    """Before: a conflicting second line of a question was scored by the resumed eval (the last copy: RA-F1
    0.111) and skipped by `awarl score` (the first: 0.0)."""
    out = tmp_path / "run"
    argv = eval_argv(tiny_dir, shipped_bm25_dir, out, write_script(tmp_path / "s.jsonl", ["nobody"] * 4), 4)
    assert main(argv) == 0
    pred = out / "predictions.jsonl"
    first = json.loads(pred.read_text().splitlines()[0])
    copy = {**first, "prediction": first["answers"][0], "outcome": "correct"}
    with open(pred, "a") as f:
        f.write(json.dumps(copy) + "\n")
    cfg = load_config(None, ["metrics.bootstrap_samples=0"])
    rows, lines, errors = read_predictions(pred)
    scored = score_predictions(rows, cfg.metrics, [], source=str(pred), line_numbers=lines, skipped=errors)
    key = f"{first['dataset']}/{first['id']}"
    assert read_done(pred)[key] == first                       # the resume's rule: the first copy
    assert scored["macro"]["accuracy"] == 0.0                   # the scorer's: the first copy too
    assert "duplicate id" in scored["skipped_lines"][0] and ":5:" in scored["skipped_lines"][0]
    assert main(argv) == 0
    assert "predictions.jsonl:5: duplicate id" in caplog.text and "(the first copy stays)" in caplog.text
    results = json.loads((out / "results.json").read_text())
    assert results["macro"]["ra_f1"] == scored["macro"]["ra_f1"] == 0.0 and results["n"] == 4
    assert len(pred.read_text().splitlines()) == 4               # the second copy moved aside, with why
    rejected = json.loads((out / "predictions.rejected.jsonl").read_text())
    assert rejected["line"] == 5 and json.loads(rejected["text"]) == copy


@pytest.mark.parametrize("state,key", [({"e_ema": 9.99e99, "e_bar": 0.1}, "e_ema"),
                                       ({"e_bar": 1.5}, "e_bar"), ({"e_bar": -1.2, "e_ema": 0.0}, "e_bar"),
                                       ({"e_bar": 0.2, "e_ema": -3.0}, "e_ema")])
def test_a_reward_state_outside_what_the_reward_can_write_is_refused(tmp_path, state, key):
    """E = ρ − ρ̂ of two rates lies in [−1, 1], and so do its EMA and Ē. Before: `e_ema: 9.99e99` was loaded
    and pinned the penalty at its maximum, exit 0."""
    (tmp_path / STATE_FILE).write_text(json.dumps({"format": "awarl-reward-state/1", "updates": 3, **state}))
    reward = AwaRLReward(RewardConfig(), None, {}, {})
    with pytest.raises(ValueError, match=rf"{STATE_FILE}: key '{key}' must be a number in \[-1, 1\]"):
        load_reward_state(reward, tmp_path)
    assert reward.e_bar == 0.0 and reward.e_ema == 0.0


def test_the_bounds_of_a_reward_state_are_accepted(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"format": "awarl-reward-state/1", "updates": 3, "e_bar": -1.0,
                                                   "e_ema": 1.0}))
    reward = AwaRLReward(RewardConfig(), None, {}, {})
    assert load_reward_state(reward, tmp_path) and (reward.e_bar, reward.e_ema) == (-1.0, 1.0)


def test_verdicts_a_down_judge_could_not_give_are_asked_again_on_a_rerun(tmp_path, tiny_dir, shipped_bm25_dir):
    """Before: "0 judged, 6 failures" on the first run and on every rerun after the endpoint came back."""
    from fastapi import HTTPException
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index
    from awarl.stages.evaluate import run_eval

    down = {"now": True}
    calls: list[dict] = []

    def reply(body: dict) -> str:
        if down["now"]:
            raise HTTPException(503, "down")
        user = json.loads(body["messages"][-1]["content"])
        return json.dumps({"verified_claims": [{"claim": user["answer"], "status": "grounded",
                                                "source_id": user["passages"][0]["id"], "confidence": 0.9}],
                           "overall_groundedness": 1.0, "flags": []})

    script = gold_script(tmp_path / "s.jsonl")
    tok, index = AutoTokenizer.from_pretrained(tiny_dir), load_index(shipped_bm25_dir)
    with serve_app(fake_chat_app(reply, log=calls)) as url:
        cfg = load_config(None, ["generation.backend=scripted", f"generation.script={script}", "eval.limit=4",
                                 "metrics.bootstrap_samples=0", "critic.judge=openai", f"critic.base_url={url}/v1",
                                 "critic.retries=0", "critic.check_endpoint=false",
                                 f"critic.cache_dir={tmp_path / 'cache'}"])
        first = run_eval(cfg, tmp_path / "run", model=str(tiny_dir), tokenizer=tok, retriever=index,
                         datasets=["hotpotqa"])
        answers = {k: r["prediction"] for k, r in read_done(tmp_path / "run" / "predictions.jsonl").items()}
        down["now"] = False
        again = run_eval(cfg, tmp_path / "run", model=str(tiny_dir), tokenizer=tok, retriever=index,
                         datasets=["hotpotqa"])
    assert (first["macro"]["critic"]["judged"], first["macro"]["critic"]["failures"]) == (0, 4)
    assert (again["macro"]["critic"]["judged"], again["macro"]["critic"]["failures"]) == (4, 0)
    rows = read_done(tmp_path / "run" / "predictions.jsonl")
    assert {k: r["prediction"] for k, r in rows.items()} == answers   # the same answers, now judged
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["verdicts_retried"] == 4
