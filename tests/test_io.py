"""awarl.io helpers of resumable jobs."""

from __future__ import annotations

import json

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


def test_repair_torn_tail_completes_a_whole_last_row_and_cuts_a_torn_one(tmp_path):
    """A last row that lacks only its newline used to be cut like a torn one: a resumed `awarl estimate` had
    already counted it done (iter_jsonl reads it), so append_jsonl's repair lost it for good."""
    from awarl.io import append_jsonl, repair_torn_tail

    p = _lines_file(tmp_path, [b'{"a": 1}\n', b'{"b": 2}'])  # rows joined with "\n", none at the end
    assert repair_torn_tail(p) == 0 and p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert repair_torn_tail(p) == 0 and p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'  # whole: left alone
    append_jsonl(p, [{"c": 3}])
    assert [row for _, row in iter_jsonl(p)] == [{"a": 1}, {"b": 2}, {"c": 3}]
    # the only line, with a BOM and a CR (a file saved on Windows): a whole row too
    bom = _lines_file(tmp_path, [b'\xef\xbb\xbf{"a": 1}\r'], "bom.jsonl")
    assert repair_torn_tail(bom) == 0 and bom.read_bytes() == b'\xef\xbb\xbf{"a": 1}\r\n'
    # torn rows (no closing brace, cut inside a string or a multi-byte character) and non-objects are cut
    for tail in (b'{"b": 2', b'{"b": "x', '{"b": "é'.encode()[:-1], b"[1, 2]", b"   "):
        t = _lines_file(tmp_path, [b'{"a": 1}\n', tail], "torn.jsonl")
        assert repair_torn_tail(t) == len(tail) and t.read_bytes() == b'{"a": 1}\n', tail


def test_finish_interrupted_append_leaves_a_sibling_files_journals_alone(tmp_path):
    """The journal of `x.jsonl.append-5` (`.x.jsonl.append-5.append-0`) was taken as x.jsonl's own: x.jsonl was
    cut to 0 and overwritten with the sibling's batch. Its journal's temp file was deleted too."""
    from awarl import io

    p, q = tmp_path / "x.jsonl", tmp_path / "x.jsonl.append-5"
    io.append_jsonl(p, [{"keep": 1}, {"keep": 2}])
    sibling = io._append_journal(q, 0)
    io.atomic_write_bytes(sibling, b'{"other": 1}\n')  # q's interrupted append
    sibling_tmp = tmp_path / f".{sibling.name}.abc123_x.tmp"  # q's journal, its own write cut
    sibling_tmp.write_bytes(b"{")
    own_tmp = tmp_path / f".{io._append_journal(p, 0).name}.abc123_x.tmp"
    own_tmp.write_bytes(b"{")
    assert io.finish_interrupted_append(p) == 0
    assert p.read_bytes() == b'{"keep": 1}\n{"keep": 2}\n'
    assert sibling.read_bytes() == b'{"other": 1}\n' and sibling_tmp.exists() and not own_tmp.exists()
    # the sibling's own resume still finds and completes its batch
    assert io.finish_interrupted_append(q) == 1 and q.read_bytes() == b'{"other": 1}\n' and not sibling.exists()


def test_atomic_write_folder_gives_folders_a_folder_mode(tmp_path):
    """Every entry of the folder used to get the file mode (0644): a subfolder lost its x bits and could not be
    entered by its owner (non-root) or anyone."""
    import os
    import stat
    import tempfile

    from awarl.io import FILE_MODE, atomic_write_folder

    umask = os.umask(0)
    os.umask(umask)
    dir_mode = 0o777 & ~umask  # what a plain mkdir gives

    def fill(tmp):
        (tmp / "sub" / "deeper").mkdir(parents=True)
        (tmp / "sub" / "w.bin").write_bytes(b"x")
        fd, private = tempfile.mkstemp(dir=tmp / "sub" / "deeper")  # 0600, as a library's temp-file write
        os.close(fd)
        os.rename(private, tmp / "sub" / "deeper" / "v.bin")
        (tmp / "INFO.json").write_text("{}")

    atomic_write_folder(tmp_path / "model", "INFO.json", fill)
    mode = lambda *parts: stat.S_IMODE(os.stat(tmp_path.joinpath("model", *parts)).st_mode)  # noqa: E731
    assert mode() == mode("sub") == mode("sub", "deeper") == dir_mode and dir_mode & stat.S_IXUSR
    assert mode("INFO.json") == mode("sub", "w.bin") == mode("sub", "deeper", "v.bin") == FILE_MODE
    assert (tmp_path / "model" / "sub" / "w.bin").read_bytes() == b"x"


def test_a_plot_rewrite_cut_short_leaves_the_earlier_picture(tmp_path):
    """compare.png, p_histogram.png, dynamics.png, the sweep's and the simulator's plots were saved in place: an
    interrupted rewrite left a 6-byte file where the good picture was (results.png was already atomic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from awarl.io import save_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    path = save_figure(fig, tmp_path / "compare.png")
    good = path.read_bytes()
    assert good.startswith(b"\x89PNG")

    def cut(target, **kw):
        with open(target, "wb") as f:
            f.write(b"\x89PNG\r\n")
        raise KeyboardInterrupt

    fig.savefig = cut
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, path)
    plt.close(fig)
    assert path.read_bytes() == good and [p.name for p in tmp_path.iterdir()] == ["compare.png"]


def test_kept_json_computes_once_and_recomputes_when_what_it_holds_is_not_what_is_wanted(tmp_path):
    from awarl.io import kept_json

    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"seeds": [0, 1], "value": len(calls)}

    path = tmp_path / "cell.json"
    assert kept_json(path, {"seeds": [0, 1]}, compute) == {"seeds": [0, 1], "value": 1}
    assert kept_json(path, {"seeds": [0, 1]}, compute)["value"] == 1 and len(calls) == 1  # resumed, not rerun
    assert kept_json(path, {"seeds": [0, 1, 2]}, compute)["value"] == 2  # other settings: computed again
    assert json.loads(path.read_text())["value"] == 2
