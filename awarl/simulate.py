"""Reward-dynamics simulator: how each refusal-reward strategy steers the abstention rate under GRPO.

A population of queries has true success probabilities s_i (Beta-distributed for answerable queries, 0 for a
share of unanswerable ones). p_i is estimated before "RL" from K samples of the initial policy, with its
abstentions and format failures, as `awarl estimate` does with the standard checkpoint. The policy decides
answer/abstain with ONE shared logistic model over a noisy perception of the query's difficulty,
x_i = logit(s_i) + noise_i, so, like an LLM, it cannot tailor its choice to each query freely. When it
answers, it is invalid with `invalid_rate`, else correct with probability s_i. Each step samples a
generation batch of queries × group, scores the completions with the strategy's reward, normalises rewards
within each group (GRPO) and takes a policy-gradient step on the two logistic parameters.

Every reward step is the shared pure function of training (awarl.rewards.abstention / strategies), in the
order `AwaRLReward` composes them: p_i (step 1), R_base (2-3), ρ̂ (4), E (5), the EMA and its start (6),
P (7), r_ref with its cap (8), the outcome reward (9), the baselines' abstain reward and the online p.

Curves are population quantities computed exactly from the policy's parameters each step (refusal rate,
precision, accuracy, RA-F1), so they carry no sampling noise; ρ̂ is the reward's own expected rate over
the population. numpy only; see docs/simulator.md for what produces each behaviour.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from awarl.config import AwarlConfig, RewardConfig, SimulateConfig, save_resolved
from awarl.io import atomic_write_json, atomic_write_text, save_figure
from awarl.lr_schedule import lr_multiplier, refusal_warmup_steps
from awarl.metrics import Outcome
from awarl.rewards import abstention as A
from awarl.rewards.strategies import abstain_reward
from awarl.rewards.strategies import strategy as registered_strategy
from awarl.simulate_env import (  # noqa: F401  (the world's names, re-exported for `awarl.simulate` users)
    AB,
    INV,
    OUTCOMES,
    Batch,
    C,
    Policy,
    Population,
    W,
    World,
    current_success,
    initial_policy,
    make_population,
    population_from_counts,
)

log = logging.getLogger(__name__)

POPULATION_KEYS = ("refusal_rate", "rho_hat", "precision", "accuracy", "ra_f1")
SMALL_ACCURACY_COST = 0.05  # "a small accuracy cost": the paper's is 0.552 -> 0.529 (0.023)
PLATEAU_TOL = 0.02          # the refusal rate's mean over the last fifth moved less than this from the fifth before
COLLAPSE_REFUSAL = 0.02     # "refusal collapsed": a final refusal rate below this ...
BASELINE_REFUSAL = 0.3      # ... where some baseline still refuses more than this


@dataclass(frozen=True)
class OracleReward:
    """A stationary refusal reward that says, the same way every step, which queries to refuse: refusing pays
    r_wrong + `pay` where the query's `key` is below `threshold` and r_wrong − `charge` elsewhere (charge 0: a
    tie with a wrong answer). `key="success"` reads each query's true success now, which no training reward
    can know; `key="estimate"` reads only what AWA-RL knows, the pre-RL p_i. Under group-normalised advantages
    the sign of r_ref − r_wrong is what an all-wrong group ranks, so every group's sign is consistent with the
    threshold: the best-informed refusal reward of its kind, the study's feasibility control for what a plateau
    at a given RA-F1 costs in late-phase refusal sd (docs/method.md "What no reward can")."""

    threshold: float
    charge: float = 0.0
    key: Literal["success", "estimate"] = "success"
    pay: float = 0.05

    @property
    def label(self) -> str:
        what = "s" if self.key == "success" else "p"
        return f"oracle {what} < {self.threshold:g}, charge {self.charge:g}"

    def abstain_rewards(self, values: np.ndarray, r_wrong: float) -> np.ndarray:
        """What an abstention earns on queries whose key is `values`."""
        return np.where(np.asarray(values) < self.threshold, r_wrong + self.pay, r_wrong - self.charge)


@dataclass
class RunResult:
    label: str
    strategy: str
    gamma: float | None = None
    static_value: float | None = None
    penalty: bool | None = None
    seed: int = 0
    history: dict[str, list[float]] = field(default_factory=dict)

    def final(self) -> dict[str, float]:
        return {k: v[-1] for k, v in self.history.items()}


class _RewardModel:
    """Per-query reward quantities of one run (R_base, ρ̂ contribution), kept in step with p_est."""

    def __init__(self, rc: RewardConfig, p_est: np.ndarray, n_est: np.ndarray) -> None:
        self.rc = rc
        self.p_est = p_est.astype(float).copy()
        self.n_est = n_est.astype(float).copy()  # samples behind each p (expected_rate=posterior)
        self.r_base = np.zeros_like(self.p_est)
        self.exp_ab = np.zeros_like(self.p_est)
        self._cache: dict[tuple[float, float], tuple[float, float]] = {}
        self.refresh(np.arange(len(self.p_est)))

    def refresh(self, idx: np.ndarray) -> None:
        for i in idx:
            self.r_base[i], self.exp_ab[i] = self.values(float(self.p_est[i]), float(self.n_est[i]))

    def values(self, p: float, n: float) -> tuple[float, float]:
        """(R_base, ρ̂ share) of a query whose estimate is p on n samples. Memoised: a K-sample estimate takes
        K + 1 values, and 32,000 queries seen once would otherwise each cost an incomplete beta function."""
        key = (p, n)
        hit = self._cache.get(key)
        if hit is None:
            rc = self.rc
            hit = self._cache[key] = (A.base_refusal_reward(p, rc.gamma, rc.p_min),
                                      A.expected_share(p, n, rc))
        return hit


def learning_rate_at(sc: SimulateConfig, step: int) -> float:
    """The policy-gradient step size at `step`: `simulate.learning_rate`, constant, or decayed linearly to 0 over
    `simulate.steps` (`train.lr_scheduler_type` constant / linear, without a learning-rate warm-up)."""
    return sc.learning_rate * lr_multiplier(sc.lr_schedule, step, sc.steps)


def _grpo_step(reward: np.ndarray, batch: Batch, G: int, sc: SimulateConfig, lr: float) -> tuple[float, float, float]:
    """The (w, b, w_found) increments of one policy-gradient step with group-normalised (or mean-centred)
    advantages."""
    r = reward.reshape(len(batch.idx), G)
    std = r.std(axis=1, keepdims=True)
    centred = r - r.mean(axis=1, keepdims=True)
    if sc.advantage_scaling == "group":
        adv = np.where(std > 1e-8, centred / (std + 1e-8), 0.0).ravel()  # identical rewards teach nothing
    else:
        adv = centred.ravel()
    # d log π(a) / d logit = a − π for a Bernoulli(π) choice of "abstain".
    score = adv * (batch.abstain.astype(float) - batch.pi)
    d_found = 0.0 if batch.found is None else lr * float((score * batch.found).mean())
    return lr * float((score * batch.x).mean()), lr * float(score.mean()), d_found


@dataclass
class _Scored:
    """What the reward made of one batch: per-query p and R_base as used, the batch's ρ̂, each abstention's
    reward, and the penalty state."""

    p: np.ndarray
    rho_hat: float
    abstain_rewards: list[float]
    penalty: float = 0.0
    group_penalties: list[float] = field(default_factory=list)
    e: float | None = None
    e_bar: float | None = None


class _RewardRun:
    """The refusal reward of one run over its batches: steps 1-9 through the training reward's own functions, in
    `AwaRLReward`'s order, with the run's Ē and online-p state."""

    def __init__(self, pop: Population, rc: RewardConfig, strategy: str, penalty: bool,
                 frozen_e_bar: float | None, oracle: OracleReward | None, steps: int, lr_schedule: str,
                 advantage_scaling: str) -> None:
        self.rc, self.strategy, self.penalty, self.frozen, self.oracle = rc, strategy, penalty, frozen_e_bar, oracle
        # a share of the learning, the one for the run's advantage normalisation
        self.warm_steps = refusal_warmup_steps(rc.warmup_share(advantage_scaling), lr_schedule, steps)
        self.awarl = registered_strategy(strategy).uses_r_ref  # keeps Ē and applies P(Ē)
        self.weighted = A.weights_gate(rc, self.awarl)  # reward.refusal_gate_weight
        self.model = _RewardModel(rc, pop.p_hat(rc.p_definition), pop.p_samples(rc.p_definition))
        self.r_max = A.refusal_cap(rc.r_correct, rc.r_ref_margin)
        self.r_min = A.refusal_floor(rc.r_wrong, rc.r_ref_floor_margin)
        # Step 9 for the answered outcomes does not depend on r_ref: computed once.
        self.fixed = {o: A.outcome_reward(o, 0.0, rc.r_correct, rc.r_wrong, rc.r_invalid) for o in OUTCOMES}
        self.e_ema, self.updates = 0.0, 0
        # reward.abstain_line=ra_f1: the running RA-F1's EMA and the step's line (None: courage γ's, per query)
        self.f_ema: float = 0.0
        self.line: float | None = None

    def population_rho_hat(self) -> float:
        return float(self.model.exp_ab.mean())

    def _per_query(self, idx: np.ndarray, correct_g: np.ndarray, answered_g: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p, R_base, ρ̂ share) of the batch's queries: the table's, or with `p_online: group` the group's own
        answered outcomes joined to the pre-RL estimate (`abstention.group_estimate`)."""
        m, rc = self.model, self.rc
        if rc.p_online != "group" and self.line is None:
            return m.p_est[idx], m.r_base[idx], m.exp_ab[idx]
        p_used, r_base, exp_ab = [], [], []
        at_line: dict[tuple[float, float], tuple[float, float]] = {}  # this step's line: few distinct (p, n)
        for i, c, a in zip(idx, correct_g, answered_g, strict=True):
            p, n = float(m.p_est[i]), float(m.n_est[i])
            if rc.p_online == "group":
                p, n = A.group_estimate(p, n, int(c), int(a), rc.p_prior_weight)
            if self.line is None:
                rb, ea = m.values(p, n)
            else:
                if (p, n) not in at_line:
                    at_line[p, n] = (A.base_reward(p, rc, self.line), A.expected_share(p, n, rc, self.line))
                rb, ea = at_line[p, n]
            p_used.append(p)
            r_base.append(rb)
            exp_ab.append(ea)
        return np.array(p_used), np.array(r_base), np.array(exp_ab)

    def _track_ra_f1(self, batch: Batch) -> None:
        """`reward.abstain_line: ra_f1`: the batch's RA-F1 joins the running F̂ (every step, the warm-up's too, as
        `AwaRLReward`), and the step's line is F̂/2."""
        rc = self.rc
        if not (self.awarl and rc.abstain_line == "ra_f1"):
            return
        code = batch.code
        f = A.ra_f1_of_counts(float((code == C).sum()), float((code != AB).sum()), float(len(code)))
        self.f_ema, f_hat = A.running_ra_f1(self.f_ema, f, self.updates + 1, rc.ra_f1_beta)
        self.line = A.ra_f1_line(f_hat)

    def score(self, batch: Batch, s: np.ndarray) -> _Scored:
        """Steps 4-8 on this generation batch (equal groups: the mean over queries is the mean over completions)."""
        rc, idx = self.rc, batch.idx
        self._track_ra_f1(batch)
        correct_g, answered_g = batch.per_query(batch.correct), batch.per_query(~batch.abstain)
        p_used, r_base, exp_ab = self._per_query(idx, correct_g, answered_g)
        out = _Scored(p=p_used, rho_hat=float(exp_ab.mean()), abstain_rewards=[], group_penalties=[0.0] * len(idx))
        if self.awarl:
            out.e = A.excess(float(batch.abstain.mean()), out.rho_hat)
            if A.warming_up(self.updates, self.warm_steps):
                # as AwaRLReward: plain GRPO's abstention reward, Ē held at its start, the step still counted
                self.updates += 1
                out.e_bar, out.abstain_rewards = 0.0, [float(rc.r_wrong)] * len(idx)
                return out
            self.e_ema, self.updates = A.ema(self.e_ema, out.e, rc.beta), self.updates + 1
            out.e_bar = A.smoothed_excess(self.e_ema, self.updates, rc.beta, rc.ema_start) if self.frozen is None \
                else float(self.frozen)
            if self.penalty:
                out.penalty = A.stepwise_penalty(out.e_bar, rc.penalty_steps, rc.penalty_max)
                # query ids as the rollout names them for AwaRLReward: the index, as a string
                out.group_penalties = [A.group_penalty(out.e_bar, str(i), self.updates, rc.penalty_steps,
                                                       rc.penalty_max, rc.penalty_dither) for i in idx]
        if self.oracle is not None:
            key = s[idx] if self.oracle.key == "success" else self.model.p_est[idx]
            out.abstain_rewards = self.oracle.abstain_rewards(key, rc.r_wrong).tolist()
        else:
            out.abstain_rewards = [
                abstain_reward(self.strategy, rc, self._r_ref(float(rb), pg, float(p), int(cg), int(ag)), bool(cg > 0))
                for rb, p, cg, ag, pg in zip(r_base, p_used, correct_g, answered_g, out.group_penalties, strict=True)]
        return out

    def _r_ref(self, r_base: float, penalty: float, p: float, correct: int, answered: int) -> float:
        """Step 8's r_ref of one query, weighted for the gate (`reward.refusal_gate_weight`) in a group with no
        correct answer, as `AwaRLReward._abstain_rewards`."""
        rc = self.rc
        r_ref = A.refusal_reward(r_base, penalty, rc.r_clip, self.r_max, self.r_min)
        if self.weighted and correct == 0:
            r_ref = A.gated_refusal_reward(r_ref, A.line_of(p, rc, self.line), answered, rc.r_wrong, rc.r_clip,
                                           self.r_max, self.r_min)
        return r_ref

    def rewards(self, batch: Batch, scored: _Scored) -> np.ndarray:
        """Step 9: each completion's outcome reward (a per-query lookup table over the four outcomes)."""
        rc = self.rc
        table = np.array([[self.fixed[Outcome.CORRECT], self.fixed[Outcome.WRONG],
                           A.outcome_reward(Outcome.ABSTAIN, ra, rc.r_correct, rc.r_wrong, rc.r_invalid),
                           self.fixed[Outcome.INVALID]] for ra in scored.abstain_rewards])
        return table[batch.group, batch.code]

    def after_step(self, batch: Batch) -> None:
        """`p_online: ema`: each drawn query's estimate moves for the next time it is drawn."""
        if self.rc.p_online != "ema":
            return
        m = self.model
        for i, c, a in zip(batch.idx, batch.per_query(batch.correct), batch.per_query(~batch.abstain), strict=True):
            m.p_est[i] = A.online_p(float(m.p_est[i]), int(c), int(a), self.rc.p_online_beta)
        m.refresh(batch.idx)


