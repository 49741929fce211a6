"""`awarl eval` end to end: tiny local model, the real BM25 index of the shipped closed corpus behind the
real retrieval server on loopback, all three datasets; resume after an interruption; the manifest; and a
scripted replay through the real loop whose scores are checked against hand-computed values."""

from __future__ import annotations

import json

import pytest
from conftest import serve_app

from awarl.cli import main
from awarl.config import load_config
from awarl.data.loaders import SHIPPED_DEV, load_shipped
from awarl.io import file_sha256, shipped_data_dir
from awarl.stages.evaluate import build_engine, read_done, run_eval

DATASETS = ["hotpotqa", "2wikimultihopqa", "musique"]


@pytest.fixture(scope="module")
def server_url(shipped_bm25_dir):
    from awarl.retrieval import load_index
    from awarl.retrieval.server import make_app

    retriever = load_index(shipped_bm25_dir)
    with serve_app(make_app(retriever, retriever.meta)) as url:
        yield url


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_eval_end_to_end_with_server_resume_and_manifest(tmp_path, tiny_dir, server_url, monkeypatch):
    out = tmp_path / "ev"
    args = ["eval", "--model", str(tiny_dir), "--limit", "2", "--out", str(out),
            "--retriever-url", server_url, "agent.max_new_tokens_per_turn=12",
            "agent.max_trajectory_tokens=200", "generation.batch_size=2", "metrics.bootstrap_samples=50"]

    # Interrupt after the first batch (2 of 6 questions): the rerun must generate only the other 4.
    import awarl.stages.evaluate as ev

    real = ev.generate_predictions

    def interrupted(*a, **kw):
        def boom(i):
            if i == 0:
                raise KeyboardInterrupt
        return real(*a, **{**kw, "on_batch": boom})

    monkeypatch.setattr(ev, "generate_predictions", interrupted)
    assert main(args) == 130
    assert len(read_lines(out / "predictions.jsonl")) == 2
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    monkeypatch.setattr(ev, "generate_predictions", real)
    assert main(args) == 0

    rows = read_lines(out / "predictions.jsonl")
    assert len(rows) == 6 and len({(r["dataset"], r["id"]) for r in rows}) == 6
    assert sorted({r["dataset"] for r in rows}) == sorted(DATASETS)
    expected = {(ex.dataset, ex.id) for ds in DATASETS for ex in load_shipped(ds, limit=2, seed=0)}
    assert {(r["dataset"], r["id"]) for r in rows} == expected  # seeded subsample, same as load_shipped
    for r in rows:
        assert r["outcome"] in {"correct", "wrong", "abstain", "invalid"}
        t = r["trajectory"]
        assert set(t) >= {"searches", "citations", "response", "passages", "stop_reason", "model_tokens"}
        assert t["model_tokens"] + t["env_tokens"] <= 200  # the trajectory budget holds

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["generated_now"] == 4
    for ds in DATASETS:
        assert manifest["data"][ds]["sha256"] == file_sha256(shipped_data_dir() / SHIPPED_DEV[ds])
    assert manifest["model"]["name"] == str(tiny_dir)
    assert manifest["model"]["files_sha256"]["config.json"] == file_sha256(tiny_dir / "config.json")
    assert manifest["retrieval"]["index"]["server"] == server_url
    assert manifest["retrieval"]["index"]["kind"] == "bm25"  # what the server reports on /health
    assert manifest["packages"]["torch"] and manifest["packages"]["trl"] == "1.16.0"
    assert manifest["sampling"]["temperature"] == 0.0 and manifest["template"] == "awarl"

    results = json.loads((out / "results.json").read_text())
    assert set(results["per_dataset"]) == set(DATASETS) and results["n"] == 6
    assert isinstance(results["coverage_gaps"], list)
    assert (out / "results.md").exists() and (out / "results.png").stat().st_size > 1000
    assert (out / "resolved_config.yaml").exists()


