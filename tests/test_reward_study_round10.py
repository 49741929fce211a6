"""scripts/reward_study_round10.py's protocol (issue 41, round 10): its seed blocks, how it counts a block's targets
(on round 9's own recorded cells), its reproduction check and its rule."""

from __future__ import annotations

import json

from conftest import load_script

from awarl.io import repo_root

ROUND9_CELLS = repo_root() / "docs" / "reward_study_round9" / "cells"


def _cell(name: str) -> dict:
    return json.loads((ROUND9_CELLS / f"{name}.json").read_text())


def test_the_decisive_blocks_are_ten_seeds_no_round_has_run():
    R = load_script("reward_study_round10")
    ran = {s for r in (R.R9, R.R7, R.R6, R.L) for block in (r.SEEDS, *r.SEED_BLOCKS) for s in block}
    for tag in R.DECISIVE:
        seeds = R.BLOCKS[tag]
        assert len(seeds) == 10 and list(seeds) == list(range(seeds[0], seeds[0] + 10))
        assert not ran & set(seeds)
    assert set(R.BLOCKS["X"]) >= set(R.REPRODUCE) and "X" not in R.DECISIVE


def test_the_reference_is_round_9s_amended_at_filing_reward_and_the_shipped_reward_is_unchanged():
    R = load_script("reward_study_round10")
    assert R.WITH_FILING[R.SHIPPED] == ({}, (0.2,))
    assert R.WITH_FILING[R.AT_FILING[0]] == (R.R9.AT_FILING_KEYS, (R.AT_FILING[1],))
    assert R.R9.AT_FILING_KEYS["reward.abstain_line"] == "courage"


def test_a_block_counts_round_9s_two_misses_on_its_own_cells():
    """Round 9's seeds 0-2, recounted: pop05 and fresh04 under group-std advantages missed, the filed cells met."""
    R = load_script("reward_study_round10")
    filed = [_cell(f"{p}-{n}-filed") for p in ("grow", "dead_once") for n in ("group", "none")]
    earlier = [_cell(n) for n in ("pop05-group-earlier", "fresh04-group-earlier", "learn00-group-earlier")]
    b = R.count(filed, earlier)
    assert b["targets"] == 7 and b["missed"] == ["pop05/group", "fresh04/group"]
    pop05 = next(r for r in b["rows"] if r["cell"] == "pop05/group")
    assert round(pop05["ra_f1"], 4) == 0.1324 and round(pop05["reference"], 4) == 0.1334
    assert pop05["margin"] < 0 and pop05["reference_label"] == R.AT_FILING[0]
    assert [r["cell"] for r in b["closest"][:2]] == ["pop05/group", "fresh04/group"]
    dead = next(r for r in b["rows"] if r["cell"] == "dead_once/none")
    assert dead["met"] and dead["reference_label"].startswith("bapo") and dead["margin"] >= 0


def test_reproduction_flags_a_cell_that_differs_from_round_9s_record():
    R = load_script("reward_study_round10")
    filed, earlier = [_cell("dead_once-none-filed")], [_cell("pop05-group-earlier")]
    assert R.reproduction(filed, earlier) == {"cells": 2, "shipped_differing": [], "at_filing_differing": []}
    filed[0]["variants"][R.SHIPPED][0]["ra_f1"] += 1e-6
    assert [d["cell"] for d in R.reproduction(filed, earlier)["shipped_differing"]] == ["dead_once/none"]


def test_the_rule_needs_both_fresh_blocks_clean_and_ignores_the_seen_seeds():
    R = load_script("reward_study_round10")
    clean = {"F1": {"missed": []}, "F2": {"missed": []}, "X": {"missed": ["pop05/group"]}}
    assert R.verdict(clean)["item1_met"]
    assert not R.verdict({**clean, "F2": {"missed": ["fresh04/group"]}})["item1_met"]


def test_sd_ratios_compare_each_earlier_cells_three_seed_sd_with_its_ten_seed_one():
    R = load_script("reward_study_round10")
    three = {"rows": [{"cell": "a", "kind": "earlier", "sd": 0.0003}, {"cell": "b", "kind": "earlier", "sd": 0.002},
                      {"cell": "f", "kind": "filed", "sd": 0.001}]}
    ten = {"rows": [{"cell": "a", "kind": "earlier", "sd": 0.0036}, {"cell": "b", "kind": "earlier", "sd": 0.002},
                    {"cell": "f", "kind": "filed", "sd": 0.004}]}
    out = R.sd_ratios(three, ten)
    assert out["cells"] == 2 and out["below_a_third"] == ["a"]
    assert abs(out["median"] - (0.0003 / 0.0036 + 1.0) / 2) < 1e-12
