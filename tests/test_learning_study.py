"""scripts/learning_study.py's protocol (issue 41): the drawn populations and their split, every one a valid
simulator config, and a selection that reads the tuning cells only, under the filed cases' constraints."""

from __future__ import annotations

import pytest
from conftest import load_script


def _study():
    return load_script("learning_study")


def test_populations_follow_the_documented_distribution_split_before_looking_and_load():
    S = _study()
    pops = S.draw_populations()
    assert pops == S.draw_populations() and len(pops) == 16
    assert [p["half"] for p in pops] == ["tuning", "held-out"] * 8
    for p in pops:
        q = p["params"]
        assert 0.3 <= q["success_alpha"] <= 3 and 0 <= q["unanswerable_share"] <= 0.5
        assert 0 <= q["latent_share"] <= 0.7 and 0.005 <= q["latent_success"] <= 0.05
        assert q["skill_gain"] == 0 or 0.001 <= q["skill_gain"] <= 0.005
        assert q.get("latent_gain", None) in (None, 0.0)
        cfg = S.cell_config(p, "none", S.SEEDS, [])  # every population is a runnable config, as drawn
        assert cfg.simulate.advantage_scaling == "none" and cfg.simulate.seeds == 3
        assert cfg.simulate.query_schedule == q["query_schedule"]
    # each unflattering option is on in some populations and off in others
    for key in ("abstain_feature", "evidence_precision", "skill_source", "held_out_share", "latent_gain"):
        on = sum(key in p["params"] for p in pops)
        assert 0 < on < 16, key


def _cell(name: str, half: str, leads: dict, collapse: tuple | None = None, norm: str = "group") -> dict:
    """A fake cell: plain GRPO 0.5 (the best baseline), every (variant, γ) 0.1 below it except `leads`."""
    S = _study()
    base = [{"label": "none (plain GRPO)", "strategy": "none", "ra_f1": 0.5, "ra_f1_sd": 0.01, "refusal_rate": 0.6,
             "late_sd": 0.001}]
    variants = {v: [{"gamma": g, "ra_f1": 0.5 + leads.get((v, g), -0.1), "ra_f1_sd": 0.01, "late_sd": 0.001,
                     "refusal_rate": 0.0 if (v, g) == collapse else 0.5} for g in S.GAMMAS] for v in S.VARIANTS}
    return {"population": name, "half": half, "norm": norm, "baselines": base, "variants": variants}


def test_selection_takes_the_largest_mean_lead_that_meets_the_filed_targets_and_never_collapses():
    S = _study()
    best, runner, third = ("group λ=0.5", 0.02), ("ema", 0.05), ("old default", 0.02)
    tuning = [_cell("a", "tuning", {best: 0.03, runner: 0.02, third: 0.01}, collapse=None),
              _cell("b", "tuning", {best: 0.03, runner: 0.02, third: 0.01})]
    filed = [_cell("grow", "filed", {best: 0.0, runner: 0.0, third: 0.0}),
             _cell("dead", "filed", {best: 0.0, runner: 0.0, third: 0.0})]
    assert (S.select(S.selection_table(tuning, filed))["variant"], ) == (best[0],)
    # the filed grow case misses by more than 1 sd: the next best that meets every target is chosen
    filed[0]["variants"][best[0]] = [{**r, "ra_f1": 0.45} if r["gamma"] == best[1] else r
                                     for r in filed[0]["variants"][best[0]]]
    pick = S.select(S.selection_table(tuning, filed))
    assert (pick["variant"], pick["gamma"]) == runner and pick["filed_constraint_met"]
    # a collapse in one tuning cell excludes a choice whatever its lead
    tuning[0] = _cell("a", "tuning", {best: 0.03, runner: 0.02, third: 0.01}, collapse=runner)
    pick = S.select(S.selection_table(tuning, filed))
    assert (pick["variant"], pick["gamma"]) == third
    # nothing meets the filed targets: chosen without that constraint, and said so
    filed = [_cell("grow", "filed", {}), _cell("dead", "filed", {})]
    pick = S.select(S.selection_table(tuning, filed))
    assert (pick["variant"], pick["gamma"]) == best and not pick["filed_constraint_met"]


def test_filed_targets_read_grow_against_plain_grpo_and_dead_against_the_best_baseline():
    S = _study()
    grow = _cell("grow_once", "filed", {})
    grow["baselines"].append({"label": "bapo", "strategy": "bapo", "ra_f1": 0.7, "ra_f1_sd": 0.01,
                              "refusal_rate": 0.5, "late_sd": 0.0})
    row = {"ra_f1": 0.495, "ra_f1_sd": 0.01}
    assert S.filed_target(grow, row)                      # within 1 sd of plain GRPO, whatever BAPO does
    dead = {**grow, "population": "dead"}
    assert not S.filed_target(dead, row)                  # dead is held to the best baseline (BAPO 0.7)


def test_the_held_out_verdict_names_ties():
    S = _study()
    cell = _cell("learn01", "held-out", {("chosen", 0.02): 0.005}, norm="none")
    cell["variants"]["chosen"] = [{"gamma": 0.02, "ra_f1": 0.505, "ra_f1_sd": 0.01, "late_sd": 0.0,
                                   "refusal_rate": 0.2}]
    v = S.judge(cell, "chosen", 0.02)
    assert v["tie"] and v["within_sd"] and not v["ahead"] and v["lead"] == pytest.approx(0.005)


def _report():
    return load_script("learning_study_report")


def test_the_interim_report_reports_finished_stages_by_the_protocols_rule_and_counts_the_first_unfinished(tmp_path):
    """scripts/learning_study_report.py on a study that has not finished: the main stage's selection once all its
    cells are in, the filed table, and for the next stage only how many cells it has."""
    import json

    S, R = _study(), _report()
    cells = tmp_path / "cells"
    cells.mkdir()
    assert "Main stage (step 5): 0 of 24 cells finished" in R.report(cells)
    best = ("group λ=0.25", 0.05)
    pops = [p for p in S.draw_populations() if p["half"] == "tuning"] + S.filed_populations()
    for p in pops:
        for norm in S.NORMALISATIONS:
            for tag, lead in (("main", 0.03), ("block1", -0.2)):
                c = _cell(p["name"], p["half"], {best: lead}, norm=norm)
                c["baselines"] += [{**c["baselines"][0], "strategy": s, "label": s, "ra_f1": 0.4}
                                   for s in ("static", "bapo")]
                (cells / f"{p['name']}-{norm}-{tag}.json").write_text(json.dumps(c))
    (cells / f"{pops[0]['name']}-group-block1.json").unlink()
    text = R.report(cells)
    assert f"**Chosen on the tuning cells (step 5):** {best[0]}, γ {best[1]:g}" in text
    assert "filed-case constraint met" in text and "| grow / group |" in text
    assert "Seed block 1 (seeds [100, 101, 102]): 23 of 24 cells finished" in text and "block 2" not in text
