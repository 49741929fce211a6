"""The reconstruction study of docs/method.md ("Reconstruction choices"), with the simulator.

Each reconstruction option of the AWA-RL reward (`reward.expected_rate`, `r_ref_margin`, `ema_start`,
`p_definition`) is run, one at a time from the SPEC reading and combined, over the γ grid and every
population of configs/simulate/, for several seeds, against plain GRPO, static refusal (0.05, 0.3) and BAPO.
The populations' simulated environment (queries, policy model, learning rule) is the fixed yardstick: only
`reward:` options differ between the rows of one population.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reconstruction_study.py --out runs/study

Writes OUT/study.json (every row, every claim check), OUT/study.md (the full tables, kept in the repo as
docs/reconstruction_study.md) and OUT/docs_tables.md (the tables of docs/method.md); prints a summary. About 3 CPU-minutes with the defaults (5 populations x 10 variants x 4 γ x 3 seeds
plus the 4 baselines, 1000 steps each).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from awarl.config import load_config
from awarl.io import atomic_write_json, atomic_write_text, repo_root
from awarl.simulate import claims, dead_zone, options_line, run_all, summary_rows

POPULATIONS = ("default", "paper_like", "format_failures", "skill_gain", "cautious_base")
SPEC = {"reward.expected_rate": "threshold", "reward.p_definition": "share_of_k", "reward.ema_start": "zero",
        "reward.r_ref_margin": None, "reward.p_online": "off"}
# name -> overrides on top of the SPEC reading (so a change of base.yaml's defaults cannot move a row), or, with
# "_shipped", on top of configs/base.yaml's own reward section (the recipe as shipped).
VARIANTS: dict[str, dict] = {
    "spec": {},
    "spec, no penalty": {"_no_penalty": True},
    "soft": {"reward.expected_rate": "soft"},
    "r_base_mean": {"reward.expected_rate": "r_base_mean"},
    "margin 0.1": {"reward.r_ref_margin": 0.1},
    "bias_corrected": {"reward.ema_start": "bias_corrected"},
    "among_answered": {"reward.p_definition": "among_answered"},
    "p_online ema": {"reward.p_online": "ema"},
    "base.yaml (γ from the grid)": {"_shipped": True},
    "base.yaml + p_online ema": {"_shipped": True, "reward.p_online": "ema"},
}
BASELINES = "simulate.strategies=[none, static, bapo]"


def _overrides(options: dict) -> list[str]:
    def value(v: object) -> str:  # YAML text: strings quoted ("off" would read as false)
        return "null" if v is None else f'"{v}"' if isinstance(v, str) else str(v)

    return [f"{k}={value(v)}" for k, v in options.items() if not k.startswith("_")]


def run_population(pop: str, seeds: int, steps: int | None) -> list[dict]:
    """Every variant of one population: rows (seed means) and the claim checks against its baselines."""
    path = repo_root() / "configs" / "simulate" / f"{pop}.yaml"
    common = [f"simulate.seeds={seeds}"] + ([f"simulate.steps={steps}"] if steps else [])
    base_cfg = load_config(path, common + _overrides(SPEC) + [BASELINES])
    base_rows = summary_rows(run_all(base_cfg, progress=False))
    out = []
    for name, opts in VARIANTS.items():
        strat = "awarl_no_penalty" if opts.get("_no_penalty") else "awarl"
        options = _overrides(opts if opts.get("_shipped") else {**SPEC, **opts})
        cfg = load_config(path, common + options + [f"simulate.strategies=[{strat}]"])
        rows = summary_rows(run_all(cfg, progress=False))
        if strat == "awarl_no_penalty":  # judged as an AWA-RL reward that has no penalty
            rows = [{**r, "penalty": True} for r in rows]
        checks = claims(base_rows + rows, dead_zone(cfg.reward))
        out.append({"population": pop, "variant": name, "options": options_line(cfg.reward),
                    "config": str(path.relative_to(repo_root())), "overrides": common + options,
                    "baselines": base_rows, "rows": rows, "claims": checks})
    return out


def _check_marks(checks: list[dict]) -> str:
    order = ("refusal plateaus", "AWA-RL raises", "AWA-RL (best", "a static")
    marks = []
    for key in order:
        c = next((c for c in checks if c["claim"].startswith(key)), None)
        marks.append("—" if c is None else ("yes" if c["holds"] else "no"))
    return " | ".join(marks)


def summary_table(results: list[dict]) -> str:
    """Per population: baselines, then each variant's refusal / RA-F1 per γ and the claim checks."""
    lines = []
    for pop in dict.fromkeys(r["population"] for r in results):
        block = [r for r in results if r["population"] == pop]
        base = block[0]["baselines"]
        gammas = [row["gamma"] for row in block[0]["rows"]]
        lines += [f"**{pop}** — baselines (refusal / precision / accuracy / RA-F1): " + "; ".join(
            f"{b['label']} {b['refusal_rate']:.2f} / {b['precision']:.3f} / {b['accuracy']:.3f} / {b['ra_f1']:.3f}"
            for b in base), "",
            "| variant | " + " | ".join(f"γ={g:g}: refusal, ρ̂, P, A, RA-F1" for g in gammas)
            + " | plateau by γ | P, RA-F1 > GRPO, small A cost | beats baselines |",
            "|---|" + "---|" * len(gammas) + "---|---|---|"]
        for r in block:
            cells = [f"{x['refusal_rate']:.2f}, {x['rho_hat']:.2f}, {x['precision']:.3f}, {x['accuracy']:.3f}, "
                     f"**{x['ra_f1']:.3f}**" for x in r["rows"]]
            lines.append(f"| {r['variant']} | " + " | ".join(cells) + " | "
                         + " | ".join(_check_marks(r["claims"]).split(" | ")[:3]) + " |")
        static = next((c for c in block[0]["claims"] if c["claim"].startswith("a static")), None)
        if static:
            lines.append(f"\nstatic 0.05 collapse (> 0.9 refusal): {'yes' if static['holds'] else 'no'} "
                         f"({static['evidence']})")
        lines.append("")
    return "\n".join(lines)


