"""How sure is "missed"? The steadiest oracle reward against the most variable baseline, paired on 20 seeds.

A measurement for issue 22's late-sd target, not a selection: no variant, γ or default changes with it. Step 10
of scripts/reconstruction_study.py calls the target *missed* in a population where the shipped reward's
late-phase refusal sd is larger than the largest baseline's beyond 2 standard errors while the steadiest of the
32 oracle rewards of step 9 that reaches step 9's RA-F1 level has a smaller mean late sd than that baseline. It
compares those two means unpaired. This script pairs them: per population (default: the three populations step
10 calls missed, fresh00, fresh04 and fresh06),

1. step 9's level: the shipped reading's best RA-F1 over the study's γ grid on the study's 3 seeds, minus 0.01;
2. on `PRECISION_SEEDS` (20) seeds, the shipped reading at the shipped γ and the four baselines (step 10's cell);
   the rival is the baseline with the largest mean late sd;
3. the 32 oracle rewards on the same seeds; among those reaching the level, the five steadiest, each with its
   paired excess over the rival (mean of the per-seed differences, every run of a seed sharing its population and
   samples) and that mean's standard error.

*steadier*: the oracle's excess is below −2 standard errors; *within noise* otherwise. The steadiest of 32 is
picked on these same seeds, so its excess is biased downwards: *within noise* is the stronger statement.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/late_sd_oracle_paired.py --out runs/oracle_paired

About 3 minutes of CPU per population. Writes OUT/oracle_paired.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reconstruction_study as rs  # noqa: E402

from awarl.config import RewardConfig  # noqa: E402
from awarl.io import atomic_write_json  # noqa: E402
from awarl.simulate import run_all, summary_rows  # noqa: E402

SHIPPED = "posterior + guards, floor 0, dither 0.2"   # the study's chosen reading (configs/base.yaml's reward)
STUDY_SEEDS = 3                                       # the seeds step 9's level is measured on
TOP = 5                                               # oracle rewards listed per population


def paired_excess(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of the per-seed differences a − b and its standard error."""
    d = np.asarray(a) - np.asarray(b)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))


def level_of(pop: dict) -> float:
    """Step 9's RA-F1 level: the shipped reading's best RA-F1 over the study's γ grid (3 seeds), minus 0.01."""
    grid = "simulate.gammas=[" + ", ".join(f"{g:g}" for g in rs.GAMMAS) + "]"
    cfg = rs.population_config(pop, STUDY_SEEDS, None, rs.variant_overrides(rs.VARIANTS[SHIPPED]) +
                     [grid, "simulate.strategies=[awarl]"])
    return max(r["ra_f1"] for r in summary_rows(run_all(cfg, progress=False))) - rs.CLOSE_TO_BEST


def check_population(pop: dict, gamma: float, seeds: int) -> dict:
    level = level_of(pop)
    cell = rs.precision_population(pop, SHIPPED, gamma, seeds)
    rival = max(cell["baselines"], key=lambda r: r["late_sd"])
    shipped = cell["shipped"]
    oracles = [o for o in rs.oracle_rows(pop, seeds, None) if o["ra_f1"] >= level]
    rows = []
    for o in sorted(oracles, key=lambda o: o["late_sd"])[:TOP]:
        excess, se = paired_excess(o["late_sd_seeds"], rival["late_sd_seeds"])
        rows.append({"key": o["key"], "threshold": o["threshold"], "charge": o["charge"], "ra_f1": o["ra_f1"],
                     "refusal": o["refusal_rate"], "late_sd": o["late_sd"], "excess": excess, "excess_se": se,
                     "verdict": "steadier" if excess < -rs.PRECISION_SE * se else "within noise"})
    excess, se = paired_excess(shipped["late_sd_seeds"], rival["late_sd_seeds"])
    return {"population": pop["name"], "seeds": seeds, "level": level, "rival": rival["label"],
            "rival_late_sd": rival["late_sd"], "shipped_late_sd": shipped["late_sd"], "shipped_excess": excess,
            "shipped_excess_se": se, "reaching_level": len(oracles), "oracles": rows}


def table(results: list[dict]) -> str:
    out = ["| population | level | largest baseline: late sd | shipped: late sd, excess ± se | oracle (key, threshold, "
           "charge): RA-F1, late sd, paired excess ± se | verdict |", "|---|---|---|---|---|---|"]
    for r in results:
        for i, o in enumerate(r["oracles"]):
            head = (f"| {r['population']} | {r['level']:.3f} | {r['rival']}: {r['rival_late_sd']:.4f} | "
                    f"{r['shipped_late_sd']:.4f}, {r['shipped_excess']:+.4f} ± {r['shipped_excess_se']:.4f} |"
                    if i == 0 else "| | | | |")
            out.append(f"{head} {'s' if o['key'] == 'success' else 'p'} < {o['threshold']:g}, charge {o['charge']:g}: "
                       f"{o['ra_f1']:.3f}, {o['late_sd']:.4f}, {o['excess']:+.4f} ± {o['excess_se']:.4f} | "
                       f"{o['verdict']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("populations", nargs="*", default=["fresh00", "fresh04", "fresh06"],
                    help="drawn populations (pop00-pop15, fresh00-fresh07; default: fresh00 fresh04 fresh06)")
    ap.add_argument("--out", default="runs/oracle_paired", help="output folder (default: runs/oracle_paired)")
    ap.add_argument("--seeds", type=int, default=rs.PRECISION_SEEDS, help="paired seeds (default 20)")
    args = ap.parse_args(argv)
    pops = {p["name"]: p for p in rs.draw_populations(16) + rs.draw_populations(8, rs.FRESH_SEED, fresh=True)}
    unknown = [n for n in args.populations if n not in pops]
    if unknown:
        ap.error(f"unknown population(s) {unknown}; choose among {', '.join(pops)}")
    gamma = RewardConfig().gamma
    results = []
    for name in args.populations:
        results.append(check_population(pops[name], gamma, args.seeds))
        print(f"{name}: done", file=sys.stderr, flush=True)
    out = Path(args.out)
    atomic_write_json(out / "oracle_paired.json", {"shipped": SHIPPED, "gamma": gamma, "results": results})
    print(table(results))
    print(f"\nwrote {out / 'oracle_paired.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
