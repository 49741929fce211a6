"""benchmarks/grpo_step_bench.py on CPU at a tiny size: both runs (awarl multi-turn GRPO through
run_train, plain TRL GRPO) really train the tiny Qwen2 model for two steps; the JSONL figures must be
positive and consistent with each other and with what TRL itself logged; the wall-time budget stops a
run after its step and skips runs not started."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import load_benchmark

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STEPS, COMPLETIONS, GENS, NEW = 2, 4, 2, 24
bench = load_benchmark("grpo_step_bench")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    # Same folder as test_train's fixture: the tiny model is built once per session.
    from awarl.models.tiny import build_tiny_model

    path = tmp_path_factory.getbasetemp() / "tiny-model"
    if not (path / "config.json").exists():
        build_tiny_model(path, seed=0)
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory, tiny_dir):
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("grpo_bench")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = bench.main(["--shape", "tiny", "--steps", str(STEPS), "--completions", str(COMPLETIONS),
                         "--num-generations", str(GENS), "--max-new-tokens", str(NEW), "--out", str(tmp / "out"),
                         "--work", str(tmp / "work"), "--tiny-dir", str(tiny_dir)])
    rows = [json.loads(line) for line in (tmp / "out" / bench.RESULTS_FILE).read_text().splitlines()]
    return {"rc": rc, "rows": {r["run"]: r for r in rows}, "n": len(rows), "stdout": buf.getvalue()}


@pytest.mark.slow
def test_both_runs_recorded_with_positive_times_and_tokens(ran):
    assert ran["rc"] == 0
    assert ran["n"] == 2 and set(ran["rows"]) == {"awarl", "trl"}
    for name, r in ran["rows"].items():
        assert r["status"] == "ok", (name, r.get("error"), r.get("tb"))
        assert r["steps"] == STEPS and len(r["step_seconds"]) == STEPS
        assert all(s > 0 for s in r["step_seconds"])
        # generation happens inside the optimizer step, so it is a part of it
        assert len(r["gen_seconds"]) == STEPS
        assert all(0 < g < s for g, s in zip(r["gen_seconds"], r["step_seconds"], strict=True))
        for toks, m, e in zip(r["completion_tokens"], r["model_tokens"], r["env_tokens"], strict=True):
            assert toks == m + e
            assert 0 < toks <= COMPLETIONS * NEW
        assert r["shape"] == "tiny" and r["cuda"] is False and r["bf16"] is False
        assert r["completions"] == COMPLETIONS and r["num_generations"] == GENS and r["max_new_tokens"] == NEW
        assert r["params"] > 0 and r["vocab_size"] > 0


@pytest.mark.slow
def test_rates_are_tokens_over_seconds_of_the_measured_steps(ran):
    for r in ran["rows"].values():
        assert r["measured_steps"] == list(range(2, STEPS + 1))  # the first step is left out
        assert r["tokens_measured"] == sum(r["completion_tokens"][1:])
        assert r["model_tokens_measured"] == sum(r["model_tokens"][1:])
        assert r["seconds_measured"] == pytest.approx(sum(r["step_seconds"][1:]), abs=1e-3)
        # seconds_measured is rounded to 0.1 ms and rates to 0.01 token/s in the record
        assert r["tokens_per_s"] == pytest.approx(r["tokens_measured"] / r["seconds_measured"], rel=1e-3, abs=0.006)
        assert r["model_tokens_per_s"] == pytest.approx(r["model_tokens_measured"] / r["seconds_measured"],
                                                        rel=1e-3, abs=0.006)
        assert r["median_step_s"] == pytest.approx(sorted(r["step_seconds"][1:])[(STEPS - 1) // 2], abs=1e-3)


@pytest.mark.slow
def test_awarl_steps_are_split_into_parts_that_add_up(ran):
    """The awarl run's steps split into PARTS: generation is the timed rollout, the parts sum to the step, and
    with transformers generation there is no weight sync and no no-grad log-prob forward (TRL computes one only
    for vLLM's importance correction); plain TRL records no split."""
    r = ran["rows"]["awarl"]
    assert len(r["step_parts"]) == STEPS and list(r["median_parts_s"]) == list(bench.PARTS)
    for parts, step, gen in zip(r["step_parts"], r["step_seconds"], r["gen_seconds"], strict=True):
        assert sum(parts.values()) == pytest.approx(step, abs=1e-3)
        assert parts["generation"] == pytest.approx(gen, abs=1e-3)
        assert parts["sync"] == 0 and parts["old_logps"] == 0
        assert min(parts[k] for k in ("reward", "loss_forward", "backward")) > 0
        assert min(parts.values()) >= -1e-3   # differences of nested timers, never a negative share
    assert r["use_vllm"] is False and r["vllm_importance_sampling_correction"] is False
    assert ran["rows"]["trl"]["step_parts"] == [] and ran["rows"]["trl"]["median_parts_s"] is None


@pytest.mark.slow
def test_token_counts_agree_with_what_trl_logged(ran):
    # TRL logs the mean model-token length of the step's completions (env tokens excluded via env_mask)
    for r in ran["rows"].values():
        assert len(r["trl_logged_mean_length"]) == STEPS
        for m, mean in zip(r["model_tokens"], r["trl_logged_mean_length"], strict=True):
            assert m == pytest.approx(mean * COMPLETIONS)
    assert ran["rows"]["trl"]["env_tokens"] == [0] * STEPS


@pytest.mark.slow
def test_side_by_side_table_printed_last(ran):
    lines = ran["stdout"].rstrip().splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("run ") and "tokens/s" in ln)
    table = lines[header + 1:]
    assert [ln.split()[0] for ln in table] == ["awarl", "trl"]
    for ln in table:
        name = ln.split()[0]
        assert str(ran["rows"][name]["tokens_per_s"]) in ln.split()