def full_tables(results: list[dict], seeds: int) -> str:
    lines = ["# Reconstruction study: full tables", "",
             f"Generated by `scripts/reconstruction_study.py` ({seeds} seeds: simulate.seed 0..{seeds - 1}). Values "
             "are final population values, mean ± std over seeds (ρ̂ of a baseline row: the SPEC threshold's at "
             "reward.gamma, a reference only; the baselines were run once per population, with the SPEC overrides). "
             "Summary and reading: docs/method.md "
             "\"Reconstruction choices\".", ""]
    for r in results:
        cmd = f"awarl simulate --config {r['config']} " + " ".join(shlex.quote(o) for o in r["overrides"])
        lines += [f"## {r['population']} — {r['variant']}", "", f"`{cmd}` (every row of this block)", "",
                  "| run | refusal | ρ̂ | precision | accuracy | RA-F1 | late drift | late sd |",
                  "|---|---|---|---|---|---|---|---|"]
        for x in r["baselines"] + r["rows"]:
            lines.append(f"| {x['label']} | {x['refusal_rate']:.3f} ± {x['refusal_rate_sd']:.3f} | {x['rho_hat']:.3f} | "
                         f"{x['precision']:.3f} ± {x['precision_sd']:.3f} | {x['accuracy']:.3f} ± {x['accuracy_sd']:.3f} | "
                         f"{x['ra_f1']:.3f} ± {x['ra_f1_sd']:.3f} | {x['late_drift']:.3f} | {x['late_sd']:.3f} |")
        lines += [""] + [f"- {'reproduced' if c['holds'] else 'NOT reproduced'}: {c['claim']} ({c['evidence']})"
                         for c in r["claims"]] + [""]
    return "\n".join(lines)


