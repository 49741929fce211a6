"""The simulated world of `awarl simulate` (docs/simulator.md): a population of queries, how their success changes
during RL, what the policy perceives of them, and how one generation batch is sampled from the policy.

The reward side (every step of SPEC section 4, through the training reward's own functions) and the learning rule
live in `awarl.simulate`; this module holds only what the reward must not see: true success, the policy's
perception and the evidence its searches found. Every option beyond the original simulator is off by default and,
when off, draws nothing from the random streams, so earlier studies reproduce bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from awarl.config import SimulateConfig
from awarl.metrics import Outcome, ra_f1
from awarl.rewards import abstention as A

# Outcome codes of the simulated completions (columns of Population.counts).
OUTCOMES = (Outcome.CORRECT, Outcome.WRONG, Outcome.ABSTAIN, Outcome.INVALID)
C, W, AB, INV = range(4)


@dataclass
class Population:
    success: np.ndarray          # true success s_i at step 0 (of a valid answer)
    answerable: np.ndarray       # bool
    noise: np.ndarray            # fixed per-query perception noise (logit units)
    counts: np.ndarray           # (n, 4) outcome counts of the K pre-RL samples, columns in OUTCOMES order
    latent: np.ndarray | None = None    # bool: the queries that start latent (simulate.latent_share); None: none
    held_out: np.ndarray | None = None  # bool: never trained on (simulate.held_out_share); None: none

    def p_hat(self, definition: str = "share_of_k") -> np.ndarray:
        """The pre-RL p_i of every query under `reward.p_definition` (estimation.estimate_p)."""
        k = self.counts.sum(axis=1)
        answered = k - self.counts[:, AB]
        return np.array([A.estimate_p(int(c), int(a), int(kk), definition)
                         for c, a, kk in zip(self.counts[:, C], answered, k, strict=True)])

    def p_samples(self, definition: str = "share_of_k") -> np.ndarray:
        """How many samples each pre-RL p_i rests on (data.estimates.row_samples): K, or the answered ones."""
        k = self.counts.sum(axis=1)
        if definition == "share_of_k":
            return k.astype(float)
        answered = k - self.counts[:, AB]
        return np.where(answered > 0, answered, k).astype(float)


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-3, 1 - 1e-3)
    return np.log(p / (1 - p))


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free logistic


def outcome_probs(success: np.ndarray, abstain: np.ndarray | float, invalid_rate: float) -> np.ndarray:
    """(n, 4) probabilities of correct / wrong / abstain / invalid for one sample of each query."""
    ab = np.broadcast_to(np.asarray(abstain, dtype=float), success.shape)
    ans = 1.0 - ab
    return np.stack([ans * (1 - invalid_rate) * success, ans * (1 - invalid_rate) * (1 - success), ab,
                     ans * invalid_rate], axis=1)


def initial_policy(sc: SimulateConfig) -> tuple[float, float]:
    """(w, b) of the initial policy P(abstain | x) = σ(w·x + b): w = 0, a cold start whose abstentions ignore
    difficulty, at init_abstain_rate."""
    return 0.0, math.log(sc.init_abstain_rate / (1 - sc.init_abstain_rate))


def make_population(sc: SimulateConfig, rng: np.random.Generator) -> Population:
    n = sc.n_queries
    answerable = rng.random(n) >= sc.unanswerable_share
    success = np.where(answerable, rng.beta(sc.success_alpha, sc.success_beta, n), 0.0)
    noise = rng.normal(0.0, sc.perception_noise, n) if sc.perception_noise > 0 else np.zeros(n)
    latent = None
    if sc.latent_share > 0:
        latent = rng.random(n) < sc.latent_share
        success = np.where(latent, sc.latent_success, success)
        answerable = answerable | latent
    # The standard checkpoint of a cold start is the initial policy: it abstains as the initial (w, b) say
    # and fails the format at invalid_rate, as in `awarl estimate`.
    w0, b0 = initial_policy(sc)
    probs = outcome_probs(success, sigmoid(w0 * (logit(success) + noise) + b0), sc.invalid_rate)
    counts = rng.multinomial(sc.k_estimate, probs / probs.sum(axis=1, keepdims=True))
    held_out = rng.random(n) < sc.held_out_share if sc.held_out_share > 0 else None
    return Population(success=success, answerable=answerable, noise=noise, counts=counts, latent=latent,
                      held_out=held_out)


def population_from_counts(counts: np.ndarray, sc: SimulateConfig, rng: np.random.Generator) -> Population:
    """A population whose pre-RL estimate IS the given (n, 4) outcome counts (e.g. an `awarl estimate` file):
    the true success of a valid answer is taken as its observed share, c / (c + w), 0 when never seen."""
    counts = np.asarray(counts, dtype=int)
    valid = counts[:, C] + counts[:, W]
    success = np.where(valid > 0, counts[:, C] / np.maximum(valid, 1), 0.0)
    noise = rng.normal(0.0, sc.perception_noise, len(counts)) if sc.perception_noise > 0 else np.zeros(len(counts))
    return Population(success=success, answerable=success > 0, noise=noise, counts=counts)


def grows(sc: SimulateConfig) -> bool:
    return sc.skill_gain != 0 or bool(sc.latent_gain)


def grown_success(pop: Population, sc: SimulateConfig, skill: float, latent_skill: float) -> np.ndarray:
    """Every query's success after the answerable ones' logits rose by `skill` (latent ones: `latent_skill`)."""
    if not grows(sc):
        return pop.success
    offset = skill if pop.latent is None else np.where(pop.latent, latent_skill, skill)
    return np.where(pop.answerable, sigmoid(logit(pop.success) + offset), 0.0)


def current_success(pop: Population, sc: SimulateConfig, step: int) -> np.ndarray:
    """Success at `step` under `skill_source: schedule` (the gains every step, whatever the policy does)."""
    latent_gain = sc.skill_gain if sc.latent_gain is None else sc.latent_gain
    return grown_success(pop, sc, sc.skill_gain * step, latent_gain * step)


@dataclass
class Batch:
    """One generation batch: `idx` queries × G completions, flattened query-major (completion j of query g at
    g·G + j)."""

    idx: np.ndarray
    group: np.ndarray           # completion -> its query's row in idx
    x: np.ndarray               # the abstain feature of each completion's query
    found: np.ndarray | None    # each completion's search found the evidence (evidence_precision); None: off
    pi: np.ndarray              # each completion's abstain probability
    abstain: np.ndarray
    invalid: np.ndarray
    correct: np.ndarray

    @property
    def code(self) -> np.ndarray:
        return np.where(self.abstain, AB, np.where(self.invalid, INV, np.where(self.correct, C, W)))

    def per_query(self, values: np.ndarray) -> np.ndarray:
        return values.reshape(len(self.idx), -1).sum(axis=1)


@dataclass
class Policy:
    """P(abstain) = σ(w·x + w_found·found + b): parameters shared by every query, as an LLM's are."""

    w: float
    b: float
    w_found: float = 0.0

    def abstain(self, x: np.ndarray, found: np.ndarray | float = 0.0) -> np.ndarray:
        if isinstance(found, float) and found == 0.0 and self.w_found == 0.0:
            return sigmoid(self.w * x + self.b)  # the original two-parameter policy, arithmetic unchanged
        return sigmoid(self.w * x + self.w_found * found + self.b)


