"""The reconstruction study of docs/method.md ("Reconstruction choices"): which reading of the AWA-RL reward to
ship, chosen on simulated populations it is then NOT judged on.

Protocol (fixed in this file before any of its results were looked at; docs/reconstruction_study.md reports it):

1. **Populations.** `draw_populations` draws `--populations` (default 16) simulator environments from one
   documented distribution (`POPULATION_DISTRIBUTION`, seeded by `POPULATION_SEED`): success of answerable
   queries ~ Beta(α, β) with α, β log-uniform on [0.3, 3]; unanswerable share ~ U(0, 0.8); perception noise
   ~ U(0, 2.5); skill gain 0 with probability 1/2, else U(0, 0.003) logits per step; invalid rate 0 with
   probability 1/2, else U(0, 0.3); the standard checkpoint's abstention rate log-uniform on [0.01, 0.3].
2. **Split before looking.** Population k goes to the tuning half when k is even, to the held-out half when
   k is odd. The five named populations of configs/simulate/ (the previous study's) are run too and reported
   apart: they chose the previous default, so they are evidence for nothing.
3. **Grid.** Every reward variant of `VARIANTS` (all reward options written out, so base.yaml cannot move a
   row) × γ in `GAMMAS` (extended below 0.25, where the previous optimum sat at the grid's edge), against
   plain GRPO, static 0.05 and 0.3, and BAPO (0.5); `--seeds` seeds (default 3), `--steps` (default the
   simulator's 1000). Values are final population values, means over seeds.
4. **Selection (tuning half only).** `select_default`: among the candidate variants (those with a guard in each
   direction, the cap r_ref_margin against lazy refusal and the floor r_ref_floor_margin against refusal
   collapse; the others are references and ablations, reported but not eligible), the (variant, γ) with the
   largest mean over tuning populations of RA-F1 minus that population's best baseline RA-F1, excluding any that
   collapses refusal (< 0.02 while the best baseline refuses > 0.3) in a tuning population. Revised for issue
   22's second round, before that round's study ran: among the choices within `SELECT_TOL` (0.001) of that
   largest mean lead (a tie at this yardstick's resolution), the one with the smallest mean late-phase refusal
   sd over the tuning populations. That pair becomes configs/base.yaml's reward.
5. **Report both halves**, the held-out half as the evidence: per population the best γ of the chosen reading
   against the best baseline (with the seed std), the chosen γ's distance to the best γ, refusal collapse,
   and the late-phase refusal std against the baselines'.
6. **Fresh held-out populations** (added for issue 22's second round): the first held-out half was looked at
   while the penalty dither was designed (pop03, pop05 and pop07's traces), so `--fresh` (default 8) more
   populations are drawn from the same distribution with `FRESH_SEED`, all held out, looked at by nobody before
   this study reported them. They are the evidence for that round's choice; the first held-out half is
   reported as before.
7. **The frozen-feedback control** (added with 6): the late-phase refusal sd of the chosen reward is compared
   with the baselines' and with the same reward with its feedback switched off, Ē held at the mean the run
   settled at over its last fifth (`simulate.run_frozen_twins`): a stationary reward that holds the same refusal
   rate. What the frozen twin shows is the sd of holding that refusal rate under GRPO; what the live run adds to
   it is the penalty's own chatter.
8. **Stability under the trainer's schedule** (added after the first run, as a check, not a selection): the
   study's simulator keeps the step size constant, `awarl train` decays it linearly to 0 (TRL's default), so the
   held-out halves' shipped reading and baselines are run again with `simulate.lr_schedule=linear` and their
   late-phase refusal std and RA-F1 reported.
9. **The feasibility control** (added for issue 22's third round, a measurement, not a selection: no variant,
   γ or default changes with it): can any refusal reward hold a plateau within 0.01 of AWA-RL's best-γ RA-F1
   (what the RA-F1 targets ask of the shipped γ) with a late-phase refusal sd no larger than the largest
   baseline's? Every drawn population (not the named ones) runs `ORACLES`, stationary rewards that pay refusing
   (r_wrong + 0.05) below a threshold and tie with or charge (r_wrong − 0.5) above it, on each query's true
   success (what no training reward can know) or on its pre-RL p_i (what AWA-RL knows), each threshold of
   `ORACLE_THRESHOLDS` (`simulate.OracleReward`). `feasibility` calls the late-sd target *incompatible* with the
   RA-F1 targets in a population when none of these rewards that reaches that level has a late sd within the
   largest baseline's, *met* when the shipped reward's late sd is within it, and *missed* otherwise (it also
   names the steadiest one that merely reaches the best baseline's RA-F1).
10. **Precision of the late-sd verdicts** (added for issue 22's fourth round, before it ran; a measurement, not a
   selection: no variant, γ or default changes with it). Steps 5 and 9 judge the late-sd target on 3 seeds, and
   the third round's misses were 0.0004-0.0027 above the largest baseline's sd, about the size of that sd itself.
   Every held-out population (both held-out halves) runs the shipped reading at the shipped γ and the four
   baselines again on `PRECISION_SEEDS` (20) seeds, the study's 3 among them (same populations and samples);
   the tuning half too, reported apart as it is not evidence (added after the held-out halves were seen).
   Per population: the largest baseline is the one with the largest 20-seed mean late sd; the shipped reward's
   excess over it is the mean of the per-seed differences (paired: every run of one seed shares its population
   and samples), with that mean's standard error. Verdict: *no larger* (excess <= 0), *within noise* (0 < excess
   <= 2 standard errors: these seeds cannot tell the two apart), *larger* (excess > 2 standard
   errors). The 3-seed verdict of step 9 is listed beside it; the target's count (step 5) is not revised by it.
   Second part, added after the first part's verdicts were seen (a measurement too): in every population where
   the excess is *larger*, the 32 oracle rewards of step 9 on the same 20 seeds (`oracle_rows`), judged as
   step 9 judges them at step 9's level (the study's best-γ RA-F1 − 0.01) against the 20-seed largest baseline:
   *the RA-F1 targets' price* when none reaching the level is as steady, *missed* when one is.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reconstruction_study.py --out runs/study

Writes OUT/pops/NAME.json per population as it finishes (a rerun skips those: the study resumes) and step 10's
OUT/precision/NAME.json (likewise kept), then OUT/study.json and OUT/study.md (kept in the repo as
docs/reconstruction_study.md), and prints the selection.
About 90 minutes of CPU with the defaults (29 populations x 14 variants x 10 γ + 4 baselines, and 32 oracle
rewards on the 24 drawn populations, 3 seeds; `--jobs 2` took 45 minutes on 2 cores), and step 10 about 25 more
(the shipped reward and 4 baselines on 20 seeds in 24 populations, 12 minutes; 32 oracle rewards on 20 seeds
where the excess is larger, 2 minutes a population).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from awarl.config import AwarlConfig, load_config
from awarl.io import atomic_write_json, atomic_write_text, repo_root
from awarl.simulate import OracleReward, run_all, run_frozen_twins, run_oracles, summary_rows

POPULATION_SEED = 20261201
FRESH_SEED = 20261202        # step 6: the fresh held-out populations (issue 22, second round)
POPULATION_DISTRIBUTION = (
    "success of answerable queries ~ Beta(α, β), α and β log-uniform on [0.3, 3]; unanswerable share ~ U(0, 0.8); "
    "perception noise ~ U(0, 2.5) logits; skill gain 0 with probability 1/2, else ~ U(0, 0.003) logits per step; "
    "invalid rate 0 with probability 1/2, else ~ U(0, 0.3); the standard checkpoint's abstention rate "
    "log-uniform on [0.01, 0.3]")
NAMED = ("default", "paper_like", "format_failures", "skill_gain", "cautious_base")
# Extended below 0.25 where the previous optimum sat at the grid's edge; the first run of this protocol (grid from
# 0.05) put the tuning optimum at 0.05, the new edge, so 0.01 and 0.02 were added (rows of the other γ unchanged:
# every run has its own common random numbers, whatever else the grid holds).
# The third round added 0.005, below the several held-out populations whose best γ was 0.01, the grid's edge.
GAMMAS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0)
COLLAPSE_REFUSAL = 0.02      # "refusal collapsed": below this ...
BASELINE_REFUSES = 0.3       # ... while the best baseline refuses more than this
CLOSE_TO_BEST = 0.01         # "the shipped γ is within 0.01 RA-F1 of the best γ"
SELECT_TOL = 0.001           # step 4: mean leads this close are a tie, broken by the smaller late-phase refusal sd

# Every reward option a variant could move, written out in full for every variant.
_COMMON = {"reward.p_definition": "share_of_k", "reward.ema_start": "zero", "reward.p_online": "off"}


def _variant(rate: str, margin: float | None, floor: float | None, dither: float = 0.0, **extra: object) -> dict:
    return {**_COMMON, "reward.expected_rate": rate, "reward.r_ref_margin": margin,
            "reward.r_ref_floor_margin": floor, "reward.penalty_dither": dither, **extra}


# name -> reward overrides; "_role" marks the references and ablations, which are not candidates for the default.
VARIANTS: dict[str, dict] = {
    "paper spec": {**_variant("threshold", None, None), "_role": "reference"},
    "previous default": {**_variant("r_base_mean", 0.1, None), "_role": "reference"},
    "threshold + guards": _variant("threshold", 0.1, 0.05),
    "soft + guards": _variant("soft", 0.1, 0.05),
    "r_base_mean + guards": _variant("r_base_mean", 0.1, 0.05),
    "posterior + guards": _variant("posterior", 0.1, 0.05),
    "posterior, cap only": {**_variant("posterior", 0.1, None), "_role": "ablation"},
    "posterior + guards, floor 0": _variant("posterior", 0.1, 0.0),
    "posterior + guards, floor 0.02": _variant("posterior", 0.1, 0.02),
    "posterior + guards, floor 0.1": _variant("posterior", 0.1, 0.1),
    "posterior + guards, no penalty": {**_variant("posterior", 0.1, 0.05), "_role": "ablation"},
    # issue 22, second round: the same with each GRPO group's step drawn at Ē + u, u ~ U(-δ, δ)
    "posterior + guards, floor 0, dither 0.05": _variant("posterior", 0.1, 0.0, 0.05),
    "posterior + guards, floor 0, dither 0.1": _variant("posterior", 0.1, 0.0, 0.1),
    "posterior + guards, floor 0, dither 0.2": _variant("posterior", 0.1, 0.0, 0.2),
}
BASELINES = "simulate.strategies=[none, static, bapo]"
# Step 9: the feasibility control's stationary rewards, on the true success and on the pre-RL estimate.
ORACLE_THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7)
ORACLE_CHARGES = (0.0, 0.5)
ORACLES = tuple(OracleReward(th, ch, key) for key in ("success", "estimate") for ch in ORACLE_CHARGES
                for th in ORACLE_THRESHOLDS)
PRECISION_SEEDS = 20          # step 10: seeds behind each late-sd comparison of the precision check
PRECISION_SE = 2.0            # step 10: an excess beyond this many standard errors is "larger", below it "within noise"


def draw_populations(count: int, seed: int = POPULATION_SEED, fresh: bool = False) -> list[dict]:
    """`count` simulator populations from POPULATION_DISTRIBUTION, each {name, half, overrides}; the split
    (even index: tuning, odd: held-out) is part of the protocol, not of the results. `fresh`: step 6's
    populations, all held out (names fresh00, fresh01, ...)."""
    rng = np.random.default_rng(seed)

    def log_uniform(lo: float, hi: float) -> float:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    pops = []
    for k in range(count):
        params = {"success_alpha": log_uniform(0.3, 3.0), "success_beta": log_uniform(0.3, 3.0),
                  "unanswerable_share": float(rng.uniform(0.0, 0.8)),
                  "perception_noise": float(rng.uniform(0.0, 2.5)),
                  "skill_gain": 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.003)),
                  "invalid_rate": 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.3)),
                  "init_abstain_rate": log_uniform(0.01, 0.3)}
        half = "fresh held-out" if fresh else "tuning" if k % 2 == 0 else "held-out"
        pops.append({"name": f"{'fresh' if fresh else 'pop'}{k:02d}", "half": half,
                     "config": "configs/base.yaml",
                     "overrides": [f"simulate.{key}={val:.4g}" for key, val in params.items()], "params": params})
    return pops


def named_populations() -> list[dict]:
    return [{"name": n, "half": "named", "config": f"configs/simulate/{n}.yaml", "overrides": [], "params": {}}
            for n in NAMED]


def variant_overrides(options: dict) -> list[str]:
    def value(v: object) -> str:  # YAML text: strings quoted ("off" would read as false)
        return "null" if v is None else f'"{v}"' if isinstance(v, str) else str(v)

    return [f"{k}={value(v)}" for k, v in options.items() if not k.startswith("_")]


def population_config(pop: dict, seeds: int, steps: int | None, extra: list[str]) -> AwarlConfig:
    """The population's simulator config at `seeds` seeds and `steps` steps, with `extra` overrides."""
    path = repo_root() / pop["config"]
    return load_config(path, pop["overrides"] + [f"simulate.seeds={seeds}"] +
                       ([f"simulate.steps={steps}"] if steps else []) + extra)


