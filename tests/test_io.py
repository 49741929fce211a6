"""awarl.io helpers of resumable jobs."""

from __future__ import annotations

from awarl.io import pending_batches


def test_pending_batches_are_cut_from_the_whole_list():
    items = list(range(7))
    assert list(pending_batches(items, 3, lambda x: False)) == [(0, [0, 1, 2]), (3, [3, 4, 5]), (6, [6])]
    # a killed run lost the batches after the first: the rerun sees the same cuts and starts
    assert list(pending_batches(items, 3, lambda x: x < 3)) == [(3, [3, 4, 5]), (6, [6])]
    # a batch finished in part (the batch size changed in between) keeps its start and its unfinished items
    assert list(pending_batches(items, 3, lambda x: x in {0, 4})) == [(0, [1, 2]), (3, [3, 5]), (6, [6])]
    assert list(pending_batches(items, 3, lambda x: True)) == []
    assert list(pending_batches([], 3, lambda x: False)) == []
