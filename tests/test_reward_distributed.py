"""Two CPU processes (torchrun, gloo) holding different slices compute identical batch statistics."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from awarl.config import RewardConfig
from awarl.rewards.trl_reward import AwaRLReward

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "dist" / "reward_allreduce.py"


def _torchrun() -> str | None:
    local = Path(sys.executable).parent / "torchrun"
    return str(local) if local.exists() else shutil.which("torchrun")


@pytest.mark.slow
def test_two_ranks_agree_with_single_process(tmp_path):
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from reward_allreduce import FULL
    finally:
        sys.path.pop(0)
    for strategy in ("awarl", "bapo"):
        single = AwaRLReward(RewardConfig(strategy=strategy, beta=0.5, p_online="ema", refusal_warmup=0.0))
        for step in range(3):
            expected = single(prompts=["p"] * 8, completions=["c"] * 8, **FULL)
            a, b = r0[strategy][step], r1[strategy][step]
            assert a["stats"] == b["stats"]            # identical batch statistics on both ranks
            assert a["p_online"] == b["p_online"]
            # E, Ē and P exist for AWA-RL only (a baseline has no penalty to log)
            keys = ("rho", "rho_hat", "r_ref_mean", "n", "share_correct") + (
                ("E", "E_bar", "penalty") if strategy == "awarl" else ())
            assert set(a["stats"]) == set(single.last_stats)
            for key in keys:
                assert a["stats"][key] == pytest.approx(single.last_stats[key]), (strategy, step, key)
            assert a["p_online"] == pytest.approx(single.p_online)
            assert a["rewards"] + b["rewards"] == pytest.approx(expected)
    # sanity: the batch is not trivially in the dead zone, so Ē and the penalty were exercised
    assert r0["awarl"][2]["stats"]["penalty"] != 0.0
