"""Cross-question drift (the critic-loop article, section 5): the same fact stated with different values by
different sub-results ("The market size is $5B" from one, "$3B" from another) is flagged with both sources,
never averaged or silently resolved.

A statement is a step's answer or a longer claim of its verdict, read as a subject and its values
(awarl/critic/values.py, awarl/critic/claims.py): dates at their precision, quantities in their units ("$5B"
= "$5,000 million", "5 km" = "5,000 m", and "5 km" is not "5 miles"), and names. The subject of a claim is
its relation words; a bare answer (a name, a date, an amount) takes its sub-question's names and relation
words (stemmed, with the relation table: "founded" and "established" are one relation; "according to the
registry" names a source, not the subject). Two statements of DIFFERENT steps conflict when their subjects
share at least `research.drift_overlap` of the smaller one's words and exactly one kind of value differs: a
date that disagrees at the coarser precision ("March 1999" and "3 March 1999" do not), an amount of the same
dimension outside rounding, or one name for another ("capital of France is Paris" vs "... is Lyon"; two
kinds at once mean two subjects: "Acme Europe ... $5B" vs "Acme Asia ... $3B"). What it cannot read it does
not flag; the final pass over all the passages flags conflicts too, and those reach the report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from awarl.critic.claims import facts_of
from awarl.critic.support import question_of
from awarl.critic.values import Value
from awarl.research.schema import ReportConflict

_SOURCE = re.compile(r",?\s*\b(?:according to|says|said|as reported by|reported by|as per)\b[^,?]*", re.IGNORECASE)


@dataclass
class Statement:
    step: int
    text: str
    sources: list[str]
    subject: set[str] = field(default_factory=set)
    values: list[Value] = field(default_factory=list)
    names: set[tuple[str, ...]] = field(default_factory=set)


def read_statement(step: int, text: str, sources: Sequence[str], question: str = "") -> Statement:
    """Subject and values of one statement (module docstring); a bare value takes its question as subject."""
    f = facts_of(text)
    subject, names = set(f.words), set(f.names)
    if not subject and question:
        q = question_of(_SOURCE.sub("", question), text, 0.0).facts
        subject = set(q.words) | {t for n in q.names for t in n}
        names -= set(q.names)
    return Statement(step=step, text=text, sources=list(sources), subject=subject, values=list(f.values),
                     names=names)


def _differs(a: list[Value], b: list[Value]) -> bool:
    """Some value of one conflicts with a comparable value of the other, and none of them agree."""
    pairs = [(x, y) for x in a for y in b if x.comparable(y)]
    return bool(pairs) and not any(x.agrees(y) for x, y in pairs)


def _conflict(a: Statement, b: Statement, overlap: float) -> str | None:
    small = min(len(a.subject), len(b.subject))
    if a.step == b.step or not small or len(a.subject & b.subject) / small < overlap:
        return None
    differ = []
    for kind in ("date", "quantity"):
        if _differs([v for v in a.values if v.kind == kind], [v for v in b.values if v.kind == kind]):
            differ.append(kind)
    if a.names and b.names and a.names != b.names:
        if len(a.names - b.names) > 1 or len(b.names - a.names) > 1:
            return None  # two names changed at once: two subjects
        differ.append("name")
    return differ[0] if len(differ) == 1 else None


def conflicts(statements: Sequence[Statement], overlap: float) -> list[tuple[str, ReportConflict]]:
    """(flag, typed conflict) for statements of different steps that give different values of one kind for
    one subject."""
    out = []
    for i, a in enumerate(statements):
        for b in statements[i + 1:]:
            kind = _conflict(a, b, overlap)
            if kind is None:
                continue
            about = " ".join(sorted(a.subject & b.subject))
            flag = (f"conflicting values across sub-questions ({'number' if kind == 'quantity' else kind}) for "
                    f"{about!r}: {a.text!r} (step {a.step + 1}, sources {', '.join(a.sources) or 'none'}) vs {b.text!r} "
                    f"(step {b.step + 1}, sources {', '.join(b.sources) or 'none'}); reported, not averaged")
            out.append((flag, ReportConflict(claim=about, values=[a.text, b.text],
                                             source_ids=list(dict.fromkeys([*a.sources, *b.sources])),
                                             steps=sorted({a.step, b.step}), found_by="drift", detail=flag)))
    return out
