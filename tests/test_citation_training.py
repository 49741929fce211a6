"""The citation judge in training and at launch: gold evidence from the training rows through the rollout
function to the reward (Search-R1's real NQ + HotpotQA rows: HotpotQA judged against its evidence, NQ by the
lexical fallback, counted); an LLM judge endpoint that dies mid-training costs no reward and few requests;
one that is down at launch stops eval and train before any model loads (dry runs do not need it)."""

from __future__ import annotations

import json

import pytest

from awarl.config import load_config
from awarl.critic import JudgeUnavailable, make_judge
from awarl.data.loaders import shipped_path
from awarl.rewards.trl_reward import AwaRLReward

DEAD = "http://127.0.0.1:9/v1"  # the discard port: nothing listens


def _searchr1_cfg(tmp_path, script, *extra):
    src = shipped_path("searchr1-train")
    return load_config(None, [f"data.train=[{{path: {src}, format: searchr1, limit: 6}}]", "run.seed=0",
                              "generation.backend=scripted", f"generation.script={script}",
                              f"run.out_dir={tmp_path / 'run'}", "reward.strategy=none", *extra])


def test_gold_evidence_reaches_the_reward_and_nq_rows_fall_back(tmp_path, tiny_dir, shipped_bm25_dir):
    from transformers import AutoTokenizer

    from awarl.agent.backends import make_backend
    from awarl.agent.templates import load_template
    from awarl.critic.gold_judge import evidence_from, gold_matches
    from awarl.retrieval import load_index
    from awarl.stages.train import build_dataset, training_rows
    from awarl.training.rollout_adapter import RolloutAdapter

    script = tmp_path / "script.jsonl"
    rows0, _ = training_rows(_searchr1_cfg(tmp_path, script, "generation.script=null"), strict=False)
    nq = [r for r in rows0 if r["gold_evidence"] is None]
    hot = [r for r in rows0 if r["gold_evidence"] is not None]
    assert nq and hot and all(r["qid"].startswith("nq/") for r in nq)
    script.write_text("".join(json.dumps({"question": r["question"], "turns": [
        f"<search> {r['question']} </search>", f"<cite> 1, 2 </cite> <answer> {r['answers'][0]} </answer>"]}) + "\n"
        for r in rows0))
    cfg = _searchr1_cfg(tmp_path, script, f"retrieval.index_dir={shipped_bm25_dir}")
    rows, info = training_rows(cfg, strict=False)
    assert info["with_gold_evidence"] == len(hot)
    assert build_dataset(rows)["gold_evidence"] == [r["gold_evidence"] for r in rows]  # a string column
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    adapter = RolloutAdapter(cfg, tok, load_index(shipped_bm25_dir), load_template(cfg.agent.template), rows,
                             backend_factory=lambda _t: make_backend(cfg.generation, None, tok))
    out = adapter([r["prompt"] for r in rows], trainer=None)
    assert out["gold_evidence"] == [r["gold_evidence"] for r in rows]

    reward = AwaRLReward(cfg.reward, make_judge(cfg.critic))  # critic.judge: gold (the default)
    logged: dict[str, float] = {}
    extra: dict[str, list] = {}
    reward(prompts=[r["prompt"] for r in rows], completions=["c"] * len(rows),
           log_metric=lambda k, v: logged.__setitem__(k, v), log_extra=lambda k, v: extra.__setitem__(k, v),
           **{k: v for k, v in out.items() if k != "env_mask"})
    answered = [o in ("correct", "wrong") for o in out["outcome"]]
    assert logged["awarl/judge_fallbacks"] == sum(a for a, r in zip(answered, rows, strict=True)
                                                   if r["gold_evidence"] is None)
    assert logged["awarl/judge_failures"] == 0 and logged["awarl/judge_requests"] == 0
    # a HotpotQA completion's r_cite is its citations' recall of the gold paragraphs minus the share of cited
    # passages that are not gold: counted here from ids and titles alone
    checked = 0
    for j, r in enumerate(rows):
        if r["gold_evidence"] is None or not answered[j]:
            continue
        ev = evidence_from(r["gold_evidence"])
        shown = {p["number"]: p for p in out["passages"][j]}
        cited = [shown[n] for n in dict.fromkeys(out["citations"][j]) if n in shown]
        hits = [set(gold_matches(ev, p["id"], p["title"])) for p in cited]
        recall = len(set().union(*hits)) / len(ev.paragraphs)
        wrong = sum(not h for h in hits) + len(set(out["citations"][j]) - set(shown))
        expect = recall - wrong / len(set(out["citations"][j]))
        assert extra["r_cite"][j] == pytest.approx(expect)  # the reward's own value, as TRL logs it
        checked += 1
    assert checked >= 1


