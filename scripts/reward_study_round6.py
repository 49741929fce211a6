"""Round 6 of the reward study (issue 41): the abstain line that RA-F1 itself sets, against round 5's default and
a γ beyond round 5's grid.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md "Round 6"). The machinery (populations, the selection rule, the filed
targets, the judged tables) is round 4's (scripts/learning_study.py) and round 5's (scripts/reward_study_round5.py),
both frozen with their results and imported here.

0. **Pilot (before this protocol; exploration, not evidence).** `reward.abstain_line: ra_f1` (every query's abstain
   line at F̂/2, F̂ the policy's running RA-F1: the line that maximises RA-F1, docs/method.md "The RA-F1 line") was
   tried on round 5's 8 tuning populations, the 4 filed cases and round 4's 8 tuning populations, seed 0, both
   normalisations, against round 5's default (γ 0.1): with the gate, the group's p and the warm-up 0.6 as in
   round 5's default, mean lead over the best baseline +0.0019, worst −0.014 (round 5's default +0.0001 and
   −0.031); without the warm-up, lazy refusal (round 4's learn12 −0.12, round 5's r5-06 −0.09); without the gate,
   GROW −0.04 to −0.06. That drove the grid below. Round 5's held-out populations, the fresh populations of step 1
   and the earlier populations of rounds 2-3 were not looked at.
1. **Populations.** `draw_populations(16, ROUND6_SEED)` from round 4's `LEARNING_DISTRIBUTION` (the same
   distribution, fresh draws), named r6-00 ... r6-15.
2. **Split before looking.** Population k is tuning when k is even, held-out when k is odd.
3. **Cells.** Both GRPO advantage normalisations (`group`: TRL's `scale_rewards: group`; `none`: mean-only).
4. **Grid.** `CANDIDATES` (round 5's default, the current default, at γ 0.05, 0.1, 0.2; the RA-F1 line with the
   current gate, group p and warm-up 0.6, 0.45 or 0.75, where γ is unused) and the baselines plain GRPO, static
   0.05 and BAPO (0.5); seeds 0, 1, 2; 1000 steps. Every candidate is the shipped reward at this commit but for
   the keys it names.
5. **Selection (tuning cells only)**: round 4's rule (`learning_study.select`, with round 5's exclusions): no
   collapse in a tuning cell; every filed target met on the filed cells (grow, grow_once ≥ plain GRPO − 1 sd;
   dead, dead_once ≥ the best baseline − 1 sd; both normalisations, seeds 0-2); then the largest mean lead over
   the tuning cells' best baseline, a tie (within 0.001) broken by the smaller mean late-phase refusal sd. If no
   candidate meets the filed targets the choice is made without them and the report says so. The current default
   is a candidate: if it is chosen nothing changes.
6. **Stability.** The `TOP` best candidates of step 5's table (those that pass its exclusions, by mean lead) are
   run again on two fresh seed blocks (100-102, 200-202) of the tuning and filed cells; step 5's rule among them
   in each block, and the rank of the main choice there.
7. **Evidence: the held-out cells**, run only now: the chosen, the current default (γ 0.1) and the baselines, both
   normalisations; per cell the lead over the best baseline ± the larger seed sd, ahead (> 1 sd), tie (|lead| ≤ 1
   sd), behind; counts per normalisation.
8. **The unflattering simulator**: the held-out populations again with all four options of docs/simulator.md on
   (round 5's `unflattering`: a population seeing each query once runs on 42,000 queries), as step 7.
9. **Round 5's held-out populations** (r5-01 ... r5-15, odd: secondary evidence; r5-05 is where round 5's default
   refused 0.98), both normalisations, as step 7.
10. **Earlier populations.** Round 4's and round 5's tuning populations (both normalisations) and the 29 of
    rounds 2-3 (group normalisation, as they were run): the chosen against the current default, and against the
    reward shipped when issue 41 was filed (`AT_FILING`: no online p, no gate, no warm-up, γ 0.02); "no worse"
    when its RA-F1 ≥ the other's − 1 sd (the larger of the two seed sds).

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round6.py --out runs/reward_study_round6 --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those: the study resumes), then OUT/study.json
and OUT/study.md (kept in the repo under docs/reward_study_round6/).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from awarl.io import atomic_write_json, atomic_write_text, kept_json, repo_root
from awarl.simulate import run_all, summary_rows


def _load(name: str, file: str):
    """A frozen study script of an earlier round, as a module (registered under `name`, which pickling needs)."""
    spec = importlib.util.spec_from_file_location(name, repo_root() / "scripts" / file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return sys.modules[name]


R5 = _load("reward_study_round5", "reward_study_round5.py")
L = R5.L

ROUND6_SEED = 20261206
SEEDS = (0, 1, 2)
SEED_BLOCKS = ((100, 101, 102), (200, 201, 202))
LINE = {"reward.abstain_line": "ra_f1"}
# name -> (the keys it changes from the shipped reward at this commit, the γ it runs at)
CANDIDATES: dict[str, tuple[dict, tuple[float, ...]]] = {
    "current default": ({}, (0.05, 0.1, 0.2)),
    "ra_f1 line": (LINE, (0.1,)),  # γ is unused under the RA-F1 line: 0.1 only labels the row
    "ra_f1 line, warm-up 0.45": ({**LINE, "reward.refusal_warmup": 0.45}, (0.1,)),
    "ra_f1 line, warm-up 0.75": ({**LINE, "reward.refusal_warmup": 0.75}, (0.1,)),
}
CURRENT = ("current default", 0.1)
AT_FILING = ("at filing", 0.02)
AT_FILING_KEYS = {"reward.p_online": "off", "reward.refusal_gate": "off", "reward.refusal_warmup": 0.0}
TOP = 4


def populations() -> list[dict]:
    """Step 1: 16 fresh populations of round 4's distribution, renamed r6-NN."""
    return [{**p, "name": p["name"].replace("learn", "r6-")} for p in L.draw_populations(16, ROUND6_SEED)]


