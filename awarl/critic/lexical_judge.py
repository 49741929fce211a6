"""The default offline citation judge (`lexical`): what a claim asserts, checked against ONE span of a
retrieved passage (issue 43; awarl/critic/support.py has the rules, docs/research.md what they can and
cannot see).

Claims (awarl/critic/claims.py): an answer of at most `short_answer_words` words (or a longer bare name or
value) is one claim, read with its question; a longer one is split into sentences and clauses, keeping numbers ("$5,000 million"), dates
("March 3, 1999") and names ("Mountrail County, North Dakota") whole.

A long claim is grounded in a passage with a clause, sentence or pair of sentences that names every name
of the claim, holds `support_threshold` of its relation words, agrees with each of its values (dates at
their precision, quantities in their units) and is negated exactly when the claim is; a cited passage is
preferred. A span about the same thing that gives another value or says the opposite contradicts it: the
claim is unsupported and the span is named in a flag (or, when another passage grounds it, the two are a
conflict). Without a span, the claim is inferred when several passages together hold its words and values
(the fewest that do), else unsupported.

A short answer is grounded by a clause that holds it AND the relation its question asks (`relation_overlap`
of the question's relation words and values, or the relation's usual form: "a song by Rush", a life-span's
first date for a birth, "a 1999 film"), not negated: a passage that says the person WORKED in Leeds does
not ground "Leeds" for where they were BORN. It rests jointly on that passage and on the question's entity
passages (retrieved passages whose title the question names as a name: a comparison's two entities, a
bridge question's first hop; one per entity, `entity_groups`) and on cited bridges (a cited passage that
holds the answer and `bridge_overlap` of the question's words). A clause about the question's subject that
states the asked relation with another value, or negated, contradicts it (unsupported, flagged); another
date or amount for it elsewhere is a conflict (typed, in `conflicts`, and flagged). An answer found only in
clauses without the relation is inferred (the judge cannot verify the relation); one found nowhere is
inferred when several passages together hold it, else unsupported.

A comparison ("Who was born earlier, A or B?", the planner's offline reading of the question) is grounded
only when the passages give both compared values and the answer is the entity they pick; the other entity
is unsupported (contradicted, flagged); unreadable values leave it inferred. "Are A and B both P?" answered
yes is grounded when each entity's passage states P, else inferred; any other yes/no answer is inferred: the
judge cannot tell yes from no.

Flags: a supporting passage that is not cited; a cited passage that supports no claim; contradictions;
conflicting values. Its agreement with the gold judge is measured in docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import lru_cache

from awarl.config import CriticConfig
from awarl.critic.claims import facts_of, is_short, split_claims
from awarl.critic.schema import (
    ClaimVerification,
    Conflict,
    CriticInput,
    CriticOutput,
    JudgeKind,
    PassageRef,
    Span,
)
from awarl.critic.support import (
    AnswerCheck,
    Unit,
    View,
    check_answer,
    check_claim,
    clauses_of,
    question_of,
    read_value,
    view,
)
from awarl.critic.tokens import (
    QUESTION_WORDS,
    STOP,
    cased_tokens,
    content_tokens,
    punct_to_spaces,
    tokens,
)
from awarl.critic.values import Value

__all__ = ["LexicalJudge", "cased_tokens", "content_tokens", "entity_groups", "mentions", "punct_to_spaces",
           "split_claims", "tokens"]

_YES_NO = frozenset({"yes", "no"})
_PAREN_TAIL = re.compile(r"\s*\([^()]*\)\s*$")


def _recall(claim: set[str], passage: set[str]) -> float:
    return len(claim & passage) / len(claim) if claim else 0.0


def _title_forms(title: str) -> list[list[str]]:
    """A title as the question may name it: whole, without a disambiguation parenthetical, before a comma
    ("Van Hook Township, Mountrail County, North Dakota" -> "Van Hook Township")."""
    forms: list[list[str]] = []
    for t in (title, _PAREN_TAIL.sub("", title), title.split(",", 1)[0]):
        toks = tokens(t)
        if toks and any(x not in STOP for x in toks) and toks not in forms:
            forms.append(toks)
    return forms


def mentions(question: list[str], title: str) -> bool:
    """Whether the question's tokens contain one of the title's forms as a contiguous run."""
    return bool(_named_spans(question, title))


def _named_spans(question: list[str], title: str, cased: list[str] | None = None) -> list[tuple[int, int]]:
    """The runs [i, j) of the question's tokens that are one of the title's forms; with the question's
    `cased` tokens, only runs with a capitalised word or a number (a name, not "rock band" for the title
    "Band (rock and pop)")."""
    spans = []
    for form in _title_forms(title):
        n = len(form)
        for i in range(len(question) - n + 1):
            if question[i:i + n] == form and (cased is None or any(t[:1].isupper() or t[:1].isdigit()
                                                                   for t in cased[i:i + n])):
                spans.append((i, i + n))
    return spans


def entity_groups(question: str, passages: list[PassageRef]) -> list[list[str]]:
    """The entities the question names by a retrieved passage's title, each as the ids of the passages that
    name it (retrieval order). A passage stands for the longest run of the question its title matches; a run
    inside another passage's longer run is part of that name ("Berlioz" in "Hector Berlioz"), and passages
    whose titles match the same run are one entity ("Manon" and "Manon (disambiguation)"). In a question with
    no capitals after its first word (lower-cased data) every match counts; otherwise only names do."""
    cased = cased_tokens(question)
    qseq = [t.lower() for t in cased]
    has_case = any(t[:1].isupper() for t in cased[1:])
    span: dict[str, tuple[int, int]] = {}
    for p in passages:
        found = _named_spans(qseq, p.title, cased if has_case else None)
        if found and p.id not in span:
            span[p.id] = max(found, key=lambda s: s[1] - s[0])
    groups: dict[tuple[int, int], list[str]] = {}
    for pid, (i, j) in span.items():
        if not any(a <= i and j <= b and (a, b) != (i, j) for a, b in span.values()):
            groups.setdefault((i, j), []).append(pid)
    return list(groups.values())


def build(cfg: CriticConfig, cache_dir: str | os.PathLike[str] | None = None) -> LexicalJudge:
    """The factory of the registered judge (LEXICAL); nothing to cache."""
    return LexicalJudge(cfg)


# awarl.choices.JUDGES `lexical`: offline; its verdicts depend on these thresholds (a report's provenance).
LEXICAL = JudgeKind(build, settings=("support_threshold", "short_support_threshold", "relation_overlap",
                                     "bridge_overlap", "short_answer_words"))


def _span(u: Unit) -> Span:
    return Span(passage_id=u.pid, start=u.start, end=u.end)


def _quote(u: Unit, limit: int = 160) -> str:
    text = " ".join(u.text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Item:
    """One answer being judged: its passages read once, labels, citations."""

    def __init__(self, item: CriticInput) -> None:
        self.item = item
        self.passages = item.passages or item.cited
        self.views = [view(p) for p in self.passages]
        self.by_id = {v.ref.id: v for v in self.views}
        self.ptoks = {p.id: set(tokens(f"{p.title} {p.text}")) for p in self.passages}
        self.cited = [p.id for p in item.cited]
        self.label = {p.id: f"[{p.number}] {p.id}" for p in self.passages}
        self.flags: list[str] = []
        self.conflicts: list[Conflict] = []

    def pick(self, units: Sequence[Unit]) -> Unit:
        """The unit to rest a claim on: in a cited passage first, then the smallest, then the first."""
        rank = {"clause": 0, "sentence": 1, "window": 2}
        return min(units, key=lambda u: (u.pid not in self.cited, rank[u.level], u.end - u.start))

    def contradicted(self, claim: str, found: Sequence[tuple[Unit, str]]) -> None:
        for u, why in found[:2]:
            self.flags.append(f"claim {claim!r} is contradicted by {self.label.get(u.pid, u.pid)}: "
                              f"“{_quote(u)}” ({why})")

    def conflict(self, claim: str, here: Unit, there: Unit, mine: str, theirs: str) -> None:
        ids = list(dict.fromkeys([here.pid, there.pid]))
        detail = f"{self.label.get(here.pid, here.pid)} “{_quote(here)}” vs {self.label.get(there.pid, there.pid)} " \
                 f"“{_quote(there)}”"
        self.conflicts.append(Conflict(claim=claim, values=[mine, theirs], source_ids=ids, detail=detail))
        self.flags.append(f"conflicting values for claim {claim!r}: {mine} ({self.label.get(here.pid, here.pid)}) vs "
                          f"{theirs} ({self.label.get(there.pid, there.pid)}); reported, not averaged")


class LexicalJudge:
    name = "lexical"

    def __init__(self, cfg: CriticConfig | None = None) -> None:
        self.cfg = cfg or CriticConfig()
        self.failures = 0

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        return [self.verify_one(item) for item in items]

    def verify_one(self, item: CriticInput) -> CriticOutput:
        it = _Item(item)
        short = is_short(item.answer, self.cfg.short_answer_words)
        verdicts: list[ClaimVerification] = []
        for claim in split_claims(item.answer, self.cfg.short_answer_words):
            v = self._short_claim(it, claim) if short else self._long_claim(it, claim)
            verdicts.append(v)
            for pid in v.source_ids:
                if v.status == "grounded" and pid not in it.cited:
                    it.flags.append(f"uncited supporting passage {it.label[pid]} for claim {claim!r}")
        supporting = {pid for v in verdicts if v.status != "unsupported" for pid in v.source_ids}
        for p in item.cited:
            if p.id not in supporting:
                it.flags.append(f"cited passage {it.label.get(p.id, p.id)} supports no claim")
        grounded = sum(v.status == "grounded" for v in verdicts)
        return CriticOutput(verified_claims=verdicts, overall_groundedness=grounded / len(verdicts) if verdicts else 0.0,
                            flags=list(dict.fromkeys(it.flags)), conflicts=it.conflicts)

    # ------------------------------------------------------------------------------------- long claims
    def _long_claim(self, it: _Item, claim: str) -> ClaimVerification:
        f = facts_of(claim)
        found = check_claim(f, it.views, self.cfg.support_threshold)
        if found.supports:
            best = it.pick(found.supports)
            for u, mine, theirs in found.conflicts:
                if u.pid != best.pid or not (best.start <= u.start and u.end <= best.end):
                    it.conflict(claim, best, u, mine.text, theirs.text)
            return ClaimVerification(claim=claim, status="grounded", source_ids=[best.pid], confidence=1.0,
                                     evidence=[_span(best)])
        if found.contradicts:
            it.contradicted(claim, found.contradicts)
            return ClaimVerification(claim=claim, status="unsupported", confidence=1.0)
        return self._joint(it, claim, content_tokens(claim), f.values)

    def _joint(self, it: _Item, claim: str, ct: set[str], values: Sequence[Value] = ()) -> ClaimVerification:
        """Inferred when two or more passages together hold `support_threshold` of the claim's tokens and
        every value it states (the fewest passages that do, picked greedily), else unsupported."""
        th = self.cfg.support_threshold
        covered: set[str] = set()
        chosen: list[str] = []
        while _recall(ct, covered) < th:
            gain = {pid: len((ct & it.ptoks[pid]) - covered) for pid in it.ptoks if pid not in chosen}
            pid = max(gain, key=lambda k: (gain[k], k in it.cited), default=None)
            if pid is None or gain[pid] == 0:
                break
            chosen.append(pid)
            covered |= ct & it.ptoks[pid]
        u = _recall(ct, covered)
        stated = all(any(a.agrees(b) for pid in chosen for w in it.by_id[pid].at("sentence") for b in w.values)
                     for a in values)
        if u >= th and len(chosen) >= 2 and stated:
            return ClaimVerification(claim=claim, status="inferred", source_ids=chosen, confidence=round(u, 4))
        return ClaimVerification(claim=claim, status="unsupported", confidence=round(1.0 - u, 4))

    # ------------------------------------------------------------------------------------ short answers
    def _entities(self, it: _Item, qc: set[str]) -> list[str]:
        """One passage per entity the question names: a cited one, then the one most about the question."""
        return [max(g, key=lambda pid: (pid in it.cited, _recall(qc, it.ptoks[pid])))
                for g in entity_groups(it.item.question, it.passages)]

    def _short_claim(self, it: _Item, claim: str) -> ClaimVerification:
        question = it.item.question
        qc = {t for t in tokens(question) if t not in STOP and t not in QUESTION_WORDS}
        entities = self._entities(it, qc)
        if " ".join(tokens(claim)) in _YES_NO:
            return self._yes_no(it, claim, entities)
        compared = self._comparison(it, claim)
        if compared is not None:
            return compared
        plan = _plan(question)
        if plan is not None and plan.reduce.kind in ("pick", "pick_yes") and len(plan.reduce.entities) == 2 and \
                not any(_names_entity(claim, e) for e in plan.reduce.entities):
            it.flags.append(f"claim {claim!r} is neither option of the question ({' or '.join(plan.reduce.entities)})")
            return ClaimVerification(claim=claim, status="unsupported", confidence=1.0)
        ct = content_tokens(claim)
        q = question_of(question, claim, self.cfg.relation_overlap)
        res = check_answer(q, claim, it.views, self.cfg.short_support_threshold)
        if res.supports:
            return self._grounded_answer(it, claim, res, entities, qc - ct)
        if facts_of(claim).words and not res.contradicts:  # "Ann Lee born in 1970" states its own relation
            stated = self._long_claim(it, claim)
            if stated.status == "grounded":
                return stated
        if res.contradicts:
            it.contradicted(claim, res.contradicts)
            return ClaimVerification(claim=claim, status="unsupported", confidence=1.0)
        if res.present:
            about = {pid: _recall(qc - ct, it.ptoks[pid]) for pid in res.present}
            best = max(res.present, key=lambda pid: (pid in it.cited, about[pid]))
            return ClaimVerification(claim=claim, status="inferred", source_ids=list(dict.fromkeys([best, *entities])),
                                     confidence=0.5)
        return self._joint(it, claim, ct)

    def _grounded_answer(self, it: _Item, claim: str, res: AnswerCheck, entities: list[str],
                         qc: set[str]) -> ClaimVerification:
        about = {u.pid: _recall(qc, it.ptoks[u.pid]) for u in res.supports}
        best = min(res.supports, key=lambda u: (u.pid not in it.cited, -about[u.pid], u.end - u.start))
        holding = set(res.present)
        bridges = [pid for pid in it.cited if pid in holding and _recall(qc, it.ptoks[pid]) >= self.cfg.bridge_overlap]
        for here, there, mine, theirs in res.conflicts:
            it.conflict(claim, best if here.pid == best.pid else here, there, mine.text, theirs.text)
        return ClaimVerification(claim=claim, status="grounded", source_ids=list(dict.fromkeys([best.pid, *entities,
                                                                                                 *bridges])),
                                 confidence=1.0, evidence=[_span(best)])

    def _yes_no(self, it: _Item, claim: str, entities: list[str]) -> ClaimVerification:
        """"Are A and B both P?" answered yes: grounded when each entity's passage states P; any other yes/no:
        inferred through the entities' passages (the judge cannot tell yes from no)."""
        if not entities:
            return ClaimVerification(claim=claim, status="unsupported", confidence=0.5)
        plan = _plan(it.item.question)
        if plan is not None and plan.reduce.kind == "all_yes" and tokens(claim) == ["yes"]:
            spans = []
            for part, entity in zip(plan.reduce.parts, _both_entities(plan), strict=False):
                q = question_of(plan.steps[part].text, "", self.cfg.relation_overlap)
                u = _stating(q, entity, it.views)
                if u is None:
                    break
                spans.append(u)
            if len(spans) == len(plan.reduce.parts) and spans:
                ids = list(dict.fromkeys([u.pid for u in spans] + entities))
                return ClaimVerification(claim=claim, status="grounded", source_ids=ids, confidence=1.0,
                                         evidence=[_span(u) for u in spans])
        return ClaimVerification(claim=claim, status="inferred", source_ids=entities, confidence=0.5)

    def _comparison(self, it: _Item, claim: str) -> ClaimVerification | None:
        """A choice comparison's answer checked by the values the passages give (module docstring); None when
        the question is not one, or the answer is neither entity."""
        plan = _plan(it.item.question)
        if plan is None:
            return None
        r = plan.reduce
        if r.kind != "pick" or len(r.entities) != 2 or r.value is None:
            return None
        steps = {s.index: s for s in plan.steps}
        if any(steps[p].depends_on for p in r.parts):
            return None  # a role between (the films' directors): the bridge hops are not read here
        which = [i for i, e in enumerate(r.entities) if _names_entity(claim, e)]
        if len(which) != 1:
            return None
        read = []
        for p, e in zip(r.parts, r.entities, strict=True):
            q = question_of(steps[p].text, "", self.cfg.relation_overlap)
            read.append(read_value(q, tuple(tokens(e)), r.value, it.views))
        if any(x is None for x in read):
            ids = [pid for g in entity_groups(it.item.question, it.passages) for pid in g[:1]]
            return ClaimVerification(claim=claim, status="inferred", source_ids=ids, confidence=0.5)
        (va, ua), (vb, ub) = read  # type: ignore[misc]
        winner = _winner(va, vb, r.order or "min")
        if winner is None:
            return ClaimVerification(claim=claim, status="inferred", source_ids=list(dict.fromkeys([ua.pid, ub.pid])),
                                     confidence=0.5)
        said = f"{r.entities[0]} {va.text} vs {r.entities[1]} {vb.text}"
        if winner != which[0]:
            it.flags.append(f"claim {claim!r} is contradicted by the compared values: {said} "
                            f"({it.label.get(ua.pid, ua.pid)}, {it.label.get(ub.pid, ub.pid)})")
            return ClaimVerification(claim=claim, status="unsupported", confidence=1.0)
        units = [ua, ub] if which[0] == 0 else [ub, ua]
        return ClaimVerification(claim=claim, status="grounded", source_ids=list(dict.fromkeys(u.pid for u in units)),
                                 confidence=1.0, evidence=[_span(u) for u in units])


