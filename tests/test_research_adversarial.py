"""Issue 43's adversarial set (tests/research_adversarial.py): every case of the issue's six classes through the
real critic loop must behave. The same cases, run as a script against main's code, gave the "before" column
of docs/research.md (41 of 43 failed there; 0 here)."""

from __future__ import annotations

import pytest
from research_adversarial import CASES, CLASSES, Context, run_case


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, shipped_bm25_dir):
    return Context(tmp_path_factory.mktemp("adversarial"), shipped_bm25_dir)


def test_every_class_of_the_issue_has_cases_and_real_shipped_passages_are_among_them():
    by = {cls: [c for c in CASES if c.cls == cls] for cls in CLASSES}
    assert all(len(cases) >= 4 for cases in by.values()), {k: len(v) for k, v in by.items()}
    assert sum("shipped" in c.id or "ninth-gate" in c.id for c in CASES) >= 6
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.cls}:{c.id}" for c in CASES])
def test_adversarial_case(case, ctx):
    assert run_case(case, ctx) is None, case.what
