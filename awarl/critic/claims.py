"""Claims and the spans that may support them (issue 43): a text's sentences and clauses with their offsets,
and what a claim asserts: the names it mentions, the values it states (awarl/critic/values.py), whether it
is negated, and its relation words (awarl/critic/tokens.py).

Sentences end at `.`, `!` or `?` before a capital, a digit or an opening quote, never after an abbreviation
("Dr.", "U.S.", "No."), an initial ("Robert Z. Leonard") or inside a number ("3.5"). Clauses split a sentence
at `;` and at a conjunction after a comma (", and", ", but", ", while", ", whereas", ", although"), when
both sides have at least three words and the split is not inside parentheses or quotes: never at a bare
comma, so "$5,000 million", "March 3, 1999", "Mountrail County, North Dakota" and "Ann Lee, the director,"
stay whole, and "Crosby, Stills, and Nash" is one list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from awarl.critic.tokens import QUESTION_WORDS, STOP, relation_text, stem, tokens
from awarl.critic.tokens import words as _words
from awarl.critic.values import MONTHS, Value, read_values

_ABBREV = frozenset(_words("mr mrs ms dr st jr sr mt ft no nos vs etc inc ltd co corp jan feb mar apr "
                           "jun jul aug sep sept oct nov dec gen col lt sgt capt rev prof hon sen rep "
                           "gov pres ave blvd dept est fig vol op pp ca approx al cf ed eds pt"))
_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)|\n+")
_CLAUSE = re.compile(r";\s+|,\s+(?:and|but|while|whereas|although|though|yet)\s+|\s+but\s+(?!also\b)|"
                     r"\s+and\s+(?=(?:he|she|they|it)\s)", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not(?!\s+only\b)|never|no(?![.\w])|no longer|neither|nor|cannot|none|false|untrue|"
                       r"denied|incorrectly|wrongly)\b|n['’]t\b", re.IGNORECASE)
_NAME = re.compile(r"(?<![\w$€£¥])[A-Z\u00C0-\u00DE][\w'’.\-]*(?:\s+(?:(?:of|de|the|van|von|da|del|della|la|le|du|di|der|den|y|"
                   r"for|on|and)\s+)*[A-Z\u00C0-\u00DE0-9][\w'’.\-]*)*")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,80})[\"”]")
# Capitalised only because they open a sentence or a question.
_OPENERS = frozenset(_words("the a an in on at what which who whom whose when where how is are was "
                            "were it this that these those there its his her their according did does "
                            "do has have had he she they we i for from by with as after before during "
                            "while although though but and or if since both neither either other "
                            "another some many most several"))
_VERB = frozenset(_words("is was are were be been being has have had does did do will would can could"))
_CONNECTORS = frozenset(_words("of de the van von da del della la le du di der den y for on and"))
_WEEKDAYS = frozenset(_words("monday tuesday wednesday thursday friday saturday sunday"))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of the text (module docstring), whitespace trimmed."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _END.finditer(text):
        if not m.group(0).startswith("\n"):
            word = re.search(r"(\S+)$", text[start:m.start()])
            w = word.group(1).lower().lstrip("(\"'“‘[") if word else ""
            nxt = re.match(r"\s*(\S)", text[m.end():])
            if m.group(0)[0] == "." and (w in _ABBREV or (len(w) == 1 and w.isalpha()) or
                                         re.fullmatch(r"(?:[a-z]\.)+[a-z]", w)):
                continue
            if nxt and not (nxt.group(1).isupper() or nxt.group(1).isdigit() or nxt.group(1) in "\"'“‘([("):
                continue
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            out.append((a, b))
    return out


def _depth_ok(text: str, pos: int, start: int) -> bool:
    """Whether position `pos` of the sentence starting at `start` is outside parentheses and quotes."""
    before = text[start:pos]
    return before.count("(") <= before.count(")") and before.count('"') % 2 == 0 and \
        before.count("“") <= before.count("”")


def clause_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each clause of the sentence text[start:end] (module docstring), conjunctions left out."""
    end = len(text) if end is None else end
    cuts: list[tuple[int, int]] = []
    for m in _CLAUSE.finditer(text, start, end):
        if _depth_ok(text, m.start(), start):
            cuts.append((m.start(), m.end()))
    out: list[tuple[int, int]] = []
    a = start
    for c0, c1 in cuts:
        left, right_end = text[a:c0], next((x0 for x0, _ in cuts if x0 > c0), end)
        if len(left.split()) >= 3 and len(text[c1:right_end].split()) >= 3:
            out.append((a, c0))
            a = c1
    out.append((a, end))
    return [(x, y) for x, y in ((x, _rstrip(text, x, y)) for x, y in out) if y > x]


