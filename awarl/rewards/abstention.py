"""The AWA-RL refusal reward (SPEC section 4) as pure functions, one per formula.

Nothing here keeps state or touches torch: the stateful training object (`trl_reward.py`) and the
simulator (`simulate.py`) both compose these, so a formula is defined exactly once. docs/method.md maps
each numbered SPEC step to the function below that computes it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

# Step 1 (p_i from the counts of K samples) lives below data/estimates.py, which reads the estimate file with it;
# it is part of this formula chain, so its names are here too.
from awarl import choices
from awarl.config import RewardConfig
from awarl.estimation import P_DEFINITIONS as P_DEFINITIONS
from awarl.estimation import estimate_p as estimate_p
from awarl.estimation import success_estimate as success_estimate

# reward.refusal_warmup's length in steps: a share of the run's learning under its learning-rate schedule
from awarl.lr_schedule import warmup_steps as warmup_steps
from awarl.metrics import Outcome

# The reconstruction options of docs/method.md "Reconstruction choices"; the first of each is the SPEC reading
# (and estimation.P_DEFINITIONS). The expected-rate readings are registered (awarl.choices.EXPECTED_RATES -> the
# `*_reading` functions below).
EXPECTED_RATES = choices.EXPECTED_RATES.names
EMA_STARTS = ("zero", "bias_corrected")


def check_prob(name: str, p: float) -> float:
    """`p` as a float, or a ValueError naming `name` when it is not a probability in [0, 1]."""
    try:
        if isinstance(p, (bool, str)):  # float() would read True as 1.0 and "0.5" as a number
            raise TypeError
        p = float(p)
    except (TypeError, ValueError):  # a list or None raised a bare TypeError out of the reward
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r:.40}") from None
    if not (0.0 <= p <= 1.0) or math.isnan(p):
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return p


def online_p(prev: float, correct: float, answered: float, beta: float) -> float:
    """Step 4, `p_online: ema`: p_q ← β_p·p_q + (1 − β_p)·(correct / answered in the query's group), clipped to
    [0, 1]; a group that answered nothing leaves p_q as it was.

    Always among the answered, whatever `p_definition` says of the pre-RL estimate: during RL the abstentions
    are the policy's own choices, which the refusal reward shapes. Counting them as failures closes a loop
    (more refusal -> lower p -> larger refusal reward -> more refusal): in the simulator it lifted the
    refusal rate of every γ by 0.02-0.07 over no online estimate (docs/method.md "Reconstruction notes").
    """
    if answered <= 0:
        return float(prev)
    obs = estimate_p(correct, answered, answered, "among_answered")
    return min(1.0, max(0.0, ema(prev, obs, beta)))


def group_estimate(p: float, n: float, correct: float, answered: float, prior_weight: float) -> tuple[float, float]:
    """Step 4, `p_online: group`: (p, n) of a query once the current GRPO group's own answered outcomes join its
    pre-RL estimate: c_g correct of a_g answered this step, beside the pre-RL c = p·n of n samples weighted by
    λ = `prior_weight`, i.e. p = (λ·c + c_g) / (λ·n + a_g) on n = λ·n + a_g samples. Every reading of ρ̂ and R_base
    then reads this p (the posterior one as Beta(λ·c + c_g + a, λ·(n − c) + (a_g − c_g) + a)).

    Why: p_i is estimated once, before RL, and goes stale as the policy learns (docs/method.md "A p that follows
    the policy"); the group's outcomes are the policy's own current success on this very query, observed before
    its rewards are paid, so they work when every query is seen only once (the GPU recipes), where a per-query
    memory (`ema`) never gets a second look. Abstentions are not counted (the policy's own choices, as in
    `online_p`); an invalid answer counts as answered and not correct, as in p_i. A group that answered nothing,
    and λ = 0 with no pre-RL samples, leave (p, λ·n)."""
    p = check_prob("p_i", p)
    if not 0.0 <= prior_weight <= 1.0:
        raise ValueError(f"p_prior_weight must be in [0, 1], got {prior_weight!r}")
    if n < 0 or correct < 0 or answered < correct or math.isnan(n + correct + answered):
        raise ValueError(f"group_estimate needs n >= 0 and 0 <= correct <= answered, got n={n!r}, "
                         f"correct={correct!r}, answered={answered!r}")
    total = prior_weight * n + answered
    if total <= 0:
        return p, 0.0
    return min(1.0, max(0.0, (prior_weight * p * n + correct) / total)), float(total)


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


def answer_value(p: float, r_correct: float = 1.0, r_wrong: float = 0.0) -> float:
    """Step 4: the expected outcome reward of answering a query answered correctly with probability p,
    r_wrong + p·(r_correct − r_wrong).

    `invalid` does not enter: a format failure is a protocol fault the policy must unlearn by formatting,
    not a capability boundary to abstain at (pricing it in would raise ρ̂, and so reward refusing, exactly
    where the policy still breaks the protocol: the lazy-refusal escape the paper warns about). p_i from K
    samples already counts an invalid sample as not correct, i.e. at r_wrong, as the metrics do.
    """
    p = check_prob("p_i", p)
    return float(r_wrong) + p * (float(r_correct) - float(r_wrong))


def prefers_abstain(p: float, gamma: float, p_min: float, r_correct: float = 1.0, r_wrong: float = 0.0) -> bool:
    """Step 4: a reward-maximising policy abstains iff R_base > the expected value of answering.

    With r_correct = 1, r_wrong = 0 that is R_base > p (SPEC). The right-hand side uses the raw p, not the
    clipped one: the clip shapes the refusal reward only, answering still earns the true success rate.
    """
    return base_refusal_reward(p, gamma, p_min) > answer_value(p, r_correct, r_wrong)


def abstain_line(p: float, gamma: float, p_min: float, r_correct: float = 1.0, r_wrong: float = 0.0) -> float:
    """Step 4: the true success rate s* below which abstaining on a query with estimate p pays more than
    answering it: R_base(p) > r_wrong + s·(r_correct − r_wrong)  ⟺  s < s* = (R_base(p) − r_wrong) /
    (r_correct − r_wrong). With the SPEC's rewards s* = R_base(p); `prefers_abstain` is the test p < s*."""
    spread = float(r_correct) - float(r_wrong)
    if spread <= 0:
        raise ValueError(f"r_correct must exceed r_wrong, got r_correct={r_correct!r}, r_wrong={r_wrong!r}")
    return (base_refusal_reward(p, gamma, p_min) - float(r_wrong)) / spread


def ra_f1_of_counts(correct: float, answered: float, total: float) -> float:
    """RA-F1 of a batch from its counts: the harmonic mean of precision C/A and accuracy C/N, which is 2C/(N + A)
    (answered A counts invalid completions, as `awarl.metrics` does). 0 for an empty batch or no correct answer."""
    if not 0 <= correct <= answered <= total:
        raise ValueError(f"need 0 <= correct <= answered <= total, got {correct!r}, {answered!r}, {total!r}")
    return 2.0 * float(correct) / (float(total) + float(answered)) if correct else 0.0


def running_ra_f1(f_ema: float, f: float, step: int, beta: float) -> tuple[float, float]:
    """`reward.abstain_line: ra_f1`: after batch `step` (1-based) of RA-F1 `f`, the EMA m = β·f_ema + (1 − β)·f
    (m_0 = 0) and F̂ = m / (1 − β^step), the bias-corrected running RA-F1 the line is drawn from."""
    m = ema(f_ema, f, beta)
    return m, bias_corrected(m, step, beta)


def ra_f1_line(f_hat: float) -> float:
    """`reward.abstain_line: ra_f1`: the abstain line s* = F̂/2 that maximises RA-F1.

    RA-F1 = 2C/(N + A) is a ratio: answering one more query of true success s adds s to C and 1 to A, which
    raises the ratio iff s > C/(N + A) = F/2. So the RA-F1-optimal policy answers exactly the queries with
    s > F*/2, F* its own optimal RA-F1 (the F1 thresholding rule, Lipton et al. 2014), and paying an abstention
    r_wrong + (F̂/2)·(r_correct − r_wrong) with F̂ the policy's running RA-F1 is Dinkelbach's iteration for
    that ratio: each step's reward-maximiser has an RA-F1 at least F̂, so F̂ climbs to F* (tested)."""
    return check_prob("the running RA-F1 F̂", f_hat) / 2.0


def line_base_reward(line: float, r_correct: float = 1.0, r_wrong: float = 0.0) -> float:
    """R_base of a query under a fixed abstain line s*: r_wrong + s*·(r_correct − r_wrong), the reward that ties
    abstaining with answering at true success s* (`abstain_line` inverted)."""
    return float(r_wrong) + check_prob("the abstain line", line) * (float(r_correct) - float(r_wrong))


def base_reward(p: float, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 3 as a run computes it: R_base(p_i) from courage γ, or, given the step's `line`
    (`reward.abstain_line: ra_f1`), the same R_base for every query, `line_base_reward`."""
    if line is None:
        return base_refusal_reward(p, cfg.gamma, cfg.p_min)
    return line_base_reward(line, cfg.r_correct, cfg.r_wrong)


def line_of(p: float, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 4's abstain line s* of a query: `abstain_line` from courage γ, or the step's `line` itself."""
    if line is None:
        return abstain_line(p, cfg.gamma, cfg.p_min, cfg.r_correct, cfg.r_wrong)
    return check_prob("the abstain line", line)


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b): P(S <= x) for S ~ Beta(a, b), a, b > 0.

    Lentz's continued fraction (Numerical Recipes §6.4), on the side of x where it converges fast; pure Python,
    so the reward needs no SciPy. Accurate to ~1e-12 (tests compare it with scipy.special.betainc)."""
    if a <= 0 or b <= 0 or math.isnan(x):
        raise ValueError(f"beta_cdf needs a, b > 0 and a number x, got x={x!r}, a={a!r}, b={b!r}")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _beta_cf_tail(1.0 - x, b, a, log_front)
    return _beta_cf_tail(x, a, b, log_front)


def _beta_cf_tail(x: float, a: float, b: float, log_front: float) -> float:
    """x^a (1−x)^b / (a B(a, b)) times the continued fraction of I_x(a, b) (its fast side)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return min(1.0, max(0.0, math.exp(log_front) * h / a))


def posterior_abstain_probability(p: float, n: float, gamma: float, p_min: float, prior: float = 0.5,
                                  r_correct: float = 1.0, r_wrong: float = 0.0) -> float:
    """Step 4, `posterior`: the probability, given the n samples behind p, that abstaining on the query pays
    more than answering it: P(s < s* | p, n) with s ~ Beta(p·n + prior, (1 − p)·n + prior) (prior 0.5: the
    Jeffreys prior) and s* = `abstain_line`.

    The threshold reading with the estimate's own uncertainty: a query never solved in K samples (p = 0) still
    has s around 1/(2K), so at γ = 0.25 (s* = 0.44) it counts 0.9995 at K = 8 and ρ̂ of an all-zero batch is
    ~1, where r_base_mean stops at 1 − p_min^γ; a query always solved counts ~0. It is continuous in γ (s*
    is), so ρ̂ moves with γ even between two K-sample values of p, where the threshold does not move at all.
    n = 0 (no estimate) gives the prior's P(s < s*)."""
    return posterior_below(abstain_line(p, gamma, p_min, r_correct, r_wrong), p, n, prior)


def posterior_below(line: float, p: float, n: float, prior: float = 0.5) -> float:
    """P(s < line) for s ~ Beta(p·n + prior, (1 − p)·n + prior): what the n samples behind p say about a true
    success below the abstain line (`posterior_abstain_probability` at a given line)."""
    p = check_prob("p_i", p)
    if n < 0 or math.isnan(n):
        raise ValueError(f"the sample count behind p_i must be >= 0, got {n!r}")
    if prior <= 0:
        raise ValueError(f"posterior_prior must be > 0, got {prior!r}")
    return beta_cdf(line, p * n + prior, (1.0 - p) * n + prior)


def soft_abstain_probability(p: float, gamma: float, p_min: float, tau: float, r_correct: float = 1.0,
                             r_wrong: float = 0.0) -> float:
    """Step 4, `soft`: σ((R_base − V)/τ), V = `answer_value`. Smooth in p, so ρ̂ does not jump when one p_i
    crosses the line."""
    return soft_at(base_refusal_reward(p, gamma, p_min), p, tau, r_correct, r_wrong)


def soft_at(r_base: float, p: float, tau: float, r_correct: float = 1.0, r_wrong: float = 0.0) -> float:
    """σ((R_base − V(p))/τ) for a given R_base: `soft_abstain_probability` at any line (courage γ's or the step's)."""
    if tau <= 0:
        raise ValueError(f"soft_tau must be > 0, got {tau!r}")
    return _sigmoid((r_base - answer_value(p, r_correct, r_wrong)) / tau)


def _sigmoid(x: float) -> float:
    """σ(x), in the overflow-safe form for both signs."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


# Step 4's readings (`reward.expected_rate`, registered in awarl.choices.EXPECTED_RATES): one completion's
# contribution to ρ̂, all with one signature: p_i, the samples n behind it (None: unknown), the run's reward
# settings, from which each reads its own constants (a reading with a new one adds a RewardConfig field and
# changes no caller), and the step's abstain line when `reward.abstain_line: ra_f1` sets one for every query
# (None: each query's own line from courage γ).
@runtime_checkable
class Reading(Protocol):
    """What an expected-rate reading registers: a pure function (p, n, cfg: RewardConfig, line=None) -> float in
    [0, 1], one completion's share of ρ̂ (its docstring names the step it computes; docs/extending.md). `line` is
    passed only under `reward.abstain_line: ra_f1`."""

    def __call__(self, p: float, n: float | None, cfg: RewardConfig, line: float | None = None) -> float: ...


def threshold_reading(p: float, n: float | None, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 4, `threshold` (SPEC): 1 if abstaining pays more than the expected value of answering, else 0."""
    if line is None:
        return 1.0 if prefers_abstain(p, cfg.gamma, cfg.p_min, cfg.r_correct, cfg.r_wrong) else 0.0
    return 1.0 if check_prob("p_i", p) < line_of(p, cfg, line) else 0.0


def soft_reading(p: float, n: float | None, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 4, `soft`: the sigmoid of that gap with temperature τ = soft_tau (`soft_abstain_probability`)."""
    return soft_at(base_reward(p, cfg, line), p, cfg.soft_tau, cfg.r_correct, cfg.r_wrong)


def r_base_mean_reading(p: float, n: float | None, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 4, `r_base_mean`: R_base itself, so ρ̂ is the batch mean of R_base = 1 − p*: the failure share the
    courage-inflated confidence p* expects. Capped at 1 − p_min^γ per query, whatever the p_i say."""
    return base_reward(p, cfg, line)


def posterior_reading(p: float, n: float | None, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 4, `posterior`: `posterior_abstain_probability` with the n samples behind p (required) and the
    Beta(posterior_prior, posterior_prior) prior; at the step's `line` when given (`posterior_below`)."""
    if n is None:
        raise ValueError("expected_rate=posterior needs the number of samples behind each p_i")
    return posterior_below(line_of(p, cfg, line), p, n, cfg.posterior_prior)


def reading(name: str) -> Reading:
    """The registered reading `name` (ValueError naming the choices when there is none)."""
    return choices.EXPECTED_RATES.load(name)


def expected_share(p: float, n: float | None, cfg: RewardConfig, line: float | None = None) -> float:
    """Step 4, one completion's contribution to ρ̂ under the run's reading (`cfg.expected_rate`; docs/method.md
    "The penalty's target"), with the run's reward settings and, under `reward.abstain_line: ra_f1`, the step's
    line: what training and the simulator call. A reading registered without a `line` parameter still serves
    the courage line (`line` is passed only when set)."""
    if line is None:
        return reading(cfg.expected_rate)(p, n, cfg)
    return reading(cfg.expected_rate)(p, n, cfg, line=line)


def batch_expected_rate(ps: Iterable[float], cfg: RewardConfig, ns: Iterable[float] | None = None) -> float:
    """Step 4: ρ̂_t = mean over the batch's completions of `expected_share` (0 for an empty batch). `ns`: the
    sample count behind each p (expected_rate=posterior)."""
    ps = list(ps)
    counts: list[float | None] = list(ns) if ns is not None else [None] * len(ps)
    if len(counts) != len(ps):
        raise ValueError(f"ns must give one sample count per p_i ({len(ps)}), got {len(counts)}")
    vals = [expected_share(p, n, cfg) for p, n in zip(ps, counts, strict=True)]
    return sum(vals) / len(vals) if vals else 0.0


def _settings(gamma: float, p_min: float, mode: str, tau: float, r_correct: float, r_wrong: float,
              prior: float) -> RewardConfig:
    # Not validated: the formulas check their own inputs (a tau <= 0 is refused by soft_at).
    return RewardConfig().model_copy(update={"gamma": gamma, "p_min": p_min, "expected_rate": mode, "soft_tau": tau,
                                             "r_correct": r_correct, "r_wrong": r_wrong, "posterior_prior": prior})


def expected_abstain(p: float, gamma: float, p_min: float, mode: str = "threshold", tau: float = 0.05,
                     r_correct: float = 1.0, r_wrong: float = 0.0, n: float | None = None,
                     prior: float = 0.5) -> float:
    """`expected_share` with the constants of the shipped readings given one by one (the formulas' tests and
    docs); a run passes its RewardConfig to `expected_share`."""
    return expected_share(p, n, _settings(gamma, p_min, mode, tau, r_correct, r_wrong, prior))


def expected_refusal_rate(ps: Iterable[float], gamma: float, p_min: float, mode: str = "threshold",
                          tau: float = 0.05, r_correct: float = 1.0, r_wrong: float = 0.0,
                          ns: Iterable[float] | None = None, prior: float = 0.5) -> float:
    """`batch_expected_rate` with the shipped readings' constants given one by one (see `expected_abstain`)."""
    return batch_expected_rate(ps, _settings(gamma, p_min, mode, tau, r_correct, r_wrong, prior), ns)


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


def bias_corrected(m: float, updates: int, beta: float) -> float:
    """An EMA m_t started at m_0 = 0, divided by 1 − β^t (as Adam's moments): the EMA-weighted average of the
    values seen so far, full size from the first step; 0 before any step."""
    if updates <= 0:
        return 0.0
    return float(m) / (1.0 - float(beta) ** int(updates))


def smoothed_excess(e_ema: float, updates: int, beta: float, start: str = "zero") -> float:
    """Step 6, `reward.ema_start`: Ē_t from the running EMA m_t (m_0 = 0) after `updates` = t steps.

    - `zero`: Ē_t = m_t (SPEC): the penalty ramps in, a persistent excess of 0.35 needs 19 steps at β = 0.9
      to pass 0.30;
    - `bias_corrected`: Ē_t = m_t / (1 − β^t) (as Adam's moments): the average of the excesses seen so far
      with the EMA's weights, full size from the first step; 0 before any step.
    """
    if start == "zero":
        return float(e_ema)
    if start == "bias_corrected":
        return bias_corrected(e_ema, updates, beta)
    raise ValueError(f"ema_start must be one of {EMA_STARTS}, got {start!r}")


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


def dither_offset(key: str, update: int, width: float) -> float:
    """Step 7, `reward.penalty_dither`: the offset u in [−width, width) that one GRPO group adds to Ē before the
    step function, a deterministic uniform draw from the group's query id `key` and the step `update`.

    Deterministic so that every process (a group may straddle ranks), a resumed run and the simulator give the
    same group the same offset; fresh every step so that no query is singled out for the whole run. width 0
    gives 0: the SPEC's single batch-wide step.
    """
    if not width >= 0 or math.isinf(width):
        raise ValueError(f"penalty_dither must be a finite width >= 0, got {width!r}")
    if width == 0:
        return 0.0
    digest = hashlib.blake2b(f"{int(update)}\x1f{key}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") >> 11) / 2.0**53  # the top 53 bits: exactly representable, in [0, 1)
    return float(width) * (2.0 * unit - 1.0)


def group_penalty(e_bar: float, key: str, update: int, steps: Sequence[tuple[float, float]], penalty_max: float,
                  width: float) -> float:
    """Step 7 for one GRPO group: P(Ē + u), u = `dither_offset`: still one of the configured steps, with its sign.

    Why (docs/method.md "Dithered steps"): under group-normalised advantages the size of r_ref hardly matters,
    only whether an abstention beats a wrong answer, so one batch-wide step acts as an on/off switch and the
    refusal rate cycles around the dead zone's edge. Spreading the groups' switching points over Ē ± width
    makes the *share* of groups that get each step, and so the batch's expected correction, a continuous,
    piecewise-linear function of Ē (dithered quantisation), while every reward paid stays a step of P.
    """
    return stepwise_penalty(float(e_bar) + dither_offset(key, update, width), steps, penalty_max)


def clip(x: float, lo: float, hi: float) -> float:
    if lo > hi:
        raise ValueError(f"clip range is empty: ({lo}, {hi})")
    return min(max(float(x), lo), hi)


def warming_up(step: int, warm_steps: int) -> bool:
    """Whether training step `step` (0-based, the reward's own count of training batches) is still in the warm-up
    of `warm_steps` steps (`warmup_steps`), where AWA-RL pays an abstention r_wrong and Ē does not move."""
    return int(step) < int(warm_steps)


def refusal_cap(r_correct: float, margin: float | None) -> float | None:
    """Step 8 option `reward.r_ref_margin`: the most an abstention may pay, r_correct − margin (None: no cap).
    The guard against lazy refusal: a correct answer always beats refusing."""
    if margin is None:
        return None
    if margin <= 0:
        raise ValueError(f"r_ref_margin must be > 0 (abstaining must pay less than a correct answer), got {margin!r}")
    return float(r_correct) - float(margin)


def refusal_floor(r_wrong: float, margin: float | None) -> float | None:
    """Step 8 option `reward.r_ref_floor_margin`: the least an abstention may pay, r_wrong + margin (None: no
    floor). The guard against refusal collapse, the mirror of `refusal_cap`: however hard the penalty corrects
    over-refusal, refusing a query the policy would get wrong never pays less than getting it wrong, so GRPO
    keeps ranking an abstention above a wrong answer in the same group and refusal cannot die out where the
    policy fails (docs/method.md "Guards in both directions")."""
    if margin is None:
        return None
    if margin < 0:
        raise ValueError(f"r_ref_floor_margin must be >= 0, got {margin!r}")
    return float(r_wrong) + float(margin)


def refusal_reward(r_base: float, penalty: float, r_clip: tuple[float, float] = (-1.0, 1.0),
                   r_max: float | None = None, r_min: float | None = None) -> float:
    """Step 8: r_ref = clip(R_base − P(Ē), r_clip), then at most `r_max` (`refusal_cap`) and at least `r_min`
    (`refusal_floor`) when given.

    Over-refusal (P > 0) lowers it, under-refusal raises it. Without the cap, sustained under-refusal
    (P = −1) pays clip(R_base + 1) = 1 for refusing any query, even one answered correctly every time; without
    the floor, sustained over-refusal (P = +1) makes refusing worse than a wrong answer on every query, and the
    policy unlearns refusal altogether.
    """
    if r_max is not None and r_min is not None and r_min > r_max:
        raise ValueError(f"the refusal floor {r_min:g} lies above the refusal cap {r_max:g}")
    r = clip(r_base - penalty, r_clip[0], r_clip[1])
    if r_max is not None:
        r = min(r, float(r_max))
    if r_min is not None:
        r = max(r, float(r_min))
    return r


def gate_weight(line: float, answered: float) -> float:
    """`reward.refusal_gate_weight: tie_at_line`: the weight 1/(1 − s*)^a of an abstention the gate lets through
    in a group of `answered` answered completions (none correct), s* = `line` (inf when s* = 1 and a > 0).

    Why: for a query of true success s the gate pays an abstention only when none of its group's a answers is
    correct, probability (1 − s)^a; weighting the payment by (1 − s*)^−a makes its expected value r_ref·((1 − s) /
    (1 − s*))^a, which is r_ref at s = s* for every a, above it below the line and below it above the line. The
    gate then moves which abstentions are paid, not where abstaining ties with answering; unweighted, the tie
    sits below s* by a margin that grows with the group's answers (docs/method.md "Gating and warm-up").
    """
    s = check_prob("the abstain line", line)
    if answered < 0 or math.isnan(answered):
        raise ValueError(f"answered must be a count >= 0, got {answered!r}")
    if answered == 0:
        return 1.0
    if s >= 1.0:
        return math.inf
    return math.exp(-float(answered) * math.log1p(-s))


def gated_refusal_reward(r_ref: float, line: float, answered: float, r_wrong: float = 0.0,
                         r_clip: tuple[float, float] = (-1.0, 1.0), r_max: float | None = None,
                         r_min: float | None = None) -> float:
    """What an abstention the gate lets through earns under `refusal_gate_weight: tie_at_line`: r_wrong + (r_ref −
    r_wrong)·`gate_weight`(line, answered), inside r_clip, the cap `r_max` and the floor `r_min` (as
    `refusal_reward`): the cap keeps a correct answer worth more than any abstention, so a group that answered
    often is paid the cap rather than its full weight."""
    gap = float(r_ref) - float(r_wrong)
    if gap == 0.0:
        return float(r_ref)
    w = gate_weight(line, answered)
    weighted = float(r_wrong) + (gap * w if math.isfinite(w) else math.copysign(math.inf, gap))
    return refusal_reward(weighted, 0.0, r_clip, r_max, r_min)  # the same bounds as an unweighted r_ref


def weights_gate(cfg: RewardConfig, uses_r_ref: bool) -> bool:
    """Whether an abstention's r_ref is weighted for the gate (`gated_refusal_reward`): AWA-RL's reward behind
    `refusal_gate: any_correct` with `refusal_gate_weight: tie_at_line`."""
    return uses_r_ref and cfg.refusal_gate == "any_correct" and cfg.refusal_gate_weight == "tie_at_line"


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
