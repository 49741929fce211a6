"""Reading passage numbers the way models write them: a `<cite>` block's contents, and `[n]` markers inside an
answer.

A `<cite>` block is read after NFKC normalisation (full-width digits, brackets and commas are the ASCII ones):
- bracketed markers, `[1][2]`, `[1, 2]`, `[1] Rush, [2] Peart`: the numbers in the brackets; text outside
  them is taken as the model's annotation (a title);
- otherwise a list of numbers and ranges, `2, 5`, `1 and 2`, `1、2`, `1 & 2`, `passages 1-3`, `Doc 1, Doc 2`,
  `#1; #2`, `(1), (2)`, `Sources: 1, 2`: separators (whitespace `,` `;` `:` `、` `/` `&` `+` `and` `or`,
  parentheses) and the words passage/doc/document/source/reference/no./p. (singular or plural) around the
  numbers, and one full stop at the end (`2, 5.`); a range `1-3` / `1–3` / `1 to 3` is every number in it.
An empty block cites nothing. Anything else (`the second passage`, a range running backwards or over
`MAX_RANGE` numbers, a number of more than `MAX_DIGITS` digits, a list longer than `MAX_CHARS` characters) is
a citation fault: the block cites nothing
and is reported, but the trajectory keeps its outcome (SPEC section 2: a citation fault is not a protocol
violation).
"""

from __future__ import annotations

import re
import unicodedata

# Guards, not method constants: no passage list is this long, and the regexes and int() of a huge digit run
# would be slow (a cite block can be as long as the trajectory budget).
MAX_RANGE = 64
MAX_DIGITS = 6
MAX_CHARS = 512

_NUMBER = r"\d+"
_ITEM = re.compile(rf"({_NUMBER})\s*(?:-|–|—|~|\bto\b)\s*({_NUMBER})|({_NUMBER})")
_FILLER = re.compile(r"\b(?:passages?|docs?|documents?|sources?|references?|refs?|nos?|p|and|or)\b\.?"
                     r"|[\s,;:、/&+#()]", flags=re.IGNORECASE)
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_ANY_BRACKETED = re.compile(r"[\[［]([^\[\]［］]*)[\]］]")


def _number_list(text: str) -> list[int] | None:
    """The numbers of a plain list of numbers and ranges (module docstring), None when anything else is in it."""
    if len(text) > MAX_CHARS:
        return None
    nums: list[int] = []
    for m in _ITEM.finditer(text):
        lo, hi, one = m.groups()
        if max(len(g or "") for g in (lo, hi, one)) > MAX_DIGITS:
            return None
        if one is not None:
            nums.append(int(one))
        elif not 0 <= int(hi) - int(lo) < MAX_RANGE:
            return None
        else:
            nums.extend(range(int(lo), int(hi) + 1))
    rest = _FILLER.sub("", _ITEM.sub(" ", text))
    return nums if nums and not rest.strip() else None


def read_citations(content: str) -> list[int] | None:
    """The passage numbers a `<cite>` block names, in order (repeats kept); [] for an empty block; None for a
    block that cannot be read (a citation fault)."""
    # A sentence's full stop after the list (`2, 5.`, `Passage 1.`) is not part of it.
    text = unicodedata.normalize("NFKC", content).strip().removesuffix(".").rstrip()
    if not text:
        return []
    marked = [nums for m in _BRACKETED.finditer(text) if (nums := _number_list(m.group(1))) is not None]
    if marked:
        return [n for nums in marked for n in nums]
    return _number_list(text)


def strip_inline_citations(answer: str) -> str:
    """The answer without bracketed passage markers (`Paris [1]`, `Paris［１］`, `Paris [1][2].` -> `Paris`,
    `Paris.`), so exact match sees the answer alone; other brackets stay. An answer that is nothing but markers
    is left as it is (a wrong answer, not an empty one)."""
    kept, pos = [], 0
    for m in _ANY_BRACKETED.finditer(answer):
        if _number_list(unicodedata.normalize("NFKC", m.group(1))) is not None:
            kept.append(answer[pos:m.start()].rstrip())  # with the space before the marker
            pos = m.end()
    kept.append(answer[pos:])
    stripped = "".join(kept).strip()
    return stripped or answer