class World:
    """The queries' success over the run, what the policy perceives, and batch sampling (module docstring)."""

    def __init__(self, pop: Population, sc: SimulateConfig, rng: np.random.Generator) -> None:
        self.pop, self.sc = pop, sc
        self.skill = self.latent_skill = 0.0   # logit offsets of the answerable / latent queries' success
        self.drift = 0.0                       # the self-estimate's learned offset
        self.train = np.arange(len(pop.success)) if pop.held_out is None else np.flatnonzero(~pop.held_out)
        self.measured = None if pop.held_out is None else pop.held_out
        self.order = None
        if sc.query_schedule == "once":
            need = sc.steps * min(sc.batch_queries, len(self.train))
            if len(self.train) < need:
                raise ValueError(f"simulate.query_schedule=once needs simulate.n_queries training queries >= steps × "
                                 f"batch_queries = {need}, got {len(self.train)}")
            self.order = rng.permutation(self.train)

    def success(self, step: int) -> np.ndarray:
        if self.sc.skill_source == "schedule":
            return current_success(self.pop, self.sc, step)
        return grown_success(self.pop, self.sc, self.skill, self.latent_skill)

    def feature(self, s: np.ndarray) -> np.ndarray:
        """x_i, what the abstain decision reads (simulate.abstain_feature)."""
        if self.sc.abstain_feature == "true_success":
            return logit(s) + self.pop.noise
        return logit(self.pop.success) + self.pop.noise + self.sc.self_estimate_bias + self.drift

    def evidence(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(probability a search finds the evidence, success given found), or None without evidence coupling."""
        q = self.sc.evidence_precision
        if q is None:
            return None
        found = np.minimum(1.0, s / q)
        return found, np.where(found > 0, s / np.maximum(found, 1e-12), 0.0)

    def metrics(self, policy: Policy, s: np.ndarray, x: np.ndarray) -> dict[str, float]:
        """Exact population refusal, precision, accuracy and RA-F1 of `policy` (on the held-out queries when any)."""
        ev = self.evidence(s)
        if ev is None:
            ab = answered_found = policy.abstain(x)
        else:
            f = ev[0]
            answered_found = policy.abstain(x, 1.0)
            ab = f * answered_found + (1 - f) * policy.abstain(x, 0.0)
        if self.measured is not None:
            ab, answered_found, s = ab[self.measured], answered_found[self.measured], s[self.measured]
        rho = float(ab.mean())
        acc = float(((1 - answered_found) * (1 - self.sc.invalid_rate) * s).mean())
        prec = acc / (1 - rho) if rho < 1 else 0.0
        return {"refusal_rate": rho, "precision": prec, "accuracy": acc, "ra_f1": ra_f1(prec, acc)}

    def draw(self, rng: np.random.Generator, step: int, size: int) -> np.ndarray:
        if self.order is not None:
            return self.order[step * size:(step + 1) * size]
        if self.pop.held_out is None:
            return rng.choice(len(self.pop.success), size=size, replace=False)
        return rng.choice(self.train, size=size, replace=False)

    def sample(self, rng: np.random.Generator, idx: np.ndarray, G: int, policy: Policy, s: np.ndarray,
               x: np.ndarray) -> Batch:
        group = np.repeat(np.arange(len(idx)), G)
        n = len(group)
        ev = self.evidence(s)
        found = None
        p_correct = s[idx][group]
        if ev is not None:  # drawn first: what the search found is in the context the policy decides on
            found = rng.random(n) < ev[0][idx][group]
            p_correct = np.where(found, ev[1][idx][group], 0.0)
        pi_b = policy.abstain(x[idx], 0.0)[group] if found is None else policy.abstain(x[idx][group], found * 1.0)
        abstain = rng.random(n) < pi_b
        invalid = ~abstain & (rng.random(n) < self.sc.invalid_rate)
        correct = ~abstain & ~invalid & (rng.random(n) < p_correct)
        return Batch(idx=idx, group=group, x=x[idx][group], found=found, pi=pi_b, abstain=abstain, invalid=invalid,
                     correct=correct)

    def learn(self, batch: Batch) -> None:
        """What the world learns from a step besides the policy's weights: skill from the answered rollouts
        (skill_source=answered) and the self-estimate's offset from the answered, valid ones (self_estimate)."""
        sc = self.sc
        if sc.skill_source == "answered":
            answered = float((~batch.abstain).mean())
            self.skill += sc.skill_gain * answered
            self.latent_skill += (sc.skill_gain if sc.latent_gain is None else sc.latent_gain) * answered
        if sc.abstain_feature == "self_estimate":
            seen = ~batch.abstain & ~batch.invalid
            if seen.any():
                believed = sigmoid(batch.x[seen])
                self.drift += sc.self_estimate_lr * float((batch.correct[seen] - believed).mean())
