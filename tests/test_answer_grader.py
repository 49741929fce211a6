"""`metrics.correctness: judge`: answers graded by an LLM against the gold answers.

The grader endpoint is a real OpenAI-compatible HTTP server on loopback whose "model" is a fixed rule
(a prediction is correct when it contains a gold answer, case-insensitively; a prediction containing
FAIL gets HTTP 500). The rule stands in for an LLM, which cannot run here; everything else is real: the
client, the cache, eval with the scripted backend through the real retriever, and `awarl score`."""

from __future__ import annotations

import json

import pytest
from conftest import fake_chat_app, serve_app

from awarl.config import CriticConfig, load_config
from awarl.critic.correctness import Grade, grade_answers, make_answer_grader
from awarl.critic.openai_judge import OpenAIJudge


def grader_app(log: list[dict], state: dict | None = None):
    """`state["down"] = True` makes every request an HTTP 503 (an outage)."""
    from fastapi import HTTPException

    state = state if state is not None else {}

    def reply(body: dict) -> str:
        if state.get("down"):
            raise HTTPException(503, "grader restarting")
        user = body["messages"][-1]["content"]
        golds = [g[2:] for g in user.split("GOLD ANSWERS:\n", 1)[1].split("\n\nPREDICTION:", 1)[0].splitlines()]
        prediction = user.split("PREDICTION:\n", 1)[1]
        if "FAIL" in prediction:
            raise HTTPException(500, "grader down")
        correct = any(g.lower() in prediction.lower() for g in golds)
        return json.dumps({"correct": correct, "reason": "contains a gold answer" if correct else "different answer"})

    return fake_chat_app(reply, log=log)


@pytest.fixture()
def grader_url():
    log: list[dict] = []
    with serve_app(grader_app(log)) as url:
        yield url + "/v1", log


def test_grade_answers_asks_only_what_exact_match_cannot_settle(grader_url, tmp_path):
    url, log = grader_url
    cfg = CriticConfig(judge="none", base_url=url, model="grader-m", retries=1, backoff_s=0.01)
    grader = OpenAIJudge(cfg, cache_dir=tmp_path / "cache")
    phrases = ["not enough information"]
    items = [
        ("Capital of France?", "Paris", True, ["Paris"]),                      # exact match: no call
        ("Capital of France?", "the city of Paris", True, ["Paris"]),          # grader: same answer
        ("Capital of France?", "London", True, ["Paris"]),                     # grader: different
        ("Capital of France?", "not enough information", True, ["Paris"]),     # abstention: no verdict
        ("Capital of France?", None, False, ["Paris"]),                        # invalid: no verdict
        ("Capital of France?", "FAIL Paris?", True, ["Paris"]),                # grader fails: EM's False, flagged
    ]
    grades = grade_answers(grader, items, phrases)
    assert grades == [Grade(True), Grade(True), Grade(False), Grade(None), Grade(None), Grade(False, failed=True)]
    asked = [b["messages"][-1]["content"].split("PREDICTION:\n", 1)[1] for b in log]
    assert sorted(asked) == ["FAIL Paris?", "FAIL Paris?", "London", "the city of Paris"]  # FAIL: one retry
    assert grader.failures == 1
    body = log[0]
    assert body["model"] == "grader-m" and body["temperature"] == 0.0
    assert body["response_format"]["json_schema"]["name"] == "answer_verdict"
    # verdicts are cached: a second grader on the same cache asks only for the failed one again
    again = grade_answers(OpenAIJudge(cfg, cache_dir=tmp_path / "cache"), items, phrases)
    assert again == grades and len(log) == 4 + 2
    assert grade_answers(None, items, phrases) == [Grade(None)] * len(items)


def test_make_answer_grader_only_under_correctness_judge(tmp_path):
    default = load_config(None, [])
    assert make_answer_grader(default.metrics, default.critic, tmp_path) is None
    judged = load_config(None, ["metrics.correctness=judge", "critic.judge=lexical"])
    g = make_answer_grader(judged.metrics, judged.critic, tmp_path)
    assert isinstance(g, OpenAIJudge)  # the endpoint of critic:, whatever judges the citations
    g.close()


