"""The offline reduce: combine the approved sub-answers into the final answer by the plan's `Reduce`
(awarl/research/schema.py), never by keeping only the last one when the parts are independent.

`combine(reduce, steps, answers)` returns (answer, why): the answer ("" when the parts do not decide it) and a
sentence saying how it was reached or why it could not be (the report shows it; an undecided reduce
abstains). Dates and numbers are read from the answers' text (`read_date`, `read_number`); a part that cannot
be read leaves the comparison undecided rather than guessed.
"""

from __future__ import annotations

from collections.abc import Sequence

from awarl.critic.values import Date, first_date, first_quantity
from awarl.metrics import normalize_answer
from awarl.research.schema import Reduce, SubQuestion


def read_date(text: str) -> tuple[int, int, int] | None:
    """(year, month, day) of the first date in the text (0 for a missing month or day; BC years negative),
    read by awarl/critic/values.py. First by position: "1912 (died 14 March 1983)" is 1912, though the full
    date is the more specific form; of the forms that start at the same place, the longest ("14 March 1983",
    not "14")."""
    d = first_date(text)
    return d.key() if d is not None else None


def _undecided(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    """Whether two read dates cannot be ordered (`Date.orderable`: 1983 against 14 March 1983)."""
    return not Date(*a).orderable(Date(*b))


def read_number(text: str) -> float | None:
    """The first amount of the text in its base unit ("8,035 m" and "8.035 km" are both 8035; "$5B" is 5e9;
    "5000 m" is five thousand metres, never five billion)."""
    return first_quantity(text)


def yes_no(text: str) -> bool | None:
    norm = normalize_answer(text)
    if norm == "yes" or norm.startswith("yes "):
        return True
    if norm == "no" or norm.startswith("no "):
        return False
    return None


def combine(reduce: Reduce, steps: Sequence[SubQuestion], answers: dict[int, str]) -> tuple[str, str]:
    """(final answer or "", how it was reached / why not); see the module docstring."""
    if reduce.kind in ("last", "llm"):
        last = steps[-1].index
        return answers.get(last, ""), f"the last step (step {last + 1}) answers the question"
    parts = reduce.parts or [s.index for s in steps]
    got = [answers.get(p, "").strip() for p in parts]
    missing = [p + 1 for p, a in zip(parts, got, strict=True) if not a]
    if missing:
        return "", f"no approved answer for step(s) {missing}"
    if reduce.kind == "join":
        return " and ".join(got), "the parts' answers joined"
    if reduce.kind == "pick":
        return _pick(reduce, parts, got)
    if reduce.kind == "pick_yes":
        yes = [yes_no(a) for a in got]
        if yes.count(True) == 1 and yes.count(False) == len(yes) - 1:
            return reduce.entities[yes.index(True)], "the one entity the sources say yes for"
        return "", f"the parts do not single out one entity (yes/no answers: {got})"
    if reduce.kind == "all_yes":
        yes = [yes_no(a) for a in got]
        if None in yes:
            return "", f"a part is not a yes/no answer ({got})"
        return ("yes" if all(yes) else "no"), "yes only when every part is yes"
    if reduce.kind == "same":
        same = len({normalize_answer(a) for a in got}) == 1
        return ("yes" if same else "no"), f"the parts {'agree' if same else 'differ'}: {got}"
    return _common(got)


def _pick(reduce: Reduce, parts: list[int], got: list[str]) -> tuple[str, str]:
    read = read_date if reduce.value == "date" else read_number
    values = [read(a) for a in got]
    unread = [f"step {p + 1}: {a!r}" for p, a, v in zip(parts, got, values, strict=True) if v is None]
    if unread:
        return "", f"could not read a {reduce.value} from {', '.join(unread)}"
    best = (min if reduce.order == "min" else max)(values)  # type: ignore[type-var]
    if values.count(best) > 1:
        return "", f"the parts give the same {reduce.value} ({got})"
    if reduce.value == "date" and any(_undecided(best, v) for v in values if v != best):  # type: ignore[arg-type]
        return "", f"the dates are not precise enough to order ({got})"
    i = values.index(best)
    word = {"date": {"min": "earliest", "max": "latest"}, "number": {"min": "smallest", "max": "largest"}}
    detail = " vs ".join(f"{e} ({a})" for e, a in zip(reduce.entities, got, strict=True))
    return reduce.entities[i], f"the {word[reduce.value or 'number'][reduce.order or 'max']} {reduce.value}: {detail}"


def _common(got: list[str]) -> tuple[str, str]:
    norms = [normalize_answer(a) for a in got]
    if len(set(norms)) == 1:
        return got[0], "every part gives this answer"
    shortest = min(range(len(got)), key=lambda i: len(norms[i]))
    # whole words: "actor" is not in "contractor", "us" not in "russia"
    if norms[shortest] and all(f" {norms[shortest]} " in f" {n} " for n in norms):
        return got[shortest], "the answer every part contains"
    return "", f"the parts give different answers ({got}): no shared answer"
