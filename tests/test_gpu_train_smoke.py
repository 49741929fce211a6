"""benchmarks/gpu_train_smoke.py (issue 46's step 3) on CPU at the tiny size: the real `awarl estimate`, `awarl
train` and `awarl train --resume` processes run, and the smoke's own checks hold; the pure log check finds each
defect it is there to find."""

from __future__ import annotations

import json
import math

import pytest
from conftest import load_benchmark

smoke = load_benchmark("gpu_train_smoke")


def _entry(step: int, loss: float = 0.1) -> dict:
    return {"step": step, "loss": loss, **dict.fromkeys(smoke.REWARD_KEYS, 0.0)}


def test_check_log_accepts_a_complete_finite_log():
    assert smoke.check_log([_entry(1), _entry(2), _entry(3)], 3) == []


@pytest.mark.parametrize(("entries", "needle"), [
    ([_entry(1), _entry(3)], "logged steps [1, 3]"),
    ([_entry(1), _entry(2, math.nan)], "loss nan is not finite"),
    ([_entry(1), _entry(2, math.inf)], "loss inf is not finite"),
    ([_entry(1), {"step": 2, "loss": 0.0}], "reward statistics"),
])
def test_check_log_names_each_defect(entries, needle):
    assert any(needle in p for p in smoke.check_log(entries, 2))


@pytest.mark.slow
def test_tiny_smoke_runs_estimate_train_and_resume(tmp_path):
    rc = smoke.main(["--shape", "tiny", "--steps", "2", "--questions", "8", "--out", str(tmp_path / "out"),
                     "--work", str(tmp_path / "work")])
    rec = json.loads((tmp_path / "out" / smoke.RESULTS_FILE).read_text())
    assert rc == 0, rec["problems"]
    assert [c["name"] for c in rec["commands"]] == ["estimate", "train", "resume"]
    assert all(c["rc"] == 0 for c in rec["commands"])
    assert rec["first_run_checkpoints"] == ["checkpoint-1", "checkpoint-2"]
    assert (rec["updates_before_resume"], rec["updates_after_resume"]) == (2, 3)
    assert [e["step"] for e in rec["log"]] == [1, 2, 3]
    assert (tmp_path / "work" / "run" / "checkpoint-3").is_dir()