def run_cell(pop: dict, norm: str, seeds: tuple[int, ...], candidates: dict[str, tuple[dict, tuple[float, ...]]],
             extra: list[str], baselines: bool) -> dict:
    """The baselines (when asked) and each candidate at its own γ of one cell: summary rows as round 4's cells."""
    cell = {"population": pop["name"], "half": pop["half"], "norm": norm, "seeds": list(seeds),
            "overrides": pop["overrides"], "extra": extra, "params": pop["params"], "variants": {},
            "baselines": summary_rows(run_all(L.cell_config(pop, norm, seeds, extra + L.BASELINES), progress=False))
            if baselines else []}
    for name, (opts, gammas) in candidates.items():
        grid = "simulate.gammas=[" + ", ".join(f"{g:g}" for g in gammas) + "]"
        cfg = L.cell_config(pop, norm, seeds, extra + L.variant_overrides(opts) + [grid, "simulate.strategies=[awarl]"])
        cell["variants"][name] = sorted(summary_rows(run_all(cfg, progress=False)), key=lambda r: r["gamma"])
    return cell


def _job(args: tuple) -> dict:
    pop, norm, seeds, candidates, extra, baselines, tag, out = args
    path = Path(out) / "cells" / f"{pop['name']}-{norm}-{tag}.json"
    want = {"overrides": pop["overrides"], "norm": norm, "seeds": list(seeds), "extra": extra,
            "candidates": {k: [v[0], list(v[1])] for k, v in candidates.items()}, "with_baselines": baselines}
    return kept_json(path, want, lambda: {**run_cell(pop, norm, seeds, candidates, extra, baselines), **want})


