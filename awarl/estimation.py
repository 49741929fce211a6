"""Step 1 of the AWA-RL reward (SPEC section 4.1): p_i, a question's success probability, from the outcome
counts of K sampled trajectories, as pure functions.

Below both of its readers: `data/estimates.py` (the estimate file `awarl estimate` writes and `awarl train`
reads) and `rewards/abstention.py` (the rest of the formula chain, which also hands these names on).
"""

from __future__ import annotations

# `reward.p_definition`; the first is the SPEC reading.
P_DEFINITIONS = ("share_of_k", "among_answered")


def success_estimate(correct: float, answered: float, k: float, definition: str = "share_of_k") -> float | None:
    """Step 1: p_i from the outcome counts of K samples (`reward.p_definition`).

    - `share_of_k`: correct / K (SPEC): an abstention counts as not correct;
    - `among_answered`: correct / answered, answered = correct + wrong + invalid (invalid counts as answered
      and wrong, as in the metrics). The estimate runs with the abstaining template, so a standard checkpoint
      that abstains often would otherwise get a low p_i and a large refusal reward for its own caution.
      None when nothing was answered (no evidence about answering; callers keep what they had).
    """
    if k <= 0 or not 0 <= correct <= answered <= k:
        raise ValueError(f"counts must satisfy 0 <= correct <= answered <= k, k > 0; got correct={correct}, "
                         f"answered={answered}, k={k}")
    if definition == "share_of_k":
        return float(correct) / float(k)
    if definition == "among_answered":
        return float(correct) / float(answered) if answered else None
    raise ValueError(f"p_definition must be one of {P_DEFINITIONS}, got {definition!r}")


def estimate_p(correct: float, answered: float, k: float, definition: str = "share_of_k") -> float:
    """Step 1 for the pre-RL estimate: `success_estimate`, where a question never answered in its K samples
    keeps its share of K (0: no evidence the checkpoint can answer it)."""
    p = success_estimate(correct, answered, k, definition)
    return float(correct) / float(k) if p is None else p