def run_population(pop: dict, seeds: int, steps: int | None, done: dict | None = None) -> dict:
    """Baselines and every variant × γ of one population (seed means, std, late drift and sd). With `done` (an
    earlier result of the same population, seeds and steps), only the (variant, γ) cells it lacks are run."""
    if done is None:
        base_cfg = population_config(pop, seeds, steps, variant_overrides(VARIANTS["paper spec"]) + [BASELINES])
        done = {**pop, "seeds": seeds, "steps": steps, "variants": {},
                "baselines": summary_rows(run_all(base_cfg, progress=False))}
    out = {**done, "variants": dict(done["variants"])}
    for name, opts in VARIANTS.items():
        have = {r["gamma"] for r in out["variants"].get(name, [])}
        todo = [g for g in GAMMAS if g not in have]
        if not todo:
            continue
        strat = "awarl_no_penalty" if name.endswith("no penalty") else "awarl"
        grid = "simulate.gammas=[" + ", ".join(f"{g:g}" for g in todo) + "]"
        cfg = population_config(pop, seeds, steps, variant_overrides(opts) + [grid, f"simulate.strategies=[{strat}]"])
        rows = out["variants"].get(name, []) + summary_rows(run_all(cfg, progress=False))
        out["variants"][name] = sorted(rows, key=lambda r: r["gamma"])
    if pop["half"] != "named" and "oracles" not in out:
        out["oracles"] = oracle_rows(pop, seeds, steps)
    return out