def _names_entity(claim: str, entity: str) -> bool:
    """Whether an answer names the entity: one's words within the other's ("Otto Ludwig Preminger" and "Otto
    Preminger" share the name's last word and its first)."""
    a, b = set(content_tokens(claim)), set(content_tokens(entity))
    return bool(a and b) and (a <= b or b <= a or (tokens(claim)[-1:] == tokens(entity)[-1:] and
                                                   tokens(claim)[:1] == tokens(entity)[:1]))


@lru_cache(maxsize=1024)
def _plan(question: str):  # noqa: ANN202 - a Plan or None
    """The planner's offline reading of the question's shape (awarl/decompose.py): one place for it."""
    from awarl.decompose import offline_plan

    return offline_plan(question)


def _both_entities(plan) -> list[tuple[str, ...]]:  # noqa: ANN001 - a Plan
    """The entity each part of an "all_yes" plan asks about: the name its sub-question starts with."""
    from awarl.critic.claims import names

    out = []
    for p in plan.reduce.parts:
        found = names(plan.steps[p].text)
        out.append(found[0] if found else ())
    return out


def _stating(q, entity: tuple[str, ...], views: Sequence[View]) -> Unit | None:  # noqa: ANN001 - a Question
    """A clause about `entity` (in it or its passage's title) stating the predicate: every relation word and
    every other name of the sub-question ("of Armenian descent": both words), three quarters of them when
    there are more than three."""
    want = [{w} for w in q.facts.words] + [set(n) for n in q.facts.names if set(n) != set(entity)]
    need = len(want) if len(want) <= 3 else -(-3 * len(want) // 4)
    for v in views:
        for u in clauses_of(v):
            held = sum(w <= (u.stems if len(w) == 1 and next(iter(w)) in q.facts.words else u.tokset) for w in want)
            if entity and set(entity) <= (u.tokset | v.title) and want and held >= need:
                return u
    return None


def _winner(a, b, order: str) -> int | None:  # noqa: ANN001 - two Values
    """0 or 1: which value the comparison picks (`min`: the earlier date or smaller amount); None when they
    cannot be ordered (equal, or dates too coarse to tell apart)."""
    if a.date is not None and b.date is not None:
        if a.date.agrees(b.date) or not a.date.orderable(b.date):
            return None
        ka, kb = a.date.key(), b.date.key()
    elif a.quantity is not None and b.quantity is not None and a.comparable(b):
        if a.agrees(b):
            return None
        ka, kb = a.quantity.value, b.quantity.value
    else:
        return None
    first = 0 if ka < kb else 1
    return first if order == "min" else 1 - first