def run_jobs(jobs: list[tuple], workers: int, label: str) -> list[dict]:
    t0, out = time.time(), []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for k, cell in enumerate(pool.map(_job, jobs), 1):
            out.append(cell)
            print(f"{label}: {cell['population']}/{cell['norm']} ({k}/{len(jobs)}, {time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    return out


def judge(cell: dict, variant: str, gamma: float) -> dict:
    """Round 5's evidence verdict, with this round's current default (γ 0.1) as the "old" column."""
    R5.CURRENT = CURRENT
    return R5.judge(cell, variant, gamma)


def compare(cell: dict, new: tuple[str, float], old: tuple[str, float]) -> dict:
    """Step 10: the chosen's RA-F1 against another reward's on one cell, "no worse" within the larger sd."""
    a, b = L.row_at(cell, *new), L.row_at(cell, *old)
    sd = max(a["ra_f1_sd"], b["ra_f1_sd"])
    return {"new": a["ra_f1"], "new_refusal": a["refusal_rate"], "old": b["ra_f1"], "old_refusal": b["refusal_rate"],
            "sd": sd, "no_worse": a["ra_f1"] >= b["ra_f1"] - sd}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/reward_study_round6")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes")
    args = ap.parse_args(argv)
    commit = protocol_commit()
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    pops, filed = populations(), L.filed_populations()
    tuning_pops = [p for p in pops if p["half"] == "tuning"]
    held_pops = [p for p in pops if p["half"] == "held-out"]

    def grid(ps: list[dict], seeds: tuple[int, ...], tag: str, candidates: dict, extra: list[str] | None = None,
             norms: tuple[str, ...] = L.NORMALISATIONS, baselines: bool = True) -> list[tuple]:
        return [(p, n, seeds, candidates, extra or [], baselines, tag, str(out)) for p in ps for n in norms]

    cells = run_jobs(grid(tuning_pops + filed, SEEDS, "main", CANDIDATES), args.jobs, "main")
    tuning = [c for c in cells if c["half"] == "tuning"]
    filed_cells = [c for c in cells if c["half"] == "filed"]
    table = L.selection_table(tuning, filed_cells)
    chosen = L.select(table)
    v, g = chosen["variant"], chosen["gamma"]
    print(f"step 5, chosen on the tuning cells: {v}, γ {g:g} (mean lead {chosen['mean_lead']:+.4f})", flush=True)

    top = R5.passing(table)[:TOP]
    blocks = []
    for k, seeds in enumerate(SEED_BLOCKS):
        jobs = [job for i, r in enumerate(top) for job in
                grid(tuning_pops + filed, seeds, f"block{k + 1}-top{i + 1}",
                     {r["variant"]: (CANDIDATES[r["variant"]][0], (r["gamma"],))})]
        bc = R5.merged(run_jobs(jobs, args.jobs, f"block {k + 1}"))
        bt = L.selection_table([c for c in bc if c["half"] == "tuning"], [c for c in bc if c["half"] == "filed"])
        pick = L.select(bt)
        ranks = [i for i, r in enumerate(bt) if (r["variant"], r["gamma"]) == (v, g)]
        blocks.append({"seeds": list(seeds), "candidates": [(r["variant"], r["gamma"]) for r in top],
                       "choice": pick, "rank_of_main_choice": ranks[0] + 1 if ranks else None, "table": bt})

    final = {"chosen": (CANDIDATES[v][0], (g,)), CURRENT[0]: (CANDIDATES[CURRENT[0]][0], (CURRENT[1],))}
    held = run_jobs(grid(held_pops, SEEDS, "held-out", final), args.jobs, "held-out")
    verdicts = [judge(c, "chosen", g) for c in held]
    unflat = run_jobs([job for p in held_pops for job in grid([p], SEEDS, "unflattering", final,
                                                               R5.unflattering(p))], args.jobs, "unflattering")
    unflat_verdicts = [judge(c, "chosen", g) for c in unflat]
    r5_held = run_jobs(grid([p for p in R5.populations() if p["half"] == "held-out"], SEEDS, "r5-held-out", final),
                       args.jobs, "round 5 held-out")
    r5_verdicts = [judge(c, "chosen", g) for c in r5_held]

    three = {**final, AT_FILING[0]: (AT_FILING_KEYS, (AT_FILING[1],))}
    earlier_pops = [p for p in L.draw_populations() if p["half"] == "tuning"] + \
        [p for p in R5.populations() if p["half"] == "tuning"]
    earlier_jobs = grid(earlier_pops, SEEDS, "earlier", three, baselines=False) + \
        grid(L.earlier_populations(), SEEDS, "earlier", three, norms=("group",), baselines=False)
    earlier_rows = []
    for c in run_jobs(earlier_jobs, args.jobs, "earlier"):
        earlier_rows.append({"population": c["population"], "norm": c["norm"],
                             "vs_current": compare(c, ("chosen", g), CURRENT),
                             "vs_at_filing": compare(c, ("chosen", g), AT_FILING)})
    study = {"protocol_commit": commit, "chosen": chosen, "selection": table, "seed_blocks": blocks,
             "held_out": verdicts, "unflattering": unflat_verdicts, "round5_held_out": r5_verdicts,
             "earlier": earlier_rows, "filed": filed_cells, "populations": pops}
    atomic_write_json(out / "study.json", study)
    atomic_write_text(out / "study.md", report(study, filed_cells, v, g))
    print(f"wrote {out}/study.json, {out}/study.md", file=sys.stderr)
    return 0


