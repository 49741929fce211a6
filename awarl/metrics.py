"""Answer normalisation, EM / F1 / cover-EM, outcomes, and the aggregate metrics (P, A, RA-F1, ...)."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """Exactly one per trajectory. For metrics, INVALID counts as answered-and-wrong."""

    CORRECT = "correct"
    WRONG = "wrong"
    ABSTAIN = "abstain"
    INVALID = "invalid"
