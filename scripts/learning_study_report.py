"""The round-4 reward study's results so far, from its finished cells (OUT/cells, written by
scripts/learning_study.py), as Markdown: every stage whose cells have all finished, by the protocol's own rules
(its functions are imported, not re-implemented), and for the first unfinished stage how far it got. The protocol
writes OUT/study.md itself when it finishes; this reads a study that has not (yet).

    python scripts/learning_study_report.py [docs/learning_study/cells] > /tmp/learning_study.md
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from awarl.io import repo_root


def protocol():  # noqa: ANN201 - the protocol module itself
    spec = importlib.util.spec_from_file_location("learning_study", repo_root() / "scripts" / "learning_study.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_stage(cells: Path, pops: list[dict], tag: str, norms: tuple[str, ...]) -> tuple[list[dict], int]:
    """The finished cells of one stage (in the protocol's order) and how many it has in all."""
    names = [f"{p['name']}-{n}-{tag}.json" for p in pops for n in norms]
    return [json.loads((cells / x).read_text()) for x in names if (cells / x).exists()], len(names)


def progress(label: str, done: int, total: int) -> list[str]:
    return [f"**{label}: {done} of {total} cells finished; not reported until all have** (the study resumes from "
            "its cells: docs/learning_study/README.md).", ""]


def report(cells: Path) -> str:
    ls = protocol()
    pops, filed = ls.draw_populations(), ls.filed_populations()
    tuning_pops = [p for p in pops if p["half"] == "tuning"]
    held_pops = [p for p in pops if p["half"] == "held-out"]
    norms = ls.NORMALISATIONS
    lines = [f"# Round 4 of the reward study: results so far (protocol: scripts/learning_study.py at "
             f"{ls.protocol_commit()[:7]})", ""]
    main, total = load_stage(cells, tuning_pops + filed, "main", norms)
    if len(main) < total:
        return "\n".join(lines + progress("Main stage (step 5)", len(main), total))
    tuning = [c for c in main if c["half"] == "tuning"]
    filed_cells = [c for c in main if c["half"] == "filed"]
    table = ls.selection_table(tuning, filed_cells)
    chosen = ls.select(table)
    v, g = chosen["variant"], chosen["gamma"]
    lines += [f"**Chosen on the tuning cells (step 5):** {v}, γ {g:g} (mean lead over the best baseline "
              f"{chosen['mean_lead']:+.4f}, worst {chosen['min_lead']:+.4f}; filed-case constraint "
              f"{'met' if chosen['filed_constraint_met'] else 'NOT met by any candidate: chosen without it'}).", "",
              "## Selection (tuning cells, seeds 0-2; top rows)", "", *ls.selection_lines(table, top=30), "",
              "## The filed cases (constraints of the selection, not evidence)", "",
              *ls.filed_table(filed_cells, v, g), "", "## Stability (step 6): fresh seed blocks", ""]
    for k, seeds in enumerate(ls.SEED_BLOCKS):
        bc, total = load_stage(cells, tuning_pops + filed, f"block{k + 1}", norms)
        if len(bc) < total:
            return "\n".join(lines + progress(f"Seed block {k + 1} (seeds {list(seeds)})", len(bc), total))
        bt = ls.selection_table([c for c in bc if c["half"] == "tuning"], [c for c in bc if c["half"] == "filed"])
        pick = ls.select(bt)
        rank = next(i for i, r in enumerate(bt) if (r["variant"], r["gamma"]) == (v, g)) + 1
        lines.append(f"- seeds {list(seeds)}: chooses {pick['variant']}, γ {pick['gamma']:g} (mean lead "
                     f"{pick['mean_lead']:+.4f}); the main choice ranks {rank} of {len(bt)} there")
    lines.append("")
    pc, total = load_stage(cells, tuning_pops + filed, "prior", norms)
    if len(pc) < total:
        return "\n".join(lines + progress("The prior (step 7)", len(pc), total))
    prior_table = ls.selection_table([c for c in pc if c["half"] == "tuning"], [c for c in pc if c["half"] == "filed"])
    lines += ["## The prior and K (step 7)", "", *ls.selection_lines(prior_table), ""]
    for k in ls.KS:
        kc, total = load_stage(cells, tuning_pops, f"k{k}", norms)
        if len(kc) < total:
            return "\n".join(lines + progress(f"K = {k} (step 7)", len(kc), total))
        leads = [ls.row_at(c, "final", g)["ra_f1"] - ls.best_baseline(c)["ra_f1"] for c in kc]
        lines.append(f"- K = {k}: mean lead {sum(leads) / len(leads):+.4f} (range {min(leads):+.4f} to "
                     f"{max(leads):+.4f})")
    lines.append("")
    for tag, title in (("held-out", "Evidence: the held-out cells (step 8)"),
                       ("unflattering", "The unflattering simulator (step 9)")):
        hc, total = load_stage(cells, held_pops, tag, norms)
        if len(hc) < total:
            return "\n".join(lines + progress(title, len(hc), total))
        verdicts = [ls.judge(c, "chosen", g) for c in hc]
        lines += [f"## {title}", "", ls.counts_line(verdicts), "", *ls.judged_table(verdicts), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(report(Path(args[0] if args else "docs/learning_study/cells")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