def simulate_run(pop: Population, sc: SimulateConfig, rc: RewardConfig, strategy: str, *, gamma: float,
                 static_value: float | None = None, penalty: bool = True, seed: int = 0,
                 label: str | None = None, on_batch: Callable[[dict], None] | None = None,
                 frozen_e_bar: float | None = None, oracle: OracleReward | None = None) -> RunResult:
    """One training run. `strategy` is a reward.strategy; `penalty=False` zeroes P(Ē) (AWA-RL ablation).
    `frozen_e_bar` holds Ē at that value every step (the EMA is not run): the same reward with its feedback
    switched off, a stationary reward (the study's control for the late-phase refusal sd). `oracle` replaces
    the strategy's abstention reward by an `OracleReward` (a baseline strategy only: it has no penalty).
    `on_batch(batch)` sees every generation batch as the reward saw it: query indices `idx`, the pre-RL p per
    query `p` (the column a rollout passes), the p the reward used `p_used`, per-completion `outcomes` and
    `rewards`, the step's `penalty` P(Ē), `E_bar`, and each group's applied penalty `group_penalties` (tests)."""
    rng = np.random.default_rng(seed)
    rc = rc.model_copy(update={"strategy": strategy, "gamma": gamma,
                               **({"static_value": static_value} if static_value is not None else {})})
    run = _RewardRun(pop, rc, strategy, penalty, frozen_e_bar, oracle, sc.steps, sc.lr_schedule,
                     sc.advantage_scaling)
    if oracle is not None and run.awarl:
        raise ValueError(f"an oracle reward is stationary: run it with a baseline strategy, not {strategy!r}")
    world = World(pop, sc, rng)
    policy = Policy(*initial_policy(sc))
    res = RunResult(label=label or (oracle.label if oracle else strategy), strategy=strategy,
                    gamma=gamma if run.awarl else None, static_value=static_value,
                    penalty=penalty if run.awarl else None, seed=seed)
    h = res.history
    for key in [*POPULATION_KEYS, "batch_rho", "batch_rho_hat", "r_ref_mean",
                *(["E", "E_bar", "penalty", "penalty_applied"] if run.awarl else [])]:
        h[key] = []
    B, G = min(sc.batch_queries, len(world.train)), sc.group_size

    for step in range(sc.steps):
        s = world.success(step)
        x = world.feature(s)
        # Population metrics of the policy before this step's update (step 0 = the initial policy).
        for k, v in world.metrics(policy, s, x).items():
            h[k].append(v)
        batch = world.sample(rng, world.draw(rng, step, B), G, policy, s, x)
        scored = run.score(batch, s)
        # ρ̂ of the population as the reward's table holds it; with p_online=group the reward has no table beyond
        # the pre-RL one, so the curve is the batch's own (noisier)
        h["rho_hat"].append(scored.rho_hat if rc.p_online == "group" else run.population_rho_hat())
        if run.awarl:
            assert scored.e is not None and scored.e_bar is not None  # an AWA-RL batch always has them
            h["E"].append(scored.e)
            h["E_bar"].append(scored.e_bar)
            h["penalty"].append(scored.penalty)
            h["penalty_applied"].append(float(np.mean(scored.group_penalties)))
        reward = run.rewards(batch, scored)
        if on_batch is not None:
            on_batch({"idx": batch.idx.copy(), "p": run.model.p_est[batch.idx].copy(), "p_used": scored.p.copy(),
                      "outcomes": [OUTCOMES[c].value for c in batch.code], "rewards": reward.copy(),
                      "penalty": scored.penalty, "E_bar": scored.e_bar, "group_penalties": list(scored.group_penalties)})
        h["batch_rho"].append(float(batch.abstain.mean()))
        h["batch_rho_hat"].append(scored.rho_hat)
        h["r_ref_mean"].append(float(np.mean(scored.abstain_rewards)))
        dw, db, dwf = _grpo_step(reward, batch, G, sc, learning_rate_at(sc, step))
        policy = Policy(policy.w + dw, policy.b + db, policy.w_found + dwf)
        run.after_step(batch)
        world.learn(batch)
    return res


