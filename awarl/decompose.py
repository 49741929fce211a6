"""A question's research plan (`Plan`: its steps and how their answers combine) and the offline decomposition
rules that read one from the question text. Below both of its users: the research planner (awarl/research/) and
the lexical judge (awarl/critic/lexical_judge.py, which reads a question's shape from it).

Offline decomposition rules (the `decomposition` planner for questions without a dataset decomposition):
the question TEXT alone, never its answer or gold evidence, split by the shapes multi-hop datasets use.

- several questions in one ("Is X found in Africa? And is Y found all over?"): one step each;
- choice comparison ("Who was born earlier, A or B?", "Is A or B public?"): one step per entity asking the
  compared attribute (a date or a number, when a cue says which: born, died, released, more, taller, ...;
  else "Is it true that A ...?"), reduced by picking the entity; a role in between ("Which film has the
  director who died later, A or B?") adds a bridge hop per entity ("director of A?" -> "When did #1 die?");
- both / same / in common ("Are A and B both American writers?", "Were A and B from the same country?",
  "What profession did A and B both hold?"): one step per entity, reduced to yes/no or the shared answer;
- a list of entities ("Capitals of France and Italy?"): one step per entity, joined;
- bridge: "the R of E" inside a question ("Where did the director of film X die?" -> "director of film X?",
  then "Where did #1 die?"), a possessive ("Where did X's father die?"), or a trailing relative clause
  ("... of the county where X is located?" -> "In which county X is located?", then "... of #1?");
- two clauses about one answer ("Which band released X and had a drummer who ...?"): one step each, reduced
  to the answer they share.
`offline_plan(question)` returns None when no rule applies (the question is then asked as it is). The rules
are heuristics over English question shapes; the LLM planner (`research.planner: openai`) is the general one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SubQuestion(BaseModel):
    """One step of a research plan. `depends_on`: indexes of earlier steps whose answers it needs (a
    multi-hop chain: MuSiQue's `#1` references), substituted into `text` before it is asked."""

    model_config = ConfigDict(extra="forbid")

    index: int
    text: str = Field(..., min_length=1)
    depends_on: list[int] = Field(default_factory=list)


class Reduce(BaseModel):
    """How the planner combines the approved sub-answers into the final answer (awarl/research/reduce.py).

    last: the last step answers the question (a chain's final hop, or a one-step plan); join: independent
    parts listed ("Paris and Rome"); pick: the entity whose part (a date or a number) is the smallest
    (`order: min`) or largest (`max`); pick_yes: the one entity whose part answered yes; all_yes: yes when
    every part is yes, no when one is no; same: yes when the parts agree, else no; common: the answer the
    parts share; llm: the LLM planner composes it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["last", "join", "pick", "pick_yes", "all_yes", "same", "common", "llm"] = "last"
    parts: list[int] = Field(default_factory=list, description="Step indexes whose answers are combined.")
    entities: list[str] = Field(default_factory=list, description="pick / pick_yes: the entity of each part.")
    value: Literal["date", "number"] | None = None
    order: Literal["min", "max"] | None = None


class Plan(BaseModel):
    steps: list[SubQuestion] = Field(..., min_length=1)
    reduce: Reduce = Field(default_factory=Reduce)
    rule: str = Field("question", description="What made the plan: musique_decomposition, comparison, "
                      "bridge, conjunction, question (asked as it is) or llm.")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Capitalised only because they open the question.
_LEADERS = _words("is are was were did do does which what who whom whose where when how in to both the a an "
                  "and or of has have had will can")
# Lowercase words allowed inside a name between capitalised ones ("Song of the South", "Lope Díaz de Haro").
_CONNECT = _words("of the de di da du del della la le von van der den y for on")
_ROLES = ("director", "producer", "composer", "writer", "author", "creator", "performer", "founder",
          "screenwriter", "editor", "cinematographer", "singer", "father", "mother", "spouse", "husband", "wife")
# Relational nouns: "the R of E" is a hop when R is one of them ("the director of film X", "the mother of Y").
_RELATIONAL = frozenset(_ROLES) | _words(
    "co-founder son daughter brother sister sibling child parent grandfather grandmother uncle aunt nephew niece "
    "manager coach captain owner president ceo chairman leader keyboardist guitarist drummer vocalist bassist "
    "actor actress designer architect inventor publisher developer manufacturer capital seat mayor governor king "
    "queen emperor predecessor successor employer teammate partner birthplace")
_DESCRIPTORS = _words("the film song album novel book band series show play game opera poem romantic comedy "
                      "television tv documentary musical video")
_PREPOSITIONS = _words("of in to on at by for with from into about as")
_AUX_ONE = {"are": "Is", "were": "Was", "do": "Does", "did": "Did", "is": "Is", "was": "Was", "does": "Does",
            "have": "Has", "has": "Has"}
_TRIVIAL = re.compile(r"^(?:who|what|which) (?:is|was|are|were) #1\??$", re.IGNORECASE)
_STARTERS = _words("which what who whom whose where when how why is are was were did do does has have had can "
                   "could will would in on to for from at by")
_KIN_MODIFIERS = _words("paternal maternal elder eldest younger youngest step first second late")


def _cap(tok: str) -> bool:
    t = tok.lstrip("(\"“‘'")
    return bool(t) and (t[0].isupper() or t[0].isdigit())


def _trim(toks: list[str]) -> list[str]:
    while toks and toks[0] in _CONNECT | {"a", "an"}:
        toks = toks[1:]
    while toks and toks[-1] in _CONNECT:
        toks = toks[:-1]
    return toks


def _span_back(toks: list[str], end: int) -> int:
    """Start of the name that ends at toks[end - 1] (capitalised words, connectors between them)."""
    j = end
    while j > 0:
        t = toks[j - 1]
        name_word = _cap(t) and not (j - 1 == 0 and t.lower() in _LEADERS)
        inner = t.lower() in _CONNECT and j - 1 > 0 and _cap(toks[j - 2]) and j < end
        if not (name_word or inner):
            break
        j -= 1
    while j < end and toks[j] in _CONNECT:  # lowercase only: "The Ganymede Takeover" keeps its "The"
        j += 1
    return j


def _span_fwd(toks: list[str], start: int) -> int:
    """End (exclusive) of the name that starts at toks[start]."""
    j = start
    while j < len(toks) and toks[j].lower() in ("the", "a", "an"):
        j += 1
    first = j
    while j < len(toks):
        t = toks[j]
        if _cap(t):
            j += 1
        elif t.lower() in _CONNECT and j > first:
            k = j
            while k < len(toks) and toks[k].lower() in _CONNECT:
                k += 1  # "Song of the South": a run of connectors between capitalised words
            if k >= len(toks) or not _cap(toks[k]):
                break
            j = k
        else:
            break
    return j if j > first else start


def _name(toks: list[str]) -> str:
    return " ".join(_trim(toks)).strip(" ,")


def _steps(texts: list[str], deps: list[list[int]] | None = None) -> list[SubQuestion]:
    deps = deps or [[] for _ in texts]
    return [SubQuestion(index=i, text=t, depends_on=d) for i, (t, d) in enumerate(zip(texts, deps, strict=True))]


# ------------------------------------------------------------------------------------- attribute cues
ValueKind = Literal["date", "number"]   # what a compared part's answer is (Reduce.value)
Order = Literal["min", "max"]           # which end of it the question picks (Reduce.order)
_DATE_CUES: tuple[tuple[str, str, Order | None], ...] = (
    # (regex over the compared phrase, sub-question template, order forced by the cue itself)
    (r"\b(died|death)\b", "When did {e} die?", None),
    (r"\byounger\b|\byoungest\b", "When was {e} born?", "max"),
    (r"\bolder\b|\boldest\b", "When was {e} born or founded?", "min"),
    (r"\bborn\b|\bbirth\b", "When was {e} born?", None),
    (r"\b(released|published|founded|formed|established|created|opened|launched|premiered|built|came out)\b",
     "When was {e} {verb}?", None),
    (r"\b(first|earlier|earliest|later|latest|recently|recent|newer|before|after)\b", "{e}: when ({phrase})?",
     None),
)
_NUMBER_CUES: tuple[tuple[str, str, Order], ...] = (
    (r"\b(taller|tallest|higher|highest|stands higher)\b", "What is the height of {e}?", "max"),
    (r"\b(longer|longest)\s+(life|age)\b|\bolder age\b", "At what age did {e} die?", "max"),
    (r"\b(larger|largest|bigger|biggest)\b", "What is the size of {e}?", "max"),
    (r"\b(more|most)\s+(?!recent)(.+)$", "{e}: how many {what}?", "max"),
    (r"\b(fewer|fewest|less|least)\s+(.+)$", "{e}: how many {what}?", "min"),
    (r"\b(longer)\b", "{e}: how long ({phrase})?", "max"),
)
_MIN_WORDS = re.compile(r"\b(first|earlier|earliest|before|older|oldest)\b")
_MAX_WORDS = re.compile(r"\b(later|latest|recently|recent|newer|after|younger|youngest|last)\b")


def _attribute(phrase: str) -> tuple[Callable[[str], str], ValueKind, Order] | None:
    """(sub-question for an entity, value kind, order) for the compared phrase, or None (no cue)."""
    words = phrase.split()
    if words and words[0].lower() in ("which", "who", "what", "whiich"):
        verb_at = _head_verb(words[1:], words[0].lower() == "who")
        phrase = " ".join(words[1 + verb_at:]) if verb_at is not None else " ".join(words[1:])
    p = phrase.lower()
    for pat, template, order in _NUMBER_CUES:
        m = re.search(pat, p)
        if m:
            what = m.group(2).strip() if m.lastindex and m.lastindex >= 2 else ""
            return (lambda e, t=template, w=what: t.format(e=e, what=w, phrase=phrase)), "number", order
    for pat, template, forced in _DATE_CUES:
        m = re.search(pat, p)
        if m:
            verb = m.group(1) if m.lastindex else ""
            if verb == "came out":
                template, verb = "When did {e} come out?", ""
            when: Order | None = forced
            if when is None:
                when = "min" if _MIN_WORDS.search(p) else "max" if _MAX_WORDS.search(p) else None
            if when is None:
                return None
            return (lambda e, t=template, v=verb: t.format(e=e, verb=v, phrase=phrase)), "date", when
    return None


# ------------------------------------------------------------------------------------------- rules
_CHOICE_COMMA = re.compile(r"^(?P<head>(?:Which|Who|What|Whose|Whiich)\b[^,]*?),\s*(?:the\s+)?(?P<a>.+?),?\s+or\s+"
                           r"(?:the\s+)?(?P<b>.+?)\s*\?$")
_CHOICE_BARE = re.compile(r"^(?P<head>(?:Which|Who)\b.+?)\s+(?P<a>[A-Z].+?)\s+or\s+(?P<b>[A-Z].+?)\s*\?$")
_CHOICE_AUX = re.compile(r"^(?P<aux>Is|Was|Are|Were|Did|Does)\s+(?:the\s+)?(?P<a>[A-Z].*?)\s+or\s+(?:the\s+)?"
                         r"(?P<b>[A-Z][^\s?]*(?:\s+[A-Z0-9(][^\s?]*)*)\s+(?P<pred>[a-z].*?)\s*\?$")
_ROLE_IN_HEAD = re.compile(r"\b(?:has the|whose|with the|by the)\s+(" + "|".join(_ROLES) + r")s?\b(.*)$")
_HEAD_NOUN = re.compile(r"^(?:Which|What)\s+(\w+)\b")
_VERBISH = re.compile(r"^(?:is|was|are|were|has|had|have|does|did|do|will|can|could)$|^\w+(?:ed|es|s)$")


def _choice(q: str) -> Plan | None:
    m = _CHOICE_COMMA.match(q) or _CHOICE_BARE.match(q)
    aux = None
    if m is None:
        m = _CHOICE_AUX.match(q)
        if m is None:
            return None
        aux = m.group("aux")
        head = m.group("pred")
    else:
        head = m.group("head")
    a, b = (m.group(k).strip(" ,") for k in ("a", "b"))
    if not a or not b or " or " in a or " or " in b:
        return None
    role = _ROLE_IN_HEAD.search(head)
    if role:  # a bridge per entity: "Which film has the director who died later, A or B?"
        noun = (_HEAD_NOUN.match(head) or [None, ""])[1]
        noun = f"{noun} " if noun and noun.lower() not in ("one", "is") else ""
        attr = _attribute(role.group(2))
        if attr is None:
            return None
        ask, value, order = attr
        texts: list[str] = []
        deps: list[list[int]] = []
        for e in (a, b):
            texts += [f"{role.group(1)} of {noun}{e}?", ask("#" + str(len(texts) + 1))]
            deps += [[], [len(texts) - 2]]
        return Plan(steps=_steps(texts, deps), rule="comparison",
                    reduce=Reduce(kind="pick", parts=[1, 3], entities=[a, b], value=value, order=order))
    attr = _attribute(head)
    if attr is not None:
        ask, value, order = attr
        return Plan(steps=_steps([ask(a), ask(b)]), rule="comparison",
                    reduce=Reduce(kind="pick", parts=[0, 1], entities=[a, b], value=value, order=order))
    texts = [_yes_no(aux, head, e) for e in (a, b)]
    return Plan(steps=_steps(texts), rule="comparison", reduce=Reduce(kind="pick_yes", parts=[0, 1], entities=[a, b]))


def _yes_no(aux: str | None, head: str, entity: str) -> str:
    """"Is it true that E <predicate>?" from "Which N <predicate>" (or "Is E <predicate>?" from an aux form)."""
    if aux is not None:
        return f"{_AUX_ONE.get(aux.lower(), aux)} {entity} {head}?"
    words = head.split()[1:]  # without Which / Who
    verb = _head_verb(words, head.split()[0].lower() == "who")
    if verb is None:
        return f"Is it true that {entity} is the one: {head}?"
    return f"Is it true that {entity} {' '.join(words[verb:])}?"


def _head_verb(words: list[str], verb_first: bool) -> int | None:
    """Index of the verb after "Which <noun phrase>": an auxiliary when there is one, else the first -ed/-s
    word after the noun ("Which musician played ...")."""
    aux = next((i for i, w in enumerate(words) if w.lower() in _AUX_ONE), None)
    if aux is not None:
        return aux
    return next((i for i, w in enumerate(words) if _VERBISH.match(w.lower()) and (i > 0 or verb_first)), None)


def _pair(toks: list[str]) -> tuple[int, int, int, int] | None:
    """(start, end) token spans of the first "A and B" pair of names."""
    for i, t in enumerate(toks):
        if t == "and" and 0 < i < len(toks) - 1:
            s = _span_back(toks, i)
            e = _span_fwd(toks, i + 1)
            if s < i and e > i + 1:
                return s, i, i + 1, e
    return None


_SAME = re.compile(r"\bsame\s+([a-z]+(?:\s+of\s+[a-z]+)?)")


def _both_same_common(q: str) -> Plan | None:
    toks = q.rstrip(" ?").split()
    low = q.lower()
    if not any(w in low for w in (" both ", "both ", " same ", " in common")):
        return None
    role = re.search(r"\b(" + "|".join(_ROLES) + r")s?\s+of\s+(?:films?|songs?|albums?)?\s*", q)
    two_roles = re.search(r"\b(" + "|".join(_ROLES) + r") of (?:films? )?(?P<a>.+?) and (?:the )?\1 of (?:films? )?"
                          r"(?P<b>[A-Z].+?)\s+(?:share|have|both|from|were|are)\b", q)
    if two_roles:
        a, b = two_roles.group("a").strip(), two_roles.group("b").strip()
    else:
        span = _pair(toks)
        if span is None:
            return None
        a, b = _name(toks[span[0]:span[1]]), _name(toks[span[2]:span[3]])
        if not role:
            role = re.search(r"\b(?:have|has) the (" + "|".join(_ROLES) + r")s?\b", q)
    if not a or not b:
        return None
    role_name = role.group(1) if role else None
    same = _SAME.search(low)
    if same:
        attr = same.group(1)
        if role_name:
            texts = [f"{role_name} of {a}?", f"{attr} of #1?", f"{role_name} of {b}?", f"{attr} of #3?"]
            return Plan(steps=_steps(texts, [[], [0], [], [2]]), rule="comparison",
                        reduce=Reduce(kind="same", parts=[1, 3]))
        return Plan(steps=_steps([f"{attr} of {a}?", f"{attr} of {b}?"]), rule="comparison",
                    reduce=Reduce(kind="same", parts=[0, 1]))
    first = toks[0].lower()
    if first in _AUX_ONE and "both" in low:  # "Are A and B both P?", "Were both A and B P?"
        m = re.search(r"\bboth\s+(.+?)\s*\?$", q) if not re.match(r"^\w+\s+both\b", q) else None
        pred = m.group(1) if m else " ".join(toks[_span_fwd(toks, toks.index("and") + 1):])
        if not pred:
            return None
        return Plan(steps=_steps([f"{_AUX_ONE[first]} {e} {pred}?" for e in (a, b)]), rule="comparison",
                    reduce=Reduce(kind="all_yes", parts=[0, 1]))
    if two_roles is None and re.match(r"^(?:what|which|who|to what|in what|the|both)\b", low):
        # "What profession did A and B both hold?": the question asked of each, the answer they share
        assert span is not None  # set wherever two_roles is not
        pre, post = " ".join(toks[:span[0]]), " ".join(toks[span[3]:])
        pre = re.sub(r"\bboth$", "", pre).strip()
        post = re.sub(r"^(?:are\s+)?both\b\s*", lambda m: "are " if m.group(0).startswith("are") else "", post)
        post = re.sub(r"\s*\bin common$", "", re.sub(r"\bboth\s+", "", post)).strip()
        texts = [" ".join(x for x in (pre, e, post) if x) + "?" for e in (a, b)]
        return Plan(steps=_steps(texts), rule="comparison", reduce=Reduce(kind="common", parts=[0, 1]))
    return None


_LIST = re.compile(r"^(?P<head>.*\b(?:of|in|for|about|from|by|between))\s+(?P<a>[A-Z][^,?]*?),?\s+and\s+"
                   r"(?P<b>[A-Z][^?]*?)\s*\?$")


def _entity_list(q: str) -> Plan | None:
    """"Capitals of France and Italy?": the question asked of each name closing it, the answers joined."""
    m = _LIST.match(q)
    if m is None:
        return None
    names = [m.group("a").split(), m.group("b").split()]
    if not all(toks and _span_fwd(toks, 0) == len(toks) for toks in names):
        return None  # each side must be one name: "... of Simon and the band" is not a list
    texts = [f"{m.group('head')} {' '.join(toks)}?" for toks in names]
    return Plan(steps=_steps(texts), rule="conjunction", reduce=Reduce(kind="join", parts=[0, 1]))


_THE_R_OF = re.compile(r"(?:^|(?<=\s))(?P<span>[Tt]he\s+(?P<r>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?)\s+of\s+)")


def _r_of_e(q: str) -> Plan | None:
    """Bridge through "the R of E": hop 1 asks it, hop 2 asks the question with #1 in its place."""
    body = q.rstrip(" ?")
    for m in _THE_R_OF.finditer(body):
        if m.start() > 1 and body[m.start() - 2] == ",":
            continue  # an apposition ("X, the father of Y, wrote ..."): not a hop
        relation = m.group("r")
        head = relation.split()[-1]
        if head not in _RELATIONAL and head.removesuffix("s") not in _RELATIONAL:
            continue  # "the end of the 2007 season", "the top level of ...": not a relation to an entity
        rest = body[m.end():].split()
        k = 0
        while k < len(rest) and k < 4 and rest[k].lower() in _DESCRIPTORS and not _cap(rest[k]):
            k += 1  # descriptors before the name: "film", "the romantic comedy"
        end = _span_fwd(rest, k) if k < len(rest) and _cap(rest[k]) else k
        if end <= k:
            continue
        if rest[0] == "the" and end < len(rest) and rest[end].islower() and rest[end] not in _STARTERS | {
                "that", "and", "or", "die", "born"}:
            continue  # "the American political satire ...": an adjective, not a name
        entity = " ".join(rest[:end]).strip(" ,")
        tail = " ".join(rest[end:])
        hop2 = f"{body[:m.start()]}#1 {tail}".strip()
        if _TRIVIAL.match(hop2) or not tail and not body[:m.start()].strip():
            continue
        return Plan(steps=_steps([f"{relation} of {entity}?", hop2 + "?"], [[], [0]]), rule="bridge")
    return None


def _possessive(q: str) -> Plan | None:
    """"Where did X's father die?" -> "father of X?", then "Where did #1 die?"."""
    body = q.rstrip(" ?")
    toks = body.split()
    for i, t in enumerate(toks):
        if not re.search(r"['’]s$", t) or i + 1 >= len(toks) or not toks[i + 1][:1].islower():
            continue
        rel, after = toks[i + 1], i + 2
        if rel.lower() in _LEADERS:
            continue
        if rel.lower() in _KIN_MODIFIERS and after < len(toks):  # "X's paternal grandfather": one relation
            rel, after = f"{rel} {toks[after]}", after + 1
        stripped = [*toks[:i], re.sub(r"['’]s$", "", t)]
        s = _span_back(stripped, i + 1)
        if s > i:
            continue
        entity = " ".join(stripped[s:])
        rel_word = re.sub(r"['’]s$", "", rel)
        if rel_word.split()[-1] not in _RELATIONAL:
            continue  # "Dvořák's renowned opera": not a relation
        hop2 = " ".join([*toks[:s], "#1" + ("'s" if rel.endswith(("'s", "’s")) else ""), *toks[after:]])
        if _TRIVIAL.match(hop2):
            continue
        return Plan(steps=_steps([f"{rel_word} of {entity}?", hop2 + "?"], [[], [0]]), rule="bridge")
    return None


_RELATIVE = re.compile(r"^(?P<pre>.*?\S)\s+the\s+(?P<n>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?)\s+"
                       r"(?P<rel>where|who|whom|that|which|whose)\s+(?P<clause>[^?]+?)\s*\?$")


def _relative(q: str) -> Plan | None:
    """"What is the seat of the county where X is located?" -> "In which county X is located?", "... of #1?"."""
    m = _RELATIVE.match(q)
    if m is None:
        return None
    n, rel, clause, pre = m.group("n"), m.group("rel"), m.group("clause"), m.group("pre")
    if any(w in _PREPOSITIONS or w.endswith("ed") for w in n.split()):
        return None  # "the assassination of which heir", "the magazine headquartered that ...": not a clause
    tail = ""
    words = clause.split()
    if pre.split()[-1].lower() in _AUX_ONE and len(words) > 1 and words[-1].islower():
        tail, clause = " " + words[-1], " ".join(words[:-1])  # "When was the pianist who recorded X born?"
    hop2 = f"{pre} #1{tail}?"
    if _TRIVIAL.match(hop2) or pre.lower() in _LEADERS:
        return None
    hop1 = {"where": f"In which {n} {clause}?", "whose": f"Which {n}'s {clause}?"}.get(rel, f"Which {n} {clause}?")
    return Plan(steps=_steps([hop1, hop2], [[], [0]]), rule="bridge")


_CLAUSES = re.compile(r"^(?P<head>(?:Which|What|Who)\b[^,]*?\b(?:\w+ed|was|is|has|had|won|played|wrote|made)\b.+?)"
                      r"\s+and\s+(?P<verb>had|has|was|is|were|won|played|wrote|made|starred|\w+ed)\s+(?P<rest>[^?]+)\?$")


def _two_clauses(q: str) -> Plan | None:
    """"Which band released X and had a drummer who ...?": one step a clause, the answer they share."""
    m = _CLAUSES.match(q)
    if m is None:
        return None
    words = m.group("head").split()
    subject: list[str] = []  # "Which Canadian rock band": the words before the head's first verb
    for w in words:
        if subject and (w.lower() in _AUX_ONE or re.fullmatch(r"\w+ed|had|won|played|wrote|made", w.lower())):
            break
        subject.append(w)
    if len(subject) < 2 or len(subject) == len(words) or any(w.lower() in _PREPOSITIONS | {"which", "that"}
                                                            for w in subject[1:]):
        return None
    second = f"{' '.join(subject)} {m.group('verb')} {m.group('rest')}?"
    return Plan(steps=_steps([m.group("head") + "?", second]), rule="conjunction",
                reduce=Reduce(kind="common", parts=[0, 1]))


def _several(q: str) -> Plan | None:
    """Two questions in one: each asked, yes/no ones reduced to all-yes, others joined."""
    parts = [p.strip() for p in re.split(r"(?<=\?)\s+(?:And\s+|and\s+)?", q) if p.strip()]
    if len(parts) < 2 or not all(p.endswith("?") and p.split()[0].lower() in _STARTERS for p in parts):
        return None  # "..., What Will You Do When You Catch Me? or School On Fire?" is one question
    texts = [p[0].upper() + p[1:] for p in parts]
    yes_no = all(t.split()[0].lower() in _AUX_ONE for t in texts)
    return Plan(steps=_steps(texts), rule="conjunction",
                reduce=Reduce(kind="all_yes" if yes_no else "join", parts=list(range(len(texts)))))


RULES: tuple[Callable[[str], Plan | None], ...] = (_several, _choice, _both_same_common, _entity_list, _r_of_e,
                                                  _possessive, _relative, _two_clauses)


def offline_plan(question: str) -> Plan | None:
    """The first rule that splits the question into two or more steps (module docstring), else None."""
    q = " ".join(question.split())
    for rule in RULES:
        plan = rule(q)
        if plan is not None and len(plan.steps) > 1:
            return plan
    return None
