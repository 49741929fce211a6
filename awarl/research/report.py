"""The research report in words (markdown), for `awarl research` and the docs."""

from __future__ import annotations

from awarl.research.schema import ResearchReport


def report_markdown(r: ResearchReport) -> str:
    verdict = "approved" if r.approved else "not approved: abstained"
    lines = ["# Research report\n", f"**Question:** {r.question}\n", f"**Answer:** {r.answer} ({verdict})\n",
             f"Confidence (grounded share of all findings): {r.confidence:.2f}; critic-loop cycles: {r.iterations}; "
             f"re-queries: {r.requeries}; groundedness before/after: {_num(r.groundedness_before)} / "
             f"{_num(r.groundedness_after)}. Generated {r.generated_at}.\n", "## Coverage gaps\n"]
    lines += [f"- {g}" for g in r.coverage_gaps] or ["- none"]
    lines += ["", "## Sub-questions\n", "| # | asked | attempts | approved | answer | searches |",
              "|---|---|---|---|---|---|"]
    for s in r.sub_questions:
        lines.append(f"| {s['index'] + 1} | {_cell(s['text'])} | {s['attempts']} | {'yes' if s['approved'] else 'no'} "
                     f"| {_cell(s['answer'] or '—')} | {_cell('; '.join(s['searches']) or '—')} |")
    lines += ["", "## Findings\n", "| claim | status | sources | confidence |", "|---|---|---|---|"]
    for c in r.findings:
        lines.append(f"| {_cell(c.claim)} | {c.status} | {_cell(', '.join(c.source_ids) or '—')} | {c.confidence:.2f} |")
    if r.flags:
        lines += ["", "## Flags\n"] + [f"- {f}" for f in r.flags]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")
