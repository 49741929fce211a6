"""The section-4 math, the baselines and the citation reward: hand-computed cases and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awarl.config import RewardConfig
from awarl.critic.schema import ClaimVerification, CriticOutput, PassageRef
from awarl.metrics import Outcome
from awarl.rewards import abstention as A
from awarl.rewards.citation import build_critic_input, citation_reward
from awarl.rewards.strategies import abstain_reward

STEPS = [(0.05, 0.0), (0.15, 0.2), (0.30, 0.5)]
probs = st.floats(0.0, 1.0, allow_nan=False)
gammas = st.floats(0.01, 1.0, allow_nan=False)


def test_clip_courage_and_base_reward_hand_computed():
    assert A.clip_p(0.03, 0.1) == 0.1
    assert A.clip_p(0.4, 0.1) == 0.4
    assert A.courage(0.25, 0.5) == pytest.approx(0.5)
    # p = 0.04 -> clipped to 0.1 -> p* = sqrt(0.1) = 0.316228 -> R_base = 0.683772
    assert A.base_refusal_reward(0.04, 0.5, 0.1) == pytest.approx(1 - math.sqrt(0.1))
    assert A.base_refusal_reward(0.81, 0.5, 0.1) == pytest.approx(0.1)
    assert A.base_refusal_reward(0.3, 1.0, 0.1) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="p_i"):
        A.clip_p(1.2, 0.1)
    with pytest.raises(ValueError, match="gamma"):
        A.courage(0.5, 0.0)


@given(p=probs, g1=gammas, g2=gammas)
def test_refusal_reward_shrinks_as_gamma_shrinks(p, g1, g2):
    lo, hi = sorted((g1, g2))
    assert A.base_refusal_reward(p, lo, 0.1) <= A.base_refusal_reward(p, hi, 0.1) + 1e-12


@given(p=probs, g=gammas)
def test_clip_bounds_base_reward(p, g):
    r = A.base_refusal_reward(p, g, 0.1)
    assert 0.0 <= r <= 1 - 0.1 ** g + 1e-12  # the clip caps what refusing a never-solved query can pay


def test_expected_rate_threshold_and_soft():
    # γ=0.5: p=0.04 -> R_base 0.684 > 0.04 (abstain); p=0.81 -> R_base 0.1 < 0.81 (answer)
    assert A.expected_refusal_rate([0.04, 0.81, 0.04, 0.81], 0.5, 0.1) == 0.5
    assert A.expected_refusal_rate([], 0.5, 0.1) == 0.0
    # γ=1: abstain iff 1 − max(p, .1) > p, i.e. p < 0.5
    assert [A.prefers_abstain(p, 1.0, 0.1) for p in (0.49, 0.5, 0.51)] == [True, False, False]
    soft = A.expected_abstain(0.04, 0.5, 0.1, "soft", 0.05)
    assert soft == pytest.approx(1 / (1 + math.exp(-(1 - math.sqrt(0.1) - 0.04) / 0.05)))
    assert A.expected_abstain(0.5, 1.0, 0.1, "soft", 0.05) == pytest.approx(0.5)  # on the line: 1/2
    with pytest.raises(ValueError, match="expected_rate"):
        A.expected_abstain(0.5, 1.0, 0.1, "fancy")


def test_excess_and_ema():
    assert A.excess(0.75, 0.5) == 0.25
    assert A.ema(0.0, 0.25, 0.9) == pytest.approx(0.025)
    assert A.ema(0.025, 0.25, 0.9) == pytest.approx(0.0475)
    with pytest.raises(ValueError, match="beta"):
        A.ema(0.0, 1.0, 1.0)


def test_stepwise_penalty_table():
    cases = {0.0: 0.0, 0.03: 0.0, 0.05: 0.0, 0.051: 0.2, 0.15: 0.2, 0.2: 0.5, 0.3: 0.5, 0.31: 1.0, 0.9: 1.0}
    for e, pen in cases.items():
        assert A.stepwise_penalty(e, STEPS, 1.0) == pen
        assert A.stepwise_penalty(-e, STEPS, 1.0) == -pen


@given(e=st.floats(-1, 1, allow_nan=False), f=st.floats(-1, 1, allow_nan=False))
def test_penalty_odd_monotone_dead_zone(e, f):
    assert A.stepwise_penalty(-e, STEPS, 1.0) == -A.stepwise_penalty(e, STEPS, 1.0)
    if e <= f:
        assert A.stepwise_penalty(e, STEPS, 1.0) <= A.stepwise_penalty(f, STEPS, 1.0)
    if abs(e) <= 0.05:
        assert A.stepwise_penalty(e, STEPS, 1.0) == 0.0


def test_dither_offset_is_a_deterministic_uniform_draw_per_group_and_step():
    keys = [f"q{k}" for k in range(4000)]
    us = [A.dither_offset(k, 7, 0.1) for k in keys]
    assert us == [A.dither_offset(k, 7, 0.1) for k in keys]  # every process, resume and the simulator agree
    assert all(-0.1 <= u < 0.1 for u in us)
    # uniform on [-0.1, 0.1): mean 0, a quarter in each quarter of the range
    assert sum(us) / len(us) == pytest.approx(0.0, abs=0.005)
    for lo in (-0.1, -0.05, 0.0, 0.05):
        assert sum(lo <= u < lo + 0.05 for u in us) / len(us) == pytest.approx(0.25, abs=0.03)
    # a fresh draw each step: no query keeps its offset for the whole run
    assert sum(A.dither_offset(k, 8, 0.1) == u for k, u in zip(keys, us, strict=True)) == 0
    assert A.dither_offset("q1", 7, 0.0) == 0.0
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="penalty_dither"):
            A.dither_offset("q1", 7, bad)


@given(e=st.floats(-1, 1, allow_nan=False), width=st.floats(0, 0.5, allow_nan=False), step=st.integers(0, 10**6))
def test_group_penalty_is_always_one_of_the_steps(e, width, step):
    levels = {0.0} | {s * p for _, p in STEPS for s in (1, -1)} | {1.0, -1.0}
    assert A.group_penalty(e, f"q{step % 97}", step, STEPS, 1.0, width) in levels
    assert A.group_penalty(e, "q", step, STEPS, 1.0, 0.0) == A.stepwise_penalty(e, STEPS, 1.0)


def test_dithered_batch_penalty_is_continuous_in_e_bar_where_one_step_jumps():
    """The reason for the dither: the mean penalty over a batch's groups rises through the dead zone's edge in
    small steps (about 0.2 × Δ / 2δ), where the single batch-wide step jumps from 0 to 0.2 at once."""
    groups = [f"q{k}" for k in range(2000)]
    grid = [0.005 * k for k in range(29)]  # Ē from 0 to 0.14: the single step's only edge is 0.05

    def batch_mean(e_bar: float, width: float) -> float:
        return sum(A.group_penalty(e_bar, g, 3, STEPS, 1.0, width) for g in groups) / len(groups)

    plain = [batch_mean(e, 0.0) for e in grid]
    dithered = [batch_mean(e, 0.1) for e in grid]
    assert max(b - a for a, b in zip(plain, plain[1:], strict=False)) == pytest.approx(0.2)
    assert all(b >= a - 0.01 for a, b in zip(dithered, dithered[1:], strict=False))  # monotone up to sampling
    assert max(abs(b - a) for a, b in zip(dithered, dithered[1:], strict=False)) < 0.03
    # centred on the same edge: half the groups penalised where Ē sits on it
    assert batch_mean(0.05, 0.1) == pytest.approx(0.1, abs=0.01) and dithered[-1] > 0.2 > dithered[0]


def test_refusal_reward_clipped_and_direction():
    assert A.refusal_reward(0.6838, 0.0) == pytest.approx(0.6838)
    assert A.refusal_reward(0.1, 0.5) == pytest.approx(-0.4)   # over-refusal lowers it below 0
    assert A.refusal_reward(0.9, -1.0) == 1.0                  # under-refusal raises it, clipped at 1
    assert A.refusal_reward(0.0, 1.0) == -1.0
    assert A.refusal_reward(0.5, 0.0, (0.0, 0.3)) == 0.3


def test_outcome_and_total_reward():
    cfg = RewardConfig()
    r = {o: A.outcome_reward(o, 0.42, cfg.r_correct, cfg.r_wrong, cfg.r_invalid) for o in Outcome}
    assert r[Outcome.INVALID] < r[Outcome.WRONG] <= r[Outcome.CORRECT]
    assert r[Outcome.ABSTAIN] == 0.42
    assert A.outcome_reward("correct", 0.0) == 1.0
    # citation only for answered, valid trajectories
    assert A.total_reward(Outcome.CORRECT, 1.0, 0.5, 0.1) == pytest.approx(1.05)
    assert A.total_reward(Outcome.WRONG, 0.0, -1.0, 0.1) == pytest.approx(-0.1)
    assert A.total_reward(Outcome.ABSTAIN, 0.3, 1.0, 0.1) == 0.3
    assert A.total_reward(Outcome.INVALID, -1.0, 1.0, 0.1) == -1.0
    assert A.total_reward(Outcome.CORRECT, 1.0, None, 0.1) == 1.0
    with pytest.raises(ValueError):
        A.outcome_reward("maybe", 0.0)


def test_strategies():
    cfg = RewardConfig(static_value=0.05, bapo_value=0.5, r_wrong=0.0, refusal_gate="off")
    assert abstain_reward("awarl", cfg, 0.37, True) == 0.37
    gated = cfg.model_copy(update={"refusal_gate": "any_correct"})   # round 5's gate: r_wrong where a rollout was right
    assert abstain_reward("awarl", gated, 0.37, True) == 0.0 and abstain_reward("awarl", gated, 0.37, False) == 0.37
    assert abstain_reward("none", cfg, 0.37, False) == cfg.r_wrong
    assert abstain_reward("static", cfg, 0.37, True) == 0.05
    assert abstain_reward("bapo", cfg, 0.37, False) == 0.5
    assert abstain_reward("bapo", cfg, 0.37, True) == 0.0
    with pytest.raises(ValueError, match="strategy"):
        abstain_reward("other", cfg, 0.0, False)


def _passages():
    return [PassageRef(number=1, id="d1", title="A", text="x"), PassageRef(number=2, id="d2", title="B", text="y"),
            PassageRef(number=3, id="d3", title="C", text="z")]


def test_citation_reward_coverage_minus_redundancy():
    ps = _passages()
    verdict = CriticOutput(verified_claims=[
        ClaimVerification(claim="c1", status="grounded", source_id="d1", confidence=1.0),
        ClaimVerification(claim="c2", status="inferred", source_id="2", confidence=0.8),   # by number
        ClaimVerification(claim="c3", status="grounded", source_id="d3", confidence=0.9),  # not cited
        ClaimVerification(claim="c4", status="unsupported", confidence=0.9),
    ], overall_groundedness=0.5, flags=[])
    # cited 1, 2, 7 (7 was never retrieved): coverage = (1 + 0.5) / 4; redundancy = 1/3 (only [7] supports nothing)
    s = citation_reward(verdict, [1, 2, 7], ps, inferred_weight=0.5)
    assert s.coverage == pytest.approx(1.5 / 4)
    assert s.redundancy == pytest.approx(1 / 3)
    assert s.reward == pytest.approx(1.5 / 4 - 1 / 3)
    # inferred_weight is honoured
    assert citation_reward(verdict, [1, 2], ps, inferred_weight=1.0).coverage == pytest.approx(0.5)
    # no claims, no citations -> 0
    empty = CriticOutput(verified_claims=[], overall_groundedness=0.0, flags=[])
    assert citation_reward(empty, [], ps).reward == 0.0
    # citing everything while grounding nothing is maximally bad
    none = CriticOutput(verified_claims=[ClaimVerification(claim="c", status="unsupported", confidence=1)],
                        overall_groundedness=0.0, flags=[])
    assert citation_reward(none, [1, 2, 3], ps).reward == -1.0


def test_build_critic_input_resolves_cited_numbers():
    item = build_critic_input("q?", "a", [3, 3, 9], _passages())
    assert [p.id for p in item.cited] == ["d3"]
    assert len(item.passages) == 3


def test_uncited_answer_earns_no_coverage_from_sourceless_inferred_claims():
    """An inferred claim without a named source used to earn inferred_weight even when the answer cited
    nothing, so dropping every citation paid +0.5 per such claim. Coverage is support by CITED passages."""
    ps = _passages()
    verdict = CriticOutput(verified_claims=[
        ClaimVerification(claim="c1", status="inferred", source_id=None, confidence=0.7),
        ClaimVerification(claim="c2", status="grounded", source_id="d1", confidence=0.9),
    ], overall_groundedness=0.5, flags=[])
    for citations in ([], None, [9]):  # nothing cited, or only a number that was never retrieved
        s = citation_reward(verdict, citations, ps, inferred_weight=0.5)
        assert s.coverage == 0.0, citations
    assert citation_reward(verdict, [9], ps).reward == -1.0  # the bogus citation is also redundant
    # citing a retrieved passage restores the sourceless inferred credit (and the grounded one when it is d1)
    assert citation_reward(verdict, [2], ps, inferred_weight=0.5).coverage == pytest.approx(0.5 / 2)
    assert citation_reward(verdict, [1], ps, inferred_weight=0.5).coverage == pytest.approx(1.5 / 2)


@pytest.mark.parametrize("override,msg", [
    ("reward.r_clip=[1.0, -1.0]", "reward.r_clip"),
    ("reward.penalty_steps=[[0.05, 0.0], [0.15, -0.2]]", "reward.penalty_steps"),
])
def test_reward_config_rejects_inverted_clip_and_negative_penalty(override, msg):
    """Both used to pass validation: an inverted r_clip only failed at the first reward call (after the
    model had loaded), and a negative penalty silently reversed the correction."""
    from awarl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=msg):
        load_config(None, [override])


# ------------------------------------------------------------------- outcome rewards and reconstruction options
def test_expected_rate_follows_the_configured_outcome_rewards():
    # γ = 1, p_min = 0.1: R_base = 1 − p for p >= 0.1. Answering is worth r_wrong + p·(r_correct − r_wrong).
    assert A.answer_value(0.3) == pytest.approx(0.3)
    assert A.answer_value(0.3, r_correct=1.0, r_wrong=-0.5) == pytest.approx(-0.05)
    assert A.answer_value(0.3, r_correct=2.0, r_wrong=0.0) == pytest.approx(0.6)
    # default rewards: abstain iff 1 − p > p, p < 0.5; r_wrong = −0.5: iff 1 − p > −0.5 + 1.5p, p < 0.6;
    # r_correct = 2: iff 1 − p > 2p, p < 1/3
    batch = [0.2, 0.3, 0.4, 0.55]
    assert A.expected_refusal_rate(batch, 1.0, 0.1) == 0.75
    assert A.expected_refusal_rate(batch, 1.0, 0.1, r_correct=1.0, r_wrong=-0.5) == 1.0
    assert A.expected_refusal_rate(batch, 1.0, 0.1, r_correct=2.0, r_wrong=0.0) == 0.5
    assert [A.prefers_abstain(p, 1.0, 0.1, 1.0, -0.5) for p in (0.59, 0.61)] == [True, False]
    # soft: σ((R_base − V)/τ) with the same V
    got = A.expected_abstain(0.3, 1.0, 0.1, "soft", 0.05, r_correct=1.0, r_wrong=-0.5)
    assert got == pytest.approx(1 / (1 + math.exp(-(0.7 - (-0.05)) / 0.05)))
    # r_base_mean is a failure share, not a comparison with the answer's value: the rewards do not enter it
    assert A.expected_abstain(0.3, 1.0, 0.1, "r_base_mean", r_correct=2.0, r_wrong=-0.5) == pytest.approx(0.7)


def test_r_base_mean_moves_with_gamma_where_the_threshold_cannot():
    # K = 8: p takes multiples of 1/8. The abstain line falls at p ≈ 0.38 (γ = 0.5), 0.43 (0.75), 0.5 (1): all
    # between 3/8 and 4/8, so the threshold ρ̂ is identical for the three; the mean of R_base is not.
    ps = [k / 8 for k in range(9)]
    thr = [A.expected_refusal_rate(ps, g, 0.1, "threshold") for g in (0.5, 0.75, 1.0)]
    assert thr[0] == thr[1] == thr[2] == pytest.approx(4 / 9)  # p = 0, 1/8, 2/8, 3/8
    mean = [A.expected_refusal_rate(ps, g, 0.1, "r_base_mean") for g in (0.5, 0.75, 1.0)]
    assert mean[0] < mean[1] < mean[2]
    assert mean[2] == pytest.approx(sum(1 - max(p, 0.1) for p in ps) / 9)
    # hand-computed at γ = 0.5: p = 0.04 -> 1 − sqrt(0.1); p = 0.81 -> 0.1
    assert A.expected_refusal_rate([0.04, 0.81], 0.5, 0.1, "r_base_mean") == pytest.approx((1 - math.sqrt(0.1) + 0.1) / 2)


@given(ps=st.lists(probs, min_size=1, max_size=12), g1=gammas, g2=gammas,
       mode=st.sampled_from(A.EXPECTED_RATES), rw=st.floats(-1.0, 0.0), rc=st.floats(0.5, 2.0),
       n=st.integers(0, 64))
def test_expected_rate_never_falls_as_gamma_rises(ps, g1, g2, mode, rw, rc, n):
    lo, hi = sorted((g1, g2))
    a = A.expected_refusal_rate(ps, lo, 0.1, mode, 0.05, rc, rw, ns=[n] * len(ps))
    b = A.expected_refusal_rate(ps, hi, 0.1, mode, 0.05, rc, rw, ns=[n] * len(ps))
    assert a <= b + 1e-12 and 0.0 <= a <= 1.0


def test_refusal_cap_hand_computed():
    assert A.refusal_cap(1.0, None) is None
    assert A.refusal_cap(1.0, 0.1) == pytest.approx(0.9)
    # sustained under-refusal, P = −1: without the cap any query pays the clip's top, 1 = a correct answer
    assert A.refusal_reward(0.1, -1.0) == 1.0
    assert A.refusal_reward(0.1, -1.0, (-1.0, 1.0), A.refusal_cap(1.0, 0.1)) == pytest.approx(0.9)
    assert A.refusal_reward(0.3, 0.0, (-1.0, 1.0), 0.9) == pytest.approx(0.3)  # below the cap: unchanged
    with pytest.raises(ValueError, match="r_ref_margin"):
        A.refusal_cap(1.0, 0.0)


@given(r_base=probs, penalty=st.floats(-1.0, 1.0), r_correct=st.floats(0.2, 2.0), margin=st.floats(0.001, 0.2))
def test_capped_refusal_reward_never_reaches_a_correct_answer(r_base, penalty, r_correct, margin):
    r = A.refusal_reward(r_base, penalty, (-1.0, 2.0), A.refusal_cap(r_correct, margin))
    assert r < r_correct


def test_ema_start_zero_ramps_in_and_bias_corrected_does_not():
    # a persistent excess of 0.35 with β = 0.9: Ē_t = 0.35·(1 − 0.9^t) passes 0.30 (full penalty) at t = 19
    m, zero, corrected = 0.0, [], []
    for t in range(1, 21):
        m = A.ema(m, 0.35, 0.9)
        zero.append(A.smoothed_excess(m, t, 0.9, "zero"))
        corrected.append(A.smoothed_excess(m, t, 0.9, "bias_corrected"))
    assert zero[17] == pytest.approx(0.35 * (1 - 0.9 ** 18)) and zero[17] <= 0.30 < zero[18]
    assert [A.stepwise_penalty(e, STEPS, 1.0) for e in (zero[0], zero[18])] == [0.0, 1.0]
    assert corrected == pytest.approx([0.35] * 20)
    assert A.stepwise_penalty(corrected[0], STEPS, 1.0) == 1.0
    # a changing excess: m_1 = 0.02 -> Ē_1 = 0.02/0.1 = 0.2; m_2 = 0.018 -> Ē_2 = 0.018/0.19
    m1 = A.ema(0.0, 0.2, 0.9)
    m2 = A.ema(m1, 0.0, 0.9)
    assert A.smoothed_excess(m1, 1, 0.9, "bias_corrected") == pytest.approx(0.2)
    assert A.smoothed_excess(m2, 2, 0.9, "bias_corrected") == pytest.approx(0.018 / 0.19)
    assert A.smoothed_excess(0.0, 0, 0.9, "bias_corrected") == 0.0
    with pytest.raises(ValueError, match="ema_start"):
        A.smoothed_excess(0.1, 1, 0.9, "warm")


def test_p_definitions_from_counts():
    # K = 8: 2 correct, 1 wrong, 4 abstain, 1 invalid -> 2/8 of all samples, 2/4 of the answered ones
    assert A.success_estimate(2, 4, 8, "share_of_k") == 0.25
    assert A.success_estimate(2, 4, 8, "among_answered") == 0.5
    assert A.success_estimate(0, 0, 8, "among_answered") is None
    assert A.estimate_p(0, 0, 8, "among_answered") == 0.0  # never answered: keeps its share of K
    with pytest.raises(ValueError, match="counts"):
        A.success_estimate(3, 2, 8)
    with pytest.raises(ValueError, match="p_definition"):
        A.success_estimate(1, 2, 8, "mean")
    # online update from a group with 1 correct of 2 answered (the others abstained), β_p = 0.5: abstentions
    # are the policy's own choices during RL, so they never count as failures here
    assert A.online_p(0.3, 1, 2, 0.5) == pytest.approx(0.5 * 0.3 + 0.5 * 0.5)
    assert A.online_p(0.3, 0, 0, 0.5) == 0.3  # the group abstained: nothing learned
    assert A.online_p(0.9, 3, 3, 0.0) == 1.0


@given(c=st.integers(0, 8), extra=st.integers(0, 8), k_extra=st.integers(0, 8))
def test_among_answered_never_below_share_of_k(c, extra, k_extra):
    answered, k = c + extra, c + extra + k_extra
    if k == 0:
        return
    assert A.estimate_p(c, answered, k, "among_answered") >= A.estimate_p(c, answered, k, "share_of_k")


@pytest.mark.parametrize("override,msg", [({"r_ref_margin": 0.0}, "r_ref_margin"),
                                          ({"r_ref_margin": 2.5}, "below r_clip"),
                                          ({"expected_rate": "median"}, "expected_rate"),
                                          ({"ema_start": "one"}, "ema_start"),
                                          ({"p_definition": "all"}, "p_definition")])
def test_reward_config_rejects_bad_reconstruction_options(override, msg):
    with pytest.raises(ValueError, match=msg):
        RewardConfig(**override)


# ------------------------------------------------------------------- the penalty's target: expected_rate=posterior
def test_beta_cdf_matches_scipy_and_the_binomial_identity():
    import random

    betainc = pytest.importorskip("scipy.special").betainc
    rng = random.Random(0)
    for _ in range(3000):
        a, b, x = rng.uniform(0.01, 80), rng.uniform(0.01, 80), rng.random()
        assert A.beta_cdf(x, a, b) == pytest.approx(float(betainc(a, b, x)), abs=1e-11)
    for a, b, x in [(1e-3, 1e-3, 0.5), (500.0, 3.0, 0.99), (0.5, 0.5, 1e-9), (0.5, 8.5, 0.4375)]:
        assert A.beta_cdf(x, a, b) == pytest.approx(float(betainc(a, b, x)), abs=1e-11)
    # integer parameters: I_x(a, b) = P(Binomial(a + b − 1, x) >= a), exactly
    for a, b, x in [(1, 1, 0.3), (3, 5, 0.2), (8, 2, 0.9), (4, 4, 0.5)]:
        m = a + b - 1
        tail = sum(math.comb(m, j) * x ** j * (1 - x) ** (m - j) for j in range(a, m + 1))
        assert A.beta_cdf(x, a, b) == pytest.approx(tail, abs=1e-13)
    assert A.beta_cdf(0.0, 2, 3) == 0.0 and A.beta_cdf(1.0, 2, 3) == 1.0
    with pytest.raises(ValueError, match="a, b > 0"):
        A.beta_cdf(0.5, 0.0, 1.0)


def test_posterior_target_has_no_ceiling_where_r_base_mean_has_one():
    # every p_i = 0 (the demo's model answers nothing): the threshold says refuse all; the mean of R_base stops
    # at 1 − p_min^γ = 0.438 at γ = 0.25; the posterior reading reaches ~1 from K = 8 samples
    zeros, ks = [0.0] * 32, [8] * 32
    assert A.expected_refusal_rate(zeros, 0.25, 0.1, "r_base_mean") == pytest.approx(1 - 0.1 ** 0.25)
    assert A.expected_refusal_rate(zeros, 0.25, 0.1, "threshold") == 1.0
    assert A.expected_refusal_rate(zeros, 0.25, 0.1, "posterior", ns=ks) > 0.99
    # every p_i = 1: nothing to refuse
    assert A.expected_refusal_rate([1.0] * 32, 0.25, 0.1, "posterior", ns=ks) < 0.001
    # hand-computed: γ = 0.25, p = 0 -> s* = 1 − 0.1^0.25 = 0.4377; s ~ Beta(0.5, 8.5)
    s_star = 1 - 0.1 ** 0.25
    assert A.abstain_line(0.0, 0.25, 0.1) == pytest.approx(s_star)
    assert A.posterior_abstain_probability(0.0, 8, 0.25, 0.1) == pytest.approx(A.beta_cdf(s_star, 0.5, 8.5))
    # no samples: the prior alone; p still sets what refusing pays
    assert A.posterior_abstain_probability(0.3, 0, 1.0, 0.1) == pytest.approx(2 / math.pi * math.asin(math.sqrt(0.7)))
    with pytest.raises(ValueError, match="posterior needs the number of samples"):
        A.expected_abstain(0.2, 0.5, 0.1, "posterior")
    with pytest.raises(ValueError, match="one sample count per p_i"):
        A.expected_refusal_rate([0.1, 0.2], 0.5, 0.1, "posterior", ns=[8])


def test_posterior_target_moves_with_gamma_where_the_threshold_is_flat():
    # K = 8: the threshold puts γ = 0.5, 0.75, 1 between 3/8 and 4/8 (same ρ̂); the posterior reading moves with
    # every γ, and with many samples it tends to the threshold (the estimate's noise is what it adds)
    ps, ks = [k / 8 for k in range(9)], [8] * 9
    post = [A.expected_refusal_rate(ps, g, 0.1, "posterior", ns=ks) for g in (0.5, 0.75, 1.0)]
    assert post[0] < post[1] < post[2]
    far = [0.05, 0.2, 0.6, 0.9]  # away from the line at γ = 0.5 (p ≈ 0.38)
    thr = A.expected_refusal_rate(far, 0.5, 0.1, "threshold")
    assert A.expected_refusal_rate(far, 0.5, 0.1, "posterior", ns=[4000] * 4) == pytest.approx(thr, abs=1e-6)
    assert A.expected_refusal_rate(far, 0.5, 0.1, "posterior", ns=[8] * 4) != pytest.approx(thr, abs=1e-3)


@given(p=probs, n=st.floats(0, 200), g=gammas, rw=st.floats(-1.0, 0.0), rc=st.floats(0.5, 2.0))
def test_posterior_is_a_probability_that_falls_as_evidence_of_success_grows(p, n, g, rw, rc):
    val = A.posterior_abstain_probability(p, n, g, 0.1, 0.5, rc, rw)
    assert 0.0 <= val <= 1.0
    if p <= 0.95:  # more observed success at the same count: less reason to refuse
        assert A.posterior_abstain_probability(min(1.0, p + 0.05), n, g, 0.1, 0.5, rc, rw) <= val + 1e-9


# ------------------------------------------------------------------- the refusal floor (guard against collapse)
def test_refusal_floor_hand_computed_and_validated():
    assert A.refusal_floor(0.0, None) is None
    assert A.refusal_floor(0.0, 0.05) == pytest.approx(0.05)
    assert A.refusal_floor(-0.5, 0.1) == pytest.approx(-0.4)
    # sustained over-refusal, P = +1: R_base 0.44 − 1 = −0.56, below a wrong answer; the floor keeps it above
    assert A.refusal_reward(0.44, 1.0) == pytest.approx(-0.56)
    assert A.refusal_reward(0.44, 1.0, (-1.0, 1.0), 0.9, A.refusal_floor(0.0, 0.05)) == pytest.approx(0.05)
    assert A.refusal_reward(0.44, 0.2, (-1.0, 1.0), 0.9, 0.05) == pytest.approx(0.24)  # above the floor: unchanged
    with pytest.raises(ValueError, match="r_ref_floor_margin"):
        A.refusal_floor(0.0, -0.1)
    with pytest.raises(ValueError, match="floor .* above the refusal cap"):
        A.refusal_reward(0.5, 0.0, (-1.0, 1.0), 0.1, 0.2)


@given(r_base=probs, penalty=st.floats(-1.0, 1.0), r_wrong=st.floats(-1.0, 0.0), floor=st.floats(0.0, 0.3),
       margin=st.floats(0.05, 0.5))
def test_guarded_refusal_reward_lies_between_a_wrong_and_a_correct_answer(r_base, penalty, r_wrong, floor, margin):
    lo, hi = A.refusal_floor(r_wrong, floor), A.refusal_cap(1.0, margin)
    if lo > hi:
        return
    r = A.refusal_reward(r_base, penalty, (-1.0, 1.0), hi, lo)
    assert r_wrong <= r < 1.0


@pytest.mark.parametrize(("opts", "msg"), [
    ({"r_ref_floor_margin": 1.5}, "above r_clip's high end"),
    ({"r_ref_floor_margin": 0.95, "r_ref_margin": 0.1}, "lies above the refusal cap"),
    ({"r_ref_floor_margin": -0.1}, "greater than or equal to 0"),
    ({"expected_rate": "bayes"}, "expected_rate"),
    ({"posterior_prior": 0.0}, "posterior_prior"),
])
def test_reward_config_refuses_guards_that_cross(opts, msg):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=msg):
        RewardConfig(**opts)
