"""Duplicate passage ids in an index build, found in 8 bytes an id.

A corpus that repeats an id would be indexed twice over (a search answers the same passage twice, and an id
no longer names one passage), so a build refuses it by default; `keep_first` keeps the first passage of each
id and counts the rest. wiki-18 has 21M ids, too many for a Python set (~2 GB), so `SeenIds` keeps 64-bit
hashes in sorted numpy runs whose sizes double (a log-structured set): each chunk of ids is tested and added
vectorised, and 21M ids take 170 MB. Two different ids share a hash with probability about n^2 / 2^65 (1 in
80,000 at 21M): under `fail` the build confirms a hit against the corpus itself before it stops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

POLICIES = ("fail", "keep_first")


def id_hash(pid: str) -> int:
    return int.from_bytes(hashlib.blake2b(pid.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


class SeenIds:
    """The ids seen so far: `add(ids)` marks which of them were seen before (or earlier in the same call)."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []   # sorted, disjoint; sizes decrease along the list

    def __len__(self) -> int:
        return sum(len(r) for r in self.runs)

    def add(self, ids: Sequence[str]) -> np.ndarray:
        """A bool array: True where the id is a repeat. The others are added."""
        h = np.fromiter((id_hash(p) for p in ids), dtype=np.uint64, count=len(ids))
        repeat = np.ones(len(h), dtype=bool)
        repeat[np.unique(h, return_index=True)[1]] = False   # first of each hash within this call
        for run in self.runs:
            pos = np.minimum(np.searchsorted(run, h), len(run) - 1)
            repeat |= run[pos] == h
        self._push(np.sort(h[~repeat]))
        return repeat

    def _push(self, run: np.ndarray) -> None:
        if not len(run):
            return
        self.runs.append(run)
        while len(self.runs) > 1 and len(self.runs[-2]) <= len(self.runs[-1]):
            top = self.runs.pop()
            self.runs[-1] = np.sort(np.concatenate([self.runs[-1], top]), kind="stable")