# ---------------------------------------------------------------- scripted replay through the real loop
def scripted_cases():
    """Two questions per dataset with scripted model turns and the outcome each must get."""
    cases = []
    for ds in DATASETS:
        a, b = load_shipped(ds, limit=2, seed=1)
        gold = a.answers[0]
        cases.append((a, [f"<search> {a.question} </search>", f"<cite> 1 </cite> <answer> {gold} </answer>"],
                      "correct"))
        cases.append((b, [f"<search> {b.question} </search>", "<answer> not enough information </answer>"],
                      "abstain"))
    # Make the datasets differ: hotpotqa's first answer is wrong; musique's second trajectory ends without
    # an answer (the model stops after its search), which is invalid.
    ex, turns, _ = cases[0]
    cases[0] = (ex, [turns[0], "<cite> 1 </cite> <answer> certainly not this xyzzy </answer>"], "wrong")
    ex, turns, _ = cases[5]
    cases[5] = (ex, [turns[0], "I am not sure what to say"], "invalid")
    return cases


def test_scripted_replay_scores_match_hand_computed(tmp_path, tiny_dir, shipped_bm25_dir):
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index

    cases = scripted_cases()
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps({"question": ex.question, "turns": turns}) + "\n"
                              for ex, turns, _ in cases))
    cfg = load_config(None, ["generation.backend=scripted", f"generation.script={script}", "eval.limit=2",
                             "run.seed=1", "metrics.bootstrap_samples=0", "generation.batch_size=4",
                             "agent.max_trajectory_tokens=4096"])
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    retriever = load_index(shipped_bm25_dir)
    res = run_eval(cfg, tmp_path / "out", model=str(tiny_dir), tokenizer=tok, retriever=retriever)

    rows = read_done(tmp_path / "out" / "predictions.jsonl")
    for ex, _, want in cases:
        r = rows[f"{ex.dataset}/{ex.id}"]
        assert r["outcome"] == want, (ex.dataset, r["trajectory"]["response"][-200:])
        assert r["trajectory"]["searches"] == [ex.question]
        assert len(r["trajectory"]["passages"]) == cfg.retrieval.topk
    # Hand-computed: hotpotqa 0 correct/1 wrong/1 abstain -> P=0, A=0, RA-F1=0
    #                2wiki 1 correct/1 abstain -> P=1, A=0.5, RA-F1=2/3
    #                musique 1 correct/1 invalid -> P=0.5, A=0.5, RA-F1=0.5
    per = res["per_dataset"]
    assert per["hotpotqa"]["precision"] == 0 and per["hotpotqa"]["ra_f1"] == 0
    assert per["2wikimultihopqa"]["precision"] == 1 and per["2wikimultihopqa"]["accuracy"] == 0.5
    assert per["2wikimultihopqa"]["ra_f1"] == pytest.approx(2 / 3)
    assert per["musique"]["ra_f1"] == pytest.approx(0.5) and per["musique"]["abstention_rate"] == 0
    assert res["macro"]["ra_f1"] == pytest.approx((0 + 2 / 3 + 0.5) / 3)
    gaps = {(g["dataset"], g["id"]) for g in res["coverage_gaps"]}
    assert gaps == {(ex.dataset, ex.id) for ex, _, want in cases if want == "abstain"}

    # The env mask: exactly the information blocks are environment tokens (never trainable).
    engine = build_engine(cfg, str(tiny_dir), tok, retriever)
    ex, _, _ = cases[2]
    (traj,) = engine.run([ex.question], temperature=0.0)
    env = [t for t, m in zip(traj.completion_ids, traj.env_mask, strict=True) if m == 0]
    model = [t for t, m in zip(traj.completion_ids, traj.env_mask, strict=True) if m == 1]
    env_text = tok.decode(env)
    assert env_text.strip().startswith("<information>") and env_text.strip().endswith("</information>")
    assert "<information>" not in tok.decode(model) and "<answer>" in tok.decode(model)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.env_mask, strict=True) if m == 0)