def run_specs(cfg: AwarlConfig) -> list[dict]:
    """The runs `simulate.strategies` asks for, one dict of `simulate_run` keyword arguments each."""
    sc, rc = cfg.simulate, cfg.reward
    specs: list[dict] = []
    for strat in sc.strategies:
        if strat == "none":
            specs.append({"strategy": "none", "gamma": rc.gamma, "label": "none (plain GRPO)"})
        elif strat == "bapo":
            specs.append({"strategy": "bapo", "gamma": rc.gamma, "label": f"bapo ({rc.bapo_value:g})"})
        elif strat == "static":
            specs += [{"strategy": "static", "gamma": rc.gamma, "static_value": v, "label": f"static {v:g}"}
                      for v in sc.static_values]
        elif strat in ("awarl", "awarl_no_penalty"):
            penalty = {} if strat == "awarl" else {"penalty": False}
            tail = "" if strat == "awarl" else " no penalty"
            if rc.abstain_line == "ra_f1":
                # γ does not enter the RA-F1 line: one run, not one per γ (its row keeps the grid's first γ, as the
                # study scripts that run the line on a one-γ grid read it)
                specs.append({"strategy": "awarl", "gamma": sc.gammas[0], **penalty,
                              "label": f"awarl RA-F1 line{tail}"})
            else:
                specs += [{"strategy": "awarl", "gamma": g, **penalty, "label": f"awarl γ={g:g}{tail}"}
                          for g in sc.gammas]
        else:  # any other registered strategy: one run at reward.gamma
            specs.append({"strategy": strat, "gamma": rc.gamma, "label": strat})
    return specs


