"""scripts/reward_study_round5.py's protocol (issue 41, round 5): fresh populations of round 4's distribution, split
before looking, every variant a valid config, and the candidates' per-block cells joined before the selection."""

from __future__ import annotations

from conftest import ROUND4_OVERRIDES, load_script

from awarl.config import load_config
from awarl.io import repo_root


def test_round5_draws_fresh_populations_of_round4s_distribution_and_splits_them_before_looking():
    R = load_script("reward_study_round5")
    pops, old = R.populations(), R.L.draw_populations()
    assert len(pops) == 16 and [p["half"] for p in pops] == ["tuning", "held-out"] * 8
    assert [p["name"] for p in pops] == [f"r5-{k:02d}" for k in range(16)]
    assert not {tuple(p["overrides"]) for p in pops} & {tuple(p["overrides"]) for p in old}  # no round-4 population
    for p in pops:
        assert R.L.cell_config(p, "group", R.SEEDS, []).simulate.seeds == 3


def test_every_round5_variant_is_a_valid_reward_over_the_reward_its_protocol_commit_shipped():
    """The variants name only what they change; the rest is configs/base.yaml at the protocol's commit, round 4's
    reward (conftest.ROUND4_REWARD), on which "current default" is that reward itself. Round 5's choice is today's
    default, so a rerun must start from the protocol's commit (docs/reward_study_round5/README.md)."""
    R = load_script("reward_study_round5")
    round4 = load_config(repo_root() / "configs" / "base.yaml", ROUND4_OVERRIDES).reward
    for name, opts in R.VARIANTS.items():
        rc = load_config(repo_root() / "configs" / "base.yaml", ROUND4_OVERRIDES + R.L.variant_overrides(opts)).reward
        assert (rc == round4) == (name == R.CURRENT[0]), name
    assert round4.gamma == R.CURRENT[1] and R.CURRENT[1] in R.GAMMAS
    # the choice, at its γ, is today's default but for γ (round 6 moved it to 0.2), the line and the warm-up (round 7)
    chosen = load_config(repo_root() / "configs" / "base.yaml", ROUND4_OVERRIDES + R.L.variant_overrides(
        R.VARIANTS["gate+group, warm-up 0.6"]) + ["reward.gamma=0.1"]).reward
    assert chosen == load_config(repo_root() / "configs" / "base.yaml", ["reward.gamma=0.1", "reward.abstain_line=courage",
                                                                        "reward.refusal_warmup=0.6"]).reward


def test_candidate_cells_are_joined_per_population_and_normalisation():
    R = load_script("reward_study_round5")
    a = {"population": "p", "norm": "group", "half": "tuning", "baselines": [], "variants": {"x": [{"gamma": 0.05}]}}
    b = {**a, "variants": {"x": [{"gamma": 0.1}], "y": [{"gamma": 0.01}]}}
    c = {**a, "norm": "none"}
    out = R.merged([a, b, c])
    assert len(out) == 2
    joined = next(m for m in out if m["norm"] == "group")
    assert [r["gamma"] for r in joined["variants"]["x"]] == [0.05, 0.1] and "y" in joined["variants"]
    assert a["variants"] == {"x": [{"gamma": 0.05}]}  # the inputs are not modified