def test_a_judge_endpoint_that_dies_mid_training_costs_no_reward_and_few_requests():
    from awarl.config import CriticConfig, RewardConfig

    cfg = CriticConfig(judge="openai", base_url=DEAD, retries=3, backoff_s=0.05, breaker_failures=2,
                       breaker_cooldown_s=60, concurrency=2)
    judge = make_judge(cfg)
    reward = AwaRLReward(RewardConfig(strategy="none"), judge)
    n = 16
    passages = [[{"number": 1, "id": "w1", "title": "Paris", "text": "Paris is the capital of France."}]] * n
    logged: dict[str, float] = {}
    out = reward(prompts=["p"] * n, completions=["c"] * n, outcome=["correct"] * n, qid=[f"q{i}" for i in range(n)],
                 p_i=[0.5] * n, question=[f"q{i}?" for i in range(n)], answer=["Paris"] * n, citations=[[1]] * n,
                 passages=passages, log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [1.0] * n  # the outcome reward alone: no citation reward for the failed items
    assert logged["awarl/judge_failures"] == n and reward.judge_failures_total == n
    # 16 items x 4 attempts would be 64 requests; the breaker stops after a couple of failed attempts
    assert judge.requests <= 2 + cfg.concurrency and judge.usage()["breaker_refused"] >= n - 4


def test_a_judge_endpoint_down_at_launch_fails_before_any_model_loads(tmp_path, capsys):
    from awarl.cli import main
    from awarl.stages.evaluate import run_eval

    dead = [f"critic.base_url={DEAD}", "critic.judge=openai"]
    cfg = load_config(None, [*dead, "eval.datasets=[hotpotqa]", "eval.limit=1"])
    with pytest.raises(JudgeUnavailable, match="cannot reach critic.base_url"):
        run_eval(cfg, tmp_path / "ev", model="/nonexistent/model")  # no model (or tokenizer) is touched
    assert not (tmp_path / "ev" / "predictions.jsonl").exists()
    # the answer grader needs the endpoint as well, whatever judges the citations
    with pytest.raises(JudgeUnavailable, match=r"answer grader \(metrics.correctness: judge\)"):
        run_eval(load_config(None, [f"critic.base_url={DEAD}", "metrics.correctness=judge", "eval.limit=1",
                                    "eval.datasets=[hotpotqa]"]), tmp_path / "ev2", model="/nonexistent/model")
    from awarl.io import repo_root

    args = ["train", "--config", str(repo_root() / "configs" / "base.yaml"), *dead, "train.model=/nonexistent/model", "reward.strategy=none",
            f"run.out_dir={tmp_path / 'run'}",
            f"data.train=[{{path: {shipped_path('hotpotqa')}, format: hotpotqa, limit: 8}}]"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "citation judge (critic.judge: openai): cannot reach critic.base_url=" in err and "serve_judge.sh" in err
    assert main([*args, "--dry-run"]) == 0  # a dry run does not need the endpoint
    assert "endpoint: http://127.0.0.1:9/v1" in capsys.readouterr().out