def seed_pair(seed: int) -> tuple[np.random.Generator, int]:
    """The population generator and the sampling seed of one simulation seed (independent streams)."""
    pop_seq, run_seq = np.random.SeedSequence([seed, 0]), np.random.SeedSequence([seed, 1])
    return np.random.default_rng(pop_seq), int(run_seq.generate_state(1)[0])


def seeded_populations(sc: SimulateConfig, population: Population | None = None
                       ) -> Iterator[tuple[int, Population, int]]:
    """(seed, population, sampling seed) for each of `simulate.seeds` seeds (simulate.seed, seed + 1, ...): the
    population drawn from the seed's own stream (`seed_pair`), or `population` when given."""
    for seed in (sc.seed + k for k in range(sc.seeds)):
        pop_rng, run_seed = seed_pair(seed)
        yield seed, population if population is not None else make_population(sc, pop_rng), run_seed


def late_window(values: Sequence[float], tail_fraction: float = 0.2) -> Sequence[float]:
    """The last `tail_fraction` of a run's curve (at least one value): the "late phase" of every summary."""
    return values[-max(1, int(len(values) * tail_fraction)):]


def run_all(cfg: AwarlConfig, progress: bool = True, population: Population | None = None) -> list[RunResult]:
    """Every configured run for each of `simulate.seeds` seeds (simulate.seed, seed + 1, ...). Within a seed
    all runs share the population and the sampling seed (common random numbers)."""
    from tqdm import tqdm

    sc, rc = cfg.simulate, cfg.reward
    specs = run_specs(cfg)
    results = []
    with tqdm(total=len(specs) * sc.seeds, desc="simulate", disable=not progress) as bar:
        for seed, pop, run_seed in seeded_populations(sc, population):
            for spec in specs:
                r = simulate_run(pop, sc, rc, seed=run_seed, **spec)
                r.seed = seed
                results.append(r)
                bar.update(1)
    return results


