"""scripts/reconstruction_study.py's protocol: the drawn populations, the split made before looking, and a
selection that only ever reads the tuning half."""

from __future__ import annotations

import sys

import pytest
from conftest import ROUND4_OVERRIDES, load_script

from awarl.config import load_config
from awarl.io import repo_root


def _study():
    return load_script("reconstruction_study")


def test_populations_follow_the_documented_distribution_and_split_before_looking():
    S = _study()
    pops = S.draw_populations(16)
    assert pops == S.draw_populations(16)  # seeded: the same 16 every time
    assert [p["half"] for p in pops] == ["tuning", "held-out"] * 8
    for p in pops:
        q = p["params"]
        assert 0.3 <= q["success_alpha"] <= 3 and 0.3 <= q["success_beta"] <= 3
        assert 0 <= q["unanswerable_share"] <= 0.8 and 0 <= q["perception_noise"] <= 2.5
        assert q["skill_gain"] == 0 or 0 < q["skill_gain"] <= 0.003
        assert q["invalid_rate"] == 0 or 0 < q["invalid_rate"] <= 0.3
        assert 0.01 <= q["init_abstain_rate"] <= 0.3
        cfg = load_config(repo_root() / p["config"], p["overrides"])  # each is a runnable simulator config
        assert cfg.simulate.unanswerable_share == pytest.approx(q["unanswerable_share"], rel=1e-3)
    assert len({p["params"]["success_alpha"] for p in pops}) == 16


def _pop(name: str, half: str, leads: dict[tuple[str, float], float],
         collapsed: tuple[str, float] | None = None, late_sd: dict[tuple[str, float], float] | None = None) -> dict:
    """A fake study result: every (variant, γ) 0.1 below the best baseline except those in `leads`; the
    `collapsed` cell refuses nothing while the baseline refuses 0.6; late-phase refusal sd 0.001 except `late_sd`."""
    S = _study()
    base = {"label": "bapo", "ra_f1": 0.5, "ra_f1_sd": 0.01, "refusal_rate": 0.6, "late_sd": 0.001, "strategy": "bapo"}
    variants = {v: [{"gamma": g, "ra_f1": 0.5 + leads.get((v, g), -0.1), "ra_f1_sd": 0.01,
                     "late_sd": (late_sd or {}).get((v, g), 0.001),
                     "refusal_rate": 0.0 if (v, g) == collapsed else 0.5} for g in S.GAMMAS] for v in S.VARIANTS}
    return {"name": name, "half": half, "params": {}, "baselines": [base], "variants": variants}


def test_selection_reads_the_tuning_half_only_and_skips_collapsing_choices():
    S = _study()
    good, other = ("posterior + guards, floor 0", 0.05), ("threshold + guards", 0.1)
    # the largest mean lead over the populations' best baselines wins, not the largest single lead
    tuning = [_pop("a", "tuning", {good: 0.012, other: 0.02}), _pop("b", "tuning", {good: 0.012, other: 0.0})]
    chosen = S.select_default(tuning)
    assert (chosen["variant"], chosen["gamma"]) == good and chosen["mean_lead"] == pytest.approx(0.012)
    # a reference (the paper's reading) is reported, never chosen, however well it does
    assert S.select_default([_pop("a", "tuning", {("paper spec", 0.5): 0.5, good: 0.001})])["variant"] == good[0]
    # a choice that collapses refusal in a tuning population is out
    collapsing = [_pop("a", "tuning", {good: 0.05, other: 0.001}, collapsed=good)]
    assert (S.select_default(collapsing)["variant"], S.select_default(collapsing)["gamma"]) == other
    with pytest.raises(AssertionError, match="tuning half only"):
        S.select_default([_pop("c", "held-out", {good: 0.1})])


def test_a_tie_on_ra_f1_goes_to_the_steadier_plateau_and_only_a_tie():
    S = _study()
    plain, dithered = ("posterior + guards, floor 0", 0.05), ("posterior + guards, floor 0, dither 0.2", 0.02)
    sds = {plain: 0.02, dithered: 0.005}
    # within SELECT_TOL of the best mean lead: the smaller mean late-phase refusal sd wins
    tie = [_pop("a", "tuning", {plain: 0.0100, dithered: 0.0100 - S.SELECT_TOL / 2}, late_sd=sds)]
    assert (S.select_default(tie)["variant"], S.select_default(tie)["gamma"]) == dithered
    # beyond it, RA-F1 decides, however noisy the winner
    lead = [_pop("a", "tuning", {plain: 0.0100, dithered: 0.0100 - 2 * S.SELECT_TOL}, late_sd=sds)]
    assert (S.select_default(lead)["variant"], S.select_default(lead)["gamma"]) == plain


