"""Round 4 of the reward study (issue 41): a p_i that follows a policy that learns, judged on a simulator that
does not share the reward's assumptions, under both GRPO advantage normalisations.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md).

0. **Pilot (before this protocol; exploration, not evidence).** Two pilot populations (45% latent queries at
   success 0.03, the rest Beta(1.2, 2), 10% unanswerable, skill gain 0.003 logits a step; "dead": the latent
   ones never improve) were looked at while `reward.p_online: group` was designed: which prior weights λ,
   which of the unflattering simulator options move what. They are not among the study's populations. The filed
   cases (configs/simulate/grow.yaml, dead.yaml and their `_once` versions) were run once before this protocol
   at the old default (the "before" figures of issue 41), not with any new variant.
1. **Populations.** `draw_populations` draws `POPULATIONS` (16) simulator environments from
   `LEARNING_DISTRIBUTION` with `LEARNING_SEED`: the previous rounds' distribution plus what a learning policy
   brings (latent queries that improve or stay dead, skill that grows, each query seen once) and each of the four
   unflattering options of docs/simulator.md on with probability 1/2, independently.
2. **Split before looking.** Population k is tuning when k is even, held-out when k is odd.
3. **Cells.** Every population runs under both GRPO advantage normalisations: `group` (divide by the group's
   reward std: TRL's `scale_rewards: group`, its default) and `none` (only subtract the group mean: TRL's
   `scale_rewards: none`, Dr. GRPO). A (population, normalisation) pair is a cell: 16 tuning, 16 held-out.
4. **Grid.** Every reward variant of `VARIANTS` × γ in `GAMMAS`, and the baselines plain GRPO, static 0.05 and
   BAPO (0.5); `SEEDS` seeds (0, 1, 2), 1000 steps. Values are final population values, means over seeds.
   Every variant is the shipped reward (posterior ρ̂, cap 0.1, floor 0, dither 0.2, prior 0.5) but for
   `reward.p_online` and `reward.p_prior_weight`; "old default" is p_online off, i.e. the reward as shipped
   before this round (its γ 0.02 is in the grid).
5. **Selection (tuning cells only).** Candidates: every (variant, γ). Excluded: (a) any that collapses refusal
   (< 0.02 while the best baseline refuses > 0.3) in a tuning cell; (b) any that misses a filed-case target in
   a filed cell (the four filed configs × both normalisations, seeds 0-2): on grow and grow_once RA-F1 ≥ plain
   GRPO's − 1 sd, on dead and dead_once ≥ the best baseline's − 1 sd (sd: the larger of the two seed sds).
   Among the rest, the largest mean over tuning cells of RA-F1 minus the cell's best baseline RA-F1; choices
   within `SELECT_TOL` (0.001) of it are a tie, broken by the smaller mean late-phase refusal sd. If (b) leaves
   no candidate, the choice is made without it and the report says so. The filed cases are therefore
   constraints of the selection, never evidence.
6. **Stability of the selection.** Step 5 re-run on two fresh seed blocks of the tuning cells (seeds 100-102 and
   200-202, filed cells included): each block's choice, and the rank of the main choice in each block.
7. **The prior and K** (stage 2, tuning cells, seeds 0-2): the chosen (variant, γ) with `reward.posterior_prior`
   in `PRIORS`, chosen by step 5's rule among them (a tie keeps 0.5, the shipped prior); then, at the chosen
   prior, K = `simulate.k_estimate` in `KS` (the pre-RL samples per query, `estimate.k`) is measured, not chosen:
   a cost the user sets; reported per K as the mean lead over the tuning cells and its range.
8. **Evidence: the held-out cells** (run only now, with the final default: the chosen variant, γ and prior). The
   chosen default against the old default and the baselines: per cell the
   lead over the best baseline with the seed sd, within 1 sd, ahead, collapse; counts per normalisation, and
   every cell where a baseline ties the chosen default (|lead| ≤ sd) named as a tie.
9. **The unflattering simulator.** The held-out populations again with all four options on
   (`UNFLATTERING`), both normalisations: the chosen default, the old default and the baselines.
10. **Earlier populations.** The 29 populations of the previous rounds (the 5 named of configs/simulate and the
    24 drawn by scripts/reconstruction_study.py), group normalisation as they were run, seeds 0-2: the chosen
    default against the old default; "no worse" when its RA-F1 ≥ the old default's − 1 sd.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/learning_study.py --out runs/learning_study --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those: the study resumes), then OUT/study.json
and OUT/study.md (kept in the repo as docs/learning_study.md).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from awarl.config import AwarlConfig, load_config
from awarl.io import atomic_write_json, atomic_write_text, repo_root
from awarl.simulate import run_all, summary_rows

LEARNING_SEED = 20261204
POPULATIONS = 16
SEEDS = (0, 1, 2)
SEED_BLOCKS = ((100, 101, 102), (200, 201, 202))   # step 6
LEARNING_DISTRIBUTION = (
    "success of answerable queries ~ Beta(α, β), α and β log-uniform on [0.3, 3]; unanswerable share ~ U(0, 0.5); "
    "latent share ~ U(0, 0.7) at latent success ~ U(0.005, 0.05); skill gain 0 with probability 1/4, else "
    "~ U(0.001, 0.005) logits per step; the latent queries grow as the rest (probability 1/2) or never (latent "
    "gain 0); perception noise ~ U(0, 2.5) logits; invalid rate 0 with probability 1/2, else ~ U(0, 0.3); the "
    "standard checkpoint's abstention rate log-uniform on [0.01, 0.3]; each query seen once (32,000 queries; 42,000 "
    "with a held-out fifth) with probability 1/2, else 2,000 queries drawn at random; each with probability 1/2, independently: the abstain "
    "feature a learned self-estimate (bias ~ U(-1, 1) logits), correctness coupled to retrieval (evidence "
    "precision ~ U(0.5, 0.9)), skill from answered rollouts only, metrics on 20% held-out queries")
NORMALISATIONS = ("group", "none")
GAMMAS = (0.01, 0.02, 0.05, 0.1, 0.25)
OLD_DEFAULT = ("old default", 0.02)
VARIANTS: dict[str, dict] = {
    "old default": {"reward.p_online": "off"},
    "ema": {"reward.p_online": "ema"},
    **{f"group λ={lam:g}": {"reward.p_online": "group", "reward.p_prior_weight": lam} for lam in (1.0, 0.5, 0.25, 0.0)},
}
BASELINES = ["simulate.strategies=[none, static, bapo]", "simulate.static_values=[0.05]"]
FILED = ("grow", "dead", "grow_once", "dead_once")
PRIORS = (0.1, 0.5, 1.0)
KS = (4, 8, 16)
UNFLATTERING = ["simulate.abstain_feature=self_estimate", "simulate.self_estimate_bias=0.5",
                "simulate.evidence_precision=0.7", "simulate.skill_source=answered", "simulate.held_out_share=0.2"]
COLLAPSE_REFUSAL = 0.02      # "refusal collapsed": below this ...
BASELINE_REFUSES = 0.3       # ... while the best baseline refuses more than this
SELECT_TOL = 0.001           # step 5: mean leads this close are a tie


# ------------------------------------------------------------------------------------------- the cells
def draw_populations(count: int = POPULATIONS, seed: int = LEARNING_SEED) -> list[dict]:
    """`count` populations from LEARNING_DISTRIBUTION, each {name, half, overrides, params}; the split (even:
    tuning, odd: held-out) is part of the protocol."""
    rng = np.random.default_rng(seed)

    def log_uniform(lo: float, hi: float) -> float:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    pops = []
    for k in range(count):
        once = rng.random() < 0.5
        p: dict = {"success_alpha": log_uniform(0.3, 3.0), "success_beta": log_uniform(0.3, 3.0),
                   "unanswerable_share": float(rng.uniform(0.0, 0.5)),
                   "latent_share": float(rng.uniform(0.0, 0.7)), "latent_success": float(rng.uniform(0.005, 0.05)),
                   "skill_gain": 0.0 if rng.random() < 0.25 else float(rng.uniform(0.001, 0.005)),
                   "perception_noise": float(rng.uniform(0.0, 2.5)),
                   "invalid_rate": 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.3)),
                   "init_abstain_rate": log_uniform(0.01, 0.3),
                   "n_queries": 32000 if once else 2000, "query_schedule": "once" if once else "sample"}
        if rng.random() < 0.5:
            p["latent_gain"] = 0.0
        if rng.random() < 0.5:
            p["abstain_feature"] = "self_estimate"
            p["self_estimate_bias"] = float(rng.uniform(-1.0, 1.0))
        if rng.random() < 0.5:
            p["evidence_precision"] = float(rng.uniform(0.5, 0.9))
        if rng.random() < 0.5:
            p["skill_source"] = "answered"
        if rng.random() < 0.5:
            p["held_out_share"] = 0.2
            if once:  # 32,000 training queries or more beside the held-out fifth (drawn per query: ~33,600)
                p["n_queries"] = 42000
        pops.append({"name": f"learn{k:02d}", "half": "tuning" if k % 2 == 0 else "held-out",
                     "config": "configs/base.yaml", "params": p,
                     "overrides": [f"simulate.{key}={_yaml(v)}" for key, v in p.items()]})
    return pops


def filed_populations() -> list[dict]:
    return [{"name": n, "half": "filed", "config": f"configs/simulate/{n}.yaml", "params": {}, "overrides": []}
            for n in FILED]


def earlier_populations() -> list[dict]:
    """Step 10: the previous rounds' 29 populations, as scripts/reconstruction_study.py draws them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reconstruction_study",
                                                  repo_root() / "scripts" / "reconstruction_study.py")
    assert spec is not None and spec.loader is not None
    rs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rs)
    return [{**p, "half": "earlier"} for p in
            rs.draw_populations(16) + rs.draw_populations(8, rs.FRESH_SEED, fresh=True) + rs.named_populations()]