@pytest.mark.slow
def test_eval_with_llm_grader_scores_paraphrased_answers_and_rescoring_agrees(grader_url, tmp_path, tiny_dir,
                                                                            shipped_bm25_dir):
    from transformers import AutoTokenizer

    from awarl.cli import main
    from awarl.data.loaders import load_shipped
    from awarl.retrieval import load_index
    from awarl.stages.evaluate import run_eval
    from awarl.stages.predictions import read_done

    url, log = grader_url
    a, b, c = load_shipped("hotpotqa", limit=3, seed=2)
    script = tmp_path / "script.jsonl"
    turns = {a.question: f"<answer> it is {a.answers[0]} </answer>",    # paraphrase: EM fails, grader: correct
             b.question: "<answer> FAIL </answer>",                       # grader down: EM's verdict (wrong)
             c.question: "<answer> not enough information </answer>"}   # abstains: no call
    script.write_text("".join(json.dumps({"question": q, "turns": [t]}) + "\n" for q, t in turns.items()))
    overrides = ["generation.backend=scripted", f"generation.script={script}", "eval.datasets=[hotpotqa]",
                 "eval.limit=3", "run.seed=2", "metrics.bootstrap_samples=0", "critic.judge=none",
                 "metrics.correctness=judge", f"critic.base_url={url}", "critic.retries=0"]
    cfg = load_config(None, overrides)
    out = tmp_path / "ev"
    res = run_eval(cfg, out, model=str(tiny_dir), tokenizer=AutoTokenizer.from_pretrained(tiny_dir),
                   retriever=load_index(shipped_bm25_dir))
    rows = {r["id"]: r for r in read_done(out / "predictions.jsonl").values()}
    assert (rows[a.id]["outcome"], rows[a.id]["judge_correct"]) == ("correct", True)
    assert (rows[b.id]["outcome"], rows[b.id]["judge_correct"], rows[b.id]["judge_failed"]) == ("wrong", False, True)
    assert rows[c.id]["outcome"] == "abstain" and "judge_correct" not in rows[c.id]
    assert len(log) == 2
    hp = res["per_dataset"]["hotpotqa"]
    assert hp["accuracy"] == pytest.approx(1 / 3) and hp["precision"] == pytest.approx(1 / 2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["correctness"]["rule"] == "judge" and manifest["correctness"]["grader"].startswith("openai:")

    # `awarl score` of the predictions under the same rule uses the recorded verdicts: same figures
    assert main(["score", str(out / "predictions.jsonl"), "--out", str(tmp_path / "sc"),
                 "metrics.correctness=judge", "metrics.bootstrap_samples=0"]) == 0
    scored = json.loads((tmp_path / "sc" / "results.json").read_text())
    assert scored["per_dataset"]["hotpotqa"]["accuracy"] == pytest.approx(1 / 3)
    # resuming the folder under another correctness rule would mix verdicts: refused
    with pytest.raises(ValueError, match="correctness"):
        run_eval(load_config(None, [o for o in overrides if "correctness" not in o]), out, model=str(tiny_dir),
                 tokenizer=AutoTokenizer.from_pretrained(tiny_dir), retriever=load_index(shipped_bm25_dir))
    from awarl.stages.eval_manifest import resume_conflicts

    em, f1 = ({"correctness": {"rule": r, "grader": None}} for r in ("em", "f1"))
    assert resume_conflicts(em, f1) == []  # recomputed from the text by the scorer: no conflict
    assert resume_conflicts(em, manifest) != [] and resume_conflicts({}, manifest) == []  # old manifests pass


def test_estimate_and_training_rollouts_use_the_grader(grader_url, tmp_path, tiny_dir, shipped_bm25_dir):
    """p_i and the training outcome (hence the reward) follow the grader's verdict, not exact match."""
    from transformers import AutoTokenizer

    from awarl.agent.backends import make_backend
    from awarl.agent.templates import load_template
    from awarl.data.estimates import read_estimates
    from awarl.data.loaders import load_shipped
    from awarl.retrieval import load_index
    from awarl.stages.estimate import run_estimate
    from awarl.training.rollout_adapter import RolloutAdapter

    url, log = grader_url
    a, b = load_shipped("2wikimultihopqa", limit=2, seed=3)
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps({"question": q, "turns": [t]}) + "\n" for q, t in {
        a.question: f"<answer> {a.answers[0]}, I believe </answer>",  # grader: correct; EM: wrong
        b.question: "<answer> zebra crossing </answer>"}.items()))     # wrong either way
    from awarl.data.loaders import SHIPPED_DEV
    from awarl.io import shipped_data_dir

    shipped = shipped_data_dir() / SHIPPED_DEV["2wikimultihopqa"]
    cfg = load_config(None, [
        "generation.backend=scripted", f"generation.script={script}", "metrics.correctness=judge",
        f"critic.base_url={url}", "critic.judge=none", f"run.out_dir={tmp_path / 'run'}", "estimate.k=2",
        "run.seed=3", f"data.train=[{{path: {shipped}, format: 2wikimultihopqa, limit: 2}}]",
        f"retrieval.index_dir={shipped_bm25_dir}", f"train.model={tiny_dir}"])
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    retriever = load_index(shipped_bm25_dir)
    p = {k.split("/", 1)[1]: r["p_i"] for k, r in read_estimates(run_estimate(cfg, tokenizer=tok,
                                                                            retriever=retriever)).items()}
    assert p == {a.id: 1.0, b.id: 0.0}
    assert len(log) == 2  # one call per distinct answer: the K=2 identical samples are asked once

    rows = [{"prompt": ex.question, "qid": ex.id, "dataset": ex.dataset, "question": ex.question,
             "answers": ex.answers, "p_i": p[ex.id]} for ex in (a, b)]
    from awarl.critic.correctness import make_answer_grader

    adapter = RolloutAdapter(cfg, tok, retriever, load_template(cfg.agent.template), rows,
                             backend_factory=lambda _t: make_backend(cfg.generation, None, tok),
                             grader=make_answer_grader(cfg.metrics, cfg.critic, tmp_path / "cache"))
    out = adapter([a.question, b.question], trainer=None)
    assert out["outcome"] == ["correct", "wrong"]