def run_frozen_twins(cfg: AwarlConfig, gamma: float, tail_fraction: float = 0.2
                     ) -> tuple[list[RunResult], list[RunResult]]:
    """The AWA-RL run at `gamma` for each of `simulate.seeds` seeds, and its frozen twin: the same reward with Ē
    held at the mean the live run settled at over its last `tail_fraction` (`simulate_run(frozen_e_bar=...)`),
    on the same population and samples. The twin is a stationary reward holding about the same refusal rate,
    so comparing their late-phase refusal sd separates what the penalty's feedback adds from what holding that
    refusal rate under GRPO costs anyway (docs/method.md "Dithered steps")."""
    sc = cfg.simulate
    live, frozen = [], []
    for seed, pop, run_seed in seeded_populations(sc):
        r = simulate_run(pop, sc, cfg.reward, "awarl", gamma=gamma, seed=run_seed, label=f"awarl γ={gamma:g}")
        settled = float(np.mean(late_window(r.history["E_bar"], tail_fraction)))
        twin = simulate_run(pop, sc, cfg.reward, "awarl", gamma=gamma, seed=run_seed,
                            label=f"awarl γ={gamma:g}, Ē frozen", frozen_e_bar=settled)
        r.seed = twin.seed = seed
        live.append(r)
        frozen.append(twin)
    return live, frozen


