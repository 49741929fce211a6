"""Round 7 of the reward study (issue 41): the RA-F1 line against courage γ, chosen by all of the issue's targets and
judged on fresh populations.

Protocol. Fixed in this file and committed BEFORE any of its results were computed; `main` refuses to run while
this file has uncommitted changes and records its commit in the results (`protocol_commit`), which land in a
later commit (docs/learning_study.md "Round 7"). The machinery is round 6's (scripts/reward_study_round6.py, which
imports rounds 4 and 5), frozen with its results and imported here.

Why this round, said before its results. Round 6's rule (round 4's) puts the filed targets first; it chose γ 0.2,
the only candidate meeting all eight, which is worse than γ 0.1 on round 6's held-out cells and worse than the
reward at filing on 16 of 61 earlier populations. Its addendum ran the tuning table's best mean lead, the RA-F1
line with warm-up 0.75, on round 6's evidence: ahead of round 6's choice on every evidence set, 57 of 61 earlier
populations no worse than at filing, one filed target missed (dead_once under mean-only advantages, by 0.001
beyond 1 sd). Issue 41's targets are the filed cases AND the earlier populations, so this round's rule counts
both. The rule was written after round 6's addendum was seen: round 7's choice is judged only on its own fresh
held-out populations, which nobody has seen.

1. **Populations.** `draw_populations(16, ROUND7_SEED)` from round 4's `LEARNING_DISTRIBUTION` (fresh draws),
   named r7-00 ... r7-15; k even: tuning, k odd: held-out (split before looking).
2. **Cells.** Both advantage normalisations (`group`, `none`), seeds 0, 1, 2, 1000 steps.
3. **Candidates** (`CANDIDATES`, each at one γ): the current default (γ 0.2), the same at γ 0.1 (round 5's),
   and the RA-F1 line (`reward.abstain_line: ra_f1`, the current gate and group p, γ unused) with warm-up 0.6,
   0.75 and 0.9. Baselines: plain GRPO, static 0.05, BAPO (0.5).
4. **The issue's targets, per candidate** (none of these cells is evidence): (a) the 8 filed cells (grow,
   grow_once ≥ plain GRPO − 1 sd; dead, dead_once ≥ the best baseline − 1 sd; both normalisations); (b) the
   earlier populations: rounds 2-3's 29 (group normalisation) and the tuning populations of rounds 4, 5 and 6
   (both normalisations), each "no worse than the reward at filing" (round 6's `AT_FILING`: no online p, no
   gate, no warm-up, γ 0.02) within 1 sd (the larger of the two seed sds).
5. **Selection**: no collapse on a tuning cell (refusal < 0.02 while the best baseline refuses > 0.3); then the
   fewest missed targets of step 4 (filed and earlier counted alike, one each); then the largest mean lead over
   the tuning cells' best baseline, a tie (within 0.001) broken by the smaller mean late-phase refusal sd. The
   current default is a candidate: if it is chosen nothing changes.
6. **Stability.** The 3 best candidates by step 5's order run again on two fresh seed blocks (100-102, 200-202) of
   the tuning and filed cells; step 5's order among them in each block, with the earlier-population misses of
   step 4 (seeds 0-2) carried over, and the rank of the main choice there.
7. **Evidence: the held-out cells**, run only now: the chosen, the current default and the baselines, both
   normalisations; per cell the lead over the best baseline ± the larger seed sd, ahead / tie / behind.
8. **The unflattering simulator**: the held-out populations with all four options of docs/simulator.md on, as
   step 7 (round 5's `unflattering`).

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/reward_study_round7.py --out runs/reward_study_round7 --jobs 2

Writes OUT/cells/NAME.json per cell as it finishes (a rerun skips those), then OUT/study.json and OUT/study.md
(kept in the repo under docs/reward_study_round7/).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

from awarl.io import atomic_write_json, atomic_write_text, repo_root


def _round6():
    spec = importlib.util.spec_from_file_location("reward_study_round6", repo_root() / "scripts" / "reward_study_round6.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reward_study_round6", mod)
    spec.loader.exec_module(mod)
    return sys.modules["reward_study_round6"]


R6 = _round6()
L, R5 = R6.L, R6.R5

ROUND7_SEED = 20261207
SEEDS = (0, 1, 2)
SEED_BLOCKS = ((100, 101, 102), (200, 201, 202))
LINE = {"reward.abstain_line": "ra_f1"}
# name -> (the keys it changes from the shipped reward at this commit, its γ)
CANDIDATES: dict[str, tuple[dict, tuple[float, ...]]] = {
    "current default": ({}, (0.2,)),
    "γ 0.1": ({}, (0.1,)),
    "ra_f1 line, warm-up 0.6": (LINE, (0.2,)),  # γ unused under the line: it only labels the row
    "ra_f1 line, warm-up 0.75": ({**LINE, "reward.refusal_warmup": 0.75}, (0.2,)),
    "ra_f1 line, warm-up 0.9": ({**LINE, "reward.refusal_warmup": 0.9}, (0.2,)),
}
CURRENT = ("current default", 0.2)
TOP = 3


def populations() -> list[dict]:
    """Step 1: 16 fresh populations of round 4's distribution, renamed r7-NN."""
    return [{**p, "name": p["name"].replace("learn", "r7-")} for p in L.draw_populations(16, ROUND7_SEED)]