def test_fresh_populations_are_a_new_draw_all_held_out():
    S = _study()
    fresh = S.draw_populations(8, S.FRESH_SEED, fresh=True)
    assert [p["name"] for p in fresh] == [f"fresh{k:02d}" for k in range(8)]
    assert {p["half"] for p in fresh} == {"fresh held-out"}
    first = {p["params"]["success_alpha"] for p in S.draw_populations(16)}
    assert not first & {p["params"]["success_alpha"] for p in fresh}  # not the first draw again


def test_feasibility_calls_the_late_sd_target_incompatible_only_when_no_oracle_reaches_the_ra_f1_steadily():
    """Protocol step 9: the shipped reward's late sd against the most variable baseline's (0.001), and whether
    some oracle reward within CLOSE_TO_BEST of AWA-RL's best-γ RA-F1 (0.51 here: level 0.50) is that steady."""
    S = _study()
    shipped = ("posterior + guards, floor 0, dither 0.2", 0.02)

    def oracle(key: str, ra: float, sd: float, th: float = 0.2) -> dict:
        return {"key": key, "threshold": th, "charge": 0.5, "ra_f1": ra, "late_sd": sd, "refusal_rate": 0.5}

    def judged(shipped_sd: float, oracles: list[dict]) -> dict:
        pop = _pop("p", "held-out", {shipped: 0.01}, late_sd={shipped: shipped_sd})
        return S.feasibility({**pop, "oracles": oracles}, *shipped)

    # the steady oracle (0.0005) falls short of the level; those that reach it vary more than the baseline
    hard = [oracle("success", 0.495, 0.0005), oracle("success", 0.52, 0.004), oracle("estimate", 0.505, 0.003)]
    got = judged(0.01, hard)
    assert got["verdict"] == "incompatible" and got["level"] == pytest.approx(0.50)
    assert got["success_at_level"]["late_sd"] == 0.004 and got["estimate_at_level"]["ra_f1"] == 0.505
    assert got["at_rival"]["late_sd"] == 0.003  # the steadiest that beats the baseline (0.5), either key
    # an oracle on what AWA-RL knows (p_i) reaches the level within the baseline's sd: the shipped reward missed it
    got = judged(0.01, [*hard, oracle("estimate", 0.502, 0.0009, th=0.1)])
    assert got["verdict"] == "missed" and got["estimate_at_level"]["threshold"] == 0.1
    # within the most variable baseline's sd the target is met, whatever the oracles do
    assert judged(0.001, hard)["verdict"] == "met"
    assert S.least_sd_at(hard, 0.6) is None


def test_precision_verdict_pairs_seeds_and_separates_a_real_excess_from_noise():
    """Protocol step 10: the shipped reward's per-seed late sd against the baseline with the largest mean, the
    excess as the mean paired difference, judged against PRECISION_SE standard errors of that mean."""
    S = _study()

    def cell(shipped: list[float], steady: list[float], variable: list[float]) -> dict:
        def row(label: str, sds: list[float], ra: float) -> dict:
            return {"label": label, "strategy": label, "ra_f1": ra, "ra_f1_sd": 0.0, "refusal_rate": 0.3,
                    "late_sd": sum(sds) / len(sds), "late_sd_seeds": sds}
        return {"population": "p", "half": "held-out", "shipped": row("awarl", shipped, 0.6),
                "baselines": [row("static 0.05", steady, 0.2), row("bapo", variable, 0.55)]}

    # bapo is the largest baseline (mean 0.004); every seed 0.001 above it is an excess no noise explains
    got = S.precision_verdict(cell([0.005, 0.003, 0.006, 0.002], [0.0, 0.0, 0.0, 0.0], [0.004, 0.002, 0.005, 0.001]))
    assert got["rival"] == "bapo" and got["excess"] == pytest.approx(0.001) and got["verdict"] == "larger"
    assert got["best_baseline"] == "bapo" and got["best_baseline_ra_f1"] == 0.55
    # the same means, but unpaired seeds: one seed far above, the others below -> within noise
    got = S.precision_verdict(cell([0.011, 0.001, 0.001, 0.003], [0.0] * 4, [0.004, 0.002, 0.005, 0.001]))
    assert got["excess"] == pytest.approx(0.001) and got["verdict"] == "within noise"
    assert got["excess_se"] == pytest.approx(0.0023452, rel=1e-4)
    assert S.precision_verdict(cell([0.001] * 4, [0.0] * 4, [0.004, 0.002, 0.005, 0.001]))["verdict"] == "no larger"
    with pytest.raises(ValueError, match="at least 2 seeds"):
        S.precision_verdict(cell([0.001], [0.0], [0.002]))