def run_oracles(cfg: AwarlConfig, oracles: Sequence[OracleReward]) -> list[RunResult]:
    """Each `OracleReward` for each of `simulate.seeds` seeds, on the populations and samples `run_all` uses (so
    its rows compare with the study's cells): the feasibility control of the late-phase refusal sd."""
    sc, rc = cfg.simulate, cfg.reward
    out = []
    for seed, pop, run_seed in seeded_populations(sc):
        for oracle in oracles:
            r = simulate_run(pop, sc, rc, "none", gamma=rc.gamma, seed=run_seed, oracle=oracle)
            r.seed = seed
            out.append(r)
    return out


def late_behaviour(refusal: Sequence[float], tail_fraction: float = 0.2) -> tuple[float, float]:
    """(late drift, late sd) of one run's refusal curve: how far its mean over the last `tail_fraction` moved from
    the window before it, and its standard deviation within that last window."""
    ref = np.asarray(refusal, dtype=float)
    last = np.asarray(late_window(refusal, tail_fraction), dtype=float)
    w = len(last)
    before = ref[-2 * w:-w] if len(ref) >= 2 * w else ref[:1]
    return abs(float(last.mean()) - float(before.mean())), float(last.std())


def summary_rows(results: Sequence[RunResult], tail_fraction: float = 0.2) -> list[dict]:
    """One row per run label: final population values, mean and std over seeds, and the refusal rate's late
    behaviour (means over seeds): `late_drift`, how far its mean over the last `tail_fraction` of the run
    moved from the window before it, and `late_sd`, its standard deviation within the last window
    (`late_behaviour`); `late_sd_seeds` keeps each seed's late sd, for paired comparisons."""
    by_label: dict[str, list[RunResult]] = {}
    for r in results:
        by_label.setdefault(r.label, []).append(r)
    rows = []
    for label, runs in by_label.items():
        first = runs[0]
        row: dict = {"label": label, "strategy": first.strategy, "gamma": first.gamma,
                     "static_value": first.static_value, "penalty": first.penalty, "seeds": len(runs)}
        for key in POPULATION_KEYS:
            vals = np.array([r.final()[key] for r in runs])
            row[key], row[f"{key}_sd"] = float(vals.mean()), float(vals.std())
        row["gap_to_rho_hat"] = row["refusal_rate"] - row["rho_hat"]
        drift, sd = zip(*(late_behaviour(r.history["refusal_rate"], tail_fraction) for r in runs), strict=True)
        row["late_drift"], row["late_sd"] = float(np.mean(drift)), float(np.mean(sd))
        row["late_sd_seeds"] = [float(x) for x in sd]  # in seed order: paired across the labels of one run_all
        rows.append(row)
    return rows


def dead_zone(rc: RewardConfig) -> float:
    """Largest |Ē| with zero penalty (the leading zero-penalty steps)."""
    dz = 0.0
    for threshold, pen in rc.penalty_steps:
        if pen != 0:
            break
        dz = threshold
    return dz


def _claim(claim: str, holds: bool, evidence: str) -> dict:
    return {"claim": claim, "holds": bool(holds), "evidence": evidence}


