"""awarl.io helpers of resumable jobs."""

from __future__ import annotations

import pytest

from awarl.io import DataError, iter_jsonl, pending_batches


def test_pending_batches_are_cut_from_the_whole_list():
    items = list(range(7))
    assert list(pending_batches(items, 3, lambda x: False)) == [(0, [0, 1, 2]), (3, [3, 4, 5]), (6, [6])]
    # a killed run lost the batches after the first: the rerun sees the same cuts and starts
    assert list(pending_batches(items, 3, lambda x: x < 3)) == [(3, [3, 4, 5]), (6, [6])]
    # a batch finished in part (the batch size changed in between) keeps its start and its unfinished items
    assert list(pending_batches(items, 3, lambda x: x in {0, 4})) == [(0, [1, 2]), (3, [3, 5]), (6, [6])]
    assert list(pending_batches(items, 3, lambda x: True)) == []
    assert list(pending_batches([], 3, lambda x: False)) == []


def _lines_file(tmp_path, lines: list[bytes], name: str = "x.jsonl"):
    p = tmp_path / name
    p.write_bytes(b"".join(lines))
    return p


def test_iter_jsonl_caps_line_length_and_names_file_and_line(tmp_path):
    cap = 64
    ok = b'{"a": "' + b"x" * (cap - 9) + b'"}'  # exactly `cap` bytes: read
    assert len(ok) == cap
    long = b'{"a": "' + b"y" * 5000 + b'"}'
    p = _lines_file(tmp_path, [ok + b"\n", long + b"\n", b'{"b": 2}\r\n', ok + b"\r\n", b'{"c": 3}'])
    with pytest.raises(DataError, match=r"x\.jsonl:2: .*longer than 64 bytes"):
        list(iter_jsonl(p, max_line_bytes=cap))
    errors: list[str] = []
    got = list(iter_jsonl(p, on_error="skip", errors=errors, max_line_bytes=cap))
    # the over-long line is skipped whole: the next lines keep their numbers (CRLF at the cap too)
    assert [n for n, _ in got] == [1, 3, 4, 5] and got[1][1] == {"b": 2} and got[3][1] == {"c": 3}
    assert len(errors) == 1 and errors[0].startswith(f"{p}:2:")
    # an over-long last line without a newline, and one longer than the skip chunk
    p2 = _lines_file(tmp_path, [b'{"b": 2}\n', b"z" * (3 << 20)], "tail.jsonl")
    errors = []
    assert [n for n, _ in iter_jsonl(p2, on_error="skip", errors=errors, max_line_bytes=cap)] == [1]
    assert errors[0].startswith(f"{p2}:2:")
    with pytest.raises(ValueError, match="max_line_bytes"):
        list(iter_jsonl(p2, max_line_bytes=0))



def test_atomic_and_appended_outputs_share_one_file_mode(tmp_path):
    """manifest.json / results.* / resolved_config.yaml (atomic writes) used to be 0600 while predictions.jsonl
    (appended) was 0644: the outputs of one run now all get the mode a plain open() gives."""
    import os
    import stat

    from awarl.config import load_config, save_resolved
    from awarl.io import append_jsonl, atomic_write_json

    atomic_write_json(tmp_path / "manifest.json", {"a": 1})
    append_jsonl(tmp_path / "predictions.jsonl", [{"id": 1}])
    save_resolved(load_config(None, []), tmp_path)
    with open(tmp_path / "plain.txt", "w") as f:
        f.write("x")
    modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in tmp_path.iterdir()}
    assert len(set(modes.values())) == 1, modes
    umask = os.umask(0)
    os.umask(umask)
    assert modes["manifest.json"] == 0o666 & ~umask
