"""Whether ONE span of a passage states what a claim asserts (issue 43): the offline judge's check, and the
critic loop's reading of the sources (conflicts within a step, the span a finding quotes, whether the
sources answer a sub-question at all).

A passage is read as units: its clauses, its sentences, and pairs of adjacent sentences (a subject named in
one and taken up by "He ..." in the next); the passage's title counts as every unit's subject.

A claim (awarl/critic/claims.py: names, values, negation, relation words) is SUPPORTED by a unit that names
every name of the claim, holds `support_threshold` of its relation words (a life-span's date holds a birth or
a death), agrees with each of its values (awarl/critic/values.py: dates at their precision, quantities in
their units) and is negated exactly when the claim is. A clause or sentence about the same thing (its names
and words) that gives another value of the same kind, or says the opposite, CONTRADICTS it.

A short answer to a question (`question_of`: its names, relation words, values; its answer-type words, "which
Italian painter", and a bridge's role words, "X's father", are not the relation asked) is supported by a
CLAUSE that holds the answer and the relation: `relation_overlap` of the question's relation words and values
within `NEAR` tokens of the answer (at least one), its final verb when it ends with one ("When was X born?"),
and no other relation verb nearest before the answer ("born in Weston, and died in Chobham"); or the
relation's usual form: "a song by Rush" for a performer, a life-span's first date for a birth, "X is a 1999
film" for a release, "in Mountrail County" for where a place is located. Not negated; about the entity a
one-hop question names (a clause naming none of its names in a passage titled by none is about someone
else); in a bridge question not a clause of the named entity's own passage that does not name the role.
A clause that states the asked relation about the question's subject beyond doubt (`_states`: all its
relation words, at most two, and all its names) with another value right after the relation word ("born in
Oslo") or another date or amount, or states it negated, or a life-span giving another date at the asked
end, CONTRADICTS the answer; another clause that gives another date or amount for it is a CONFLICT, reported
beside the support.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from awarl.critic.claims import Facts, clause_spans, facts_of, names, negated, sentence_spans
from awarl.critic.schema import PassageRef
from awarl.critic.tokens import (
    AGENT_RELATIONS,
    CANONICAL,
    END_RELATIONS,
    ROLE_WORDS,
    START_RELATIONS,
    content_tokens,
    relation_text,
    stem,
    stems,
    tokens,
)
from awarl.critic.tokens import (
    words as _words,
)
from awarl.critic.values import Value, read_values

# A role that links a named entity to the one the question is about: "X's father", "the director of film X".
_BRIDGE = re.compile(r"(?i:['’]s\s+(" + "|".join(sorted(ROLE_WORDS)) + r")s?\b)|(?i:\b(" + "|".join(sorted(ROLE_WORDS)) +
                     r")s?\s+of\s+(?:the\s+)?(?:(?:film|movie|song|album|novel|book|band|series|show)\s+)?)"
                     r"(?=[A-Z\"“])")
# A kind of work right before its title ("the director of film Oh Billy, Behave"): says which X, not a relation.
_DESCRIBED = re.compile(r"\b((?i:film|movie|song|album|novel|book|band|series|show|play|game|opera|poem|documentary|"
                        r"musical|magazine|single|group|company|team|club))\s+(?=[A-Z\"“])")
_ADJECTIVAL = ("ish", "ian", "ese", "an", "ch", "ic", "i")  # "French", "Canadian": a nationality, not a subject
NEAR = 12  # tokens: how far from the answer the relation's words may be in its clause
_WORKS = frozenset(_words("film movie album song single novel book series show play opera game documentary "
                          "musical episode poem comic magazine newspaper video"))


@dataclass
class Unit:
    """A clause, sentence or pair of sentences of a passage, read once."""

    pid: str
    start: int
    end: int
    text: str
    level: str                      # clause | sentence | window
    toks: list[str] = field(default_factory=list)
    stems: set[str] = field(default_factory=set)
    seq: list[str] = field(default_factory=list)  # the stems in order (positions: about those of `toks`)
    values: list[Value] = field(default_factory=list)  # offsets into the passage text
    negated: bool = False
    names: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def tokset(self) -> set[str]:
        return set(self.toks)


@dataclass
class View:
    """A passage as units (module docstring)."""

    ref: PassageRef
    title: set[str]
    units: list[Unit]

    def at(self, *levels: str) -> list[Unit]:
        return [u for u in self.units if u.level in levels]


def _unit(p: PassageRef, values: list[Value], a: int, b: int, level: str) -> Unit:
    text = p.text[a:b]
    seq = stems(text)
    return Unit(pid=p.id, start=a, end=b, text=text, level=level, toks=tokens(text), stems=set(seq), seq=seq,
                values=[v for v in values if a <= v.start and v.end <= b], negated=negated(text), names=names(text))


def view(p: PassageRef) -> View:
    """The passage read as units (cached: a GRPO group's completions, the loop's steps and the final pass read
    the same passages again)."""
    return _view(p.id, p.title, p.text, p.number)


@lru_cache(maxsize=4096)
def _view(pid: str, title: str, text: str, number: int) -> View:
    p = PassageRef(number=number, id=pid, title=title, text=text)
    values = read_values(p.text)
    sents = sentence_spans(p.text)
    units: list[Unit] = []
    for a, b in sents:
        clauses = clause_spans(p.text, a, b)
        if len(clauses) > 1:
            units += [_unit(p, values, x, y, "clause") for x, y in clauses]
        units.append(_unit(p, values, a, b, "sentence"))
    for (a, _), (_, b) in zip(sents, sents[1:], strict=False):
        units.append(_unit(p, values, a, b, "window"))
    return View(ref=p, title=set(tokens(_title_subject(p.title))), units=units)


def _title_subject(title: str) -> str:
    """A title as the subject it names: without a disambiguation parenthetical, before a comma."""
    return title.split(" (")[0].split(",")[0]


def clauses_of(v: View) -> list[Unit]:
    """The smallest units of each sentence: its clauses, or the sentence when it has one clause."""
    out: list[Unit] = []
    for u in v.units:
        if u.level == "sentence" and not any(c.level == "clause" and u.start <= c.start and c.end <= u.end
                                             for c in v.units) or u.level == "clause":
            out.append(u)
    return sorted(out, key=lambda u: u.start)


def _names_in(names_: Iterable[tuple[str, ...]], u: Unit, v: View) -> bool:
    have = u.tokset | v.title
    return all(set(n) <= have for n in names_)


def held(words: set[str], have: set[str]) -> set[str]:
    """The words `have` holds: the same stem, or one stem a prefix of the other of at least five letters
    ("affiliation" / "affiliated", "production" / "producer": a light stemmer's misses)."""
    return {w for w in words if w in have or any(len(w) >= 5 and x.startswith(w) or len(x) >= 5 and w.startswith(x)
                                                 for x in have)}


def _share(words: set[str], u: Unit, values: Sequence[Value] = ()) -> float:
    """Share of the relation words the unit holds; a birth or a founding (a death, an end) also held by a
    date of the claim that the unit gives as the start (end) of a life-span or run."""
    if not words:
        return 1.0
    got = held(words, u.stems)
    roles = {b.role for a in values for b in u.values if b.role and a.agrees(b)}
    if "start" in roles:
        got |= words & START_RELATIONS
    if "end" in roles:
        got |= words & END_RELATIONS
    return len(got) / len(words)


# ------------------------------------------------------------------------------------------ long claims
@dataclass
class ClaimCheck:
    supports: list[Unit] = field(default_factory=list)
    contradicts: list[tuple[Unit, str]] = field(default_factory=list)   # (unit, why)
    conflicts: list[tuple[Unit, Value, Value]] = field(default_factory=list)  # (unit, the claim's value, its)


def check_claim(f: Facts, views: Sequence[View], threshold: float) -> ClaimCheck:
    """Every unit that supports or contradicts the claim (module docstring). A pair of sentences may support
    a claim, never contradict it (one of them may be about something else)."""
    out = ClaimCheck()
    for v in views:
        for u in v.units:
            if not _names_in(f.names, u, v) or _share(f.words, u, f.values) < threshold:
                continue
            agree, clash = _values(f.values, u.values)
            if u.level == "window":
                if not clash and u.negated == f.negated and len(agree) == len(f.values):
                    out.supports.append(u)
            elif clash:
                out.contradicts.append((u, "gives " + ", ".join(f"{b.text!r} where the claim says {a.text!r}"
                                                                 for a, b in clash)))
                out.conflicts += [(u, a, b) for a, b in clash]
            elif u.negated != f.negated:
                out.contradicts.append((u, "says the opposite" if u.negated else "says it without the negation"))
            elif len(agree) == len(f.values):
                out.supports.append(u)
    return out


def _values(want: list[Value], have: list[Value]) -> tuple[list[Value], list[tuple[Value, Value]]]:
    """(claim values some unit value agrees with, (claim value, unit value) pairs that conflict with no
    agreeing value beside them)."""
    agree, clash = [], []
    for a in want:
        if any(a.agrees(b) for b in have):
            agree.append(a)
        else:
            other = next((b for b in have if a.comparable(b)), None)
            if other is not None:
                clash.append((a, other))
    return agree, clash


# ---------------------------------------------------------------------------------------- short answers
@dataclass
class Question:
    """What a question asks, for judging a short answer to it."""

    text: str
    facts: Facts
    need: int                      # relation evidence a clause must hold (0: the question names no relation)
    roles: set[str] = field(default_factory=set)  # a bridge's role words ("father" in "X's father"), set aside
    head: str = ""                 # the relation asked, when the question ends with it


_ASK = re.compile(r"\b(?:which|what)\s+((?:[\w'’-]+\s+){0,8}?)(?=(?:is|was|are|were|did|does|do|has|had|have|can|"
                  r"could|will|would)\b|[\w-]+ed\b|\?|$)", re.IGNORECASE)


def answer_type(question: str) -> set[str]:
    """The words after "which" / "what" that say what KIND of thing the answer is ("Which Italian painter and
    architect", "What unit of ..."): they describe the answer, not the relation asked."""
    m = _ASK.search(question)
    return {stem(t) for t in tokens(m.group(1))} if m else set()


@lru_cache(maxsize=4096)
def question_of(question: str, answer: str, relation_overlap: float) -> Question:
    """The question's names, values and relation words; a role word beside another relation word is a bridge
    ("Where did X's father die?": the relation asked is the death, the father is whose) and set aside."""
    f = facts_of(question, drop=content_tokens(answer))
    f.words -= answer_type(question) | {stem(m.group(1)) for m in _DESCRIBED.finditer(question)}
    roles = {stem(m.group(1) or m.group(2)) for m in _BRIDGE.finditer(question)} & f.words
    if roles == f.words:  # "Who is the director of film X?": the role IS the relation asked
        roles = set()
    f.words -= roles
    n = len(f.words) + len(f.values)
    need = math.ceil(relation_overlap * n) if f.words else 0
    need = max(need, 1) if relation_overlap > 0 and f.words else need
    return Question(text=question, facts=f, need=need, roles=roles, head=_head(question, f.words) if need else "")


_RELATIVE = frozenset(["where", "which", "that", "who", "whom", "whose"])
_TRAILING = frozenset(["in", "on", "at", "for", "from", "to", "with", "by", "of", "about", "into", "as"])


def _head(question: str, words: set[str]) -> str:
    """The relation a question asks when it ends with its verb ("When was X born?", "What city was the author
    of Y born in?", "In True Grit, who did the star play?"), else "" (no word is singled out: "the seat of
    the French government" ends with a noun)."""
    toks = [t for t in tokens(relation_text(question)) if t not in _TRAILING]
    if not toks or stem(toks[-1]) not in words or _RELATIVE & set(toks[2:-1]):
        return ""  # "... the county where X is located?": the last verb is the relative clause's
    last = toks[-1]
    verb = stem(last) in CANONICAL or last.endswith(("ed", "en")) or bool({"did", "does", "do"} & set(toks))
    return stem(last) if verb else ""


@dataclass
class AnswerCheck:
    supports: list[Unit] = field(default_factory=list)
    contradicts: list[tuple[Unit, str]] = field(default_factory=list)
    conflicts: list[tuple[Unit, Unit, Value, Value]] = field(default_factory=list)  # (support, other, a, b)
    present: list[str] = field(default_factory=list)  # passages holding the answer in some clause


def _answer_at(answer: str, avals: list[Value], u: Unit, presence: float = 1.0) -> int | None:
    """Token index where the answer is in the unit (its first value's, or its first content word's), else
    None. A value answer must agree with a value of the unit; a name must have `presence` of its content
    words there."""
    if avals:
        got = [b for a in avals for b in u.values if a.agrees(b)]
        if len(got) < len(avals):
            return None
        return len(tokens(u.text[: got[0].start - u.start]))
    want = tokens(answer)
    content = [t for t in want if t in content_tokens(answer)]
    held = [t for t in content if t in u.tokset]
    if not content or (presence > 0 and (not held or len(held) < presence * len(content))):
        return None
    for i in range(len(u.toks) - len(want) + 1):
        if u.toks[i:i + len(want)] == want:
            return i
    return u.toks.index(held[0]) if held else 0


def _relation(q: Question, u: Unit, avals: list[Value], at: int | None) -> bool:
    """Whether the unit states the relation the question asks (module docstring), around the answer at `at`:
    its head relation (by its words, or its usual form) and `need` of its relation words and values."""
    if q.need == 0:
        return True
    near = u.stems if at is None else set(u.seq[max(0, at - NEAR):at + NEAR + 1])
    got = len(held(q.facts.words, near)) + sum(any(a.agrees(b) for b in u.values) for a in q.facts.values)
    head = bool(held({q.head}, near)) if q.head else True
    if got >= q.need and head and not _other_verb_first(q, u, at):
        return True
    return _usual_form(q, u, avals, at)


def _other_verb_first(q: Question, u: Unit, at: int | None) -> bool:
    """Whether the relation verb nearest before the answer is another one than the question asks ("born in
    Weston-super-Mare, Somerset and died in Chobham": asked where he died, Weston-super-Mare is the birth's)."""
    if not q.head or at is None:
        return False
    before = [x for x in u.seq[max(0, at - NEAR):at] if x in CANONICAL]
    return bool(before) and before[-1] != q.head


def relation_holds(q: Question, u: Unit, candidate: str) -> bool:
    """Whether `candidate` (a value or a name) is in the unit in the relation the question asks."""
    avals = answer_values(candidate)
    at = _answer_at(candidate, avals, u)
    return at is not None and _relation(q, u, avals, at)


def _usual_form(q: Question, u: Unit, avals: list[Value], at: int | None) -> bool:
    """The asked relation in its usual form: an agent after "by" ("a song by Rush"), a life-span's first
    (last) date for a birth or founding (a death), a year before a kind of work ("a 1999 film") for a release,
    a place after "in" for where something is located."""
    rel = {q.head} if q.head else q.facts.words
    if at is not None and rel & AGENT_RELATIONS and "by" in u.toks[max(0, at - 3):at]:
        return True
    if avals and at is not None:
        hit = next((b for b in u.values for a in avals if a.agrees(b)), None)
        if hit is not None and ((hit.role == "start" and rel & START_RELATIONS) or
                                (hit.role == "end" and rel & END_RELATIONS)):
            return True
        if hit is not None and rel & {"release"} and u.toks[at - 1:at] in (["is"], ["was"]) and \
                set(u.toks[at:at + 5]) & _WORKS:  # "X is a 1999 film", not "based on a 1993 novel"
            return True
    return bool(at is not None and q.facts.words == {"locate"} and {"in", "of"} & set(u.toks[max(0, at - 2):at]))


def check_answer(q: Question, answer: str, views: Sequence[View], presence: float = 1.0) -> AnswerCheck:
    """Clauses that support or contradict a short answer, and other passages' conflicting values. A
    sentence whose clauses do not support the answer supports it as a whole only when none of its clauses
    contradicts it ("born in Denver, and died in Desert Hot Springs" never says where he died is Denver).
    `presence`: share of the answer's content words a clause must hold (critic.short_support_threshold)."""
    out = AnswerCheck()
    avals = answer_values(answer)
    if avals and all(any(a.agrees(x) for x in q.facts.values) for a in avals):
        return out  # the answer repeats a value the question gives ("... in 1857 ...?" "1857"): it answers nothing
    ans_toks = set(tokens(answer))
    for v in views:
        for sent in v.at("sentence"):
            parts = [u for u in v.at("clause") if sent.start <= u.start and u.end <= sent.end] or [sent]
            before = (len(out.supports), len(out.contradicts))
            for u in parts:
                _judge_unit(q, answer, avals, ans_toks, u, v, out, presence)
            if len(out.supports) == before[0] and len(out.contradicts) == before[1] and len(parts) > 1:
                at = _answer_at(answer, avals, sent, presence)
                if at is not None and _relation(q, sent, avals, at) and not (sent.negated and not q.facts.negated):
                    out.supports.append(sent)
    out.present = list(dict.fromkeys(out.present))
    if avals and out.supports:
        out.conflicts = _value_conflicts(q, avals, out, views)
    return out


def answer_values(answer: str) -> list[Value]:
    """The values an answer states when it is a value ("3 May 1985", "$5B", "5 km", "seven members"), none
    when they are a small part of a name ("A Nightmare on Elm Street 4: The Dream Master")."""
    vals = read_values(answer)
    size = len(answer.strip())
    return vals if vals and sum(len(v.text) for v in vals) >= 0.5 * size else []


def _judge_unit(q: Question, answer: str, avals: list[Value], ans_toks: set[str], u: Unit, v: View,
                out: AnswerCheck, presence: float) -> None:
    at = _answer_at(answer, avals, u, presence)
    if at is not None:
        out.present.append(u.pid)
        if not _relation(q, u, avals, at) or _wrong_end_of_bridge(q, u, v) or _off_subject(q, u, v):
            why = _wrong_role(q, avals, u, v)
            if why:
                out.contradicts.append((u, why))
            return
        if u.negated and not q.facts.negated:
            out.contradicts.append((u, "says it negated"))
        else:
            out.supports.append(u)
    elif _states(q, u, v):
        why = _other_value(avals, ans_toks, q, u)
        if why:
            out.contradicts.append((u, why))
    elif why := _wrong_role(q, avals, u, v):
        out.contradicts.append((u, why))


def _wrong_role(q: Question, avals: list[Value], u: Unit, v: View) -> str:
    """Why a life-span or run about the question's subject contradicts a date answer: it gives another date in
    the asked place ("(18 September 1882 – 2 November 1952)" asked when he died, "18 September 1882")."""
    role = _asked_role(q)
    if not avals or not role or not _subject_all(q, u, v):
        return ""
    at_role = [b for b in u.values if b.role == role]
    if not at_role or any(a.agrees(b) for a in avals for b in at_role):
        return ""
    other = [b for b in at_role if any(a.comparable(b) for a in avals)]
    return f"gives {other[0].text!r} as the {'birth or start' if role == 'start' else 'death or end'}" if other else ""


def _off_subject(q: Question, u: Unit, v: View) -> bool:
    """A one-hop question ("Where was Ann Ray born?": no bridge, one or two relation words) asks about the
    entity it names: a clause naming none of its names, in a passage titled by none, is about someone else
    ("Bo Tell was born ... in Oslo")."""
    names = [n for n in q.facts.names if len(n) > 1 or not n[0].endswith(_ADJECTIVAL)]
    if q.roles or len(q.facts.words) > 2 or not names:
        return False
    have = u.tokset | v.title
    return not any(set(n) <= have for n in names)


def _wrong_end_of_bridge(q: Question, u: Unit, v: View) -> bool:
    """A bridge question ("Where did X's father die?") asks about the entity X's role word leads to: a clause
    of X's own passage that does not name the role ("He died in Lancashire" about X) is about X, not about
    the father."""
    return bool(q.roles) and any(set(n) <= v.title for n in q.facts.names) and not held(q.roles, u.stems)


def _states(q: Question, u: Unit, v: View) -> bool:
    """Whether the unit states the asked relation about the question's subject beyond doubt: every relation
    word and every name of the question (in it or its passage's title), for a question of at most two relation
    words. Only such a unit may contradict an answer: a multi-hop question's words also describe its bridges."""
    w = q.facts.words
    return bool(w) and len(w) <= 2 and held(w, u.stems) == w and bool(q.facts.names) and \
        all(set(n) <= (u.tokset | v.title) for n in q.facts.names)


def _other_value(avals: list[Value], ans_toks: set[str], q: Question, u: Unit) -> str:
    """Why a unit stating the asked relation (`_states`) contradicts the answer: another value of the answer's
    kind, or another name right after the relation word ("born in Oslo", "designed by Rex Dunn"); "" when it
    gives neither."""
    if avals:
        other = [b for b in u.values for a in avals if a.comparable(b) and not a.agrees(b)
                 and not any(b.agrees(x) for x in q.facts.values)]
        return f"gives {other[0].text!r}" if other else ""
    q_toks = {t for n in q.facts.names for t in n}
    rel = [i for i, t in enumerate(u.toks) if held({stem(t)}, q.facts.words)]
    for n in u.names:
        if set(n) <= q_toks or set(n) & ans_toks:
            continue
        at = next((i for i in range(len(u.toks) - len(n) + 1) if tuple(u.toks[i:i + len(n)]) == n), None)
        if at is not None and any(0 < at - i <= 3 for i in rel):
            return f"names {' '.join(n)!r}"
    return ""


def _value_conflicts(q: Question, avals: list[Value], res: AnswerCheck,
                     views: Sequence[View]) -> list[tuple[Unit, Unit, Value, Value]]:
    """Clauses (of any passage) that state the asked relation about the question's subject (`_states`, or a
    life-span's date for a birth or a death) with another value of the answer's kind than the supporting
    clause's."""
    support = res.supports[0]
    found = []
    for v in views:
        for u in clauses_of(v):
            if u in res.supports:
                continue
            role = _asked_role(q)
            if _states(q, u, v):
                candidates = u.values
            elif role and _subject_all(q, u, v):
                candidates = [b for b in u.values if b.role == role]
            else:
                continue
            for a in avals:
                clash = [b for b in candidates if a.comparable(b) and not a.agrees(b)
                         and not any(b.agrees(x) for x in q.facts.values)]
                if clash and not any(a.agrees(b) for b in candidates):
                    found.append((support, u, a, clash[0]))
    return found


def _asked_role(q: Question) -> str:
    """"start" when the question asks a birth or a founding, "end" a death or an end, else ""."""
    w = q.facts.words
    return "start" if w and w <= START_RELATIONS else "end" if w and w <= END_RELATIONS else ""


def _subject_all(q: Question, u: Unit, v: View) -> bool:
    return bool(q.facts.names) and all(set(n) <= (u.tokset | v.title) for n in q.facts.names)


def read_value(q: Question, entity: tuple[str, ...], kind: str, views: Sequence[View]) -> tuple[Value, Unit] | None:
    """The value (a date or an amount, `kind`) a passage gives for the question's relation about `entity`: a
    clause naming the entity (or in its passage) that states the relation (its words, a life-span's dates for
    births and deaths, "X is a 2002 film" for a release). None when no clause gives one."""
    want = "date" if kind == "date" else "quantity"
    for v in views:
        for u in clauses_of(v):
            if not set(entity) <= (u.tokset | v.title):
                continue
            for b in u.values:
                if b.kind == want and relation_holds(q, u, b.text):
                    return b, u
    return None