def test_summarize_uses_steps_after_the_first():
    rec = bench.StepRecord(step_seconds=[10.0, 2.0, 4.0], gen_seconds=[5.0, 1.0, 1.5],
                           model_tokens=[100, 90, 70], env_tokens=[0, 10, 30])
    s = bench.summarize(rec)
    assert s["tokens_measured"] == 200 and s["seconds_measured"] == 6.0
    # rates are rounded to 0.01 token/s in the record
    assert s["tokens_per_s"] == pytest.approx(200 / 6, abs=0.006)
    assert s["model_tokens_per_s"] == pytest.approx(160 / 6, abs=0.006)
    assert s["median_step_s"] == 3.0 and s["median_gen_s"] == 1.25
    one = bench.summarize(bench.StepRecord([3.0], [1.0], [30], [0]))
    assert one["measured_steps"] == [1] and one["tokens_per_s"] == 10.0
    with pytest.raises(ValueError, match="no completed step"):
        bench.summarize(bench.StepRecord())


def test_step_timer_stops_training_once_the_budget_is_spent():
    from transformers import TrainerControl, TrainerState, TrainingArguments

    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
    for deadline, stops in ((time.monotonic() - 1, True), (time.monotonic() + 3600, False)):
        rec = bench.StepRecord()
        cb, control = bench.step_timer(rec, deadline), TrainerControl()
        cb.on_step_begin(args, TrainerState(), control)
        control = cb.on_step_end(args, TrainerState(), control)
        assert control.should_training_stop is stops
        assert len(rec.step_seconds) == 1 and rec.step_seconds[0] >= 0


@pytest.mark.slow
def test_spent_budget_skips_runs_not_started(tmp_path, tiny_dir, capsys):
    rc = bench.main(["--shape", "tiny", "--steps", "1", "--completions", "2", "--num-generations", "2",
                     "--max-new-tokens", "16", "--which", "trl", "--budget-s", "0.001", "--out", str(tmp_path),
                     "--tiny-dir", str(tiny_dir)])
    assert rc == 0
    (row,) = [json.loads(x) for x in (tmp_path / bench.RESULTS_FILE).read_text().splitlines()]
    assert row["run"] == "trl" and row["status"] == "skipped_for_time" and "step_seconds" not in row
    assert "skipped_for_time" in capsys.readouterr().out