def oracle_rows(pop: dict, seeds: int, steps: int | None) -> list[dict]:
    """Step 9's oracle rewards (`ORACLES`) on one population: a summary row each (with each seed's late sd), with
    the reward's key, threshold and charge."""
    cfg = population_config(pop, seeds, steps, variant_overrides(VARIANTS["paper spec"]))
    rows = summary_rows(run_oracles(cfg, ORACLES))
    return [{**row, "key": o.key, "threshold": o.threshold, "charge": o.charge}
            for o, row in zip(ORACLES, rows, strict=True)]


# ------------------------------------------------------------------------------------------- analysis
def best_baseline(pop: dict) -> dict:
    return max(pop["baselines"], key=lambda r: r["ra_f1"])


def row_at(pop: dict, variant: str, gamma: float) -> dict:
    return next(r for r in pop["variants"][variant] if abs(r["gamma"] - gamma) < 1e-12)


def collapsed(row: dict, rival: dict) -> bool:
    return row["refusal_rate"] < COLLAPSE_REFUSAL and rival["refusal_rate"] > BASELINE_REFUSES


def candidates() -> list[str]:
    return [n for n, o in VARIANTS.items() if not o.get("_role")]


def selection_table(pops: list[dict], names: list[str] | None = None) -> list[dict]:
    """Every (variant, γ) of `names` (default: the candidates) scored on `pops`: mean RA-F1 lead over each
    population's best baseline, its worst lead, and how many populations it collapses in."""
    out = []
    for name in candidates() if names is None else names:
        for g in GAMMAS:
            leads, sds, falls = [], [], 0
            for pop in pops:
                row, rival = row_at(pop, name, g), best_baseline(pop)
                leads.append(row["ra_f1"] - rival["ra_f1"])
                sds.append(row["late_sd"])
                falls += collapsed(row, rival)
            out.append({"variant": name, "gamma": g, "mean_lead": float(np.mean(leads)),
                        "min_lead": float(np.min(leads)), "mean_late_sd": float(np.mean(sds)), "collapses": falls})
    return sorted(out, key=lambda r: -r["mean_lead"])


def select_default(pops: list[dict]) -> dict:
    """Step 4 of the protocol. `pops` must be the tuning half only."""
    assert all(p["half"] == "tuning" for p in pops), "the default is chosen on the tuning half only"
    table = [r for r in selection_table(pops) if r["collapses"] == 0]
    tied = [r for r in table if r["mean_lead"] >= table[0]["mean_lead"] - SELECT_TOL]
    return min(tied, key=lambda r: (r["mean_late_sd"], -r["mean_lead"]))


def judge_population(pop: dict, variant: str, gamma: float, frozen: dict | None = None) -> dict:
    """The issue's targets on one population for the shipped reading `variant` at the shipped `gamma`; `frozen`
    (a `frozen_check` row of this population) adds the frozen-feedback control of step 7."""
    rival = best_baseline(pop)
    rows = pop["variants"][variant]
    best = max(rows, key=lambda r: r["ra_f1"])
    shipped = row_at(pop, variant, gamma)
    sd = max(best["ra_f1_sd"], rival["ra_f1_sd"])
    base_sd = [b["late_sd"] for b in pop["baselines"]]
    return {"population": pop["name"], "half": pop["half"], "rival": rival["label"], "rival_ra_f1": rival["ra_f1"],
            "rival_sd": rival["ra_f1_sd"], "rival_refusal": rival["refusal_rate"], "best_gamma": best["gamma"],
            "best_ra_f1": best["ra_f1"], "best_sd": best["ra_f1_sd"], "best_refusal": best["refusal_rate"],
            "lead": best["ra_f1"] - rival["ra_f1"], "sd": sd, "within_sd": best["ra_f1"] >= rival["ra_f1"] - sd,
            "ahead": best["ra_f1"] > rival["ra_f1"], "shipped_ra_f1": shipped["ra_f1"],
            "shipped_refusal": shipped["refusal_rate"], "shipped_gap": best["ra_f1"] - shipped["ra_f1"],
            "shipped_close": best["ra_f1"] - shipped["ra_f1"] <= CLOSE_TO_BEST,
            "collapse": any(collapsed(r, rival) for r in rows), "shipped_late_sd": shipped["late_sd"],
            "baseline_late_sd_max": max(base_sd), "baseline_late_sd_min": min(base_sd),
            "late_sd_ok": shipped["late_sd"] <= max(base_sd),
            **({"frozen_late_sd": frozen["frozen_late_sd"], "frozen_refusal": frozen["frozen_refusal"],
                "late_sd_vs_frozen_ok": shipped["late_sd"] <= frozen["frozen_late_sd"]} if frozen else {})}