@pytest.mark.slow
def test_grader_failures_are_counted_and_a_rerun_regrades_them(tmp_path, tiny_dir, shipped_bm25_dir):
    """One outage used to poison the folder: its lines kept exact match's verdict forever. Now the report counts
    them (results.json / results.md) and rerunning the same eval grades them again."""
    from transformers import AutoTokenizer

    from awarl.data.loaders import load_shipped
    from awarl.retrieval import load_index
    from awarl.stages.evaluate import run_eval
    from awarl.stages.predictions import read_done

    log: list[dict] = []
    state = {"down": True}
    a, b = load_shipped("musique", limit=2, seed=4)
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps({"question": ex.question, "turns": [f"<answer> it is {ex.answers[0]} "
                                                                              "</answer>"]}) + "\n"
                              for ex in (a, b)))
    overrides = ["generation.backend=scripted", f"generation.script={script}", "eval.datasets=[musique]",
                 "eval.limit=2", "run.seed=4", "metrics.bootstrap_samples=0", "critic.judge=none",
                 "metrics.correctness=judge", "critic.retries=1", "critic.backoff_s=0.01", "critic.check_endpoint=false"]
    out = tmp_path / "ev"
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    retriever = load_index(shipped_bm25_dir)
    with serve_app(grader_app(log, state)) as url:
        cfg = load_config(None, [*overrides, f"critic.base_url={url}/v1"])
        res = run_eval(cfg, out, model=str(tiny_dir), tokenizer=tok, retriever=retriever)
        assert res["per_dataset"]["musique"]["grader_failures"] == 2 and res["macro"]["grader_failures"] == 2
        assert res["per_dataset"]["musique"]["correct"] == 0
        assert "Answer grader (`metrics.correctness: judge`): 2 failed grade(s) (musique 2)" in \
            (out / "results.md").read_text()
        assert json.loads((out / "results.json").read_text())["overall"]["grader_failures"] == 2
        rows = read_done(out / "predictions.jsonl")
        assert all(r["judge_failed"] and r["outcome"] == "wrong" for r in rows.values())
        n_down = len(log)
        state["down"] = False  # the endpoint is back: the same command re-grades the failed lines
        res = run_eval(cfg, out, model=str(tiny_dir), tokenizer=tok, retriever=retriever)
    assert len(log) == n_down + 2  # one request per failed line, nothing generated again
    rows = read_done(out / "predictions.jsonl")
    assert all(r["judge_correct"] is True and "judge_failed" not in r and r["outcome"] == "correct"
               for r in rows.values())
    assert res["per_dataset"]["musique"]["grader_failures"] == 0 and res["per_dataset"]["musique"]["correct"] == 2
    assert "0 failed grade(s)" in (out / "results.md").read_text()


def test_estimate_with_a_dead_grader_endpoint_stops_before_any_model_loads(tmp_path):
    """`awarl estimate` under metrics.correctness=judge used to find a dead grader only batch by batch."""
    from conftest import free_port

    from awarl.critic import JudgeUnavailable
    from awarl.data.loaders import SHIPPED_DEV
    from awarl.io import shipped_data_dir
    from awarl.stages.estimate import run_estimate

    shipped = shipped_data_dir() / SHIPPED_DEV["hotpotqa"]
    cfg = load_config(None, ["metrics.correctness=judge", f"critic.base_url=http://127.0.0.1:{free_port()}/v1",
                             f"run.out_dir={tmp_path}", f"data.train=[{{path: {shipped}, limit: 2}}]",
                             "train.model=/nonexistent/model"])  # never loaded: the check comes first
    with pytest.raises(JudgeUnavailable, match="answer grader"):
        run_estimate(cfg)