def _rstrip(text: str, a: int, b: int) -> int:
    while b > a and (text[b - 1].isspace() or text[b - 1] in ".;!?,"):
        b -= 1
    return b


def is_short(answer: str, short_answer_words: int = 5) -> bool:
    """Whether an answer is read as one short answer to its question: at most `short_answer_words` words, or
    a longer name or value with no relation word of its own ("McDull: Rise of the Rice Cooker")."""
    answer = answer.strip()
    if len(answer.split()) <= short_answer_words:
        return True
    return len(sentence_spans(answer)) == 1 and not facts_of(answer).words and not _VERB & set(tokens(answer))


def split_claims(answer: str, short_answer_words: int = 5) -> list[str]:
    """The claims of an answer: the answer itself when it is short (`is_short`), else its clauses (module
    docstring: numbers, dates and names stay whole)."""
    answer = answer.strip()
    if not answer:
        return []
    if is_short(answer, short_answer_words):
        return [answer]
    claims: list[str] = []
    for s0, s1 in sentence_spans(answer):
        for c0, c1 in clause_spans(answer, s0, s1):
            piece = answer[c0:c1].strip(" .;!?,")
            if tokens(piece):
                claims.append(piece)
    return claims


def negated(text: str) -> bool:
    return bool(_NEGATION.search(text))


def names(text: str) -> list[tuple[str, ...]]:
    """The names the text mentions, each as its tokens: runs of capitalised words (with "of", "de", "van"...
    between them), and quoted titles; words capitalised only because they open a sentence, months and
    weekdays are left out."""
    out: list[tuple[str, ...]] = []
    for m in _QUOTED.finditer(text):
        toks = tuple(tokens(m.group(1)))
        if toks:
            out.append(toks)
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        at_start = m.start() == 0 or bool(re.search(r"[.!?:;\"“(]\s*$", text[:m.start()]))
        while words:
            w = words[0].lower().strip(".,")
            if not (w in MONTHS or w in _WEEKDAYS or (w in _OPENERS and (at_start or w in ("the", "a", "an")))):
                break
            words = words[1:]
        opens = m.start() == 0 or bool(re.search(r"[.!?]\s*$", text[:m.start()]))
        if opens and len(words) > 2 and words[1].lower() in _CONNECTORS and words[0].lower() not in _CONNECTORS:
            words = words[2:]  # "Capitals of France?": a common word capitalised because it opens the sentence
        while words and words[-1].lower() in ("of", "the", "and", "de", "for", "on"):
            words = words[:-1]
        words = [w for w in words if w.lower().strip(".,") not in MONTHS and not w.isdigit()]
        toks = tuple(tokens(" ".join(words)))
        if toks and not all(t in STOP for t in toks):
            out.append(toks)
    return list(dict.fromkeys(out))


@dataclass
class Facts:
    """What a claim (or a question) asserts: its names, values, negation and relation words (stems)."""

    text: str
    names: list[tuple[str, ...]] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    negated: bool = False
    words: set[str] = field(default_factory=set)


def facts_of(text: str, drop: set[str] | frozenset[str] = frozenset()) -> Facts:
    """The facts of `text`; `drop`: tokens that are not relation words here (an answer's own words)."""
    found = names(text)
    values = read_values(text)
    name_toks = {t for n in found for t in n}
    value_toks = {t for v in values for t in tokens(v.text)}
    words = {stem(t) for t in tokens(relation_text(text))
             if t not in STOP and t not in QUESTION_WORDS and t not in name_toks and t not in value_toks
             and t not in drop and not any(ch.isdigit() for ch in t)}
    return Facts(text=text, names=found, values=values, negated=negated(text), words=words - {""})