def least_sd_at(rows: list[dict], min_ra_f1: float) -> dict | None:
    """The steadiest of `rows` (smallest late-phase refusal sd) among those reaching `min_ra_f1`, or None."""
    reach = [r for r in rows if r["ra_f1"] >= min_ra_f1]
    return min(reach, key=lambda r: r["late_sd"]) if reach else None


def feasibility(pop: dict, variant: str, gamma: float) -> dict:
    """Step 9 on one population. The RA-F1 targets hold the shipped γ to within CLOSE_TO_BEST of the best γ's
    RA-F1; at that level (`level`), and at the best baseline's RA-F1, the steadiest oracle reward of each key,
    against the largest baseline late sd. The verdict on the late-sd target: met by the shipped reward; missed
    (some oracle reward at `level` is as steady as the most variable baseline); or incompatible with the RA-F1
    targets (none is)."""
    rival, shipped = best_baseline(pop), row_at(pop, variant, gamma)
    best = max(pop["variants"][variant], key=lambda r: r["ra_f1"])
    base_sd = max(b["late_sd"] for b in pop["baselines"])
    level = best["ra_f1"] - CLOSE_TO_BEST
    out: dict = {"population": pop["name"], "half": pop["half"], "rival": rival["label"],
                 "rival_ra_f1": rival["ra_f1"], "baseline_late_sd_max": base_sd, "best_gamma": best["gamma"],
                 "best_ra_f1": best["ra_f1"], "level": level, "shipped_ra_f1": shipped["ra_f1"],
                 "shipped_late_sd": shipped["late_sd"], "shipped_refusal": shipped["refusal_rate"],
                 "at_rival": least_sd_at(pop["oracles"], rival["ra_f1"])}
    compatible = False
    for key in ("success", "estimate"):
        at_level = least_sd_at([r for r in pop["oracles"] if r["key"] == key], level)
        out[f"{key}_at_level"] = at_level
        compatible |= at_level is not None and at_level["late_sd"] <= base_sd
    out["compatible"] = compatible
    out["verdict"] = "met" if shipped["late_sd"] <= base_sd else "missed" if compatible else "incompatible"
    return out


def frozen_check(pops: list[dict], variant: str, gamma: float, seeds: int, steps: int | None,
                 lr_schedule: str = "constant") -> dict[str, dict]:
    """Step 7: per population, the chosen reward at the chosen γ and its frozen twin (Ē held at the mean the run
    settled at), late-phase refusal sd and final refusal of each, means over seeds."""
    out = {}
    for pop in pops:
        cfg = population_config(pop, seeds, steps, variant_overrides(VARIANTS[variant]) + [f"simulate.lr_schedule={lr_schedule}"])
        live, frozen = (summary_rows(runs)[0] for runs in run_frozen_twins(cfg, gamma))
        out[pop["name"]] = {"population": pop["name"], "live_late_sd": live["late_sd"], "live_ra_f1": live["ra_f1"],
                            "live_refusal": live["refusal_rate"], "frozen_late_sd": frozen["late_sd"],
                            "frozen_refusal": frozen["refusal_rate"], "frozen_ra_f1": frozen["ra_f1"]}
    return out


def precision_population(pop: dict, variant: str, gamma: float, seeds: int = PRECISION_SEEDS,
                         steps: int | None = None) -> dict:
    """Step 10 on one population: the shipped reading at `gamma` and the baselines on `seeds` seeds, each run's
    late-phase refusal sd per seed (`late_sd_seeds`, in seed order) and its RA-F1."""
    cfg = population_config(pop, seeds, steps, variant_overrides(VARIANTS[variant]) +
                  [f"simulate.gammas=[{gamma:g}]", "simulate.strategies=[awarl, none, static, bapo]"])
    rows = summary_rows(run_all(cfg, progress=False))
    keep = ("label", "strategy", "ra_f1", "ra_f1_sd", "refusal_rate", "late_sd", "late_sd_seeds")
    shipped = next(r for r in rows if r["strategy"] == "awarl")
    return {"population": pop["name"], "half": pop["half"], "overrides": pop["overrides"], "variant": variant,
            "gamma": gamma, "seeds": seeds, "steps": steps, "shipped": {k: shipped[k] for k in keep},
            "baselines": [{k: r[k] for k in keep} for r in rows if r["strategy"] != "awarl"]}


def oracle_verdict(verdict: dict, oracles: list[dict], level: float) -> dict:
    """Step 10's second part: the steadiest of `oracles` (any key) reaching `level` against the largest baseline's
    late sd of `verdict` (a `precision_verdict`): the RA-F1 targets' price when it is steadier than no baseline
    (or none reaches `level`), missed otherwise."""
    steadiest = least_sd_at(oracles, level)
    price = steadiest is None or steadiest["late_sd"] > verdict["rival_late_sd"]
    return {**verdict, "level": level, "oracle_at_level": steadiest, "oracle_verdict": "price" if price else "missed"}


