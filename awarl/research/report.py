"""The research report in words (markdown), for `awarl research` and the docs."""

from __future__ import annotations

from awarl.research.schema import Finding, ResearchReport


def report_markdown(r: ResearchReport) -> str:
    marked = [f for f in r.findings if f.mark]
    verdict = "approved" if r.approved else "not approved: abstained"
    if r.approved and marked:
        verdict += f", with {len(marked)} marked claim(s): see Marked claims"
    lines = ["# Research report\n", f"**Question:** {r.question}\n", f"**Answer:** {r.answer} ({verdict})\n",
             f"Decided by the {r.judge or 'configured'} judge" + (
                 " — an ORACLE: it read the dataset's gold evidence, so this result is not what a system "
                 "without that evidence would report" if r.oracle else "") + f"; plan: {r.plan.get('rule', '?')}"
             f" (reduce: {(r.plan.get('reduce') or {}).get('kind', '?')}).\n",
             f"Confidence (grounded share of all findings): {r.confidence:.2f}; critic-loop cycles: {r.iterations}; "
             f"re-queries: {r.requeries}; groundedness before/after: {_num(r.groundedness_before)} / "
             f"{_num(r.groundedness_after)}. Generated {r.generated_at}.\n", "## Coverage gaps\n"]
    lines += [f"- {g}" for g in r.coverage_gaps] or ["- none"]
    lines += ["", "## Query failures\n"] + ([f"- {g}" for g in r.query_failures] or ["- none"])
    if marked:
        lines += ["", "## Marked claims\n"] + [f"- {_where(f)}: {f.claim!r} — {f.mark}" for f in marked]
    lines += ["", "## Sub-questions\n", "| # | asked | attempts | approved | answer | searches |",
              "|---|---|---|---|---|---|"]
    for s in r.sub_questions:
        lines.append(f"| {s['index'] + 1} | {_cell(s['text'])} | {s['attempts']} | {'yes' if s['approved'] else 'no'} "
                     f"| {_cell(s['answer'] or '—')} | {_cell('; '.join(s['searches']) or '—')} |")
    lines += ["", "## Findings\n", "| where | claim | status | sources | quoted span | confidence | mark |",
              "|---|---|---|---|---|---|---|"]
    for c in r.findings:
        quotes = " / ".join(f"{q.passage_id}: “{q.text}”" for q in c.quotes)
        lines.append(f"| {_where(c)} | {_cell(c.claim)} | {c.status} | {_cell(', '.join(c.source_ids) or '—')} | "
                     f"{_cell(quotes or '—')} | {c.confidence:.2f} | {_cell(c.mark or '—')} |")
    if r.flags:
        lines += ["", "## Flags\n"] + [f"- {f}" for f in r.flags]
    return "\n".join(lines) + "\n"


def _where(f: Finding) -> str:
    return "final answer" if f.step is None else f"step {f.step + 1}"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")