def test_oracle_verdict_calls_a_larger_late_sd_the_ra_f1_targets_price_only_when_no_oracle_at_the_level_is_steady():
    """Step 10's second part: the steadiest oracle (any key) reaching step 9's level against the 20-seed largest
    baseline late sd."""
    S = _study()
    verdict = {"population": "p", "verdict": "larger", "rival_late_sd": 0.002}

    def oracle(ra: float, sd: float, key: str = "estimate") -> dict:
        return {"key": key, "threshold": 0.3, "charge": 0.5, "ra_f1": ra, "late_sd": sd, "refusal_rate": 0.4}

    steady_but_short = oracle(0.49, 0.0001)
    got = S.oracle_verdict(verdict, [steady_but_short, oracle(0.51, 0.004, "success")], level=0.5)
    assert got["oracle_verdict"] == "price" and got["oracle_at_level"]["late_sd"] == 0.004 and got["level"] == 0.5
    assert S.oracle_verdict(verdict, [steady_but_short], level=0.5)["oracle_at_level"] is None
    assert S.oracle_verdict(verdict, [steady_but_short], level=0.5)["oracle_verdict"] == "price"
    got = S.oracle_verdict(verdict, [steady_but_short, oracle(0.505, 0.0015)], level=0.5)
    assert got["oracle_verdict"] == "missed" and got["verdict"] == "larger"  # the first part's verdict is kept


def test_precision_table_counts_each_verdict_and_names_the_oracle_only_where_the_excess_is_larger():
    S = _study()
    base = {"half": "held-out", "seeds": 20, "shipped_ra_f1": 0.6, "shipped_refusal": 0.3, "rival": "bapo (0.5)",
            "excess_se": 0.0005}
    rows = [{**base, "population": "a", "shipped_late_sd": 0.001, "rival_late_sd": 0.002, "excess": -0.001,
             "verdict": "no larger"},
            {**base, "population": "b", "shipped_late_sd": 0.009, "rival_late_sd": 0.002, "excess": 0.007,
             "verdict": "larger", "level": 0.59, "oracle_verdict": "price",
             "oracle_at_level": {"key": "success", "threshold": 0.2, "charge": 0.5, "ra_f1": 0.595,
                                 "late_sd": 0.004, "refusal_rate": 0.7}}]
    lines = S.precision_table(rows, {"a": "missed", "b": "incompatible"})
    assert lines[2].startswith("| a |") and lines[2].endswith("| no larger | missed |  |")
    assert "s < 0.2, charge 0.5" in lines[3] and "the RA-F1 targets' price" in lines[3]
    assert lines[-1] == ("In 2 populations (20 seeds): the shipped reward's late refusal sd no larger than the largest "
                         "baseline's in 1, larger but within 2 standard errors in 0, larger beyond them in 1 (of which "
                         "the RA-F1 targets' price, no oracle reward at step 9's level as steady as the largest "
                         "baseline, in 1).")


def test_oracle_pairing_measures_the_shipped_reading_on_paired_seeds(monkeypatch):
    """scripts/late_sd_oracle_paired.py measures the reading round 3 shipped (configs/base.yaml until round 5 added
    the gate, the group's p and the warm-up), pairs each oracle's per-seed late sd with the rival's, and calls an
    oracle steadier only beyond 2 standard errors."""
    _study()
    P = load_script("late_sd_oracle_paired")
    S = sys.modules["reconstruction_study"]
    base = load_config(repo_root() / "configs" / "base.yaml", ROUND4_OVERRIDES).reward
    for key, value in S.VARIANTS[P.SHIPPED].items():
        if key.startswith("reward."):
            assert getattr(base, key.removeprefix("reward.")) == value, key
    excess, se = P.paired_excess([0.010, 0.012, 0.011, 0.013], [0.011, 0.013, 0.012, 0.014])
    assert excess == pytest.approx(-0.001) and se == pytest.approx(0.0)  # the seeds' shared noise cancels
    excess, se = P.paired_excess([0.01, 0.03], [0.02, 0.02])
    assert excess == pytest.approx(0.0) and se == pytest.approx(0.01)
    with pytest.raises(SystemExit):
        P.main(["fresh99"])