def precision_verdict(cell: dict, se_limit: float = PRECISION_SE) -> dict:
    """Step 10's verdict on one `precision_population` cell: the shipped reward's late sd against the largest
    baseline's (by mean over seeds), the excess as the mean of the paired per-seed differences and its standard
    error; *no larger* (excess <= 0), *within noise* (<= `se_limit` standard errors) or *larger*."""
    shipped = cell["shipped"]
    rival = max(cell["baselines"], key=lambda r: r["late_sd"])
    diff = np.asarray(shipped["late_sd_seeds"]) - np.asarray(rival["late_sd_seeds"])
    if len(diff) < 2:
        raise ValueError(f"{cell['population']}: a standard error needs at least 2 seeds, got {len(diff)}")
    excess, se = float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(len(diff)))
    verdict = "no larger" if excess <= 0 else "within noise" if excess <= se_limit * se else "larger"
    best = best_baseline(cell)
    return {"population": cell["population"], "half": cell["half"], "seeds": len(diff),
            "shipped_late_sd": shipped["late_sd"], "shipped_ra_f1": shipped["ra_f1"],
            "shipped_refusal": shipped["refusal_rate"], "rival": rival["label"], "rival_late_sd": rival["late_sd"],
            "excess": excess, "excess_se": se, "verdict": verdict,
            "best_baseline": best["label"], "best_baseline_ra_f1": best["ra_f1"]}


# ------------------------------------------------------------------------------------------- report
def _f(x: float) -> str:
    return f"{x:.3f}"


