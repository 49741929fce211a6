"""scripts/reward_study_round8.py's protocol (issue 41, round 8): its two readings of the warm-up under linear decay,
the reproduction check against round 7's recorded cells, and the filed targets it reports."""

from __future__ import annotations

import copy
import json

from conftest import load_script


def test_round_7s_reading_is_900_steps_and_the_shipped_one_0_9_of_the_learning():
    R = load_script("reward_study_round8")
    assert R.check_readings() == {R.STEPS_09: 900, R.LEARNING_09: 684}
    assert R.CANDIDATES[R.LEARNING_09][0]["reward.refusal_warmup"] == 0.9


def test_the_reproduction_check_compares_every_field_of_round_7s_recorded_row():
    R = load_script("reward_study_round8")
    recorded = json.loads((R.ROUND7_CELLS / "r7-01-group-held-out.json").read_text())
    cell = {**recorded, "variants": {R.ROUND7_CHOSEN: copy.deepcopy(recorded["variants"]["chosen"])}}
    assert R.reproduction([cell])[0]["equal"]
    cell["variants"][R.ROUND7_CHOSEN][0]["refusal_rate"] += 1e-12
    (got,) = R.reproduction([cell])
    assert not got["equal"] and got["differing"] == ["refusal_rate"]


def test_filed_rows_apply_issue_41s_targets_to_each_reading():
    R = load_script("reward_study_round8")

    def r(strategy: str, f1: float, sd: float = 0.002) -> dict:
        return {"strategy": strategy, "label": strategy, "gamma": 0.2, "ra_f1": f1, "ra_f1_sd": sd,
                "refusal_rate": 0.5}

    cell = {"population": "dead_once", "norm": "none", "baselines": [r("none", 0.38), r("static", 0.50),
                                                                     r("bapo", 0.519)],
            "variants": {R.STEPS_09: [r("awarl", 0.413)], R.LEARNING_09: [r("awarl", 0.518)]}}
    (row,) = R.filed_rows([cell], (R.STEPS_09, R.LEARNING_09))
    assert row["best"]["strategy"] == "bapo"
    assert not row["candidates"][R.STEPS_09]["met"] and row["candidates"][R.LEARNING_09]["met"]
    text = "\n".join(R.filed_table([row]))
    assert f"- {R.STEPS_09}: 0 of 1 met (missed: dead_once/none)" in text and f"- {R.LEARNING_09}: 1 of 1 met" in text
