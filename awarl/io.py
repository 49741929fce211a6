"""Small I/O helpers shared by every stage: atomic writes, JSONL with line-numbered errors, hashing."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from awarl.locks import path_lock

log = logging.getLogger(__name__)


class DataError(ValueError):
    """Bad input data; the message names the file and the line or record index."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# The mode a plain open() gives a new file here. mkstemp creates 0600 files, so without this a run's atomic
# outputs (manifest, results, resolved config) would be private while its appended ones (predictions) are not.
FILE_MODE = 0o666 & ~_umask()
# The mode a plain mkdir() gives a new folder here (mkdtemp creates 0700 ones).
DIR_MODE = 0o777 & ~_umask()


def named(e: OSError, path: str | os.PathLike) -> OSError:
    """`e` with `path` as its file name when it has none (a failed write() names no file: a full disk then says
    "No space left on device" and not where), for the command line's one-line message."""
    if e.filename is not None or e.errno is None:
        return e
    return type(e)(e.errno, e.strerror, os.fspath(path))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write via a temp file in the same folder + rename, so a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise named(e, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def kept_json(path: str | os.PathLike, want: dict, compute: Callable[[], dict]) -> dict:
    """The JSON object at `path` when it holds every key of `want` with that value (a finished piece of a long job:
    a rerun resumes), else `compute()`, written there atomically. The study scripts' per-cell cache."""
    path = Path(path)
    if path.exists():
        done = loads_json(path.read_text(encoding="utf-8"))
        if isinstance(done, dict) and all(done.get(k) == v for k, v in want.items()):
            return done
    out = compute()
    atomic_write_json(path, out)
    return out


def atomic_write_folder(out: str | os.PathLike, marker: str, fill: Callable[[Path], None]) -> None:
    """Write a folder atomically: `fill(tmp)` in a temporary sibling, renamed to `out`, so a kill never leaves
    half a model behind. An existing `out` is replaced only when it is empty or an earlier result of the same
    kind (it holds the file `marker`, which `fill` writes); anything else in it is refused (ValueError), not
    overwritten."""
    out = Path(out)
    with path_lock(out, str(out)):  # one writer: two would each delete the other's result to rename their own
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (out / marker).is_file():
            raise ValueError(f"{out}: exists and holds something else (no {marker}); choose another folder")
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
        try:
            fill(tmp)
            _set_output_modes(tmp)
            if not (tmp / marker).is_file():
                raise RuntimeError(f"{out}: the folder written has no {marker}")
            if out.exists():
                shutil.rmtree(out)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _set_output_modes(folder: Path) -> None:
    """Give everything under `folder` the modes a plain open() / mkdir() would (files FILE_MODE, folders
    DIR_MODE), whatever `fill` wrote them with (mkstemp / mkdtemp make them private). A folder must keep its x
    bits: with a file's mode it could not be entered. Symlinks are left alone: chmod would change their
    target, which may lie outside the folder."""
    os.chmod(folder, DIR_MODE)
    for root, dirs, files in os.walk(folder):  # never descends into a symlinked folder
        for name in dirs + files:
            entry = Path(root) / name
            if not entry.is_symlink():
                os.chmod(entry, DIR_MODE if name in dirs else FILE_MODE)


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 120) -> Path:
    """`fig.savefig` to a temporary sibling, then renamed: an interrupted rewrite leaves the earlier picture
    (an in-place savefig left a 6-byte file where it was). The figure is not closed here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Write rows atomically; returns the row count."""
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Make the file end on a line break, so the next append starts on a fresh line instead of being glued to
    an unterminated last line. A last line that parses as a JSON object is a whole row that lost only its
    newline (a writer stopped just before it, or one that joined its rows with "\n"): the newline is added
    and the row kept, as the readers (`iter_jsonl`) already count it. Anything else is a partial line (a
    writer killed mid-line: a torn row lacks at least its closing brace) and is cut. Returns the number of
    bytes removed (0 when the file is whole, which costs one byte read, or when only a newline was added)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    size = path.stat().st_size
    with open(path, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # Scan back for the last newline in blocks (the torn line can be long: a whole trajectory).
        pos, keep = size, 0
        while pos > 0:
            start = max(0, pos - (1 << 16))
            f.seek(start)
            block = f.read(pos - start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        if size - keep <= MAX_LINE_BYTES + 1:  # a longer line iter_jsonl refuses whatever it holds: not read
            f.seek(keep)
            tail = f.read(size - keep)
            if len(tail.rstrip(b"\r")) <= MAX_LINE_BYTES and _is_json_object(tail, first_line=keep == 0):
                f.seek(size)
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
                log.warning("%s: added the missing newline at the end of its last line (a whole row, %d bytes)",
                            path, size - keep)
                return 0
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    log.warning("%s: removed a partial last line (%d bytes, no newline at its end: its write was cut off)", path,
                size - keep)
    return size - keep


def _is_json_object(raw: bytes, *, first_line: bool = False) -> bool:
    """Whether one line parses as a JSON object, as `iter_jsonl` reads it (a BOM on the first line ignored)."""
    if first_line and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return isinstance(loads_json(raw.decode("utf-8")), dict)
    except ValueError:  # UnicodeDecodeError is a ValueError
        return False


def _append_journal(path: Path, offset: int) -> Path:
    return path.with_name(f".{path.name}.append-{offset}")


def ascii_digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also takes digits `int()` / `float()` refuse or misread, such as "²"
    (a journal's offset, a Retry-After header's seconds)."""
    return text.isascii() and text.isdigit()


def finish_interrupted_append(path: str | os.PathLike) -> int:
    """Complete an `append_jsonl` that a killed process left half done, so the file holds all of that batch's
    rows or, where its journal never got written, none: the file is cut back to where the batch began and the
    journaled batch appended whole. Resumable jobs call it before reading what is done. Returns the rows."""
    path = Path(path)
    head = f".{path.name}.append-"
    prefix = glob.escape(head)
    # A journal's name is `head` and the offset, nothing more: the globs also match the journals of a sibling
    # file whose name extends NAME's (`x.jsonl.append-5`: `.x.jsonl.append-5.append-0`), which must not be
    # taken as NAME's own (NAME would be cut and overwritten with the sibling's batch).
    for stale in path.parent.glob(f".{prefix}*.tmp"):  # a journal whose own write was cut: no append began
        # atomic_write_bytes's temp name: "." + journal name + "." + mkstemp's random part (no dot) + ".tmp"
        offset, *rest = stale.name[len(head) + 1:].split(".")
        if ascii_digits(offset) and len(rest) == 2:
            stale.unlink(missing_ok=True)
    journals = [j for j in path.parent.glob(prefix + "*") if ascii_digits(j.name[len(head):])]
    done = 0
    for journal in sorted(journals, key=lambda j: int(j.name[len(head):])):
        offset = journal.name[len(head):]
        data = journal.read_bytes()
        size = path.stat().st_size if path.exists() else 0
        if size < int(offset):  # the file was rewritten since: the batch cannot be placed, so it is dropped
            log.warning("%s: dropped the batch of an interrupted append (%s): the file is now shorter than "
                        "where that batch began", path, journal.name)
        else:
            with open(path, "r+b" if path.exists() else "wb") as f:
                f.truncate(int(offset))
                f.seek(int(offset))
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            done += data.count(b"\n")
            log.warning("%s: completed the append of a batch of %d rows that a killed run had begun (%d bytes "
                        "of it were in the file)", path, data.count(b"\n"), size - int(offset))
        journal.unlink()
    return done


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Append the rows, all or none, and fsync. The batch is first written whole to a journal next to the file
    (`.NAME.append-OFFSET`, atomically), then appended, then the journal removed: a process killed during the
    append leaves the journal, from which `finish_interrupted_append` (run here first, and by resumable jobs
    before they read) completes the batch. A torn last line from an older writer is cut first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    finish_interrupted_append(path)
    repair_torn_tail(path)
    data = b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in rows)
    if not data:
        return
    journal = _append_journal(path, path.stat().st_size if path.exists() else 0)
    atomic_write_bytes(journal, data)
    try:
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:   # the journal stays: the next reader completes the batch (or cuts it back)
        raise named(e, path) from None
    journal.unlink()


def pending_batches(items: Sequence[Any], size: int, is_done: Callable[[Any], bool]
                    ) -> Iterator[tuple[int, list[Any]]]:
    """(start, unfinished items) of each batch of `size` cut from the WHOLE list, skipping finished batches.

    Resumable jobs append one batch at a time (all or none: `append_jsonl`), so a killed run loses whole
    batches; cutting from the whole list (not from what is left) lets its rerun draw the same batches, so a
    job that seeds a batch by `start` samples what an uninterrupted run would. (Evaluation and estimation
    seed each question by itself, `question_seed`, which holds whatever the batches.)"""
    for start in range(0, len(items), size):
        batch = [x for x in items[start:start + size] if not is_done(x)]
        if batch:
            yield start, batch


def loads_json(raw: str | bytes | bytearray) -> Any:
    """`json.loads` whose every fault is a ValueError: a document nested too deeply for Python's parser (a
    RecursionError otherwise, which no reader's `except ValueError` catches) reads as malformed JSON, so each
    reader turns it into its own one-line error naming the file and line, or the endpoint."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply (more levels than Python's JSON parser takes)") from None


# The longest JSON line iter_jsonl reads. Real records are far shorter (a HotpotQA record with its context
# is ~10 KB, a trajectory ~100 KB); without a cap one runaway line (a file that is not JSON Lines, a
# writer gone wrong) is read whole, and parsing it costs twice its size again before it is rejected.
MAX_LINE_BYTES = 64 << 20
_SKIP_CHUNK = 1 << 20  # the rest of an over-long line is skipped in chunks of this size, never held


def iter_jsonl(path: str | os.PathLike, *, on_error: str = "fail", errors: list[str] | None = None,
               objects_only: bool = True, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed value) of each non-blank JSON line.

    One bad line (not UTF-8, not JSON, too deeply nested, longer than `max_line_bytes` bytes, or - with
    `objects_only` - not a JSON object, such as a truncated last line from a killed writer) never aborts the
    whole file: it raises DataError naming `file:LINE` (on_error="fail") or is recorded in `errors` and
    skipped (on_error="skip"). An over-long line is never held in memory: at most `max_line_bytes` of it are
    read, the rest is skipped, so memory stays bounded whatever the file holds. A UTF-8 byte-order mark on
    the first line (files exported on Windows) is ignored.
    """
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
    with open(path, "rb") as f:
        n = 0
        # + 2: a line of exactly the cap still fits with its "\r\n", so line numbers never drift.
        while raw := f.readline(max_line_bytes + 2):
            n += 1
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                if len(raw.rstrip(b"\r\n")) > max_line_bytes:
                    _skip_rest_of_line(f, raw)
                    raise ValueError(f"line longer than {max_line_bytes} bytes (the max_line_bytes cap)")
                if not raw.strip():
                    continue
                obj = loads_json(raw.decode("utf-8"))
                if objects_only and not isinstance(obj, dict):
                    raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            except ValueError as e:  # UnicodeDecodeError is a ValueError
                msg = f"{path}:{n}: malformed JSON line: {e}"
                if on_error == "fail":
                    raise DataError(msg) from None
                if errors is not None:
                    errors.append(msg)
                continue
            yield n, obj


def _skip_rest_of_line(f: Any, head: bytes) -> None:
    """Advance `f` past the end of the line whose first bytes were `head`."""
    if head.endswith(b"\n"):
        return
    while chunk := f.readline(_SKIP_CHUNK):
        if chunk.endswith(b"\n"):
            return


def canonical_sha256(obj: Any) -> str:
    """sha256 of plain data as canonical JSON (sorted keys): the same data, the same hash, whatever the key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


SAMPLE_BLOCK = 64 << 10
SAMPLE_BLOCKS = 16


def file_sample_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's size and of 16 blocks of 64 KiB spread evenly over it (first and last included; the
    whole file when it is no larger): a fingerprint that costs about a megabyte read whatever the size, so
    it can be checked at every load where a full hash of a multi-GB file could not. It tells a file from
    another one (another build, a truncation, a copy cut short) unless the two agree on every sampled block."""
    size = os.path.getsize(path)
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= SAMPLE_BLOCK * SAMPLE_BLOCKS:
            h.update(f.read())
        else:
            step = (size - SAMPLE_BLOCK) / (SAMPLE_BLOCKS - 1)
            for i in range(SAMPLE_BLOCKS):
                f.seek(int(i * step))
                h.update(f.read(SAMPLE_BLOCK))
    return h.hexdigest()


def repo_root() -> Path:
    """The source checkout (where data/ and configs/ live)."""
    return Path(__file__).resolve().parent.parent


def shipped_data_dir() -> Path:
    """Folder of the shipped real data samples; AWARL_DATA_DIR overrides it."""
    return Path(os.environ.get("AWARL_DATA_DIR") or repo_root() / "data")
