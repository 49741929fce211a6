"""Words as the offline judge compares them: tokens (SQuAD-style normalisation), content words, and relation
words reduced to one form (a light stemmer and a small table of the relations multi-hop questions ask about:
"born" / "birth" / "birthplace", "capital" / "seat", "came out" / "released" / "premiere"...).

Tokens: lower-case, punctuation to spaces (Unicode punctuation, as EM's normalisation reads it: `Paris…`,
`«Paris»`, `Paris。` are `paris`), articles dropped, and the possessive `'s` removed first ("Arthur's
Magazine" is {arthur, magazine}, not a stray `s` that every passage with an apostrophe contains).

The relation table is what the judge can see of paraphrase: a relation worded with none of its words (a
birth given as "a native of Leeds" is in it; "hails from Leeds" is not) is not recognised, and the judge then
says `inferred`, never `grounded` (docs/research.md, "What the offline judge checks").
"""

from __future__ import annotations

import re
import string

from awarl.metrics import is_punct


def words(text: str) -> list[str]:
    """The words of a literal list written as one string (the tables below)."""
    return text.split()


STOP = frozenset({
    "a", "an", "the", "and", "or", "of", "in", "on", "at", "to", "for", "from", "by", "with", "as", "is",
    "was", "were", "are", "be", "been", "being", "it", "its", "this", "that", "these", "those", "he",
    "she", "they", "his", "her", "their", "him", "them", "who", "whom", "which", "what", "when", "where",
    "why", "how", "than", "then", "there", "also", "not", "no", "but", "into", "over", "under", "after",
    "before", "about",
})
# Words a question is made of that say nothing about where its answer is, or about the relation it asks.
QUESTION_WORDS = frozenset({"did", "does", "do", "both", "same", "whose", "name", "called", "either", "one",
                            "many", "much", "has", "have", "had", "year", "date", "kind", "type", "known",
                            "according", "says", "say", "said", "true", "following", "other", "another",
                            "person", "someone", "something", "thing", "first", "earlier", "earliest", "later",
                            "latest", "last", "older", "oldest", "younger", "youngest", "more", "most", "less",
                            "least", "fewer", "which", "can", "could", "will", "would", "also", "currently"})
_POSSESSIVE = re.compile(r"(?<=[\w)])['’]s\b", flags=re.IGNORECASE)
_ASCII_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")
# Phrases that name one relation, read before the words are split.
_PHRASES = ((re.compile(r"\b(?:came|come|comes|coming) out\b", re.I), "released"),
            (re.compile(r"\blocated in the administrative territorial entity\b", re.I), "located"),
            (re.compile(r"\b(?:place|date|year|city|country) of birth\b", re.I), "born"),
            (re.compile(r"\b(?:place|date|year|city|country) of death\b", re.I), "died"),
            (re.compile(r"\bcountry of citizenship\b", re.I), "citizen"),
            (re.compile(r"\bcountry of origin\b", re.I), "from"),
            (re.compile(r"\bpassed away\b", re.I), "died"))