def _yaml(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return f'"{v}"'  # quoted: "off" would read as false
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def cell_config(pop: dict, norm: str, seeds: tuple[int, ...], extra: list[str]) -> AwarlConfig:
    """A population's simulator config under normalisation `norm`, consecutive `seeds`, and `extra` overrides."""
    if list(seeds) != list(range(seeds[0], seeds[0] + len(seeds))):
        raise ValueError(f"seeds must be consecutive, got {seeds}")
    return load_config(repo_root() / pop["config"], pop["overrides"] + [
        f"simulate.advantage_scaling={norm}", f"simulate.seed={seeds[0]}", f"simulate.seeds={len(seeds)}", *extra])


def variant_overrides(options: dict) -> list[str]:
    return [f"{k}={_yaml(v)}" for k, v in options.items()]


def run_cell(pop: dict, norm: str, seeds: tuple[int, ...], variants: dict[str, dict],
             gammas: tuple[float, ...], extra: list[str] | None = None) -> dict:
    """Baselines and every variant × γ of one cell: summary rows (seed means, sds, late drift and sd)."""
    extra = extra or []
    cell = {"population": pop["name"], "half": pop["half"], "norm": norm, "seeds": list(seeds),
            "overrides": pop["overrides"], "extra": extra, "params": pop["params"],
            "baselines": summary_rows(run_all(cell_config(pop, norm, seeds, extra + BASELINES), progress=False)),
            "variants": {}}
    grid = "simulate.gammas=[" + ", ".join(f"{g:g}" for g in gammas) + "]"
    for name, opts in variants.items():
        cfg = cell_config(pop, norm, seeds, extra + variant_overrides(opts) + [grid, "simulate.strategies=[awarl]"])
        cell["variants"][name] = sorted(summary_rows(run_all(cfg, progress=False)), key=lambda r: r["gamma"])
    return cell


# ------------------------------------------------------------------------------------------- analysis
def best_baseline(cell: dict) -> dict:
    return max(cell["baselines"], key=lambda r: r["ra_f1"])


def plain(cell: dict) -> dict:
    return next(r for r in cell["baselines"] if r["strategy"] == "none")


def row_at(cell: dict, variant: str, gamma: float) -> dict:
    return next(r for r in cell["variants"][variant] if abs(r["gamma"] - gamma) < 1e-12)


def collapsed(row: dict, rival: dict) -> bool:
    return row["refusal_rate"] < COLLAPSE_REFUSAL and rival["refusal_rate"] > BASELINE_REFUSES


def filed_target(cell: dict, row: dict) -> bool:
    """Issue 41's target on a filed cell: grow ≥ plain GRPO − 1 sd, dead ≥ the best baseline − 1 sd."""
    rival = plain(cell) if cell["population"].startswith("grow") else best_baseline(cell)
    return row["ra_f1"] >= rival["ra_f1"] - max(row["ra_f1_sd"], rival["ra_f1_sd"])


def selection_table(tuning: list[dict], filed: list[dict]) -> list[dict]:
    """Every (variant, γ) scored on the tuning cells (mean and worst lead over each cell's best baseline, mean late
    sd, collapses) and checked on the filed cells."""
    out = []
    names = {n for c in tuning for n in c["variants"]}
    for name in sorted(names):
        for g in sorted({r["gamma"] for c in tuning for r in c["variants"][name]}):
            leads, sds, falls = [], [], 0
            for cell in tuning:
                row, rival = row_at(cell, name, g), best_baseline(cell)
                leads.append(row["ra_f1"] - rival["ra_f1"])
                sds.append(row["late_sd"])
                falls += collapsed(row, rival)
            missed = [f"{c['population']}/{c['norm']}" for c in filed
                      if name in c["variants"] and not filed_target(c, row_at(c, name, g))]
            out.append({"variant": name, "gamma": g, "mean_lead": float(np.mean(leads)),
                        "min_lead": float(np.min(leads)), "mean_late_sd": float(np.mean(sds)), "collapses": falls,
                        "filed_missed": missed})
    return sorted(out, key=lambda r: -r["mean_lead"])


def select(table: list[dict]) -> dict:
    """Step 5's rule on a selection table (tuning cells only)."""
    ok = [r for r in table if r["collapses"] == 0]
    kept = [r for r in ok if not r["filed_missed"]]
    pool = kept or ok
    tied = [r for r in pool if r["mean_lead"] >= pool[0]["mean_lead"] - SELECT_TOL]
    best = min(tied, key=lambda r: (r["mean_late_sd"], -r["mean_lead"]))
    return {**best, "filed_constraint_met": bool(kept)}


def judge(cell: dict, variant: str, gamma: float) -> dict:
    """One evidence cell: the chosen default's lead over the best baseline, the old default's, ties named."""
    rival, row, old = best_baseline(cell), row_at(cell, variant, gamma), row_at(cell, *OLD_DEFAULT)
    sd = max(row["ra_f1_sd"], rival["ra_f1_sd"])
    lead = row["ra_f1"] - rival["ra_f1"]
    return {"population": cell["population"], "norm": cell["norm"], "rival": rival["label"],
            "rival_ra_f1": rival["ra_f1"], "rival_refusal": rival["refusal_rate"], "plain_ra_f1": plain(cell)["ra_f1"],
            "ra_f1": row["ra_f1"], "refusal": row["refusal_rate"], "sd": sd, "lead": lead,
            "old_ra_f1": old["ra_f1"], "old_refusal": old["refusal_rate"],
            "old_lead": old["ra_f1"] - rival["ra_f1"], "within_sd": lead >= -sd, "ahead": lead > sd,
            "tie": abs(lead) <= sd, "collapse": collapsed(row, rival)}


# ------------------------------------------------------------------------------------------- report
def _f(x: float) -> str:
    return f"{x:.3f}".replace("-", "−")


def judged_table(rows: list[dict]) -> list[str]:
    out = ["| cell | best baseline: RA-F1 (refusal) | plain GRPO | chosen: RA-F1 (refusal) | lead ± sd | old default: "
           "RA-F1 (refusal) | verdict |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "ahead" if r["ahead"] else "tie" if r["tie"] else "behind"
        out.append(f"| {r['population']} / {r['norm']} | {r['rival']} {_f(r['rival_ra_f1'])} ({r['rival_refusal']:.2f}) | "
                   f"{_f(r['plain_ra_f1'])} | {_f(r['ra_f1'])} ({r['refusal']:.2f}) | {r['lead']:+.3f} ± {r['sd']:.3f} | "
                   f"{_f(r['old_ra_f1'])} ({r['old_refusal']:.2f}) | {verdict}{', collapse' if r['collapse'] else ''} |")
    return out


def counts_line(rows: list[dict]) -> str:
    parts = []
    for norm in NORMALISATIONS:
        rs = [r for r in rows if r["norm"] == norm]
        if rs:
            parts.append(f"{norm}: within 1 sd of the best baseline in {sum(r['within_sd'] for r in rs)} of {len(rs)}, "
                         f"ahead by more than 1 sd in {sum(r['ahead'] for r in rs)}, tied in {sum(r['tie'] for r in rs)}, "
                         f"collapse in {sum(r['collapse'] for r in rs)}; mean lead {np.mean([r['lead'] for r in rs]):+.4f} "
                         f"(old default {np.mean([r['old_lead'] for r in rs]):+.4f})")
    return "; ".join(parts)


def filed_table(filed: list[dict], variant: str, gamma: float) -> list[str]:
    out = ["| filed cell | plain GRPO | static 0.05 | BAPO | old default (γ 0.02) | chosen | target | met |",
           "|---|---|---|---|---|---|---|---|"]
    for c in filed:
        b = {r["strategy"]: r for r in c["baselines"]}
        row, old = row_at(c, variant, gamma), row_at(c, *OLD_DEFAULT)

        def cell(r: dict) -> str:
            return f"{_f(r['ra_f1'])} ± {r['ra_f1_sd']:.3f} ({r['refusal_rate']:.2f})"

        target = "≥ plain − 1 sd" if c["population"].startswith("grow") else "≥ best baseline − 1 sd"
        out.append(f"| {c['population']} / {c['norm']} | {cell(b['none'])} | {cell(b['static'])} | {cell(b['bapo'])} | "
                   f"{cell(old)} | {cell(row)} | {target} | {'yes' if filed_target(c, row) else 'no'} "
                   f"(old: {'yes' if filed_target(c, old) else 'no'}) |")
    return out


def selection_lines(table: list[dict], top: int = 12) -> list[str]:
    out = ["| variant | γ | mean lead | worst lead | mean late sd | collapses | filed targets missed |",
           "|---|---|---|---|---|---|---|"]
    for r in table[:top]:
        out.append(f"| {r['variant']} | {r['gamma']:g} | {r['mean_lead']:+.4f} | {r['min_lead']:+.4f} | "
                   f"{r['mean_late_sd']:.4f} | {r['collapses']} | {', '.join(r['filed_missed']) or '-'} |")
    return out


# ------------------------------------------------------------------------------------------- driver
def protocol_commit() -> str:
    """This file's last commit; refuses when it has uncommitted changes (results must name a committed protocol)."""
    here = Path(__file__).resolve()
    root = repo_root()
    rel = str(here.relative_to(root))
    dirty = subprocess.run(["git", "status", "--porcelain", "--", rel], cwd=root, capture_output=True, text=True,
                           check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"{rel} has uncommitted changes: commit the protocol before running the study")
    return subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def _kept(path: Path, want: dict, compute: Callable[[], dict]) -> dict:
    """The JSON of `path` when it holds every key of `want` with that value (a finished cell: the study resumes),
    else `compute()`, written there atomically."""
    if path.exists():
        done = json.loads(path.read_text())
        if all(done.get(k) == v for k, v in want.items()):
            return done
    cell = compute()
    atomic_write_json(path, cell)
    return cell


def _job(args: tuple) -> dict:
    pop, norm, seeds, variants, gammas, extra, tag, out = args
    path = Path(out) / "cells" / f"{pop['name']}-{norm}-{tag}.json"
    want = {"overrides": pop["overrides"], "norm": norm, "seeds": list(seeds), "extra": extra or [],
            "variant_names": sorted(variants), "gammas": list(gammas)}
    return _kept(path, want, lambda: {**run_cell(pop, norm, seeds, variants, gammas, extra), **want})


def run_jobs(jobs: list[tuple], workers: int, label: str) -> list[dict]:
    t0, out = time.time(), []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for k, cell in enumerate(pool.map(_job, jobs), 1):
            out.append(cell)
            print(f"{label}: {cell['population']}/{cell['norm']} ({k}/{len(jobs)}, {time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/learning_study")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes")
    args = ap.parse_args(argv)
    commit = protocol_commit()
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    pops, filed = draw_populations(), filed_populations()
    tuning_pops = [p for p in pops if p["half"] == "tuning"]
    held_pops = [p for p in pops if p["half"] == "held-out"]

    def grid(ps: list[dict], seeds: tuple[int, ...], tag: str, variants: dict = VARIANTS,
             gammas: tuple[float, ...] = GAMMAS, extra: list[str] | None = None) -> list[tuple]:
        return [(p, n, seeds, variants, gammas, extra, tag, str(out)) for p in ps for n in NORMALISATIONS]

    cells = run_jobs(grid(tuning_pops + filed, SEEDS, "main"), args.jobs, "main")
    tuning = [c for c in cells if c["half"] == "tuning"]
    filed_cells = [c for c in cells if c["half"] == "filed"]
    table = selection_table(tuning, filed_cells)
    chosen = select(table)
    v, g = chosen["variant"], chosen["gamma"]
    print(f"step 5, chosen on the tuning cells: {v}, γ {g:g} (mean lead {chosen['mean_lead']:+.4f})", flush=True)
    blocks = []
    for k, seeds in enumerate(SEED_BLOCKS):
        bc = run_jobs(grid(tuning_pops + filed, seeds, f"block{k + 1}"), args.jobs, f"block {k + 1}")
        bt = selection_table([c for c in bc if c["half"] == "tuning"], [c for c in bc if c["half"] == "filed"])
        pick = select(bt)
        rank = next(i for i, r in enumerate(bt) if (r["variant"], r["gamma"]) == (v, g)) + 1
        blocks.append({"seeds": list(seeds), "choice": pick, "rank_of_main_choice": rank,
                       "main_choice_lead": next(r["mean_lead"] for r in bt if (r["variant"], r["gamma"]) == (v, g))})
    priors = {f"prior {a:g}": {**VARIANTS[v], "reward.posterior_prior": a} for a in PRIORS}
    pc = run_jobs(grid(tuning_pops + filed, SEEDS, "prior", priors, (g,)), args.jobs, "prior")
    prior_table = selection_table([c for c in pc if c["half"] == "tuning"], [c for c in pc if c["half"] == "filed"])
    prior_pick = select(prior_table)
    tied = [r for r in prior_table if r["mean_lead"] >= prior_pick["mean_lead"] - SELECT_TOL and not r["collapses"]]
    prior = 0.5 if any(r["variant"] == "prior 0.5" for r in tied) else float(prior_pick["variant"].split()[1])
    final = {**VARIANTS[v], "reward.posterior_prior": prior}
    k_rows = []
    for k in KS:
        kc = run_jobs(grid(tuning_pops, SEEDS, f"k{k}", {"final": final}, (g,), [f"simulate.k_estimate={k}"]),
                      args.jobs, f"K={k}")
        leads = [row_at(c, "final", g)["ra_f1"] - best_baseline(c)["ra_f1"] for c in kc]
        k_rows.append({"k": k, "mean_lead": float(np.mean(leads)), "min_lead": float(np.min(leads)),
                       "max_lead": float(np.max(leads))})
    final_variants = {"chosen": final, "old default": VARIANTS["old default"]}
    both = tuple(sorted({g, OLD_DEFAULT[1]}))
    held = run_jobs(grid(held_pops, SEEDS, "held-out", final_variants, both), args.jobs, "held-out")
    verdicts = [judge(c, "chosen", g) for c in held]
    unflat = run_jobs(grid(held_pops, SEEDS, "unflattering", final_variants, both, UNFLATTERING), args.jobs,
                      "unflattering")
    unflat_verdicts = [judge(c, "chosen", g) for c in unflat]
    earlier = run_jobs([(p, "group", SEEDS, final_variants, both, None, "earlier", str(out))
                        for p in earlier_populations()], args.jobs, "earlier")
    earlier_rows = []
    for c in earlier:
        new, old = row_at(c, "chosen", g), row_at(c, *OLD_DEFAULT)
        sd = max(new["ra_f1_sd"], old["ra_f1_sd"])
        earlier_rows.append({"population": c["population"], "new": new["ra_f1"], "old": old["ra_f1"], "sd": sd,
                             "no_worse": new["ra_f1"] >= old["ra_f1"] - sd})
    study = {"protocol_commit": commit, "chosen": chosen, "prior": prior, "selection": table, "seed_blocks": blocks,
             "prior_table": prior_table, "k": k_rows, "held_out": verdicts, "unflattering": unflat_verdicts,
             "earlier": earlier_rows, "filed": filed_cells, "populations": pops}
    atomic_write_json(out / "study.json", study)
    atomic_write_text(out / "study.md", report(study, filed_cells, v, g))
    print(f"wrote {out}/study.json, {out}/study.md", file=sys.stderr)
    return 0


def report(study: dict, filed: list[dict], v: str, g: float) -> str:
    c = study["chosen"]
    lines = [f"# Round 4 of the reward study: results (protocol: scripts/learning_study.py at {study['protocol_commit']})",
             "", f"**Chosen on the tuning cells (step 5):** {v}, γ {g:g}, posterior prior {study['prior']:g} "
             f"(mean lead over the best baseline {c['mean_lead']:+.4f}, worst {c['min_lead']:+.4f}; filed-case "
             f"constraint {'met' if c['filed_constraint_met'] else 'NOT met by any candidate'}).", "",
             "## Selection (tuning cells, seeds 0-2; top rows)", "", *selection_lines(study["selection"]), "",
             "## Stability (step 6): fresh seed blocks", ""]
    for b in study["seed_blocks"]:
        ch = b["choice"]
        lines.append(f"- seeds {b['seeds']}: chooses {ch['variant']}, γ {ch['gamma']:g} (mean lead "
                     f"{ch['mean_lead']:+.4f}); the main choice ranks {b['rank_of_main_choice']} there (lead "
                     f"{b['main_choice_lead']:+.4f})")
    lines += ["", "## The prior and K (step 7)", "", *selection_lines(study["prior_table"]), "",
              "| K | mean lead | min | max |", "|---|---|---|---|"]
    lines += [f"| {r['k']} | {r['mean_lead']:+.4f} | {r['min_lead']:+.4f} | {r['max_lead']:+.4f} |" for r in study["k"]]
    lines += ["", "## Evidence: the held-out cells (step 8)", "", counts_line(study["held_out"]), "",
              *judged_table(study["held_out"]), "", "## The unflattering simulator (step 9)", "",
              counts_line(study["unflattering"]), "", *judged_table(study["unflattering"]), "",
              "## Earlier populations (step 10)", "",
              f"No worse than the old default (within 1 sd) in {sum(r['no_worse'] for r in study['earlier'])} of "
              f"{len(study['earlier'])}.", "", "| population | chosen | old default | sd | no worse |", "|---|---|---|---|---|"]
    lines += [f"| {r['population']} | {_f(r['new'])} | {_f(r['old'])} | {r['sd']:.3f} | {'yes' if r['no_worse'] else 'no'} |"
              for r in study["earlier"]]
    lines += ["", "## The filed cases (constraints of the selection, not evidence)", "", *filed_table(filed, v, g), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
