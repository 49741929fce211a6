"""scripts/reward_study_round9.py's protocol (issue 41, round 9): the two rewards it compares, its fresh populations,
the targets it counts and its decision rule."""

from __future__ import annotations

from conftest import load_script

from awarl.config import load_config


def test_round_7s_default_is_the_shipped_reward_without_this_rounds_two_changes():
    R = load_script("reward_study_round9")
    keys, _ = R.REWARDS[R.ROUND7]
    old = load_config("configs/base.yaml", [f"{k}={v}" for k, v in keys.items()]).reward
    new = load_config("configs/base.yaml").reward
    assert (old.refusal_gate_weight, old.warmup_share("group"), old.warmup_share("none")) == ("off", 0.9, 0.9)
    assert (new.refusal_gate_weight, new.warmup_share("group"), new.warmup_share("none")) == ("tie_at_line", 0.9, 0.75)
    differ = {k for k in new.model_dump() if new.model_dump()[k] != old.model_dump()[k]}
    assert differ == {"refusal_gate_weight", "refusal_warmup"}


def test_the_fresh_populations_are_new_and_all_evidence():
    R = load_script("reward_study_round9")
    pops = R.populations()
    assert [p["name"] for p in pops] == [f"r9-{k:02d}" for k in range(16)]
    assert {p["half"] for p in pops} == {"evidence"}
    r7 = [p["params"] for p in R.R7.populations()]
    assert not any(p["params"] in r7 for p in pops)


def _row(f1: float, sd: float = 0.002, refusal: float = 0.5, strategy: str = "awarl") -> dict:
    return {"strategy": strategy, "label": strategy, "gamma": 0.2, "ra_f1": f1, "ra_f1_sd": sd,
            "refusal_rate": refusal}


def test_targets_count_filed_and_earlier_misses_per_reward():
    R = load_script("reward_study_round9")
    filed = [{"population": "dead_once", "norm": "none", "baselines": [_row(0.38, strategy="none"),
                                                                      _row(0.519, strategy="bapo")],
              "variants": {R.SHIPPED: [_row(0.5175)], R.ROUND7: [_row(0.513)]}}]
    at_filing = [{**_row(0.432, 0.006), "gamma": 0.02}]
    earlier = [{"population": "r6-00", "norm": "none", "baselines": [],
                "variants": {R.SHIPPED: [_row(0.4285)], R.ROUND7: [_row(0.4188)], R.R6.AT_FILING[0]: at_filing}}]
    a = R.targets(filed, earlier)
    assert a[R.SHIPPED]["missed"] == [] and a[R.ROUND7]["missed"] == ["dead_once/none", "r6-00/none"]


def test_the_decision_rule_needs_fewer_misses_and_no_lower_lead():
    R = load_script("reward_study_round9")
    a = {R.SHIPPED: {"missed": ["x"]}, R.ROUND7: {"missed": ["x", "y"]}}
    ok = {"group": {"lead": -0.0075, "old_lead": -0.0073}, "none": {"lead": 0.001, "old_lead": -0.003}}
    assert R.decision(a, ok)["keep_shipped"]
    worse = {**ok, "none": {"lead": -0.0045, "old_lead": -0.003}}
    assert R.decision(a, worse) == {"fewer_missed": True, "lead_no_worse": False, "keep_shipped": False}
    same = {R.SHIPPED: {"missed": ["x"]}, R.ROUND7: {"missed": ["y"]}}
    assert not R.decision(same, ok)["keep_shipped"]


def test_the_amendments_check_holds_the_at_filing_reward_to_round_7s_recorded_values():
    """Step A's reference must be the reward at filing that round 7 ran (courage line), value for value."""
    import json

    R = load_script("reward_study_round9")
    assert R.AT_FILING_KEYS["reward.abstain_line"] == "courage"
    recorded = next(iter(json.loads(R.ROUND7_STUDY.read_text())["earlier"].values()))
    ref = next(r for r in recorded if (r["population"], r["norm"]) == ("learn10", "group"))
    cell = {"population": "learn10", "norm": "group",
            "variants": {R.R6.AT_FILING[0]: [{**_row(ref["old"], refusal=ref["old_refusal"]), "gamma": 0.02}]}}
    assert R.at_filing_check([cell]) == {"cells": 1, "differing": []}
    cell["variants"][R.R6.AT_FILING[0]][0]["ra_f1"] = 0.2802  # what the first run's RA-F1-line reference gave
    assert R.at_filing_check([cell])["differing"] == [{"cell": "learn10/group", "ra_f1": 0.2802, "round7": ref["old"]}]