def protocol_commit() -> str:
    """This file's last commit; refuses when it has uncommitted changes (results must name a committed protocol)."""
    import subprocess

    root = repo_root()
    rel = str(Path(__file__).resolve().relative_to(root))
    dirty = subprocess.run(["git", "status", "--porcelain", "--", rel], cwd=root, capture_output=True, text=True,
                           check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"{rel} has uncommitted changes: commit the protocol before running the study")
    return subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def _f(x: float) -> str:
    return f"{x:.3f}".replace("-", "−")


def filed_lines(filed: list[dict], variant: str, gamma: float) -> list[str]:
    out = ["| filed cell | plain GRPO | static 0.05 | BAPO | current default (γ 0.1) | chosen | target | met |",
           "|---|---|---|---|---|---|---|---|"]
    for c in filed:
        b = {r["strategy"]: r for r in c["baselines"]}
        row, cur = L.row_at(c, variant, gamma), L.row_at(c, *CURRENT)

        def cell(r: dict) -> str:
            return f"{_f(r['ra_f1'])} ± {r['ra_f1_sd']:.3f} ({r['refusal_rate']:.2f})"

        target = "≥ plain − 1 sd" if c["population"].startswith("grow") else "≥ best baseline − 1 sd"
        out.append(f"| {c['population']} / {c['norm']} | {cell(b['none'])} | {cell(b['static'])} | {cell(b['bapo'])} | "
                   f"{cell(cur)} | {cell(row)} | {target} | {'yes' if L.filed_target(c, row) else 'no'} "
                   f"(current: {'yes' if L.filed_target(c, cur) else 'no'}) |")
    return out


def report(study: dict, filed: list[dict], v: str, g: float) -> str:
    c = study["chosen"]
    lines = [f"# Round 6 of the reward study: results (protocol: scripts/reward_study_round6.py at "
             f"{study['protocol_commit']})", "",
             f"**Chosen on the tuning cells (step 5):** {v}, γ {g:g}{' (unused by the RA-F1 line)' if 'ra_f1' in v else ''}"
             f" (mean lead over the best baseline {c['mean_lead']:+.4f}, worst {c['min_lead']:+.4f}; filed-case "
             f"constraint {'met' if c['filed_constraint_met'] else 'NOT met by any candidate'}).", "",
             "In the tables below \"old default\" is the current default (round 5's: the gate, the group's p λ 0.5, "
             "warm-up 0.6, γ 0.1) and \"chosen\" the choice above.", "",
             "## Selection (tuning cells, seeds 0-2)", "", *L.selection_lines(study["selection"], 20), "",
             "## Stability (step 6): fresh seed blocks, the top candidates", ""]
    for b in study["seed_blocks"]:
        ch = b["choice"]
        lines.append(f"- seeds {b['seeds']}: chooses {ch['variant']}, γ {ch['gamma']:g} (mean lead "
                     f"{ch['mean_lead']:+.4f}); the main choice ranks {b['rank_of_main_choice']} of "
                     f"{len(b['candidates'])} there")
    for title, key in (("Evidence: the held-out cells (step 7)", "held_out"),
                       ("The unflattering simulator (step 8)", "unflattering"),
                       ("Round 5's held-out populations (step 9)", "round5_held_out")):
        lines += ["", f"## {title}", "", L.counts_line(study[key]), "", *L.judged_table(study[key])]
    rows = study["earlier"]
    lines += ["", "## Earlier populations (step 10)", "",
              f"No worse than the current default (within 1 sd) in {sum(r['vs_current']['no_worse'] for r in rows)} of "
              f"{len(rows)}; no worse than the reward shipped when issue 41 was filed in "
              f"{sum(r['vs_at_filing']['no_worse'] for r in rows)} of {len(rows)}.", "",
              "| population | chosen (refusal) | current default (refusal) | sd | no worse | at filing (refusal) | sd | "
              "no worse |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r["vs_current"], r["vs_at_filing"]
        lines.append(f"| {r['population']} / {r['norm']} | {_f(a['new'])} ({a['new_refusal']:.2f}) | {_f(a['old'])} "
                     f"({a['old_refusal']:.2f}) | {a['sd']:.3f} | {'yes' if a['no_worse'] else 'no'} | {_f(b['old'])} "
                     f"({b['old_refusal']:.2f}) | {b['sd']:.3f} | {'yes' if b['no_worse'] else 'no'} |")
    lines += ["", "## The filed cases (constraints of the selection, not evidence)", "", *filed_lines(filed, v, g), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