def earlier_populations() -> list[tuple[dict, tuple[str, ...]]]:
    """Step 4 (b): (population, its normalisations)."""
    tuning = [p for p in L.draw_populations() + R5.populations() + R6.populations() if p["half"] == "tuning"]
    return [(p, L.NORMALISATIONS) for p in tuning] + [(p, ("group",)) for p in L.earlier_populations()]


def ranked(table: list[dict], earlier_missed: dict[str, list[str]]) -> list[dict]:
    """Step 5's order: collapses out, then fewest missed targets, then largest mean lead (ties within
    `L.SELECT_TOL` by the smaller late sd). Each row gains `earlier_missed` and `missed`."""
    rows = [{**r, "earlier_missed": earlier_missed[r["variant"]],
             "missed": len(r["filed_missed"]) + len(earlier_missed[r["variant"]])} for r in table]
    ok = [r for r in rows if r["collapses"] == 0] or rows
    out: list[dict] = []
    for m in sorted({r["missed"] for r in ok}):
        pool = sorted((r for r in ok if r["missed"] == m), key=lambda r: -r["mean_lead"])
        while pool:
            tied = [r for r in pool if r["mean_lead"] >= pool[0]["mean_lead"] - L.SELECT_TOL]
            best = min(tied, key=lambda r: (r["mean_late_sd"], -r["mean_lead"]))
            out.append(best)
            pool.remove(best)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/reward_study_round7")
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

    cells = R6.run_jobs(grid(tuning_pops + filed, SEEDS, "main", CANDIDATES), args.jobs, "main")
    tuning = [c for c in cells if c["half"] == "tuning"]
    filed_cells = [c for c in cells if c["half"] == "filed"]
    table = L.selection_table(tuning, filed_cells)

    with_filing = {**CANDIDATES, R6.AT_FILING[0]: (R6.AT_FILING_KEYS, (R6.AT_FILING[1],))}
    earlier_jobs = [job for p, norms in earlier_populations() for job in
                    grid([p], SEEDS, "earlier", with_filing, norms=norms, baselines=False)]
    earlier_cells = R6.run_jobs(earlier_jobs, args.jobs, "earlier")
    earlier = {name: [{"population": c["population"], "norm": c["norm"],
                       **R6.compare(c, (name, gammas[0]), R6.AT_FILING)} for c in earlier_cells]
               for name, (_, gammas) in CANDIDATES.items()}
    earlier_missed = {name: [f"{r['population']}/{r['norm']}" for r in rows if not r["no_worse"]]
                      for name, rows in earlier.items()}
    order = ranked(table, earlier_missed)
    chosen = order[0]
    v, g = chosen["variant"], chosen["gamma"]
    print(f"step 5, chosen: {v} (missed {chosen['missed']}, mean lead {chosen['mean_lead']:+.4f})", flush=True)

    top = order[:TOP]
    blocks = []
    for k, seeds in enumerate(SEED_BLOCKS):
        cands = {r["variant"]: CANDIDATES[r["variant"]] for r in top}
        bc = R6.run_jobs(grid(tuning_pops + filed, seeds, f"block{k + 1}", cands), args.jobs, f"block {k + 1}")
        bt = L.selection_table([c for c in bc if c["half"] == "tuning"], [c for c in bc if c["half"] == "filed"])
        bo = ranked(bt, earlier_missed)
        blocks.append({"seeds": list(seeds), "candidates": list(cands), "choice": bo[0],
                       "rank_of_main_choice": [r["variant"] for r in bo].index(v) + 1, "table": bo})

    final = {"chosen": (CANDIDATES[v][0], (g,)), CURRENT[0]: CANDIDATES[CURRENT[0]]}
    R5.CURRENT = CURRENT  # round 5's verdict names this round's current default as its "old" column
    held = R6.run_jobs(grid(held_pops, SEEDS, "held-out", final), args.jobs, "held-out")
    verdicts = [R5.judge(c, "chosen", g) for c in held]
    unflat = R6.run_jobs([job for p in held_pops for job in grid([p], SEEDS, "unflattering", final,
                                                                  R5.unflattering(p))], args.jobs, "unflattering")
    unflat_verdicts = [R5.judge(c, "chosen", g) for c in unflat]
    study = {"protocol_commit": commit, "chosen": chosen, "order": order, "seed_blocks": blocks,
             "held_out": verdicts, "unflattering": unflat_verdicts, "earlier": earlier, "filed": filed_cells,
             "populations": pops}
    atomic_write_json(out / "study.json", study)
    atomic_write_text(out / "study.md", report(study))
    print(f"wrote {out}/study.json, {out}/study.md", file=sys.stderr)
    return 0


