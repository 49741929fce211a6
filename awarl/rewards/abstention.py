"""The AWA-RL refusal reward (SPEC section 4) as pure functions, one per formula.

Nothing here keeps state or touches torch: the stateful training object (`trl_reward.py`) and the
simulator (`simulate.py`) both compose these, so a formula is defined exactly once. docs/method.md maps
each numbered SPEC step to the function below that computes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from awarl.metrics import Outcome


def check_prob(name: str, p: float) -> float:
    """`p` as a float, or a ValueError naming `name` when it is not a probability in [0, 1]."""
    p = float(p)
    if not (0.0 <= p <= 1.0) or math.isnan(p):
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return p


def clip_p(p: float, p_min: float) -> float:
    """Step 2: p̃ = max(p, p_min). Keeps a never-solved query from paying full reward for refusing at once."""
    return max(check_prob("p_i", p), check_prob("p_min", p_min))


def courage(p_clipped: float, gamma: float) -> float:
    """Step 3: p* = p̃^γ. γ < 1 inflates the model's confidence (p* >= p̃), so refusing pays less."""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")
    return check_prob("p_clipped", p_clipped) ** gamma


def base_refusal_reward(p: float, gamma: float, p_min: float) -> float:
    """Step 3: R_base(q) = 1 − (max(p, p_min))^γ."""
    return 1.0 - courage(clip_p(p, p_min), gamma)


def prefers_abstain(p: float, gamma: float, p_min: float) -> bool:
    """Step 4: a reward-maximising policy abstains iff R_base > p (answering earns p in expectation).

    The right-hand side is the raw p, not the clipped one: the clip shapes the refusal reward only, the
    expected value of answering is still the true success rate.
    """
    return base_refusal_reward(p, gamma, p_min) > p


def soft_abstain_probability(p: float, gamma: float, p_min: float, tau: float) -> float:
    """Step 4, `soft`: σ((R_base − p) / τ). Smooth in p, so ρ̂ does not jump when one p_i crosses the line."""
    if tau <= 0:
        raise ValueError(f"soft_tau must be > 0, got {tau!r}")
    gap = (base_refusal_reward(p, gamma, p_min) - p) / tau
    # Written in the overflow-safe form for both signs of the gap.
    if gap >= 0:
        return 1.0 / (1.0 + math.exp(-gap))
    z = math.exp(gap)
    return z / (1.0 + z)


def expected_abstain(p: float, gamma: float, p_min: float, mode: str = "threshold", tau: float = 0.05) -> float:
    """One completion's contribution to ρ̂: the indicator (threshold) or its sigmoid (soft)."""
    if mode == "threshold":
        return 1.0 if prefers_abstain(p, gamma, p_min) else 0.0
    if mode == "soft":
        return soft_abstain_probability(p, gamma, p_min, tau)
    raise ValueError(f"expected_rate must be 'threshold' or 'soft', got {mode!r}")


def expected_refusal_rate(ps: Iterable[float], gamma: float, p_min: float, mode: str = "threshold",
                          tau: float = 0.05) -> float:
    """Step 4: ρ̂_t = mean over the batch's completions of `expected_abstain` (0 for an empty batch)."""
    vals = [expected_abstain(p, gamma, p_min, mode, tau) for p in ps]
    return sum(vals) / len(vals) if vals else 0.0


def refusal_rate(outcomes: Iterable[Outcome | str]) -> float:
    """ρ_t: share of completions whose outcome is `abstain` (0 for an empty batch)."""
    outs = [Outcome(o) for o in outcomes]
    return sum(o is Outcome.ABSTAIN for o in outs) / len(outs) if outs else 0.0


def excess(rho: float, rho_hat: float) -> float:
    """Step 5: E_t = ρ_t − ρ̂_t (positive = over-refusal)."""
    return float(rho) - float(rho_hat)


def ema(prev: float, value: float, beta: float) -> float:
    """Step 6: Ē_t = β·Ē_{t−1} + (1−β)·E_t."""
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    return beta * float(prev) + (1.0 - beta) * float(value)


def stepwise_penalty(e_bar: float, steps: Sequence[tuple[float, float]], penalty_max: float) -> float:
    """Step 7: P(Ē) = sign(Ē)·m(|Ē|), m the step function of the ordered (threshold, penalty) pairs.

    |Ē| <= t_k gives the penalty of the first such pair; beyond the last threshold, `penalty_max`. The
    magnitude depends on |Ē| only, so P is odd; with non-decreasing penalties it is monotone.
    """
    mag = abs(float(e_bar))
    pen = penalty_max
    for threshold, value in steps:
        if mag <= threshold:
            pen = value
            break
    if e_bar > 0:
        return float(pen)
    if e_bar < 0:
        return -float(pen)
    return 0.0  # exactly zero excess: no sign to follow, whatever the first step says


def clip(x: float, lo: float, hi: float) -> float:
    if lo > hi:
        raise ValueError(f"clip range is empty: ({lo}, {hi})")
    return min(max(float(x), lo), hi)


def refusal_reward(r_base: float, penalty: float, r_clip: tuple[float, float] = (-1.0, 1.0)) -> float:
    """Step 8: r_ref = clip(R_base − P(Ē), r_clip). Over-refusal (P > 0) lowers it, under-refusal raises it."""
    return clip(r_base - penalty, r_clip[0], r_clip[1])


def outcome_reward(outcome: Outcome | str, r_ref: float, r_correct: float = 1.0, r_wrong: float = 0.0,
                   r_invalid: float = -1.0) -> float:
    """Step 9: correct → r_correct, wrong → r_wrong, invalid → r_invalid, abstain → r_ref."""
    o = Outcome(outcome)
    if o is Outcome.CORRECT:
        return float(r_correct)
    if o is Outcome.WRONG:
        return float(r_wrong)
    if o is Outcome.INVALID:
        return float(r_invalid)
    return float(r_ref)


def total_reward(outcome: Outcome | str, r_outcome: float, r_cite: float | None, lambda_cite: float) -> float:
    """Step 11: r = outcome + λ_cite·r_cite. Citations count only for answered, valid trajectories (correct or
    wrong); `r_cite=None` (no judge, or a judge failure) adds nothing."""
    o = Outcome(outcome)
    if r_cite is None or o not in (Outcome.CORRECT, Outcome.WRONG):
        return float(r_outcome)
    return float(r_outcome) + float(lambda_cite) * float(r_cite)