def claims(rows: list[dict], dead: float) -> list[dict]:
    """The paper's claims, checked (not asserted) on seed-mean values, each with the numbers that decide it."""
    out = []
    on = {r["gamma"]: r for r in rows if r["strategy"] == "awarl" and r["penalty"]}
    off = {r["gamma"]: r for r in rows if r["strategy"] == "awarl" and r["penalty"] is False}
    base = [r for r in rows if r["strategy"] != "awarl"]
    none = next((r for r in rows if r["strategy"] == "none"), None)
    if len(on) >= 2:
        gs = sorted(on)
        rates = [on[g]["refusal_rate"] for g in gs]
        plateau = all(on[g]["late_drift"] <= PLATEAU_TOL and on[g]["late_sd"] <= PLATEAU_TOL for g in gs)
        out.append(_claim(f"refusal plateaus by γ: higher γ, more refusal, each run settled (mean refusal of the "
                          f"last fifth within {PLATEAU_TOL:g} of the fifth before, its std within the last fifth "
                          f"at most {PLATEAU_TOL:g})",
                          plateau and all(a < b for a, b in zip(rates, rates[1:], strict=False)),
                          ", ".join(f"γ={g:g}: {on[g]['refusal_rate']:.3f} (late drift {on[g]['late_drift']:.3f}, "
                                    f"late sd {on[g]['late_sd']:.3f})" for g in gs)))
    if none and on:
        best = max(on.values(), key=lambda r: r["ra_f1"])
        cost = none["accuracy"] - best["accuracy"]
        out.append(_claim(f"AWA-RL raises precision and RA-F1 over plain GRPO at a small accuracy cost "
                          f"(<= {SMALL_ACCURACY_COST:g}; paper 0.023)",
                          best["precision"] > none["precision"] and best["ra_f1"] > none["ra_f1"]
                          and cost <= SMALL_ACCURACY_COST,
                          f"best γ={best['gamma']:g}: P {best['precision']:.3f} vs {none['precision']:.3f}, "
                          f"A {best['accuracy']:.3f} vs {none['accuracy']:.3f} (cost {cost:+.3f}), "
                          f"RA-F1 {best['ra_f1']:.3f} vs {none['ra_f1']:.3f}"))
    if on and base:
        rival = max(base, key=lambda r: r["refusal_rate"])
        fallen = [g for g in sorted(on) if on[g]["refusal_rate"] < COLLAPSE_REFUSAL]
        out.append(_claim(f"AWA-RL's refusal never collapses (< {COLLAPSE_REFUSAL:g}) where a baseline refuses more "
                          f"than {BASELINE_REFUSAL:g}", rival["refusal_rate"] <= BASELINE_REFUSAL or not fallen,
                          f"most refusing baseline {rival['label']} {rival['refusal_rate']:.3f}; AWA-RL final refusal "
                          + ", ".join(f"γ={g:g} {on[g]['refusal_rate']:.3f}" for g in sorted(on))))
    for r in rows:
        if r["strategy"] == "static" and r["static_value"] is not None and abs(r["static_value"] - 0.05) < 1e-9:
            out.append(_claim("a static refusal reward of 0.05 collapses to refusing nearly always (> 0.9; "
                              "paper: 99.9%)", r["refusal_rate"] > 0.9, f"final refusal rate {r['refusal_rate']:.3f}"))
    if on and base:
        best = max(on.values(), key=lambda r: r["ra_f1"])
        rival = max(base, key=lambda r: r["ra_f1"])
        # With several seeds a lead smaller than the seeds' spread is a tie, not a win.
        noise = max(best.get("ra_f1_sd", 0.0), rival.get("ra_f1_sd", 0.0))
        out.append(_claim("AWA-RL (best γ) has a higher RA-F1 than every baseline, by more than the seed std",
                          best["ra_f1"] - rival["ra_f1"] > noise,
                          f"AWA-RL γ={best['gamma']:g} {best['ra_f1']:.3f} vs best baseline {rival['label']} "
                          f"{rival['ra_f1']:.3f} (seed std {noise:.3f})"))
    both = sorted(set(on) & set(off))
    if both:
        # Inside the dead zone P(Ē) = 0 by design, so the penalty can only act on runs whose no-penalty twin
        # ends outside it; the claim is judged on those, the others are listed as inert.
        acting = [g for g in both if abs(off[g]["gap_to_rho_hat"]) > dead]
        closer = [g for g in acting if abs(on[g]["gap_to_rho_hat"]) < abs(off[g]["gap_to_rho_hat"])]
        out.append(_claim("the penalty pulls the observed refusal rate toward ρ̂ (runs whose no-penalty twin "
                          f"ends outside the dead zone |ρ−ρ̂| <= {dead:g})", bool(acting) and closer == acting,
                          "; ".join(f"γ={g:g}: |ρ−ρ̂| {abs(on[g]['gap_to_rho_hat']):.3f} with penalty vs "
                                    f"{abs(off[g]['gap_to_rho_hat']):.3f} without"
                                    f"{'' if g in acting else ' (inside the dead zone: penalty inert)'}"
                                    for g in both)))
    return out


def mean_curves(results: Sequence[RunResult]) -> dict[str, dict[str, list[float]]]:
    """Every curve of every run label, averaged over seeds."""
    by_label: dict[str, list[RunResult]] = {}
    for r in results:
        by_label.setdefault(r.label, []).append(r)
    return {label: {k: np.mean([r.history[k] for r in runs], axis=0).tolist() for k in runs[0].history}
            for label, runs in by_label.items()}