def population_table(pops: list[dict]) -> list[str]:
    lines = ["| population | half | α | β | unanswerable | noise | skill gain | invalid | init abstain | "
             "plain-GRPO accuracy |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in pops:
        q = p["params"]
        none = next(b for b in p["baselines"] if b["strategy"] == "none")
        if q:
            cells = [f"{q['success_alpha']:.2f}", f"{q['success_beta']:.2f}", f"{q['unanswerable_share']:.2f}",
                     f"{q['perception_noise']:.2f}", f"{q['skill_gain']:.4f}", f"{q['invalid_rate']:.2f}",
                     f"{q['init_abstain_rate']:.3f}"]
        else:
            cells = [f"`{p['config']}`"] + [""] * 6
        lines.append(f"| {p['name']} | {p['half']} | " + " | ".join(cells) + f" | {_f(none['accuracy'])} |")
    return lines


def targets_table(judged: list[dict]) -> list[str]:
    twin = all("frozen_late_sd" in j for j in judged)
    lines = ["| population | best baseline: RA-F1 ± sd (refusal) | AWA-RL best γ: RA-F1 ± sd (refusal) | lead | "
             ">= best − 1 sd | ahead | shipped γ: RA-F1 (gap to best γ) | collapse | late refusal sd: "
             "shipped / baselines min–max |" + (" frozen twin: late sd (refusal) |" if twin else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if twin else "")]
    for j in judged:
        lines.append(
            f"| {j['population']} | {j['rival']}: {_f(j['rival_ra_f1'])} ± {_f(j['rival_sd'])} "
            f"({j['rival_refusal']:.2f}) | γ={j['best_gamma']:g}: {_f(j['best_ra_f1'])} ± {_f(j['best_sd'])} "
            f"({j['best_refusal']:.2f}) | {j['lead']:+.3f} | {'yes' if j['within_sd'] else '**no**'} | "
            f"{'yes' if j['ahead'] else 'no'} | {_f(j['shipped_ra_f1'])} ({j['shipped_gap']:+.3f}) | "
            f"{'**yes**' if j['collapse'] else 'no'} | {j['shipped_late_sd']:.4f} / {j['baseline_late_sd_min']:.4f}–"
            f"{j['baseline_late_sd_max']:.4f} |" + (f" {j['frozen_late_sd']:.4f} ({j['frozen_refusal']:.2f}) |" if twin else ""))
    n = len(judged)
    if n:
        lines += ["", f"In {n} populations: AWA-RL (best γ) at least the best baseline − 1 sd in "
                  f"{sum(j['within_sd'] for j in judged)}, strictly ahead in {sum(j['ahead'] for j in judged)}; "
                  f"refusal collapse in {sum(j['collapse'] for j in judged)}; the shipped γ within {CLOSE_TO_BEST:g} "
                  f"RA-F1 of the best γ in {sum(j['shipped_close'] for j in judged)}; late refusal sd no larger than "
                  f"the largest baseline's in {sum(j['late_sd_ok'] for j in judged)}"
                  + (f", no larger than its frozen twin's in {sum(j['late_sd_vs_frozen_ok'] for j in judged)}"
                     if twin else "") + "."]
    return lines


def _oracle_cell(row: dict | None) -> str:
    if row is None:
        return "none reaches it"
    what = "s" if row["key"] == "success" else "p"
    return (f"{row['late_sd']:.4f} ({what} < {row['threshold']:g}, charge {row['charge']:g}: RA-F1 "
            f"{_f(row['ra_f1'])}, refusal {row['refusal_rate']:.2f})")


def feasibility_table(rows: list[dict]) -> list[str]:
    lines = ["| population | best baseline: RA-F1 | largest baseline late sd | shipped: RA-F1 (refusal), late sd | "
             "steadiest oracle at ≥ the best baseline's RA-F1 | AWA-RL best γ: RA-F1 | steadiest oracle on s_i at ≥ "
             f"best γ − {CLOSE_TO_BEST:g} | the same on p_i | late-sd target |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = {"met": "met", "missed": "**missed**", "incompatible": "incompatible"}[r["verdict"]]
        lines.append(f"| {r['population']} | {r['rival']}: {_f(r['rival_ra_f1'])} | {r['baseline_late_sd_max']:.4f} | "
                     f"{_f(r['shipped_ra_f1'])} ({r['shipped_refusal']:.2f}), {r['shipped_late_sd']:.4f} | "
                     f"{_oracle_cell(r['at_rival'])} | γ={r['best_gamma']:g}: {_f(r['best_ra_f1'])} | "
                     f"{_oracle_cell(r['success_at_level'])} | {_oracle_cell(r['estimate_at_level'])} | {verdict} |")
    n = len(rows)
    if n:
        count = {v: sum(r["verdict"] == v for r in rows) for v in ("met", "missed", "incompatible")}
        lines += ["", f"In {n} populations: the late-sd target met in {count['met']}; incompatible with the RA-F1 "
                  f"targets for every oracle reward in {count['incompatible']}; missed, where an oracle reward within "
                  f"{CLOSE_TO_BEST:g} of the best γ's RA-F1 is as steady as the baselines, in {count['missed']}."]
    return lines


def precision_table(rows: list[dict], step9: dict[str, str] | None = None) -> list[str]:
    """Step 10's rows; `step9`: the 3-seed feasibility verdict of each population, listed beside."""
    lines = ["| population | shipped: RA-F1 (refusal) | shipped late sd | largest baseline: late sd | excess ± se | "
             "verdict | 3-seed verdict (step 9) | where larger: steadiest oracle at step 9's level, same seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = f"**{r['verdict']}**" if r["verdict"] == "larger" else r["verdict"]
        lines.append(f"| {r['population']} | {_f(r['shipped_ra_f1'])} ({r['shipped_refusal']:.2f}) | "
                     f"{r['shipped_late_sd']:.4f} | {r['rival']}: {r['rival_late_sd']:.4f} | "
                     f"{r['excess']:+.4f} ± {r['excess_se']:.4f} | {verdict} | {(step9 or {}).get(r['population'], '')} | "
                     + (f"{_oracle_cell(r['oracle_at_level'])} at ≥ {_f(r['level'])}: "
                        + ("**missed**" if r["oracle_verdict"] == "missed" else "the RA-F1 targets' price")
                        if "oracle_verdict" in r else "") + " |")
    n = len(rows)
    if n:
        count = {v: sum(r["verdict"] == v for r in rows) for v in ("no larger", "within noise", "larger")}
        lines += ["", f"In {n} populations ({rows[0]['seeds']} seeds): the shipped reward's late refusal sd no larger "
                  f"than the largest baseline's in {count['no larger']}, larger but within {PRECISION_SE:g} standard "
                  f"errors in {count['within noise']}, larger beyond them in {count['larger']}"
                  + (f" (of which the RA-F1 targets' price, no oracle reward at step 9's level as steady as the "
                     f"largest baseline, in {sum(r.get('oracle_verdict') == 'price' for r in rows)})"
                     if count["larger"] else "") + "."]
    return lines


def variants_summary(pops: list[dict], gamma_of: dict[str, float]) -> list[str]:
    """Per variant: mean lead over the best baseline at its best-on-tuning γ and at its best γ per population."""
    lines = ["| variant | γ chosen on tuning | mean lead at that γ | mean lead at each population's best γ | "
             "worst lead at that γ | collapses (any γ) |", "|---|---|---|---|---|---|"]
    for name in VARIANTS:
        g = gamma_of[name]
        at_g = [row_at(p, name, g)["ra_f1"] - best_baseline(p)["ra_f1"] for p in pops]
        best = [max(r["ra_f1"] for r in p["variants"][name]) - best_baseline(p)["ra_f1"] for p in pops]
        falls = sum(any(collapsed(r, best_baseline(p)) for r in p["variants"][name]) for p in pops)
        lines.append(f"| {name} | {g:g} | {np.mean(at_g):+.4f} | {np.mean(best):+.4f} | {min(at_g):+.3f} | {falls} |")
    return lines


def full_population_block(pop: dict) -> list[str]:
    cmd = f"awarl simulate --config {pop['config']} " + " ".join(shlex.quote(o) for o in pop["overrides"]) + \
        f" --seeds {pop['seeds']}"
    lines = [f"### {pop['name']} ({pop['half']})", "", f"`{cmd}` plus a variant's reward overrides (list above).", "",
             "Baselines (refusal / P / A / RA-F1 ± sd / late sd): " + "; ".join(
                 f"{b['label']} {b['refusal_rate']:.2f} / {_f(b['precision'])} / {_f(b['accuracy'])} / "
                 f"{_f(b['ra_f1'])} ± {_f(b['ra_f1_sd'])} / {b['late_sd']:.3f}" for b in pop["baselines"]), "",
             "| variant | " + " | ".join(f"γ={g:g}" for g in GAMMAS) + " |", "|---|" + "---|" * len(GAMMAS)]
    for name in VARIANTS:
        cells = [f"{_f(r['ra_f1'])} ({r['refusal_rate']:.2f})" for r in pop["variants"][name]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + [""]


HALVES = (("fresh held-out", "Fresh held-out populations: the evidence"),
          ("held-out", "First held-out half (evidence for the first round; looked at while the dither was designed)"),
          ("tuning", "Tuning half (not evidence: the default was chosen here)"),
          ("named", "The named populations (chose the first default)"))


def _half_heading(title: str) -> str:
    """A half's short name for the sub-headings of a section ("Fresh held-out populations", ...)."""
    return title.split(":")[0].split(" (")[0]


def _per_half(rows: list[dict], table: Callable[[list[dict]], list[str]],
              halves: Sequence[tuple[str, str]]) -> list[str]:
    """`table` of `rows` for each of `halves` that has rows, under the half's sub-heading."""
    lines: list[str] = []
    for half, title in halves:
        mine = [r for r in rows if r["half"] == half]
        if mine:
            lines += [f"{_half_heading(title)}:", ""] + table(mine) + [""]
    return lines


def report(results: list[dict], chosen: dict, tuning_table: list[dict], seeds: int,
           stability: list[dict] | None = None, frozen: dict[str, dict] | None = None,
           feasible: list[dict] | None = None, precise: list[dict] | None = None) -> str:
    by_half = {h: [p for p in results if p["half"] == h] for h, _ in HALVES}
    v, g = chosen["variant"], chosen["gamma"]
    every = selection_table(by_half["tuning"], list(VARIANTS))
    best_g = {name: max((r for r in every if r["variant"] == name), key=lambda r: r["mean_lead"])["gamma"]
              for name in VARIANTS}
    lines = ["# Reconstruction study: a default chosen on populations it is not judged on", "",
             f"Generated by `scripts/reconstruction_study.py` ({seeds} seeds, {len(results)} populations). The "
             "protocol is the script's docstring, fixed before its results were seen; docs/method.md \"The "
             "penalty's target\" and \"Reconstruction choices\" read the results.", "",
             f"Population distribution: {POPULATION_DISTRIBUTION} (seed {POPULATION_SEED}). Even-numbered "
             "populations form the tuning half, odd-numbered ones the held-out half; the five named populations of "
             "configs/simulate/ chose the first default and are reported apart. The fresh held-out populations "
             f"(fresh00, ...) are drawn from the same distribution with seed {FRESH_SEED}, for the second round's "
             "choice (protocol step 6).", "",
             "Reward variants (every option written out; all use p_definition share_of_k, ema_start zero, "
             "p_online off):", ""]
    for name, opts in VARIANTS.items():
        lines.append(f"- **{name}**: `{' '.join(variant_overrides(opts))}`" + (f" ({opts['_role']})" if opts.get("_role") else ""))
    lines += ["", "## Populations", ""] + population_table(results)
    lines += ["", "## Selection on the tuning half", "",
              "Score: mean over the tuning populations of RA-F1 minus the population's best baseline RA-F1 "
              f"(a (variant, γ) that collapses refusal in a tuning population is excluded); leads within "
              f"{SELECT_TOL:g} of the best are a tie, broken by the smaller mean late-phase refusal sd. Top 15 of "
              f"{len(tuning_table)}:", "", "| variant | γ | mean lead | worst lead | mean late refusal sd | collapses |",
              "|---|---|---|---|---|---|"]
    for r in tuning_table[:15]:
        lines.append(f"| {r['variant']} | {r['gamma']:g} | {r['mean_lead']:+.4f} | {r['min_lead']:+.3f} | "
                     f"{r['mean_late_sd']:.4f} | {r['collapses']} |")
    lines += ["", f"**Chosen: {v}, γ = {g:g}** (configs/base.yaml).", ""]
    for half, title in HALVES:
        pops = by_half[half]
        if not pops:
            continue
        lines += [f"## {title}", "", f"The shipped reading ({v}) at its best γ per population and at the shipped "
                  f"γ = {g:g}, against the best of plain GRPO, static 0.05 / 0.3 and BAPO:", ""]
        lines += targets_table([judge_population(p, v, g, (frozen or {}).get(p["name"])) for p in pops])
        lines += ["", "Every variant on this half (γ chosen on the tuning half):", ""] + variants_summary(pops, best_g)
        lines += [""]
    if stability:
        lines += ["## Held-out populations under the trainer's learning-rate schedule", "",
                  "Step 8 of the protocol: the study's simulator keeps the step size constant; `awarl train` decays "
                  "it linearly to 0 (TRL's default). The shipped reading at the shipped γ (and its frozen twin) and "
                  "the baselines again, `simulate.lr_schedule=linear`, final values, mean over seeds:", ""]
        lines += _per_half(stability, stability_table, HALVES[:2])
    if feasible:
        lines += ["## Can any reward meet the late-sd target? (protocol step 9)", "",
                  "The feasibility control: stationary rewards that pay refusing (r_wrong + 0.05) where a query's key "
                  "is below a threshold and tie with (charge 0) or fall below (charge 0.5) a wrong answer elsewhere, "
                  "the key being the query's true success s_i (no training reward can know it) or its pre-RL p_i "
                  f"(what AWA-RL knows); thresholds {', '.join(f'{x:g}' for x in ORACLE_THRESHOLDS)}. Each cell names "
                  "the steadiest such reward (smallest late-phase refusal sd) among those reaching the RA-F1 in its "
                  "header. The RA-F1 targets hold the shipped γ to within "
                  f"{CLOSE_TO_BEST:g} of the best γ's RA-F1: *incompatible* says that no oracle reward reaching that "
                  "level is as steady as the most variable baseline, *missed* that one is and the shipped reward is "
                  "not, *met* that the shipped reward is.", ""]
        lines += _per_half(feasible, feasibility_table, HALVES)
    if precise:
        step9 = {r["population"]: r["verdict"] for r in feasible or []}
        lines += ["## How sure is each late-sd verdict? (protocol step 10)", "",
                  f"The shipped reading at the shipped γ and the four baselines again on {precise[0]['seeds']} seeds "
                  "(the study's among them). *excess*: the mean over seeds of the shipped reward's late refusal sd "
                  "minus the largest baseline's (the baseline with the largest mean), each seed's runs sharing their "
                  f"population and samples, ± its standard error. *within noise*: larger by at most {PRECISION_SE:g} "
                  "standard errors; *larger*: beyond them. RA-F1 and refusal are the means over these seeds. Where "
                  "the excess is larger, the last column runs step 9's oracle rewards on the same seeds and names the "
                  "steadiest reaching step 9's level: *missed* if it is steadier than the largest baseline, else "
                  "the RA-F1 targets' price.", ""]
        lines += _per_half(precise, lambda rows: precision_table(rows, step9), HALVES[:3])
    lines += ["## Full tables", "", "RA-F1 (refusal) of every variant at every γ, mean over seeds.", ""]
    for p in results:
        lines += full_population_block(p)
    return "\n".join(lines)


def stability_check(pops: list[dict], variant: str, gamma: float, seeds: int, steps: int | None) -> list[dict]:
    """Step 8: the shipped reading at the shipped γ (with its frozen twin) and the baselines under a linearly
    decayed step size."""
    out = []
    twins = frozen_check(pops, variant, gamma, seeds, steps, lr_schedule="linear")
    for pop in pops:
        base = summary_rows(run_all(population_config(pop, seeds, steps, ["simulate.lr_schedule=linear", BASELINES]
                                            + variant_overrides(VARIANTS["paper spec"])), progress=False))
        twin = twins[pop["name"]]
        rival = max(base, key=lambda r: r["ra_f1"])
        out.append({"population": pop["name"], "half": pop["half"], "ra_f1": twin["live_ra_f1"],
                    "late_sd": twin["live_late_sd"], "refusal": twin["live_refusal"],
                    "frozen_late_sd": twin["frozen_late_sd"], "rival": rival["label"], "rival_ra_f1": rival["ra_f1"],
                    "baseline_late_sd_min": min(b["late_sd"] for b in base),
                    "baseline_late_sd_max": max(b["late_sd"] for b in base)})
    return out


def stability_table(rows: list[dict]) -> list[str]:
    lines = ["| population | shipped: RA-F1 (refusal) | best baseline: RA-F1 | late refusal sd: shipped / baselines "
             "min–max / frozen twin |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['population']} | {_f(r['ra_f1'])} ({r['refusal']:.2f}) | {r['rival']}: "
                     f"{_f(r['rival_ra_f1'])} | {r['late_sd']:.4f} / {r['baseline_late_sd_min']:.4f}–"
                     f"{r['baseline_late_sd_max']:.4f} / {r['frozen_late_sd']:.4f} |")
    n = len(rows)
    if n:
        lines += ["", f"In {n} populations: late refusal sd no larger than the largest baseline's in "
                  f"{sum(r['late_sd'] <= r['baseline_late_sd_max'] for r in rows)}, no larger than the frozen twin's "
                  f"in {sum(r['late_sd'] <= r['frozen_late_sd'] for r in rows)}."]
    return lines


def _run_one(args: tuple[dict, int, int | None, str]) -> str:
    pop, seeds, steps, out = args
    path = Path(out) / "pops" / f"{pop['name']}.json"
    done = json.loads(path.read_text()) if path.exists() else None
    if done is not None and (done.get("seeds"), done.get("steps"), done.get("overrides")) != \
            (seeds, steps, pop["overrides"]):
        done = None  # another study's cell: start this population again
    atomic_write_json(path, run_population(pop, seeds, steps, done))
    return pop["name"]


def _kept(path: Path, want: dict, compute: Callable[[], dict]) -> dict:
    """The JSON of `path` when it holds every key of `want` with that value (a finished cell of the same
    settings: the study resumes), else `compute()`, written there atomically."""
    if path.exists():
        done = json.loads(path.read_text())
        if all(done.get(k) == v for k, v in want.items()):
            return done
    cell = compute()
    atomic_write_json(path, cell)
    return cell


def _precision_one(args: tuple[dict, str, float, int, int | None, str]) -> dict:
    """Step 10 on one population, kept in OUT/precision/NAME.json."""
    pop, variant, gamma, seeds, steps, out = args
    want = {"variant": variant, "gamma": gamma, "seeds": seeds, "steps": steps, "overrides": pop["overrides"]}
    return _kept(Path(out) / "precision" / f"{pop['name']}.json", want,
                 lambda: precision_population(pop, variant, gamma, seeds, steps))


def _precision_oracles(pop: dict, seeds: int, steps: int | None, out: str) -> list[dict]:
    """Step 10's second part on one population (`oracle_rows` on the precision seeds), kept in
    OUT/precision/NAME.oracles.json."""
    want = {"seeds": seeds, "steps": steps, "overrides": pop["overrides"]}
    return _kept(Path(out) / "precision" / f"{pop['name']}.oracles.json", want,
                 lambda: {**want, "oracles": oracle_rows(pop, seeds, steps)})["oracles"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/study", help="output folder (default: runs/study)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (default 3)")
    ap.add_argument("--steps", type=int, help="steps per run (default: simulate.steps, 1000)")
    ap.add_argument("--populations", type=int, default=16, help="drawn populations (default 16, half of them tuning)")
    ap.add_argument("--fresh", type=int, default=8, help="fresh held-out populations (default 8; step 6)")
    ap.add_argument("--no-named", action="store_true", help="skip the five named populations")
    ap.add_argument("--jobs", type=int, default=1, help="populations simulated in parallel processes")
    ap.add_argument("--precision-seeds", type=int, default=PRECISION_SEEDS,
                    help=f"seeds of step 10's late-sd comparison (default {PRECISION_SEEDS})")
    args = ap.parse_args(argv)
    out = Path(args.out)
    (out / "pops").mkdir(parents=True, exist_ok=True)
    pops = draw_populations(args.populations) + draw_populations(args.fresh, FRESH_SEED, fresh=True) + \
        ([] if args.no_named else named_populations())
    t0 = time.time()
    work = [(p, args.seeds, args.steps, str(out)) for p in pops]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for k, name in enumerate(pool.map(_run_one, work), 1):
            print(f"{name}: done ({k}/{len(work)}, {time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    results = [json.loads((out / "pops" / f"{p['name']}.json").read_text()) for p in pops]
    tuning = [p for p in results if p["half"] == "tuning"]
    table = selection_table(tuning)
    chosen = select_default(tuning)
    v, g = chosen["variant"], chosen["gamma"]
    print(f"chosen on the tuning half: {chosen}", flush=True)
    frozen = frozen_check(results, v, g, args.seeds, args.steps)
    held_pops = [p for p in results if p["half"] in ("fresh held-out", "held-out")]
    held = [judge_population(p, v, g, frozen[p["name"]]) for p in held_pops]
    stability = stability_check(held_pops, v, g, args.seeds, args.steps)
    feasible = [feasibility(p, v, g) for p in results if "oracles" in p]
    (out / "precision").mkdir(exist_ok=True)
    checked = held_pops + tuning
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        cells = list(pool.map(_precision_one, [(p, v, g, args.precision_seeds, args.steps, str(out))
                                               for p in checked]))
    level = {f["population"]: f["level"] for f in feasible}
    precise = []
    for pop, cell in zip(checked, cells, strict=True):
        r = precision_verdict(cell)
        if r["verdict"] == "larger":
            oracles = _precision_oracles(pop, args.precision_seeds, args.steps, str(out))
            r = oracle_verdict(r, oracles, level[pop["name"]])
        precise.append(r)
    atomic_write_json(out / "study.json", {"seeds": args.seeds, "chosen": chosen, "selection": table,
                                           "held_out": held, "frozen": frozen, "stability_linear_lr": stability,
                                           "feasibility": feasible, "precision": precise, "results": results})
    atomic_write_text(out / "study.md", report(results, chosen, table, args.seeds, stability, frozen, feasible,
                                               precise))
    print("\n".join(targets_table(held)))
    print("\n".join(feasibility_table([f for f in feasible if f["half"] != "tuning"])))
    print("\n".join(precision_table([r for r in precise if r["half"] != "tuning"])))
    print(f"\nwrote {out}/study.json, {out}/study.md ({time.time() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
