"""Values a claim or a passage states, normalised so that two texts can be compared: dates with their
precision, and quantities with their unit (issue 43). One place for the critic's judge, the loop's conflict
checks (within a step and across steps) and the planner's reduce.

Dates: "3 March 1999", "March 3, 1999", "March 1999", "1999-03-03", "1999" (a bare four-digit year in
1000-2100 with no currency, multiplier or unit), "300 BC". A date has the precision it was written with:
"March 1999" and "3 March 1999" AGREE (the coarser one says less, not something else); "1999" and "2001",
or "3 March 1999" and "4 March 1999", conflict. A life-span parenthesis "(8 December 1906 – 30 November 1983)"
marks its first date as the start of a life or a run (a birth, a founding) and its second as its end
(`Value.role`).

Quantities: a number with its currency ($ € £ ¥), multiplier (thousand, million, billion, trillion, bn, and
k / m / b only right after a currency: "$5m" is five million, "5000 m" is five thousand METRES) and unit
(length, area, mass, duration, percent), converted to a base unit: "5 km" = "5,000 m" = "5000 metres";
"$5B" = "$5,000 million"; "5 km" and "5 miles" conflict. Bare counts keep the noun that follows ("3 acts").
Two quantities agree when they are within half the rounding step of the less precise one ("$58 million"
and "$58.4 million" agree, "5 km" and "5 miles" do not). Quantities of different dimensions (or
currencies) are never compared: neither agreement nor conflict.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from awarl.critic.tokens import words as _words

MONTHS = {m: i + 1 for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                          "september", "october", "november", "december"))}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())})
MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{3,4})(?:\s*(?P<bc>BC|BCE|B\.C\.))?"
_DATE_FORMS = (
    re.compile(r"\b(?P<year>\d{4})-(?P<mnum>\d{1,2})-(?P<day>\d{1,2})\b"),
    re.compile(r"\b" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r",?\s+" + _YEAR + r"\b", re.IGNORECASE),
    re.compile(r"\b" + _MONTH + r"\s+" + _DAY + r",?\s+" + _YEAR + r"\b", re.IGNORECASE),
    re.compile(r"\b" + _MONTH + r",?\s+" + _YEAR + r"\b", re.IGNORECASE),
)
_BARE_YEAR = re.compile(r"(?<![\w$€£¥.,])(?P<year>\d{3,4})(?:\s*(?P<bc>BC|BCE|B\.C\.)|\s*(?P<ad>AD|CE))?(?![\w%]|[.,]\d)")
_COUNTED = re.compile(r"\s+(?:people|persons|men|women|children|[a-z]+[^s's]s)\b")  # "1500 soldiers": a count
_PAREN = re.compile(r"\([^()]*\)")
_DASH = re.compile(r"^\s*[–—-]+\s*$|^\s*(?:to|until)\s*$")
_BORN_BEFORE = re.compile(r"\(\s*(?:b\.|born)\s*[^()]*$", re.IGNORECASE)

_CURRENCY = {"$": "$", "€": "€", "£": "£", "¥": "¥", "us$": "$", "usd": "$", "eur": "€", "gbp": "£"}
_MULT = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "bn": 1e9, "mn": 1e6, "mln": 1e6}
_CURRENCY_MULT = {"k": 1e3, "m": 1e6, "b": 1e9}  # only right after a currency: "$5m", "£3bn"
# unit word -> (dimension, factor to the base unit)
_UNITS: dict[str, tuple[str, float]] = {}
for _names, _dim, _factor in (
        ("m metre metres meter meters", "length", 1.0), ("km kilometre kilometres kilometer kilometers", "length", 1e3),
        ("cm centimetre centimetres centimeter centimeters", "length", 0.01),
        ("mm millimetre millimetres millimeter millimeters", "length", 1e-3),
        ("mi mile miles", "length", 1609.344), ("ft foot feet", "length", 0.3048), ("yd yard yards", "length", 0.9144),
        ("km2 km² sqkm", "area", 1e6), ("mi2 mi² sqmi", "area", 2_589_988.11), ("m2 m²", "area", 1.0),
        ("acre acres", "area", 4046.8564), ("hectare hectares ha", "area", 1e4),
        ("kg kilogram kilograms kilogramme kilogrammes", "mass", 1.0), ("g gram grams gramme grammes", "mass", 1e-3),
        ("t tonne tonnes", "mass", 1e3), ("lb lbs", "mass", 0.45359237),
        ("s sec second seconds", "duration", 1.0), ("min minute minutes", "duration", 60.0),
        ("h hr hour hours", "duration", 3600.0), ("day days", "duration", 86400.0),
        ("week weeks", "duration", 604800.0), ("year years yr yrs", "duration", 31_557_600.0),
        ("% percent per-cent", "percent", 1.0)):
    for _n in _names.split():
        _UNITS[_n] = (_dim, _factor)
_SQUARE = {"square kilometres": "km2", "square kilometers": "km2", "square miles": "mi2", "square metres": "m2",
           "square meters": "m2", "sq mi": "mi2", "sq km": "km2", "per cent": "percent"}
_NUMBER_WORDS = {w: i for i, w in enumerate(_words("zero one two three four five six seven eight nine ten "
                                                   "eleven twelve thirteen fourteen fifteen sixteen seventeen "
                                                   "eighteen nineteen twenty"))}
_QTY = re.compile(
    r"(?<![\w.])(?P<cur>US\$|[$€£¥])?\s?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?:\s?(?P<mult>thousand|million|billion|trillion|bn|mn|mln)\b|(?P<cmult>[kmbKMB])(?![\w]))?"
    r"(?:\s?(?P<unit>square kilometres|square kilometers|square miles|square metres|square meters|sq mi|sq km|"
    r"per cent|km²|mi²|m²|%|[A-Za-z]+)\b|(?P<pct>%))?"
    r"(?:\s+(?P<code>USD|EUR|GBP|dollars?|euros?))?",
    re.IGNORECASE)
_WORD_QTY = re.compile(r"\b(?P<word>" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) +
                       r")\s+(?P<noun>[a-z]+)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Date:
    year: int
    month: int = 0  # 0: not given
    day: int = 0

    @property
    def precision(self) -> str:
        return "day" if self.day else "month" if self.month else "year"

    def agrees(self, other: Date) -> bool:
        """Equal at the coarser of the two precisions ("March 1999" agrees with "3 March 1999")."""
        if self.year != other.year:
            return False
        if self.month and other.month and self.month != other.month:
            return False
        return not (self.day and other.day and self.day != other.day and self.month == other.month)

    def key(self) -> tuple[int, int, int]:
        return self.year, self.month, self.day

    def orderable(self, other: Date) -> bool:
        """Whether the two can be put in order: not when one is too coarse to tell (1983 against 14 March
        1983, or March 1983 against 14 March 1983: either could be first)."""
        if self.year != other.year:
            return True
        if not self.month or not other.month:
            return False
        return self.month != other.month or bool(self.day and other.day)


@dataclass(frozen=True)
class Quantity:
    value: float   # in the base unit of `dim` (metres, kg, seconds, square metres, the currency, 1)
    dim: str       # length, area, mass, duration, percent, money:$ (one per currency), count
    step: float    # rounding step of the value as written, in the base unit
    noun: str = ""  # a count's noun ("acts" in "3 acts"), singular

    def comparable(self, other: Quantity) -> bool:
        return self.dim == other.dim and (self.dim != "count" or not self.noun or not other.noun
                                          or self.noun == other.noun)

    def agrees(self, other: Quantity) -> bool:
        """Within half the coarser rounding step (two written forms of one value)."""
        tol = max(self.step, other.step) / 2 + 1e-9 * max(abs(self.value), abs(other.value), 1.0)
        return abs(self.value - other.value) <= tol


@dataclass(frozen=True)
class Value:
    kind: str                      # "date" | "quantity"
    text: str                      # as written
    start: int
    end: int
    date: Date | None = None
    quantity: Quantity | None = None
    role: str = ""                 # "start" / "end" of a life or a run (a life-span parenthesis)

    def comparable(self, other: Value) -> bool:
        if self.kind != other.kind:
            return False
        if self.quantity is not None and other.quantity is not None:
            return self.quantity.comparable(other.quantity)
        return True

    def agrees(self, other: Value) -> bool:
        """Two comparable values that state the same thing (module docstring); False when not comparable."""
        if not self.comparable(other):
            return False
        if self.date is not None and other.date is not None:
            return self.date.agrees(other.date)
        return self.quantity is not None and other.quantity is not None and self.quantity.agrees(other.quantity)

    def conflicts(self, other: Value) -> bool:
        """Comparable and different: "1999" / "2001", "5 km" / "5 miles"; never "March 1999" / "3 March 1999"."""
        return self.comparable(other) and not self.agrees(other)

    def normalised(self) -> str:
        """The value in one canonical form (for flags and conflict records)."""
        if self.date is not None:
            y, m, d = self.date.key()
            era = f"{-y} BC" if y < 0 else str(y)
            return era if not m else f"{era}-{m:02d}" if not d else f"{era}-{m:02d}-{d:02d}"
        q = self.quantity
        assert q is not None
        unit = {"length": " m", "area": " m²", "mass": " kg", "duration": " s", "percent": "%",
                "count": f" {q.noun}" if q.noun else ""}.get(q.dim, "")
        cur = q.dim.split(":", 1)[1] if q.dim.startswith("money:") else ""
        return f"{cur}{q.value:,.10g}{unit}"


def _year(g: dict[str, Any]) -> int:
    return int(g["year"]) * (-1 if g.get("bc") else 1)


def read_dates(text: str) -> list[Value]:
    """Every date in the text (module docstring), in order; overlapping forms keep the longest."""
    found: list[Value] = []
    taken: list[tuple[int, int]] = []
    for form in _DATE_FORMS:
        for m in form.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            g = m.groupdict()
            month = int(g["mnum"]) if g.get("mnum") else MONTHS.get((g.get("month") or "").lower().rstrip("."), 0)
            if not 1 <= month <= 12 or (g.get("day") and not 1 <= int(g["day"]) <= 31):
                continue
            found.append(Value("date", m.group(0), m.start(), m.end(), date=Date(_year(g), month, int(g.get("day") or 0))))
            taken.append((m.start(), m.end()))
    for m in _BARE_YEAR.finditer(text):
        if any(a < m.end() and m.start() < b for a, b in taken):
            continue
        year = int(m.group("year"))
        if not (m.group("bc") or m.group("ad")) and not 1000 <= year <= 2100:
            continue
        if _followed_by_unit(text, m.end()) or _COUNTED.match(text, m.end()):
            continue
        found.append(Value("date", m.group(0), m.start(), m.end(), date=Date(_year(m.groupdict()))))
    found.sort(key=lambda v: v.start)
    return _lifespan_roles(text, found)


def _followed_by_unit(text: str, end: int) -> bool:
    """Whether a number ending at `end` is an amount (a multiplier or a unit follows), not a year."""
    rest = text[end:end + 24].lower()
    m = re.match(r"\s?(%|[a-z²]+(?:\s[a-z]+)?)", rest)
    if not m:
        return False
    word = m.group(1)
    first = word.split()[0]
    return first in _MULT or first in _UNITS or word in _SQUARE or first == "%"


def _lifespan_roles(text: str, dates: list[Value]) -> list[Value]:
    """A parenthesis holding two dates joined by a dash ("(8 December 1906 – 30 November 1983)",
    "(1844-1846)") gives the span of a life or a run: its first date is the `start` (a birth, a founding), the
    second the `end`; a date after "(born" is a `start` too."""
    out = list(dates)
    for m in _PAREN.finditer(text):
        inside = [i for i, v in enumerate(out) if m.start() < v.start and v.end < m.end()]
        if len(inside) == 2 and _DASH.search(text[out[inside[0]].end:out[inside[1]].start]):
            a, b = inside
            out[a] = replace(out[a], role="start")
            out[b] = replace(out[b], role="end")
    for i, v in enumerate(out):
        if not v.role and _BORN_BEFORE.search(text[max(0, v.start - 40):v.start]):
            out[i] = replace(v, role="start")
    return out


def _step_of(num: str) -> float:
    """The rounding step of a written number: its last decimal place, or the trailing zeros of an integer
    ("5000" may be rounded to thousands)."""
    digits = num.replace(",", "")
    if "." in digits:
        return 10.0 ** -len(digits.split(".", 1)[1])
    stripped = digits.rstrip("0")
    return 10.0 ** (len(digits) - len(stripped)) if stripped else 1.0


def read_quantities(text: str, skip: list[tuple[int, int]] | None = None) -> list[Value]:
    """Every amount in the text that is not a date (the spans in `skip`): module docstring."""
    skip = skip if skip is not None else [(v.start, v.end) for v in read_dates(text)]
    out: list[Value] = []
    for m in _QTY.finditer(text):
        if any(a < m.end("num") and m.start("num") < b for a, b in skip):
            continue
        q = _quantity(m)
        if q is not None:
            out.append(Value("quantity", m.group(0).strip(), m.start(), m.end(), quantity=q))
    for m in _WORD_QTY.finditer(text):
        noun = _singular(m.group("noun").lower())
        if noun in _UNITS or noun in _MULT or noun in _STOP_NOUNS:
            continue
        n = float(_NUMBER_WORDS[m.group("word").lower()])
        out.append(Value("quantity", m.group(0), m.start(), m.end(), quantity=Quantity(n, "count", 1.0, noun)))
    out.sort(key=lambda v: v.start)
    return out


_STOP_NOUNS = frozenset(_words("of and or the a an in on at to for by with from as is was were are be been "
                               "who which that times"))


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def _quantity(m: re.Match[str]) -> Quantity | None:
    num = m.group("num")
    try:
        value = float(num.replace(",", ""))
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    cur = _CURRENCY.get((m.group("cur") or "").lower(), "")
    code = (m.group("code") or "").lower()
    if not cur and code:
        cur = {"usd": "$", "eur": "€", "gbp": "£", "dollar": "$", "dollars": "$", "euro": "€", "euros": "€"}.get(code, "")
    step = _step_of(num)
    mult = 1.0
    if m.group("mult"):
        mult = _MULT[m.group("mult").lower()]
    elif m.group("cmult"):
        letter = m.group("cmult").lower()
        if cur or letter == "k" or m.group("cmult") in "MB":
            mult = _CURRENCY_MULT[letter]
        elif letter == "m":  # "5m" without a currency: metres
            return Quantity(value, "length", step)
        else:
            return None
    value, step = value * mult, step * mult
    if cur:
        return Quantity(value, f"money:{cur}", step)
    unit = (m.group("unit") or "").lower()
    unit = _SQUARE.get(unit, unit)
    if m.group("pct") or unit in ("%", "percent", "per-cent"):
        return Quantity(value, "percent", step)
    if unit in _UNITS:
        dim, factor = _UNITS[unit]
        return Quantity(value * factor, dim, step * factor)
    noun = _singular(unit) if unit and unit.isalpha() and unit not in _STOP_NOUNS else ""
    return Quantity(value, "count", step, noun)


def read_values(text: str) -> list[Value]:
    """Dates and quantities of the text, in order."""
    dates = read_dates(text)
    qty = read_quantities(text, [(v.start, v.end) for v in dates])
    return sorted([*dates, *qty], key=lambda v: v.start)


def first_date(text: str) -> Date | None:
    """The first date by position (the reduce's reading of a part: "1912 (died 14 March 1983)" is 1912)."""
    dates = read_dates(text)
    return dates[0].date if dates else None


def first_quantity(text: str) -> float | None:
    """The first amount's value in its base unit (the reduce's reading of a numeric part)."""
    qty = read_quantities(text)
    return qty[0].quantity.value if qty and qty[0].quantity is not None else None
