"""scripts/reward_study_round7.py's protocol (issue 41, round 7): fresh populations, the earlier populations it
counts as targets, and its selection order (collapses out, fewest missed targets, largest mean lead, ties by the
smaller late sd)."""

from __future__ import annotations

from conftest import load_script


def row(name: str, lead: float, sd: float = 0.01, collapses: int = 0, filed: tuple[str, ...] = ()) -> dict:
    return {"variant": name, "gamma": 0.2, "mean_lead": lead, "min_lead": lead, "mean_late_sd": sd,
            "collapses": collapses, "filed_missed": list(filed)}


def test_round7_populations_are_fresh_and_its_targets_are_the_earlier_rounds_tuning_populations():
    R = load_script("reward_study_round7")
    pops = R.populations()
    assert [p["name"] for p in pops] == [f"r7-{k:02d}" for k in range(16)]
    seen = {tuple(p["overrides"]) for p in R.L.draw_populations() + R.R5.populations() + R.R6.populations()}
    assert not {tuple(p["overrides"]) for p in pops} & seen
    earlier = R.earlier_populations()
    assert all(p["half"] != "held-out" for p, _ in earlier)  # no earlier round's evidence is a target
    assert sum(len(norms) for _, norms in earlier) == 3 * 16 + 29


def test_the_order_puts_fewest_missed_targets_before_the_mean_lead_and_breaks_ties_by_late_sd():
    R = load_script("reward_study_round7")
    table = [row("lead", 0.02, filed=("dead/none",)), row("safe", 0.001), row("safe, calmer", 0.0005, sd=0.001),
             row("collapsed", 0.05, collapses=1), row("worse earlier", 0.03)]
    missed = {"lead": [], "safe": [], "safe, calmer": [], "collapsed": [], "worse earlier": ["pop05/group", "x/none"]}
    order = [r["variant"] for r in R.ranked(table, missed)]
    # 0 missed: the two "safe" rows tie within 0.001, the calmer first; then 1 missed; then 2; collapses never
    assert order == ["safe, calmer", "safe", "lead", "worse earlier"]
    assert [r["missed"] for r in R.ranked(table, missed)] == [0, 0, 1, 2]
