"""The research report in words (markdown), for `awarl research` and the docs.

Every piece of text that comes from an input (the question, the executor's answers and searches, passage
text, a judge's claims and flags) is written inert: control characters (an ANSI escape, a newline that would
start a line of its own) are shown as `\\x1b`, `\\n`, ...; so no input can start a line, and a question holding
"## Coverage gaps – none" cannot forge a heading or a list item; the characters markdown reads inside a line
(emphasis, links, HTML, code, a table cell's `|`) are backslash-escaped.
"""

from __future__ import annotations

import re

from awarl.research.schema import Finding, ResearchReport

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~])")


def inert(text: object) -> str:
    """Text from an input, safe to print inside a markdown line (module docstring)."""
    s = _CONTROL.sub(lambda m: {"\n": "\\n", "\r": "\\r", "\t": " "}.get(m.group(0), f"\\x{ord(m.group(0)):02x}"),
                     str(text))
    return _MARKDOWN.sub(r"\\\1", s)


def report_markdown(r: ResearchReport) -> str:
    marked = [f for f in r.findings if f.mark]
    verdict = "approved" if r.approved else "not approved: abstained"
    if r.approved and marked:
        verdict += f", with {len(marked)} marked claim(s): see Marked claims"
    prov = r.provenance or {}
    lines = ["# Research report\n", f"**Question:** {inert(r.question)}\n", f"**Answer:** {inert(r.answer)} ({verdict})\n",
             f"Decided by the {inert(r.judge or 'configured')} judge" + (
                 " — an ORACLE: it read the dataset's gold evidence, so this result is not what a system "
                 "without that evidence would report" if r.oracle else "") + f"; plan: {inert(r.plan.get('rule', '?'))}"
             f" (reduce: {inert((r.plan.get('reduce') or {}).get('kind', '?'))}).\n",
             f"Confidence (grounded share of the judge's findings on the reported answer; 0 when it abstains): "
             f"{r.confidence:.2f}; critic-loop cycles: {r.iterations}; re-queries: {r.requeries}; groundedness "
             f"before/after: {_num(r.groundedness_before)} / {_num(r.groundedness_after)}. Generated "
             f"{inert(r.generated_at)}.\n"]
    if prov:
        lines.append(f"Sources: {_identity(prov.get('index'))}; executor: {_identity(prov.get('executor'))}; judge: "
                     f"{_identity(prov.get('judge'))}; planner: {_identity(prov.get('planner'))}.\n")
    lines += ["## Coverage gaps\n"] + ([f"- {inert(g)}" for g in r.coverage_gaps] or ["- none"])
    lines += ["", "## Query failures\n"] + ([f"- {inert(g)}" for g in r.query_failures] or ["- none"])
    lines += ["", "## Judge and executor failures\n"] + ([f"- {inert(g)}" for g in r.failures] or ["- none"])
    lines += ["", "## Conflicts\n"] + ([f"- {_where_steps(c.steps)}: {' vs '.join(inert(v) for v in c.values)} "
                                        f"({inert(', '.join(c.source_ids) or 'sources not named')}; {c.found_by})"
                                        for c in r.conflicts] or ["- none"])
    if marked:
        lines += ["", "## Marked claims\n"] + [f"- {_where(f)}: “{inert(f.claim)}” — {inert(f.mark)}" for f in marked]
    lines += ["", "## Sub-questions\n", "| # | asked | attempts | approved | answer | searches |",
              "|---|---|---|---|---|---|"]
    for s in r.sub_questions:
        lines.append(f"| {s['index'] + 1} | {inert(s['text'])} | {s['attempts']} | {'yes' if s['approved'] else 'no'} "
                     f"| {inert(s['answer'] or '—')} | {inert('; '.join(s['searches']) or '—')} |")
    lines += ["", "## Findings\n", "| where | claim | status | sources | quoted span | confidence | mark |",
              "|---|---|---|---|---|---|---|"]
    for c in r.findings:
        quotes = " / ".join(f"{q.passage_id} [{q.start}:{q.end}]: “{q.text}”" for q in c.quotes)
        lines.append(f"| {_where(c)} | {inert(c.claim)} | {c.status} | {inert(', '.join(c.source_ids) or '—')} | "
                     f"{inert(quotes or '—')} | {c.confidence:.2f} | {inert(c.mark or '—')} |")
    if r.flags:
        lines += ["", "## Flags\n"] + [f"- {inert(f)}" for f in r.flags]
    return "\n".join(lines) + "\n"


def _identity(d: object) -> str:
    if not isinstance(d, dict) or not d:
        return "not recorded"
    keys = ("kind", "name", "model", "corpus_sha256", "passage_count", "weights_sha256", "script_sha256", "planner")
    return inert(", ".join(f"{k} {str(d[k])[:16] if k.endswith('sha256') else d[k]}" for k in keys if d.get(k)))


def _where(f: Finding) -> str:
    return "final answer" if f.step is None else f"step {f.step + 1}"


def _where_steps(steps: list[int]) -> str:
    return "final answer" if not steps else ", ".join(f"step {s + 1}" for s in steps)


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"
