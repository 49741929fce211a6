"""benchmarks/rollout_bench.py on CPU at a tiny size: the agent rollout (the transformers backend's slot
cache, BM25 over the shipped closed corpus) and plain `generate` really run side by side; the figures must
agree with each other (plain generates the agent's mean model tokens per row over its mean context, the ratio
is the medians' ratio, the engine's counters match the trajectories), the output is steered as asked, and the
last printed line is the ratio. Also the static-cache path the GPU variant uses, and Qwen's full output width."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from conftest import load_benchmark

bench = load_benchmark("rollout_bench")


def run(tmp_path, tiny_dir, shipped_bm25_dir, *extra, runs=2):
    out = tmp_path / "rollout.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = bench.main(["--runs", str(runs), "--batch", "6", "--turn-tokens", "10", "--trajectory-tokens", "600",
                         "--rates", "0.08", "0.04", "0.02", "--tiny-dir", str(tiny_dir), "--index",
                         str(shipped_bm25_dir), "--out", str(out), *extra])
    return rc, json.loads(out.read_text()), buf.getvalue().strip().splitlines()


def check_report(rep, lines, n=2):
    w, s, eng = rep["workload"], rep["summary"], rep["engine"]
    assert lines[-1] == f"ratio={s['ratio']:.3f}"
    runs = rep["runs"]
    assert all(len(v["seconds"]) == n and min(v["seconds"]) > 0 for v in runs.values())
    assert s["ratio"] == pytest.approx(bench.median(runs["agent"]["seconds"]) / bench.median(runs["plain"]["seconds"]))
    pairs = [a / b for a, b in zip(runs["agent"]["seconds"], runs["plain"]["seconds"], strict=True)]
    assert s["paired_ratio"] == pytest.approx(bench.median(pairs))
    # plain generates exactly the agent's mean model tokens per row, over the agent's mean context
    assert rep["plain_new_tokens"] == round(w["mean_model_tokens"])
    assert runs["plain"]["tokens"] == [6 * rep["plain_new_tokens"]] * n
    assert rep["plain_context_tokens"] == round(w["mean_context_tokens"])
    # the seeded agent reruns the warm-up's trajectories; the engine's counters match them
    assert runs["agent"]["tokens"] == [w["model_tokens"]] * n
    assert eng["engine"] == "continuous" and eng["model_tokens"] == w["model_tokens"]
    # each turn's first token comes from its prefill, the others from decode steps
    assert eng["decode_steps"] >= w["max_model_tokens"] - (rep["settings"]["turns"] + 1)
    assert 0 < s["slot_use"] <= 1 and eng["slots"] == 6
    assert w["searches"] > 0 and sum(w["stop_reasons"].values()) == 6


@pytest.mark.slow
def test_cpu_run_tiny(tmp_path, tiny_dir, shipped_bm25_dir):
    rc, rep, lines = run(tmp_path, tiny_dir, shipped_bm25_dir, "--shape", "tiny")
    assert rc == 0
    check_report(rep, lines)
    assert rep["vocab"] == 4106 and rep["settings"]["bias"]["</search>"] > rep["settings"]["bias"]["</answer>"]
    assert not rep["engine"]["static"]


@pytest.mark.slow
def test_static_cache_path_at_qwen_output_width(tmp_path, tiny_dir, shipped_bm25_dir):
    """The GPU variant's path (static cache; compiled only on CUDA) on the tiny layers with a 151,936-wide
    output: ids the tokenizer lacks are never sampled."""
    rc, rep, lines = run(tmp_path, tiny_dir, shipped_bm25_dir, "--shape", "tiny-152k", "--static-cache", runs=1)
    assert rc == 0
    check_report(rep, lines, n=1)
    assert rep["vocab"] == 151936 and rep["engine"]["static"] and rep["engine"]["cache_length"] % 256 == 0


@pytest.mark.slow
def test_split_accounts_for_every_forward(tmp_path, tiny_dir, shipped_bm25_dir):
    """--split: the agent's forwards are the engine's decode steps and prefill forwards (padded widths
    included), plain's are one prefill and a decode step per token after the first, and each run's parts add
    up to its time."""
    rc, rep, lines = run(tmp_path, tiny_dir, shipped_bm25_dir, "--shape", "tiny", "--split", runs=1)
    assert rc == 0
    check_report(rep, lines, n=1)
    eng, split = rep["engine"], rep["split"]
    (agent,) = split["agent"]
    assert agent["decode_forwards"] == eng["decode_steps"] and agent["prefill_forwards"] == eng["prefill_forwards"]
    assert agent["prefill_row_tokens"] == eng["prefill_padded_tokens"]
    # a decode step runs only the decoding rows: their sum is what the slot use counts
    assert agent["decode_row_tokens"] == pytest.approx(eng["slot_use"] * eng["decode_steps"] * eng["slots"])
    for name in ("plain", "plain_prompt_only"):
        (plain,) = split[name]
        assert plain["prefill_forwards"] == 1 and plain["decode_forwards"] == rep["plain_new_tokens"] - 1
        assert plain["decode_row_tokens"] == 6 * (rep["plain_new_tokens"] - 1)
    for runs in split.values():
        for r in runs:
            parts = r["decode_s"] + r["prefill_s"] + r["sample_s"] + r["search_wait_s"] + r["other_s"]
            assert parts == pytest.approx(r["seconds"], abs=1e-3) and min(r.values()) >= 0
    assert rep["summary"]["median_split"]["agent"]["decode_forwards"] == eng["decode_steps"]
    assert any(ln.startswith("  split agent") for ln in lines)


@pytest.mark.slow
def test_group_rolls_each_question_out_several_times_from_one_prefill(tmp_path, tiny_dir, shipped_bm25_dir):
    """--group 3: two questions, three completions each (a GRPO step's shape): each prompt is prefilled once
    and copied to its two twins; the plain rows still read and write the same tokens."""
    rc, rep, lines = run(tmp_path, tiny_dir, shipped_bm25_dir, "--shape", "tiny", "--group", "3", runs=1)
    assert rc == 0
    check_report(rep, lines, n=1)
    eng = rep["engine"]
    assert rep["settings"]["group"] == 3 and eng["shared_prompt_tokens"] > 0
    assert eng["shared_prompt_tokens"] == 2 * rep["workload"]["prompt_tokens"] // 3   # 2 of each 3 prompts
    # --no-shared-prefill: the same workload, every prompt prefilled (the baseline the sharing is measured by)
    rc, own, lines = run(tmp_path, tiny_dir, shipped_bm25_dir, "--shape", "tiny", "--group", "3",
                         "--no-shared-prefill", runs=1)
    assert rc == 0 and own["settings"]["no_shared_prefill"]
    check_report(own, lines, n=1)
    assert own["engine"]["shared_prompt_tokens"] == 0
    # (float32: a twin's copied logits may differ in the last bit from its own prefill's, so the trajectories,
    # and the passages prefilled after the prompts, need not match token for token; test_rollout_continuous
    # checks that in float64)
    assert own["engine"]["prefill_tokens"] >= eng["shared_prompt_tokens"] + rep["workload"]["prompt_tokens"] // 3


def test_group_must_divide_the_batch(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--batch", "8", "--group", "3"])
    assert "multiple of --group" in capsys.readouterr().err


def test_paired_ratio_compares_runs_made_back_to_back():
    assert bench.paired_ratio([1.1, 4.4, 1.1], [1.0, 4.0, 1.0]) == pytest.approx(1.1)
    # the load went up 8x during the second agent run and stayed: two of three pairs ran under the same load
    # (ratio 1), while the medians' ratio pairs the agent's busy runs with plain's quiet one (8)
    agent, plain = [1.0, 8.0, 8.0], [1.0, 1.0, 8.0]
    assert bench.paired_ratio(agent, plain) == pytest.approx(1.0)
    assert bench.median(agent) / bench.median(plain) == pytest.approx(8.0)
    assert bench.paired_ratio([], []) is None


def test_plain_contexts_and_workload_are_the_agents_tokens():
    from types import SimpleNamespace

    t = SimpleNamespace(prompt_ids=[1, 2, 3], completion_ids=[7, 8, 9, 10, 11], env_mask=[1, 0, 0, 1, 1],
                        stop_reason="answer")
    assert bench.plain_contexts([t], 4) == [[1, 2, 3, 8]]
    assert bench.plain_contexts([t], 12) == [[1, 2, 3, 8, 9] * 2 + [1, 2]]
    w = bench.workload([t, t])
    assert (w["model_tokens"], w["context_tokens"], w["searches"], w["max_model_tokens"]) == (6, 10, 2, 3)
    # turns of 1 and 2 tokens: a barrier per turn runs 1 + 2 steps with both rows, 6 of 6 slot-steps used
    assert (w["barrier_decode_steps"], w["barrier_slot_use"]) == (3, 1.0)
    u = SimpleNamespace(prompt_ids=[1], completion_ids=[5] * 4, env_mask=[1, 1, 1, 1], stop_reason="eos")
    w = bench.workload([t, u])
    assert (w["barrier_decode_steps"], w["barrier_slot_use"]) == (4 + 2, 7 / (2 * 4 + 1 * 2))
