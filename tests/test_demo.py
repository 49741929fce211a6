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


@pytest.mark.slow
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


@pytest.mark.slow
def test_demo_small_end_to_end_and_resume(tmp_path):
    out = tmp_path / "demo"
    small = ["demo.warmup_steps=4", "demo.train_questions=4", "estimate.k=2", "eval.limit=1",
             "train.max_steps=2", "train.save_steps=2", "train.num_generations=2",
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
    assert (out / "checkpoint-2" / "awarl_reward_state.json").exists()
    assert (out / "final" / "config.json").exists() and (out / "model" / "warmup" / "config.json").exists()
    report = (out / "REPORT.md").read_text()
    assert "after AWA-RL GRPO" in report and "resolved_config.yaml" in report
    assert 'Collapse alarms (`alarms.jsonl`, docs/training.md "Collapse alarms"): none.' in report  # 2 steps
    # the paired before/after comparison in the report is the one in compare/compare.json
    cmp = json.loads((out / "compare" / "compare.json").read_text())
    assert cmp["common_questions"] == 3 and [r["name"] for r in cmp["runs"]] == ["before RL", "after RL"]
    delta = cmp["deltas"]["after RL"]["ra_f1"]["delta"]
    assert delta == pytest.approx(after["macro"]["ra_f1"] - before["macro"]["ra_f1"])
    assert f"RA-F1 {delta:+.3f}" in report

    # The dynamics plot's data are the trainer's own logged values, step by step (not recomputed elsewhere).
    dyn = json.loads((out / "dynamics.json").read_text())
    logged = [h for h in json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
              if "awarl/rho" in h]
    assert dyn["trainer"]["step"] == [h["step"] for h in logged] == [1, 2]
    for key in ("rho", "rho_hat", "E_bar", "penalty"):
        assert dyn["trainer"][key] == [h[f"awarl/{key}"] for h in logged], key
    assert dyn["replay_max_abs_diff"] < 1e-6  # Ē and P recomputed from the logged E match the logged ones
    assert len(dyn["simulator"]["rho_hat"]["mean"]) == 2 and dyn["simulator"]["assumed"]["group_size"] == 2
    assert (out / "dynamics.png").stat().st_size > 10_000
    assert "## The AWA-RL mechanism, step by step" in report and dyn["words"] in report

    # A rerun finds every stage done: nothing is rebuilt, the estimate file is not extended.
    stamp = (out / "model" / "warmup" / "model.safetensors").stat().st_mtime_ns
    assert main(["demo", "--out", str(out), *small]) == 0
    assert (out / "model" / "warmup" / "model.safetensors").stat().st_mtime_ns == stamp
    assert len((out / "p_estimates.jsonl").read_text().splitlines()) == 4
    # the resumed trainer restores its log history from the checkpoint: the plot keeps every step
    assert json.loads((out / "dynamics.json").read_text())["trainer"]["step"] == [1, 2]


def _log(step, rho, rho_hat, e, e_bar, pen, **extra):
    return {"step": step, "awarl/rho": rho, "awarl/rho_hat": rho_hat, "awarl/E": e, "awarl/E_bar": e_bar,
            "awarl/penalty": pen, "awarl/r_ref_mean": 0.5, "awarl/share_invalid": 0.1, **extra}


def test_dynamics_come_from_the_log_and_the_replay_catches_a_wrong_value():
    from awarl.config import RewardConfig
    from awarl.stages.demo_dynamics import dynamics_words, replay_error, trainer_dynamics

    rc = RewardConfig()  # β = 0.9, zero start: Ē_1 = 0.1·E_1, Ē_2 = 0.9·Ē_1 + 0.1·E_2
    history = [_log(1, 0.0, 1.0, -1.0, -0.1, -0.2), {"step": 1, "loss": 0.3}, _log(2, 0.5, 1.0, -0.5, -0.14, -0.2),
               {"step": 2, "eval/macro_ra_f1": 0.1}]
    dyn = trainer_dynamics(history)
    assert dyn["step"] == [1, 2] and dyn["rho"] == [0.0, 0.5] and dyn["E_bar"] == [-0.1, -0.14]
    assert replay_error(dyn, rc) == pytest.approx(0.0, abs=1e-12)
    wrong = trainer_dynamics([_log(1, 0.0, 1.0, -1.0, -0.1, -0.2), _log(2, 0.5, 1.0, -0.5, -0.2, -0.5)])
    assert replay_error(wrong, rc) == pytest.approx(0.06)
    words = dynamics_words(dyn, {}, rc, 0.0)
    assert "from 0.00" in words and "-0.20 (from step 1)" in words and "left the dead zone" in words
    assert "the trainer applied the formulas" in words
    # a replay that misses says so (the sentence that it reproduced them was written whatever the error)
    missed = dynamics_words(wrong, {}, rc, replay_error(wrong, rc))
    assert "the trainer applied the formulas" not in missed and "misses the logged values by up to 6.0e-02" in missed
    # a baseline logs no E, Ē, P: nothing to replay, and the words say only what was logged
    base = trainer_dynamics([{k: v for k, v in _log(1, 0.2, 0.5, 0, 0, 0).items() if k[6:] not in ("E", "E_bar",
                                                                                                   "penalty")}])
    assert "E_bar" not in base and replay_error(base, rc) is None
    # reward.refusal_warmup: the first steps hold Ē and P at 0 and feed no E to the EMA
    warm = trainer_dynamics([_log(1, 0.9, 0.5, 0.4, 0.0, 0.0), _log(2, 0.0, 1.0, -1.0, -0.1, -0.2)])
    assert replay_error(warm, rc, warm_steps=1) == pytest.approx(0.0, abs=1e-12)
    assert replay_error(warm, rc, warm_steps=0) > 0.01
    assert "The first 1 steps were the refusal warm-up" in dynamics_words(warm, {}, rc, 0.0, warm_steps=1)
    assert "refusal warm-up" not in dynamics_words(warm, {}, rc, 0.0)
    assert "penalty" not in dynamics_words(base, {}, rc, None)
    # the RA-F1 line (shipped): ρ̂ reads F̂/2, logged as awarl/line, and the words say where the line went
    lined = trainer_dynamics([_log(1, 0.2, 0.3, -0.1, -0.01, 0.0, **{"awarl/line": 0.1, "awarl/ra_f1_hat": 0.2}),
                              _log(2, 0.2, 0.4, -0.2, -0.03, 0.0, **{"awarl/line": 0.15, "awarl/ra_f1_hat": 0.3})])
    assert lined["line"] == [0.1, 0.15] and lined["ra_f1_hat"] == [0.2, 0.3]
    said = dynamics_words(lined, {}, rc, 0.0)
    assert "it reads the RA-F1 line F̂/2" in said and "0.100 -> 0.150" in said and "constant" not in said
    assert "constant: it is a function of the batch's p_i only" in dynamics_words(
        trainer_dynamics([_log(1, 0.2, 0.3, -0.1, -0.01, 0.0)]), {}, RewardConfig(abstain_line="courage"), 0.0)


def test_report_names_the_rate_the_p_i_imply_under_every_reading():
    """The demo's questions are never solved (p_i = 0 of K): the posterior target is the implied share, the
    threshold says refuse all, r_base_mean stops at its ceiling 1 − p_min^γ; the report says so."""
    from awarl.config import RewardConfig
    from awarl.rewards import abstention as A
    from awarl.stages.demo_dynamics import target_readings, target_words

    rows = [{"qid": str(i), "dataset": "hotpotqa", "p_i": 0.0, "k": 4, "correct": 0,
             "outcomes": {"correct": 0, "wrong": 2, "abstain": 1, "invalid": 1}} for i in range(6)]
    rc = RewardConfig()
    t = target_readings(rows, rc)
    assert t["rho_hat"]["posterior"] == pytest.approx(A.posterior_abstain_probability(0.0, 4, rc.gamma, rc.p_min))
    assert t["rho_hat"]["threshold"] == 1.0
    assert t["rho_hat"]["r_base_mean"] == pytest.approx(1 - rc.p_min ** rc.gamma) == pytest.approx(t["r_base_mean_cap"])
    assert set(t["rho_hat"]) == set(A.EXPECTED_RATES)
    words = target_words(t)
    # the shipped RA-F1 line: these are the courage line's values, and the run's own ρ̂ read F̂/2 instead
    assert "6 never solved in their 4 samples" in words and "posterior" in words and "(this run's)" not in words
    assert f"at the courage line (γ = {rc.gamma:g}; this run's line is F̂/2 instead)" in words
    courage = target_words(target_readings(rows, RewardConfig(abstain_line="courage")))
    assert "posterior 0." in courage and "(this run's)" in courage and "courage line" not in courage
    # more samples behind the same p_i = 0: the posterior target moves towards the threshold's 1
    more = target_readings([{**r, "k": 16} for r in rows], rc)
    assert t["rho_hat"]["posterior"] < more["rho_hat"]["posterior"] < 1.0


def test_a_demo_rerun_under_other_settings_is_refused_before_its_record_is_rewritten(tmp_path):
    """The demo wrote resolved_config.yaml first thing, so the training stage's changed-settings check found
    nothing: a finished γ 0.02 demo rerun with reward.gamma=0.5 trained nothing and its REPORT.md said γ 0.5."""
    from awarl.config import ConfigError, load_config
    from awarl.stages.demo import default_config_path, start_record

    cfg = load_config(default_config_path(), [f"run.out_dir={tmp_path}"])
    start_record(cfg, tmp_path)
    kept = (tmp_path / "resolved_config.yaml").read_text()
    start_record(cfg, tmp_path)  # the same settings: a rerun continues
    other = load_config(default_config_path(), [f"run.out_dir={tmp_path}", "reward.gamma=0.5"])
    with pytest.raises(ConfigError, match=rf"holds a demo run made with other settings \(reward\.gamma: "
                       rf"{cfg.reward.gamma:g} -> 0\.5\)"):
        start_record(other, tmp_path)
    assert (tmp_path / "resolved_config.yaml").read_text() == kept
    for bad, named in ((["train.logging_steps=3"], "train.logging_steps"), (["eval.limit=null"], "eval.limit")):
        with pytest.raises(ConfigError, match=named):
            start_record(load_config(default_config_path(), [f"run.out_dir={tmp_path / 'x'}", *bad]), tmp_path / "x")


def test_a_rerun_reports_what_each_stage_cost_when_it_ran(tmp_path):
    """A rerun skips finished stages in no time, and its report showed those skips (warm-up 0.0 s)."""
    import time

    from awarl.stages.demo import Timer

    first = Timer(tmp_path)
    first.done("warm-up", time.time() - 7.7)
    rerun = Timer(tmp_path)
    rerun.done("warm-up", time.time())
    assert first.rows() == ["| warm-up | 7.7 |"] and rerun.rows() == ["| warm-up | 7.7 (this rerun: 0.0) |"]


def test_a_warm_up_cut_short_is_no_warm_up(tmp_path, tiny_dir, shipped_bm25_dir, monkeypatch):
    """The warm-up saved the model, then the tokenizer, into model/warmup, and the demo took config.json as
    done: a kill in between left a folder every rerun loaded (a one-token tokenizer) and failed on. Now the
    folder is written in a temporary sibling and renamed, its info last."""
    from transformers import AutoTokenizer

    from awarl.agent.templates import load_template
    from awarl.data.loaders import load_shipped
    from awarl.retrieval import load_index
    from awarl.training.warmup import WARMUP_INFO, read_warmup, warmup_to_dir

    examples, index, folder = load_shipped("hotpotqa", limit=2), load_index(shipped_bm25_dir), tmp_path / "warmup"
    kind = type(AutoTokenizer.from_pretrained(tiny_dir))

    def killed(self, *a, **kw):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(kind, "save_pretrained", killed)
        with pytest.raises(KeyboardInterrupt):
            warmup_to_dir(tiny_dir, folder, examples, index, load_template("awarl"), topk=1, steps=1, batch_size=1)
    assert not folder.exists() and read_warmup(folder) is None and list(tmp_path.iterdir()) == []
    info = warmup_to_dir(tiny_dir, folder, examples, index, load_template("awarl"), topk=1, steps=1, batch_size=1)
    assert read_warmup(folder) == info and (folder / WARMUP_INFO).is_file() and (folder / "tokenizer.json").is_file()


def test_too_few_demo_questions_are_refused_before_anything_runs_naming_the_demo_setting(tmp_path):
    """The batch check ran at the training stage (after warm-up, evaluations and p_i), named data.train (empty in
    the demo configs, its questions are demo.train_questions), and the rerun with more was then refused as a run
    under other settings."""
    from awarl.config import ConfigError, load_config
    from awarl.stages.demo import default_config_path, start_record

    few = load_config(default_config_path(), [f"run.out_dir={tmp_path}", "demo.train_questions=1"])
    with pytest.raises(ConfigError, match=r"only 1 training question.*add training questions \(demo\.train_questions\)"):
        start_record(few, tmp_path)
    assert not (tmp_path / "resolved_config.yaml").exists()
    start_record(load_config(default_config_path(), [f"run.out_dir={tmp_path}", "demo.train_questions=8"]), tmp_path)
    assert (tmp_path / "resolved_config.yaml").is_file()


def test_demo_real_says_how_much_of_the_excess_a_short_run_lets_the_ema_reach():
    from awarl.config import load_config
    from awarl.stages.demo_real import ema_horizon_line

    cfg = load_config("configs/demo_real_cpu.yaml")
    line = ema_horizon_line(cfg, 4)
    assert "at most 34% of a steady excess" in line and "0 while |Ē| ≤ 0.05 (0.2 just beyond)" in line
    assert "at most 88%" in ema_horizon_line(cfg, 20)
    assert "bias-corrected" in ema_horizon_line(load_config("configs/demo_real_cpu.yaml",
                                                            ["reward.ema_start=bias_corrected"]), 4)