def protocol_commit() -> str:
    """This file's last commit; refuses when it has uncommitted changes (results must name a committed protocol)."""
    import subprocess

    root = repo_root()
    rel = str(Path(__file__).resolve().relative_to(root))
    if subprocess.run(["git", "status", "--porcelain", "--", rel], cwd=root, capture_output=True, text=True,
                      check=True).stdout.strip():
        raise SystemExit(f"{rel} has uncommitted changes: commit the protocol before running the study")
    return subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def report(study: dict) -> str:
    c = study["chosen"]
    lines = [f"# Round 7 of the reward study: results (protocol: scripts/reward_study_round7.py at "
             f"{study['protocol_commit']})", "",
             f"**Chosen (step 5):** {c['variant']} (missed targets {c['missed']}: filed "
             f"{', '.join(c['filed_missed']) or 'none'}; earlier {len(c['earlier_missed'])}; mean lead over the "
             f"tuning cells' best baseline {c['mean_lead']:+.4f}, worst {c['min_lead']:+.4f}).", "",
             "In the evidence tables \"old default\" is the current default (round 6's: courage γ 0.2, the gate, the "
             "group's p λ 0.5, warm-up 0.6).", "",
             "## Step 5's order (tuning cells, seeds 0-2)", "",
             "| candidate | missed | filed missed | earlier worse than at filing | mean lead | worst lead | mean late sd "
             "| collapses |", "|---|---|---|---|---|---|---|---|"]
    for r in study["order"]:
        lines.append(f"| {r['variant']} | {r['missed']} | {', '.join(r['filed_missed']) or '-'} | "
                     f"{len(r['earlier_missed'])}: {', '.join(r['earlier_missed']) or '-'} | {r['mean_lead']:+.4f} | "
                     f"{r['min_lead']:+.4f} | {r['mean_late_sd']:.4f} | {r['collapses']} |")
    lines += ["", "## Stability (step 6): fresh seed blocks, the top candidates", ""]
    for b in study["seed_blocks"]:
        ch = b["choice"]
        lines.append(f"- seeds {b['seeds']}: chooses {ch['variant']} (missed {ch['missed']}, mean lead "
                     f"{ch['mean_lead']:+.4f}); the main choice ranks {b['rank_of_main_choice']} of "
                     f"{len(b['candidates'])} there")
    for title, key in (("Evidence: the held-out cells (step 7)", "held_out"),
                       ("The unflattering simulator (step 8)", "unflattering")):
        rows = study[key]
        lines += ["", f"## {title}", "", L.counts_line(rows), "", *L.judged_table(rows)]
        for norm in L.NORMALISATIONS:
            rs = [r for r in rows if r["norm"] == norm]
            lines.append(f"- {norm}: ahead {sum(r['ahead'] for r in rs)}, tied {sum(r['tie'] for r in rs)}, behind "
                         f"{sum(not r['ahead'] and not r['tie'] for r in rs)}; mean lead "
                         f"{np.mean([r['lead'] for r in rs]):+.4f}")
    lines += ["", "## The filed cases (targets, not evidence)", "", *filed_lines(study["filed"], c["variant"],
                                                                                 c["gamma"]), ""]
    return "\n".join(lines)


def filed_lines(filed: list[dict], variant: str, gamma: float) -> list[str]:
    out = ["| filed cell | plain GRPO | BAPO | best baseline | current default (γ 0.2) | chosen | met (current) |",
           "|---|---|---|---|---|---|---|"]
    for c in filed:
        b = {r["strategy"]: r for r in c["baselines"]}
        row, cur = L.row_at(c, variant, gamma), L.row_at(c, *CURRENT)
        out.append(f"| {c['population']} / {c['norm']} | " + " | ".join(
            f"{r['ra_f1']:.3f} ± {r['ra_f1_sd']:.3f} ({r['refusal_rate']:.2f})"
            for r in (b["none"], b["bapo"], L.best_baseline(c), cur, row)) +
            f" | {'yes' if L.filed_target(c, row) else 'no'} ({'yes' if L.filed_target(c, cur) else 'no'}) |")
    return out


if __name__ == "__main__":
    sys.exit(main())