SHIPPED = "base.yaml (γ from the grid)"
CLAIM_KEYS = (("refusal plateaus", "refusal plateaus by γ"),
              ("AWA-RL raises", "P and RA-F1 above plain GRPO, accuracy cost <= 0.05"),
              ("a static", "static 0.05 collapses (> 0.9)"), ("AWA-RL (best", "best γ beats every baseline by > 1 seed std"))


def docs_tables(results: list[dict]) -> str:
    """The three tables of docs/method.md "Reconstruction choices", from the study's rows."""
    pops = list(dict.fromkeys(r["population"] for r in results))
    cell = {(r["population"], r["variant"]): r for r in results}
    lines = ["RA-F1 at γ = 0.25 / 0.5 / 1 (mean of the final values over the seeds):", "",
             "| variant | " + " | ".join(pops) + " |", "|---|" + "---|" * len(pops)]
    for name in VARIANTS:
        row = []
        for pop in pops:
            by_g = {x["gamma"]: x["ra_f1"] for x in cell[(pop, name)]["rows"]}
            row.append(" / ".join(f"{by_g[g]:.3f}" for g in (0.25, 0.5, 1.0)))
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    for label in [b["label"] for b in results[0]["baselines"]]:
        vals = [next(b for b in cell[(pop, SHIPPED)]["baselines"] if b["label"] == label) for pop in pops]
        lines.append(f"| {label} | " + " | ".join(f"{v['ra_f1']:.3f}" for v in vals) + " |")
    lines += ["", "The shipped recipe at its γ = 0.25 and the SPEC reading at SPEC's γ = 0.5, against the baselines "
              "(refusal, ρ̂, precision, accuracy, RA-F1 ± std over seeds):", "",
              "| population | run | refusal | ρ̂ | precision | accuracy | RA-F1 |", "|---|---|---|---|---|---|---|"]
    for pop in pops:
        picks = [("base.yaml, γ=0.25", next(x for x in cell[(pop, SHIPPED)]["rows"] if x["gamma"] == 0.25)),
                 ("SPEC reading, γ=0.5", next(x for x in cell[(pop, "spec")]["rows"] if x["gamma"] == 0.5))]
        picks += [(b["label"], b) for b in cell[(pop, SHIPPED)]["baselines"]]
        for label, x in picks:
            lines.append(f"| {pop} | {label} | {x['refusal_rate']:.3f} | {x['rho_hat']:.3f} | {x['precision']:.3f} | "
                         f"{x['accuracy']:.3f} | {x['ra_f1']:.3f} ± {x['ra_f1_sd']:.3f} |")
    lines += ["", "The paper's claims, checked on seed means (`awarl.simulate.claims`; yes / no per population):", "",
              "| claim | reward | " + " | ".join(pops) + " |", "|---|---|" + "---|" * len(pops)]
    for key, text in CLAIM_KEYS:
        for name in ("spec", SHIPPED):
            marks = []
            for pop in pops:
                c = next((c for c in cell[(pop, name)]["claims"] if c["claim"].startswith(key)), None)
                marks.append("—" if c is None else ("yes" if c["holds"] else "no"))
            lines.append(f"| {text} | {'SPEC reading' if name == 'spec' else 'base.yaml'} | " + " | ".join(marks) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/study", help="output folder (default: runs/study)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (default 3)")
    ap.add_argument("--steps", type=int, help="steps per run (default: simulate.steps)")
    ap.add_argument("--populations", nargs="*", default=list(POPULATIONS), choices=POPULATIONS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.process_time()
    results = []
    for pop in args.populations:
        results += run_population(pop, args.seeds, args.steps)
        print(f"{pop}: done ({time.process_time() - t0:.0f} CPU-s)", file=sys.stderr, flush=True)
    atomic_write_json(out / "study.json", {"seeds": args.seeds, "results": results})
    atomic_write_text(out / "study.md", full_tables(results, args.seeds))
    atomic_write_text(out / "docs_tables.md", docs_tables(results))
    print(summary_table(results))
    print(f"\nwrote {out}/study.json, {out}/study.md ({time.process_time() - t0:.0f} CPU-s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
