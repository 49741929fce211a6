"""The protocol warm-up (teacher trajectories, masked loss) and `awarl demo` end to end at a small size."""

from __future__ import annotations

import json

import pytest

from awarl.agent.templates import load_template
from awarl.cli import main
from awarl.data.loaders import load_shipped
from awarl.metrics import normalize_answer
from awarl.training.warmup import build_sequences, first_turn, supervised_warmup


@pytest.fixture(scope="module")
def parts(tiny_dir, shipped_bm25_dir):
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index

    return AutoTokenizer.from_pretrained(tiny_dir), load_index(shipped_bm25_dir)


def test_teacher_sequences_train_only_model_turns(parts):
    tok, retriever = parts
    template = load_template("awarl")
    examples = load_shipped("hotpotqa", limit=12, seed=3)
    seqs = build_sequences(examples, retriever, template, tok, topk=2)
    hits = retriever.search([e.question for e in examples], 2)
    assert any(s.answered for s in seqs) and not all(s.answered for s in seqs)  # both behaviours taught
    for ex, seq, passages in zip(examples, seqs, hits, strict=True):
        trained = tok.decode([t for t, m in zip(seq.input_ids, seq.loss_mask, strict=True) if m])
        masked = tok.decode([t for t, m in zip(seq.input_ids, seq.loss_mask, strict=True) if not m])
        assert trained.startswith(f"<search> {ex.question} </search>")
        assert "<information>" in masked and "<information>" not in trained  # environment never trained
        assert ex.question in masked  # the prompt is masked too
        # The teacher answers exactly when a gold answer occurs in a retrieved passage, and cites it.
        golds = [normalize_answer(a) for a in ex.answers if normalize_answer(a)]
        found = [i + 1 for i, p in enumerate(passages)
                 if any(f" {g} " in f" {normalize_answer(p.title + ' ' + p.text)} " for g in golds)]
        assert seq.answered == bool(found)
        if found:
            assert trained.endswith(f"<cite> {found[0]} </cite>\n<answer> {ex.answers[0]} </answer>")
        else:
            assert trained.endswith("<answer> not enough information </answer>")
        short = first_turn(seq)
        assert tok.decode([t for t, m in zip(short.input_ids, short.loss_mask, strict=True) if m]).strip() \
            == f"<search> {ex.question} </search>"


def test_warmup_lowers_the_loss(parts, tiny_dir):
    from transformers import AutoModelForCausalLM

    tok, retriever = parts
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    seqs = build_sequences(load_shipped("hotpotqa", limit=8), retriever, load_template("awarl"), tok, topk=1)
    before = [p.detach().clone() for p in model.parameters()]
    losses = supervised_warmup(model, tok, seqs, steps=16, batch_size=2, lr=3e-3, progress=False)
    assert len(losses) == 16
    assert sum(losses[-4:]) / 4 < losses[0] - 1.0  # random init starts near ln(vocab) ~ 8.3
    assert any(not (a == b).all() for a, b in zip(before, model.parameters(), strict=True))


def test_demo_small_end_to_end_and_resume(tmp_path):
    out = tmp_path / "demo"
    small = ["demo.warmup_steps=4", "demo.train_questions=4", "estimate.k=2", "eval.limit=1",
             "train.max_steps=1", "train.save_steps=1", "train.num_generations=2",
             "train.per_device_train_batch_size=4", "agent.max_new_tokens_per_turn=8",
             "agent.max_trajectory_tokens=600", "metrics.bootstrap_samples=20", "train.report_to=[none]"]
    assert main(["demo", "--out", str(out), *small]) == 0

    before = json.loads((out / "eval_before_rl" / "results.json").read_text())
    after = json.loads((out / "eval" / "final" / "results.json").read_text())
    for res in (before, after):
        assert set(res["per_dataset"]) == {"hotpotqa", "2wikimultihopqa", "musique"} and res["n"] == 3
    estimates = [json.loads(x) for x in (out / "p_estimates.jsonl").read_text().splitlines()]
    assert len(estimates) == 4 and all(r["k"] == 2 for r in estimates)
    # training and evaluation questions are disjoint
    evald = {json.loads(x)["id"] for x in (out / "eval_before_rl" / "predictions.jsonl").read_text().splitlines()}
    assert not evald & {r["qid"].split("/", 1)[-1] for r in estimates}
    assert (out / "checkpoint-1" / "awarl_reward_state.json").exists()
    assert (out / "final" / "config.json").exists() and (out / "model" / "warmup" / "config.json").exists()
    report = (out / "REPORT.md").read_text()
    assert "after AWA-RL GRPO" in report and "resolved_config.yaml" in report
    # the paired before/after comparison in the report is the one in compare/compare.json
    cmp = json.loads((out / "compare" / "compare.json").read_text())
    assert cmp["common_questions"] == 3 and [r["name"] for r in cmp["runs"]] == ["before RL", "after RL"]
    delta = cmp["deltas"]["after RL"]["ra_f1"]["delta"]
    assert delta == pytest.approx(after["macro"]["ra_f1"] - before["macro"]["ra_f1"])
    assert f"RA-F1 {delta:+.3f}" in report

    # A rerun finds every stage done: nothing is rebuilt, the estimate file is not extended.
    stamp = (out / "model" / "warmup" / "model.safetensors").stat().st_mtime_ns
    assert main(["demo", "--out", str(out), *small]) == 0
    assert (out / "model" / "warmup" / "model.safetensors").stat().st_mtime_ns == stamp
    assert len((out / "p_estimates.jsonl").read_text().splitlines()) == 4