def test_config_gives_the_awarl_run_its_settings(tmp_path):
    """--config: the step's shape comes from the run config (the study's: 1 question x 4 completions, a
    1,024-token trajectory, LoRA r 8, no KL), and the awarl run keeps the config's agent, critic, reward and
    generation settings with only the bench's model, index, p_i file and scratch folder put in; awarl-vllm
    adds TRL's colocated engine (float32, eager on CPU)."""
    from pathlib import Path

    study = Path(__file__).resolve().parents[1] / "configs" / "study" / "real_smollm2.yaml"
    args = bench.parse_args(["--config", str(study), "--completions", "64", "--lora", "0"])
    assert (args.completions, args.num_generations, args.max_new_tokens) == (4, 4, 1024)
    assert (args.lora, args.kl_beta, args.learning_rate) == (8, 0.0, 5e-5)
    b = bench.Bench(shape="smollm2", model_dir=tmp_path / "model", model_info={}, index_dir=tmp_path / "bm25",
                    examples=[], steps=3, completions=4, num_generations=4, max_new_tokens=1024, kl_beta=0.0,
                    learning_rate=5e-5, gradient_checkpointing=False, seed=0, work=tmp_path, deadline=None,
                    config=study)
    cfg = bench.awarl_config(b)
    assert (cfg.agent.max_turns, cfg.agent.max_new_tokens_per_turn, cfg.agent.max_trajectory_tokens) == (2, 64, 1024)
    assert cfg.critic.judge == "gold" and cfg.retrieval.topk == 2 and cfg.generation.dtype == "float32"
    assert cfg.train.lora.enabled and cfg.train.lora.r == 8 and cfg.train.per_device_train_batch_size == 4
    assert cfg.train.model == str(tmp_path / "model") and cfg.retrieval.index_dir == str(tmp_path / "bm25")
    assert cfg.train.max_steps == 3 and cfg.run.out_dir == str(tmp_path / "awarl_run") and not cfg.train.use_vllm
    v = bench.awarl_config(b, vllm=True)
    assert v.train.use_vllm and v.train.vllm_mode == "colocate"
    assert v.generation.enforce_eager and v.generation.dtype == "float32"
    assert v.train.vllm_importance_sampling_correction   # TRL's default
    # --set: overrides of the awarl runs, after the bench's own
    args = bench.parse_args(["--config", str(study), "--set", "train.vllm_importance_sampling_correction=false",
                             "--set", "agent.max_turns=3"])
    assert args.overrides == ["train.vllm_importance_sampling_correction=false", "agent.max_turns=3"]
    v = bench.awarl_config(bench.Bench(**{**b.__dict__, "overrides": tuple(args.overrides)}), vllm=True)
    assert not v.train.vllm_importance_sampling_correction and v.agent.max_turns == 3 and v.train.use_vllm
    # without --config: the bench's own settings, the same fixed keys
    own = bench.awarl_config(bench.Bench(**{**b.__dict__, "config": None, "max_new_tokens": 48}))
    assert own.critic.judge == "lexical" and own.agent.max_trajectory_tokens == 48 and own.train.max_steps == 3


def test_a_config_that_does_not_load_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  no_such_key: 1\n")
    with pytest.raises(SystemExit):
        bench.parse_args(["--config", str(bad)])
    err = capsys.readouterr().err
    assert "--config" in err and "no_such_key" in err


@pytest.mark.parametrize("argv, message", [
    (["--completions", "6", "--num-generations", "4"], "multiple of --num-generations"),
    (["--which", "awarl,vllm"], "unknown run"),
    (["--num-generations", "1", "--completions", "2"], "num-generations must be >= 2"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err
