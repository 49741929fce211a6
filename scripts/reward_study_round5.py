"""Round 5 of the reward study (issue 41): a refusal reward that does not teach lazy refusal to a policy that learns
by answering, and still refuses where nothing can be learned.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md "Round 5"). The machinery (populations, cells, the selection rule, the filed
targets) is round 4's, imported from scripts/learning_study.py, whose file is frozen with round 4's results.

0. **Pilot (before this protocol; exploration, not evidence).** The two options this round studies,
   `reward.refusal_gate: any_correct` (an abstention earns r_wrong when a rollout of its own group is correct:
   BAPO's group rule in front of AWA-RL's r_ref) and `reward.refusal_warmup` (a share of the run paid as plain
   GRPO, Ē held at 0), were tried on round 4's 8 tuning populations and the 4 filed cases, seed 0, group
   normalisation, γ 0.01-0.1: gate, `p_online: group` λ 0.5, both, warm-up 0.3 and 0.6, both with warm-up 0.3.
   What it showed, and what drove the grid below: the gate with the group's p meets GROW and DEAD at γ 0.05 on
   the filed cases (the gate alone does not meet GROW); a warm-up of 0.6 recovers most of plain GRPO's lead where
   skill comes only from answering (round 4's learn06 and learn12: −0.044 and −0.084 → +0.003 and +0.011 at
   γ 0.01). Round 4's held-out populations and this round's populations were not looked at.
1. **Populations.** `draw_populations(16, ROUND5_SEED)` from round 4's `LEARNING_DISTRIBUTION` (the same
   distribution, fresh draws), named r5-00 ... r5-15.
2. **Split before looking.** Population k is tuning when k is even, held-out when k is odd.
3. **Cells.** Both GRPO advantage normalisations (`group`: TRL's `scale_rewards: group`; `none`: mean-only, Dr.
   GRPO), as in round 4.
4. **Grid.** `VARIANTS` × `GAMMAS`, and the baselines plain GRPO, static 0.05 and BAPO (0.5); seeds 0, 1, 2; 1000
   steps. Every variant is the shipped reward at this commit (posterior ρ̂, prior 0.5, cap 0.1, floor 0, dither
   0.2, `p_online: off`) but for the keys it names; "current default" is the shipped reward itself, whose γ 0.01
   is in the grid.
5. **Selection (tuning cells only)**: round 4's rule (`learning_study.select`): no collapse in a tuning cell
   (refusal < 0.02 while the best baseline refuses > 0.3); every filed target met on the filed cells (grow,
   grow_once ≥ plain GRPO − 1 sd; dead, dead_once ≥ the best baseline − 1 sd; both normalisations, seeds 0-2);
   then the largest mean lead over the tuning cells' best baseline, a tie (within 0.001) broken by the smaller
   mean late-phase refusal sd. If no candidate meets the filed targets the choice is made without them and the
   report says so. The current default is a candidate: if it is chosen nothing changes.
6. **Stability.** The `TOP` best candidates of step 5's table (those that pass its exclusions, by mean lead) are
   run again on two fresh seed blocks (100-102, 200-202) of the tuning and filed cells; step 5's rule among them
   in each block, and the rank of the main choice there.
7. **Evidence: the held-out cells**, run only now: the chosen (variant, γ), the current default (γ 0.01) and the
   baselines, both normalisations; per cell the lead over the best baseline ± the larger seed sd, ahead (> 1 sd),
   tie (|lead| ≤ 1 sd), behind; counts per normalisation; every tie named.
8. **The unflattering simulator**: the held-out populations again with all four options of docs/simulator.md on
   (`learning_study.UNFLATTERING`), as step 7; a population seeing each query once runs on 42,000 queries there,
   as its distribution gives one with a held-out fifth (`unflattering`; amended in a later commit, when the first
   run stopped on r5-05's 32,000, before any result of this step existed).
9. **Round 4's held-out populations** (never looked at with these options: secondary evidence), both
   normalisations, as step 7.
10. **Earlier populations.** Round 4's tuning populations (both normalisations) and the 29 of rounds 2-3 (group
    normalisation, as they were run): the chosen against the current default; "no worse" when its RA-F1 ≥ the
    current default's − 1 sd.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round5.py --out runs/reward_study_round5 --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those: the study resumes), then OUT/study.json
and OUT/study.md (kept in the repo under docs/reward_study_round5/).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from awarl.io import atomic_write_json, atomic_write_text, repo_root


def _round4():
    """scripts/learning_study.py (round 4's protocol, frozen with its results) as a module."""
    spec = importlib.util.spec_from_file_location("learning_study", repo_root() / "scripts" / "learning_study.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("learning_study", mod)  # the worker processes unpickle its functions by this name
    spec.loader.exec_module(mod)
    return sys.modules["learning_study"]


L = _round4()

ROUND5_SEED = 20261205
SEEDS = (0, 1, 2)
SEED_BLOCKS = ((100, 101, 102), (200, 201, 202))
GAMMAS = (0.01, 0.02, 0.05, 0.1)
CURRENT = ("current default", 0.01)
GATE_GROUP = {"reward.refusal_gate": "any_correct", "reward.p_online": "group", "reward.p_prior_weight": 0.5}
VARIANTS: dict[str, dict] = {
    "current default": {},
    "warm-up 0.6": {"reward.refusal_warmup": 0.6},
    "gate+group": GATE_GROUP,
    "gate+group, warm-up 0.3": {**GATE_GROUP, "reward.refusal_warmup": 0.3},
    "gate+group, warm-up 0.6": {**GATE_GROUP, "reward.refusal_warmup": 0.6},
}
TOP = 5


def populations() -> list[dict]:
    """Step 1: 16 fresh populations of round 4's distribution, renamed r5-NN."""
    return [{**p, "name": p["name"].replace("learn", "r5-")} for p in L.draw_populations(16, ROUND5_SEED)]


def unflattering(pop: dict) -> list[str]:
    """Step 8's overrides for `pop`: all four options on; a population that sees each query once gets the 42,000
    queries its distribution gives when the held-out fifth is drawn (32,000 cannot feed 1000 steps of 32 beside
    it). Amended after the first run stopped on r5-05 with that error, before any step 8 result existed."""
    extra = list(L.UNFLATTERING)
    if pop["params"].get("query_schedule") == "once" and pop["params"]["n_queries"] < 42000:
        extra.append("simulate.n_queries=42000")
    return extra


def judge(cell: dict, variant: str, gamma: float) -> dict:
    """One evidence cell: the chosen default's lead over the best baseline, the current default's beside it."""
    rival, row, cur = L.best_baseline(cell), L.row_at(cell, variant, gamma), L.row_at(cell, *CURRENT)
    sd = max(row["ra_f1_sd"], rival["ra_f1_sd"])
    lead = row["ra_f1"] - rival["ra_f1"]
    return {"population": cell["population"], "norm": cell["norm"], "rival": rival["label"],
            "rival_ra_f1": rival["ra_f1"], "rival_refusal": rival["refusal_rate"],
            "plain_ra_f1": L.plain(cell)["ra_f1"], "ra_f1": row["ra_f1"], "refusal": row["refusal_rate"], "sd": sd,
            "lead": lead, "old_ra_f1": cur["ra_f1"], "old_refusal": cur["refusal_rate"],
            "old_lead": cur["ra_f1"] - rival["ra_f1"], "within_sd": lead >= -sd, "ahead": lead > sd,
            "tie": abs(lead) <= sd, "collapse": L.collapsed(row, rival)}


def merged(cells: list[dict]) -> list[dict]:
    """Cells of the same (population, normalisation) run per candidate, joined into one cell with every variant."""
    by: dict[tuple[str, str], dict] = {}
    for c in cells:
        m = by.setdefault((c["population"], c["norm"]), {**c, "variants": {}})
        for name, rows in c["variants"].items():
            m["variants"].setdefault(name, []).extend(rows)
    return list(by.values())


def passing(table: list[dict]) -> list[dict]:
    """Step 5's exclusions, in the table's order (by mean lead): no collapse, and the filed targets when any
    candidate meets them."""
    ok = [r for r in table if r["collapses"] == 0]
    kept = [r for r in ok if not r["filed_missed"]]
    return kept or ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/reward_study_round5")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes")
    args = ap.parse_args(argv)
    commit = protocol_commit()
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    pops, filed = populations(), L.filed_populations()
    tuning_pops = [p for p in pops if p["half"] == "tuning"]
    held_pops = [p for p in pops if p["half"] == "held-out"]

    def grid(ps: list[dict], seeds: tuple[int, ...], tag: str, variants: dict = VARIANTS,
             gammas: tuple[float, ...] = GAMMAS, extra: list[str] | None = None,
             norms: tuple[str, ...] = L.NORMALISATIONS) -> list[tuple]:
        return [(p, n, seeds, variants, gammas, extra, tag, str(out)) for p in ps for n in norms]

    cells = L.run_jobs(grid(tuning_pops + filed, SEEDS, "main"), args.jobs, "main")
    tuning = [c for c in cells if c["half"] == "tuning"]
    filed_cells = [c for c in cells if c["half"] == "filed"]
    table = L.selection_table(tuning, filed_cells)
    chosen = L.select(table)
    v, g = chosen["variant"], chosen["gamma"]
    print(f"step 5, chosen on the tuning cells: {v}, γ {g:g} (mean lead {chosen['mean_lead']:+.4f})", flush=True)

    top = passing(table)[:TOP]
    blocks = []
    for k, seeds in enumerate(SEED_BLOCKS):
        jobs = [job for i, r in enumerate(top) for job in
                grid(tuning_pops + filed, seeds, f"block{k + 1}-top{i + 1}", {r["variant"]: VARIANTS[r["variant"]]},
                     (r["gamma"],))]
        bc = merged(L.run_jobs(jobs, args.jobs, f"block {k + 1}"))
        bt = L.selection_table([c for c in bc if c["half"] == "tuning"], [c for c in bc if c["half"] == "filed"])
        pick = L.select(bt)
        rank = next(i for i, r in enumerate(bt) if (r["variant"], r["gamma"]) == (v, g)) + 1 \
            if any((r["variant"], r["gamma"]) == (v, g) for r in bt) else None
        blocks.append({"seeds": list(seeds), "candidates": [(r["variant"], r["gamma"]) for r in top],
                       "choice": pick, "rank_of_main_choice": rank, "table": bt})

    final = {"chosen": VARIANTS[v], CURRENT[0]: VARIANTS[CURRENT[0]]}
    both = tuple(sorted({g, CURRENT[1]}))
    held = L.run_jobs(grid(held_pops, SEEDS, "held-out", final, both), args.jobs, "held-out")
    verdicts = [judge(c, "chosen", g) for c in held]
    unflat = L.run_jobs([job for p in held_pops for job in grid([p], SEEDS, "unflattering", final, both,
                                                                 unflattering(p))], args.jobs, "unflattering")
    unflat_verdicts = [judge(c, "chosen", g) for c in unflat]
    r4 = L.draw_populations()
    r4_held = L.run_jobs(grid([p for p in r4 if p["half"] == "held-out"], SEEDS, "r4-held-out", final, both),
                         args.jobs, "round 4 held-out")
    r4_verdicts = [judge(c, "chosen", g) for c in r4_held]
    earlier_jobs = grid([p for p in r4 if p["half"] == "tuning"], SEEDS, "earlier", final, both) + \
        [(p, "group", SEEDS, final, both, None, "earlier", str(out)) for p in L.earlier_populations()]
    earlier_rows = []
    for c in L.run_jobs(earlier_jobs, args.jobs, "earlier"):
        new, cur = L.row_at(c, "chosen", g), L.row_at(c, *CURRENT)
        sd = max(new["ra_f1_sd"], cur["ra_f1_sd"])
        earlier_rows.append({"population": c["population"], "norm": c["norm"], "new": new["ra_f1"],
                             "old": cur["ra_f1"], "sd": sd, "no_worse": new["ra_f1"] >= cur["ra_f1"] - sd})
    study = {"protocol_commit": commit, "chosen": chosen, "selection": table, "seed_blocks": blocks,
             "held_out": verdicts, "unflattering": unflat_verdicts, "round4_held_out": r4_verdicts,
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
    out = ["| filed cell | plain GRPO | static 0.05 | BAPO | current default (γ 0.01) | chosen | target | met |",
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
    fix = "current default" if (v, g) == CURRENT else "old default"
    lines = [f"# Round 5 of the reward study: results (protocol: scripts/reward_study_round5.py at "
             f"{study['protocol_commit']})", "",
             f"**Chosen on the tuning cells (step 5):** {v}, γ {g:g} (mean lead over the best baseline "
             f"{c['mean_lead']:+.4f}, worst {c['min_lead']:+.4f}; filed-case constraint "
             f"{'met' if c['filed_constraint_met'] else 'NOT met by any candidate'}).", "",
             "In the tables below \"old default\" is the current default (p_online off, no gate, no warm-up, γ 0.01) "
             f"and \"chosen\" the choice above{' (the same reward)' if fix == 'current default' else ''}.", "",
             "## Selection (tuning cells, seeds 0-2; top rows)", "", *L.selection_lines(study["selection"], 20), "",
             "## Stability (step 6): fresh seed blocks, the top candidates", ""]
    for b in study["seed_blocks"]:
        ch = b["choice"]
        lines.append(f"- seeds {b['seeds']}: chooses {ch['variant']}, γ {ch['gamma']:g} (mean lead "
                     f"{ch['mean_lead']:+.4f}); the main choice ranks {b['rank_of_main_choice']} of "
                     f"{len(b['candidates'])} there")
    for title, key in (("Evidence: the held-out cells (step 7)", "held_out"),
                       ("The unflattering simulator (step 8)", "unflattering"),
                       ("Round 4's held-out populations (step 9)", "round4_held_out")):
        lines += ["", f"## {title}", "", L.counts_line(study[key]), "", *L.judged_table(study[key])]
    lines += ["", "## Earlier populations (step 10)", "",
              f"No worse than the current default (within 1 sd) in {sum(r['no_worse'] for r in study['earlier'])} "
              f"of {len(study['earlier'])}.", "", "| population | chosen | current default | sd | no worse |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['population']} / {r['norm']} | {_f(r['new'])} | {_f(r['old'])} | {r['sd']:.3f} | "
              f"{'yes' if r['no_worse'] else 'no'} |" for r in study["earlier"]]
    lines += ["", "## The filed cases (constraints of the selection, not evidence)", "", *filed_lines(filed, v, g), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