def plot_curves(results: Sequence[RunResult], path: str | os.PathLike) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = mean_curves(results)
    kinds = {r.label: r for r in results}
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), sharex=True)
    panels = [("refusal_rate", "refusal rate (dashed: ρ̂ of AWA-RL runs)"), ("precision", "precision"),
              ("accuracy", "accuracy"), ("ra_f1", "RA-F1")]
    cmap = plt.get_cmap("tab20")
    for k, (label, hist) in enumerate(curves.items()):
        r = kinds[label]
        style = ":" if r.strategy == "awarl" and r.penalty is False else "-"
        color = cmap(k % 20)
        for ax, (key, _) in zip(axes.flat, panels, strict=True):
            ax.plot(hist[key], style, color=color, lw=1.4, label=label)
        if r.strategy == "awarl" and r.penalty:
            axes[0, 0].plot(hist["rho_hat"], "--", color=color, lw=0.9)
    for ax, (_, title) in zip(axes.flat, panels, strict=True):
        ax.set_title(title)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[0, 1].legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def options_line(rc: RewardConfig) -> str:
    """The reconstruction options of a reward config, in one line (docs/method.md "Reconstruction choices")."""
    return (f"expected_rate={rc.expected_rate}, p_definition={rc.p_definition}, ema_start={rc.ema_start}, "
            f"r_ref_margin={rc.r_ref_margin}, r_ref_floor_margin={rc.r_ref_floor_margin}, p_online={rc.p_online}, "
            f"refusal_gate={rc.refusal_gate} (weight {rc.refusal_gate_weight}), refusal_warmup={rc.warmup_text()}, "
            f"abstain_line={rc.abstain_line}; "
            f"outcome rewards correct {rc.r_correct:g}, "
            f"wrong {rc.r_wrong:g}, invalid {rc.r_invalid:g}")


def summary_markdown(cfg: AwarlConfig, rows: list[dict], checks: list[dict]) -> str:
    sc = cfg.simulate
    seeds = f"seed {sc.seed}" if sc.seeds == 1 else f"seeds {sc.seed}..{sc.seed + sc.seeds - 1}"
    lines = [f"# Reward-dynamics simulation ({sc.steps} steps, {sc.n_queries} queries, "
             f"{sc.batch_queries}×{sc.group_size} completions/step, {seeds})", "",
             f"Reward options: {options_line(cfg.reward)}.", "",
             "Final population values (mean over seeds; ± the std where there are several). ρ̂ is the AWA-RL "
             "expected refusal rate at the run's γ (for baselines: at reward.gamma, for reference).", "",
             "| run | refusal | ρ̂ | refusal − ρ̂ | precision | accuracy | RA-F1 |", "|---|---|---|---|---|---|---|"]

    def cell(r: dict, key: str) -> str:
        return f"{r[key]:.3f}" + (f" ± {r[key + '_sd']:.3f}" if r["seeds"] > 1 else "")

    for r in rows:
        lines.append(f"| {r['label']} | {cell(r, 'refusal_rate')} | {r['rho_hat']:.3f} | {r['gap_to_rho_hat']:+.3f} | "
                     f"{cell(r, 'precision')} | {cell(r, 'accuracy')} | {cell(r, 'ra_f1')} |")
    lines += ["", "## Paper claims, as observed in this run", ""]
    for c in checks:
        lines.append(f"- {'reproduced' if c['holds'] else 'NOT reproduced'}: {c['claim']} ({c['evidence']})")
    lines += ["", "![curves](curves.png)", ""]
    return "\n".join(lines)


def write_outputs(cfg: AwarlConfig, results: list[RunResult], out_dir: str | os.PathLike) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = summary_rows(results)
    checks = claims(rows, dead_zone(cfg.reward))
    summary = {"config": cfg.model_dump(mode="json"), "runs": rows, "claims": checks}
    atomic_write_json(out / "summary.json", summary)
    atomic_write_json(out / "curves.json", mean_curves(results))
    save_resolved(cfg, out)
    atomic_write_text(out / "summary.md", summary_markdown(cfg, rows, checks))
    plot_curves(results, out / "curves.png")
    return summary


def run_simulation(cfg: AwarlConfig, out_dir: str | os.PathLike, progress: bool = True) -> dict:
    """Run every configured strategy and write curves.png, summary.md, summary.json, curves.json."""
    results = run_all(cfg, progress=progress)
    summary = write_outputs(cfg, results, out_dir)
    log.info("simulation written to %s", out_dir)
    return summary


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(run_simulation(AwarlConfig(), "runs/simulate")["claims"], indent=2))
