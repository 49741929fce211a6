"""scripts/reward_study_round6.py's protocol (issue 41, round 6): fresh populations split before looking, every
candidate a valid reward over the one its protocol commit shipped, the chosen one today's default, and the
reward "at filing" the one issue 41 measured."""

from __future__ import annotations

from conftest import ROUND4_REWARD, load_script

from awarl.config import load_config
from awarl.io import repo_root

BASE = repo_root() / "configs" / "base.yaml"
ROUND6 = ["reward.abstain_line=courage", "reward.refusal_warmup=0.6"]  # base.yaml's reward at round 6's commits


def test_round6_draws_fresh_populations_unlike_rounds_4_and_5_and_splits_them_before_looking():
    R = load_script("reward_study_round6")
    pops = R.populations()
    assert [p["name"] for p in pops] == [f"r6-{k:02d}" for k in range(16)]
    assert [p["half"] for p in pops] == ["tuning", "held-out"] * 8
    earlier = {tuple(p["overrides"]) for p in R.L.draw_populations() + R.R5.populations()}
    assert not {tuple(p["overrides"]) for p in pops} & earlier


def test_every_round6_candidate_changes_only_what_it_names_and_the_chosen_is_todays_default():
    """At the protocol's commit base.yaml shipped round 5's reward at γ 0.1; round 6 chose "current default" at
    γ 0.2, which is base.yaml's γ now (round 7 then changed the line and the warm-up: `ROUND6`). The RA-F1
    candidates differ from round 6's reward only in the line and the warm-up."""
    R = load_script("reward_study_round6")
    today = load_config(BASE, ROUND6).reward
    assert today.gamma == 0.2 and today.abstain_line == "courage"
    opts, gammas = R.CANDIDATES["current default"]
    assert opts == {} and 0.2 in gammas and R.CURRENT == ("current default", 0.1)
    for name, (opts, _) in R.CANDIDATES.items():
        rc = load_config(BASE, ROUND6 + R.L.variant_overrides(opts)).reward
        changed = {k for k, v in rc.model_dump().items() if v != today.model_dump()[k]}
        assert changed <= {"abstain_line", "refusal_warmup"}, name
        assert (rc.abstain_line == "ra_f1") == name.startswith("ra_f1"), name


def test_the_reward_at_filing_is_the_one_issue_41_measured():
    """No online p, no gate, no warm-up, γ 0.02: round 4's reward (conftest) at round 3's γ."""
    R = load_script("reward_study_round6")
    at_filing = load_config(BASE, ROUND6 + R.L.variant_overrides(R.AT_FILING_KEYS) + [f"reward.gamma={R.AT_FILING[1]}"]).reward
    round4 = load_config(BASE, [f"reward.{k}={v!r}" if isinstance(v, str) else f"reward.{k}={v}"
                                for k, v in {**ROUND4_REWARD, "gamma": 0.02}.items()]).reward
    # p_prior_weight is read only by p_online=group, off in both
    assert at_filing.model_copy(update={"p_prior_weight": 1.0}) == round4


def test_the_addendum_runs_the_tuning_tables_runner_up_and_chooses_nothing():
    A = load_script("reward_study_round6_addendum")
    assert list(A.CANDIDATE) == ["ra_f1 line, warm-up 0.75"]
    assert A.CANDIDATE["ra_f1 line, warm-up 0.75"][0] == A.R6.CANDIDATES["ra_f1 line, warm-up 0.75"][0]