_SYNONYMS = {canon: words.split() for canon, words in {
    "born": "born birth births birthplace birthday native",
    "die": "die died dies dying death deaths dead",
    "marry": "marry married marries marriage spouse spouses wife husband wed wedded",
    "capital": "capital capitals seat",
    "found": "found founded founder founders founding establish established establishment co-founded "
             "cofounded formed incorporated",
    "release": "release released releases releasing premiere premiered premieres published publish "
               "publication publisher publishers debut debuted aired",
    "write": "write wrote written writer writers writing author authors authored penned",
    "perform": "perform performed performer performers performing sung sang sing sings singer recorded",
    "locate": "located location situated lies",
    "study": "study studied studies student students educated attended alumnus alumna graduated graduate",
    "live": "lived live lives living resided resident reside resides",
    "citizen": "citizen citizenship nationality",
    "design": "design designed designer architect",
    "build": "build built builds constructed construction",
    "win": "win won wins winner winning awarded",
    "play": "play played plays player players playing",
    "star": "star starred starring stars",
    "height": "height tall high elevation",
    "start": "start started starts begin began begun opened open opens launched launch",
    "end": "end ended ends closed close dissolved disbanded defunct",
    "population": "population inhabitants",
    "center": "center centre centers centres",
    "theater": "theater theatre theaters theatres",
}.items()}
SYNONYM = {w: canon for canon, words in _SYNONYMS.items() for w in words}
CANONICAL = frozenset(_SYNONYMS) - {"capital", "center", "theater", "population", "height", "citizen"}  # the verbs
# Relations whose agent follows "by" ("a song by Rush", "designed by Rex Dunn"), or whose value is a place
# after "in", or that a date's role in a life-span or run states ("(1844–1846)": its start and end).
AGENT_RELATIONS = frozenset({"write", "perform", "design", "build", "found", "direct", "produc", "compos",
                             "creat", "develop", "publish", "own", "paint", "releas", "release", "manufactur",
                             "invent", "record"})
PLACE_RELATIONS = frozenset({"locate", "born", "die", "live", "found", "capital", "from", "citizen"})
START_RELATIONS = frozenset({"born", "found", "release", "start"})
END_RELATIONS = frozenset({"die", "end"})
# Nouns that name an entity by its role to another ("the director of film X", "X's father"): beside another
# relation word they describe the question's subject (a bridge), they are not the relation asked.
ROLE_WORDS = frozenset(words("director producer composer writer author creator performer founder "
                             "screenwriter editor cinematographer singer father mother spouse husband wife "
                             "son daughter brother sister sibling child parent grandfather grandmother uncle "
                             "aunt nephew niece manager coach captain owner president chairman leader actor "
                             "actress designer architect publisher developer manufacturer drummer guitarist "
                             "vocalist bassist keyboardist teammate partner employer predecessor successor"))
_SUFFIXES = ("ations", "ation", "ings", "ing", "ions", "ion", "ers", "ors", "ies", "ied", "ed", "es", "er", "or",
             "s")


def punct_to_spaces(text: str) -> str:
    """ASCII punctuation and every Unicode punctuation character (category P) to a space: the rule of
    `awarl.metrics.normalize_answer`, so an answer EM accepts tokenises as its gold would."""
    text = _ASCII_PUNCT.sub(" ", text)
    return text if text.isascii() else "".join(" " if is_punct(ch) else ch for ch in text)


def cased_tokens(text: str) -> list[str]:
    """`tokens(text)` before lower-casing (the same tokens, one for one): the question's capitals say which
    of its words are names."""
    text = _POSSESSIVE.sub("", text)
    return [t for t in punct_to_spaces(text).split() if t.lower() not in ("a", "an", "the")]


def tokens(text: str) -> list[str]:
    """Lower-case, possessive `'s` dropped, punctuation to spaces, articles dropped (SQuAD-style
    normalisation, token level)."""
    return [t.lower() for t in cased_tokens(text)]


def content_tokens(text: str) -> set[str]:
    toks = tokens(text)
    content = {t for t in toks if t not in STOP}
    return content or set(toks)


def stem(word: str) -> str:
    """One form per word: the relation table's name for it, else the word without a common suffix ("directed",
    "director", "direction" -> "direct")."""
    w = word.lower()
    if w in SYNONYM:
        return SYNONYM[w]
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)] + ("y" if suf in ("ies", "ied") else "")
            break
    return w[:-1] if len(w) > 4 and w.endswith("e") else w


def relation_text(text: str) -> str:
    """The text with the phrases that name one relation replaced by its word ("came out" -> "released")."""
    for pattern, word in _PHRASES:
        text = pattern.sub(word, text)
    return text


def stems(text: str) -> list[str]:
    """The stems of the text's tokens, in order (relation phrases read first)."""
    return [stem(t) for t in tokens(relation_text(text))]
