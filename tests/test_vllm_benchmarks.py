"""The benchmarks' vLLM paths on vLLM's CPU build, with the protocol-warmed tiny model (it searches and
answers): benchmarks/rollout_bench.py --vllm (the agent per turn and as a session against plain
`LLM.generate` of the same tokens and of the prompts, the prefix cache emptied before each timed call) and
benchmarks/grpo_step_bench.py's awarl-vllm run (GRPO through TRL's colocated engine, each step split into
its parts: the weight sync and TRL's importance-correction forward appear there and nowhere else)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from conftest import load_benchmark

pytestmark = pytest.mark.vllm


def test_rollout_bench_vllm_rows_read_and_write_the_plain_rows_tokens(tmp_path, protocol_dir, shipped_bm25_dir):
    bench = load_benchmark("rollout_bench")
    out = tmp_path / "rollout.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = bench.main(["--model", str(protocol_dir), "--vllm", "--vllm-temperature", "0", "--runs", "2",
                         "--batch", "4", "--turn-tokens", "16", "--trajectory-tokens", "300", "--index",
                         str(shipped_bm25_dir), "--work", str(tmp_path), "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    v = rep["vllm"]
    assert set(v["runs"]) == {"per_turn", "session", "plain", "plain_prompt_only"}, v
    assert v["same_trajectories"] is True   # greedy: both agent paths give the same trajectories
    new = rep["plain_new_tokens"]
    for name in ("plain", "plain_prompt_only"):
        assert v["runs"][name]["model_tokens"] == [4 * new] * 2
        # eos ignored: every row samples `new` tokens, one engine step each after the step that prefills
        assert min(v["runs"][name]["engine_steps"]) >= new
    for name, row in v["runs"].items():
        for total, inside, n, by in zip(row["seconds"], row["step_seconds"], row["engine_steps"],
                                        row["steps_by_running"], strict=True):
            assert 0 < inside <= total and sum(k for k, _ in by.values()) == n
            assert sum(sec for _, sec in by.values()) == pytest.approx(inside, abs=1e-3)
            assert max(map(int, by)) <= 4
        if name.startswith("plain"):   # eos ignored: all four requests run to the end together
            assert all(list(by) == ["4"] for by in row["steps_by_running"])
    med = v["median_seconds"]
    assert v["session_over_plain"] == pytest.approx(med["session"] / med["plain"])
    assert v["session_over_plain_prompt_only"] == pytest.approx(med["session"] / med["plain_prompt_only"])
    pairs = [a / b for a, b in zip(v["runs"]["session"]["seconds"], v["runs"]["plain"]["seconds"], strict=True)]
    assert v["session_over_plain_paired"] == pytest.approx(bench.median(pairs))
    # the cache is emptied before each call: greedy rounds hit it alike, the warm-up round (a fresh engine)
    # included; the session's resubmitted histories are served by it
    rounds = v["prefix_cached_tokens_by_round"]["session"]
    assert len(rounds) == 3 and len(set(rounds)) == 1 and rounds[0] > 0
    assert "session / plain (same tokens)" in buf.getvalue()


def test_grpo_bench_colocated_run_times_the_sync_and_the_importance_forward(tmp_path, protocol_dir):
    bench = load_benchmark("grpo_step_bench")
    with contextlib.redirect_stdout(io.StringIO()):
        rc = bench.main(["--shape", "tiny", "--model", str(protocol_dir), "--steps", "2", "--completions", "4",
                         "--num-generations", "2", "--max-new-tokens", "64", "--which", "awarl-vllm,awarl",
                         "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    rows = {r["run"]: r for r in map(json.loads, (tmp_path / "out" / bench.RESULTS_FILE).read_text().splitlines())}
    assert rc == 0, {k: r.get("tb") for k, r in rows.items()}
    v, h = rows["awarl-vllm"], rows["awarl"]
    assert v["use_vllm"] and v["vllm_importance_sampling_correction"] and v["generation"].startswith("colocated")
    assert not h["use_vllm"] and v["model_dir"] == h["model_dir"] == str(protocol_dir)
    for r in (v, h):
        assert len(r["step_parts"]) == 2
        for parts, step in zip(r["step_parts"], r["step_seconds"], strict=True):
            assert sum(parts.values()) == pytest.approx(step, abs=1e-3)
            assert min(parts.values()) >= -1e-3
    # TRL syncs the engine before every step's rollout and recomputes the sampling log-probs (importance
    # correction); transformers generation on the live policy needs neither
    assert all(p["sync"] > 0 and p["old_logps"] > 0 for p in v["step_parts"])
    assert all(p["sync"] == 0 and p["old_logps"] == 0 for p in h["step_parts"])
