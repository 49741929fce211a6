"""Fault injection, round 4 (issue 44): results lost or wrong at the edges.

The transformers backend generating past the model's positions (vLLM's path was bounded, this one was not), a
citation cache that cannot be written (every verdict the judge gave was counted a failure), an LLM judge's
verdict about a claim that is not the answer's (it scored full support), and a research report whose --out
cannot be written at the end of the run (the report was lost). docs/reliability.md (round 4) gives what each
did before. Real parts: the tiny model and tokenizer, the shipped BM25 index, a loopback OpenAI-compatible
endpoint (fake: no LLM runs here), the `awarl` command line in a child process under RLIMIT_FSIZE.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fake_chat_app, serve_app

from awarl.config import load_config
from awarl.critic.audit import audit_verdict, states
from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput, PassageRef
from awarl.data.loaders import load_shipped

ROOT = Path(__file__).resolve().parent.parent


def test_the_transformers_backend_keeps_a_trajectory_inside_the_models_positions(tmp_path, tiny_dir,
                                                                                 shipped_bm25_dir):
    """Before: a model of 400 positions, four turns of up to 300 tokens: trajectories of 575 and 572 positions,
    no warning (vLLM's engine is bounded by its max_model_len, this path by nothing)."""
    from transformers import AutoTokenizer

    from awarl.agent.rollout import RolloutEngine
    from awarl.retrieval import load_index

    short = tmp_path / "short"
    shutil.copytree(tiny_dir, short)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = 400
    (short / "config.json").write_text(json.dumps(config))
    cfg = load_config(None, ["agent.max_turns=4", "agent.max_new_tokens_per_turn=300",
                             "agent.max_trajectory_tokens=1200"])
    engine = RolloutEngine.from_config(cfg, AutoTokenizer.from_pretrained(short), load_index(shipped_bm25_dir),
                                       model=str(short))
    assert engine.context_len == 400
    questions = [e.question for e in load_shipped("hotpotqa", limit=3, seed=0)]
    trajs = engine.run(questions, temperature=1.0, top_p=1.0, seed=[1, 2, 3])
    lengths = [len(t.prompt_ids) + len(t.completion_ids) for t in trajs]
    assert max(lengths) <= 400 and 400 in lengths, lengths   # bounded, and the bound was reached
    assert {t.stop_reason for t in trajs if len(t.prompt_ids) + len(t.completion_ids) == 400} == {"token_budget"}


@pytest.fixture()
def judge_run(tmp_path, tiny_dir, shipped_bm25_dir):
    """An evaluation of four scripted answers (each citing its first passage) judged by an OpenAI-compatible
    endpoint whose verdict `reply(user)` writes; returns (results, calls)."""
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index
    from awarl.stages.evaluate import run_eval

    exs = load_shipped("hotpotqa", limit=4, seed=0)
    script = tmp_path / "s.jsonl"
    script.write_text("".join(json.dumps({"question": e.question, "turns": [
        f"<search> {e.question} </search>", f"<cite> 1 </cite> <answer> {e.answers[0]} </answer>"]}) + "\n"
        for e in exs))

    def run(reply, cache_dir: Path) -> tuple[dict, list]:
        calls: list[dict] = []

        def answer(body: dict) -> str:
            user = json.loads(body["messages"][-1]["content"])
            claim = reply(user)
            return json.dumps({"verified_claims": [{"claim": claim, "status": "grounded",
                                                    "source_id": user["passages"][0]["id"], "confidence": 0.9}],
                               "overall_groundedness": 1.0, "flags": []})

        with serve_app(fake_chat_app(answer, log=calls)) as url:
            cfg = load_config(None, ["generation.backend=scripted", f"generation.script={script}", "eval.limit=4",
                                     "metrics.bootstrap_samples=0", "critic.judge=openai", f"critic.base_url={url}/v1",
                                     "critic.retries=0", "critic.check_endpoint=false",
                                     f"critic.cache_dir={cache_dir}"])
            res = run_eval(cfg, tmp_path / "run", model=str(tiny_dir), tokenizer=AutoTokenizer.from_pretrained(tiny_dir),
                           retriever=load_index(shipped_bm25_dir), datasets=["hotpotqa"])
        return res, calls

    return run


def test_verdicts_are_kept_when_the_critic_cache_cannot_be_written(tmp_path, judge_run, caplog):
    """Before: an unwritable critic.cache_dir discarded every verdict: 0 judged, 4 failures, exit 0."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res, calls = judge_run(lambda user: user["answer"], blocker / "cache")   # a folder under a file: ENOTDIR
    critic = res["macro"]["critic"]
    assert (critic["judged"], critic["failures"]) == (4, 0) and len(calls) == 4
    warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(warnings) == 1 and "kept in memory for this run only" in warnings[0].getMessage()


def test_a_verdict_about_another_claim_does_not_score_full_support(judge_run, tmp_path):
    """Before: one grounded claim "The Eiffel Tower is in Paris." gave every answer coverage 1.0."""
    res, _ = judge_run(lambda user: "The Eiffel Tower is in Paris.", tmp_path / "c1")
    from awarl.stages.predictions import read_done

    rows = read_done(tmp_path / "run" / "predictions.jsonl")
    for r in rows.values():
        if r["prediction"].lower() in ("yes", "no"):
            continue  # a comparison's claims never state yes or no
        assert r["critic"]["coverage"] == 0.5 and r["critic"]["groundedness"] == 0.5, r["critic"]
        assert any("no claim states the answer" in f for f in r["critic"]["flags"])
    assert res["macro"]["critic"]["coverage"] < 1.0


def test_a_verdict_whose_claim_states_the_answer_keeps_full_support(judge_run, tmp_path):
    res, _ = judge_run(lambda user: f"The answer is {user['answer']}.", tmp_path / "c2")
    assert res["macro"]["critic"]["coverage"] == 1.0


def test_the_answer_claim_rule_by_itself():
    inp = CriticInput(question="Where?", answer="Stanley, North Dakota",
                      passages=[PassageRef(number=1, id="p1", title="T", text="Stanley is a city.")])
    verdict = CriticOutput(verified_claims=[ClaimVerification(claim="Mountrail County's seat is Stanley.",
                                                              status="grounded", source_ids=["p1"], confidence=1)],
                           overall_groundedness=1.0, flags=[])
    assert states("the seat is Stanley, North Dakota!", "Stanley, North Dakota")
    assert not states("Mountrail County's seat is Stanley.", "Stanley, North Dakota")   # every word of the answer
    out = audit_verdict(verdict, inp, answer_claim=True)
    assert [c.status for c in out.verified_claims] == ["grounded", "unsupported"]
    assert out.verified_claims[-1].claim == "Stanley, North Dakota" and out.overall_groundedness == 0.5
    assert audit_verdict(verdict, inp).verified_claims == verdict.verified_claims   # the local judges: unchanged
    yes = CriticInput(question="Same?", answer="yes", passages=inp.passages)
    assert len(audit_verdict(verdict, yes, answer_claim=True).verified_claims) == 1


@pytest.mark.slow
def test_the_research_report_is_printed_when_its_file_cannot_be_written(tmp_path, tiny_dir, shipped_bm25_dir):
    """Before: with --out unwritable at the end of the run (a 1 kB file-size limit), nothing was printed and two
    tracebacks ended the run: the report was lost."""
    out = tmp_path / "report.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    # stdout and stderr are pipes, which the file-size limit does not touch
    r = subprocess.run([sys.executable, "-m", "awarl.cli", "research",
                        "What is the seat of the county where Van Hook Township is located?", "--model", str(tiny_dir),
                        "--index", str(shipped_bm25_dir), "--out", str(out), "agent.max_turns=1",
                        "agent.max_new_tokens_per_turn=8", "agent.max_trajectory_tokens=120"],
                       env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}, capture_output=True,
                       text=True, timeout=600, preexec_fn=limit)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stdout.startswith("# Research report") and "Van Hook Township" in r.stdout
    errors = [x for x in r.stderr.splitlines() if " error: " in x]
    assert errors == [f"awarl research: error: {out}: file too large for the file-size limit (`ulimit -f`) or the "
                      "filesystem: raise the limit or write elsewhere, then rerun the same command"]
    assert not out.exists()
