"""Cross-question drift (the critic-loop article, section 5): the same fact stated with different values by
different sub-results ("The market size is $5B" from one, "$3B" from another) is flagged with both sources,
never averaged or silently resolved.

A statement is a step's answer (with its sub-question as the subject when the answer is a bare value: a
name, a date, a number) or a longer claim of its verdict. Each is read as a subject (its content words) and
its values: numbers (currency and multipliers normalised: "$5B" = "$5 billion"), dates, and named entities
(capitalised names). Two statements of DIFFERENT steps conflict when their subjects share at least
`research.drift_overlap` of the smaller one's words and exactly one kind of value differs (a number, a date,
or one name for another: "capital of France is Paris" vs "... is Lyon"; two names changed at once means two
different subjects, "Paris ... France" vs "Berlin ... Germany"). A lexical heuristic: what it cannot parse it
does not flag; the LLM judge's final pass over all the passages flags conflicts too, and its flags reach the
report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from awarl.critic.lexical_judge import content_tokens, tokens
from awarl.research.reduce import read_date


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_MONTHS = _words("january february march april may june july august september october november december")
_NUM = re.compile(r"(?P<cur>[$€£¥])?\s?(?P<num>\d+(?:[,.]\d+)*)\s*(?P<mult>%|percent|thousand|million|billion|"
                  r"trillion|bn|[kmbt]\b)?", re.IGNORECASE)
_MULT = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "b": 1e9,
         "trillion": 1e12, "t": 1e12}
_NAME = re.compile(r"\b[A-Z][\w'’.-]*(?:\s+(?:of|de|the|van|von|da|del|la|le|du)?\s*[A-Z][\w'’.-]*)*")
_OPENERS = _words("the a an in on at what which who when where how is are was were it this that these those "
                  "there its his her their according")
# Words of a sub-question that say what is asked, not what it is about.
_ASKING = _words("what which who whom whose when where how year date many much number value name called "
                 "did does do is are was were")


@dataclass
class Statement:
    step: int
    text: str
    sources: list[str]
    subject: set[str] = field(default_factory=set)
    values: dict[str, set[str]] = field(default_factory=dict)


def _numbers(text: str) -> set[str]:
    out = set()
    for m in _NUM.finditer(text):
        if read_date(m.group(0)) and not m.group("cur") and not m.group("mult") and len(m.group("num")) == 4:
            continue  # a year: a date, not an amount
        num = float(m.group("num").replace(",", "")) if m.group("num").count(".") <= 1 else None
        if num is None:
            continue
        mult = (m.group("mult") or "").lower()
        pct = mult in ("%", "percent")
        out.add(f"{m.group('cur') or ''}{num * _MULT.get(mult, 1.0):g}{'%' if pct else ''}")
    return out


def _dates(text: str) -> set[str]:
    d = read_date(text)
    return {"-".join(str(x) for x in d)} if d else set()


def _names(text: str) -> set[str]:
    out = set()
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        if m.start() == 0 or text[:m.start()].rstrip().endswith((".", "?", "!")):
            while words and words[0].lower() in _OPENERS:  # capitalised only because it opens a sentence
                words = words[1:]
        words = [w for w in words if w.lower().strip(".") not in _MONTHS]
        if words and not any(ch.isdigit() for ch in words[0]):
            out.add(" ".join(tokens(" ".join(words))))
    return {n for n in out if n}


def read_statement(step: int, text: str, sources: Sequence[str], question: str = "") -> Statement:
    """Subject and values of one statement (module docstring); a bare value takes its question as subject."""
    values = {"number": _numbers(text), "date": _dates(text), "name": _names(text)}
    if values["date"]:
        values["number"] = {n for n in values["number"] if not re.fullmatch(r"\d{1,4}", n)}
    value_words = {t for v in values["name"] for t in v.split()} | _MONTHS
    subject = {t for t in content_tokens(text) if t not in value_words and not any(c.isdigit() for c in t)}
    if not subject and question:
        q_names = _names(question)
        subject = {t for t in content_tokens(question) if t not in _ASKING}
        values["name"] -= q_names
    return Statement(step=step, text=text, sources=list(sources), subject=subject,
                     values={k: v for k, v in values.items() if v})


def _conflict(a: Statement, b: Statement, overlap: float) -> str | None:
    small = min(len(a.subject), len(b.subject))
    if a.step == b.step or not small or len(a.subject & b.subject) / small < overlap:
        return None
    differ = [k for k in a.values.keys() & b.values.keys() if a.values[k] != b.values[k]]
    if len(differ) != 1:
        return None
    kind = differ[0]
    if kind == "name" and (len(a.values[kind] - b.values[kind]) > 1 or len(b.values[kind] - a.values[kind]) > 1):
        return None
    if kind == "number" and (a.values.get("name", set()) ^ b.values.get("name", set())):
        return None
    return kind


def conflicts(statements: Sequence[Statement], overlap: float) -> list[str]:
    """Flags for statements of different steps that give different values of one kind for one subject."""
    flags = []
    for i, a in enumerate(statements):
        for b in statements[i + 1:]:
            kind = _conflict(a, b, overlap)
            if kind is not None:
                flags.append(f"conflicting values across sub-questions ({kind}) for "
                             f"{' '.join(sorted(a.subject & b.subject))!r}: {a.text!r} (step {a.step + 1}, "
                             f"sources {', '.join(a.sources) or 'none'}) vs {b.text!r} (step {b.step + 1}, sources "
                             f"{', '.join(b.sources) or 'none'}); reported, not averaged")
    return flags
