"""One writer per output: an advisory lock (`fcntl.flock`) on a lock file that names its holder.

Every command that writes a run folder or a cache entry takes the lock of that output first. A second process
asking for the same output is refused with one line naming the holder (pid, host, since when, its command
line), or, for a cache entry (`wait=True`: the default index, a converted model), waits for the holder and then
uses what it made. The kernel drops a flock when its process dies, however it dies, so the lock of a killed
run is simply taken over (and the take-over logged); nothing has to guess whether a pid is still alive.

Two places for the lock file:

- `folder_lock(FOLDER)`: `FOLDER/.awarl.lock`, for a folder written in place (an eval, estimate or training
  run, a demo, a sweep). While it is held no other awarl process writes there, so the temporaries a killed
  atomic write left in the folder (`.NAME.<random>.tmp`) are swept when it is taken.
- `path_lock(PATH)`: `PARENT/.NAME.lock`, for a file, or for a folder that is built aside and renamed into
  place (an index, a converted model): a lock file inside it would be swapped away with the old folder.

The lock is reentrant within a process (a demo holds its folder and its training stage asks for the same one)
and is released, its file removed, when the outermost holder leaves. A lock file is removed only by the
process that holds it; a process that opened the old file just before is told by the file's inode that it
locked a removed file and tries again. A filesystem that cannot lock (some network mounts) is used
unlocked, with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LOCK_NAME = ".awarl.lock"
# How often a waiting process (wait=True) says whom it waits for.
WAIT_LOG_S = 60.0
_POLL_S = 0.2


class OutputInUse(ValueError):
    """Another process holds the output's lock; the message names it and says what to do, in one line."""


_held: dict[str, list[Any]] = {}   # lock file (absolute) -> [open file, depth]
_guard = threading.Lock()


def command_line() -> str:
    """This process's command line as a user would type it (`awarl eval ...` for `python -m awarl.cli eval`)."""
    argv = list(sys.argv)
    if argv and (argv[0].endswith(os.path.join("awarl", "cli.py")) or Path(argv[0]).name == "awarl"):
        argv[0] = "awarl"
    return shlex.join(argv)[:500]


def _holder_record() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command_line()}


def _describe(record: dict[str, Any] | None) -> str:
    if not record:
        return "another process (it has not written its name yet)"
    return (f"process {record.get('pid')} on {record.get('host')} since {record.get('started')}: "
            f"{record.get('command')}")


def _read_record(f: Any) -> dict[str, Any] | None:
    try:
        f.seek(0)
        data = json.loads(f.read() or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _flock(fd: int, flags: int) -> None:
    fcntl.flock(fd, flags)


def _try_lock(path: Path) -> tuple[Any, dict[str, Any] | None, bool]:
    """(open file, the record it held before, locked) for one attempt; the file is open either way."""
    while True:
        f = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for as long as the lock
        try:
            _flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return f, _read_record(f), False
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                log.warning("%s: this filesystem cannot lock (%s); going on without the lock, so another run "
                            "on this output would not be refused", path, e.strerror)
                return f, None, True
            f.close()
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return f, _read_record(f), True
        f.close()  # locked a file its holder removed on release: lock the current one instead


def _acquire(path: Path, what: str, wait: bool, remedy: str) -> Any:
    waited_since, said = time.monotonic(), 0.0
    while True:
        f, before, locked = _try_lock(path)
        if locked:
            break
        f.close()
        if not wait:
            raise OutputInUse(f"{what} is in use by {_describe(before)}; wait for it to finish or stop it "
                              f"({remedy})")
        if time.monotonic() - waited_since >= said:
            log.info("%s is being written by %s; waiting for it to finish", what, _describe(before))
            said += WAIT_LOG_S
        time.sleep(_POLL_S)
    if before and before.get("pid") != os.getpid():
        log.warning("%s: took over the lock of %s (that process is gone)", what, _describe(before))
    f.seek(0)
    f.truncate()
    f.write(json.dumps(_holder_record()))
    f.flush()
    return f


@contextmanager
def _locked(lock_file: Path, what: str, *, wait: bool, remedy: str) -> Iterator[bool]:
    """Hold `lock_file` (reentrant in this process); yields True for the outermost holder."""
    key = str(lock_file.absolute())
    with _guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
    if entry is not None:
        try:
            yield False
        finally:
            with _guard:
                entry[1] -= 1
        return
    f = _acquire(lock_file, what, wait, remedy)
    entry = [f, 1]
    with _guard:
        _held[key] = entry
    try:
        yield True
    finally:
        with _guard:
            entry[1] -= 1
            last = entry[1] == 0
            if last:
                del _held[key]
        if last:
            with suppress(OSError):
                lock_file.unlink(missing_ok=True)  # while still holding it: a new holder locks a new file
            f.close()


@contextmanager
def folder_lock(folder: str | os.PathLike, what: str | None = None, *,
                remedy: str = "or use another output folder") -> Iterator[Path]:
    """Hold `folder` (created if missing) for this process: `FOLDER/.awarl.lock`. Refuses (OutputInUse) when
    another process holds it. Taking it sweeps the folder's stale atomic-write temporaries. A folder this
    call created and that is left empty is removed on release, so a run refused before it wrote anything
    leaves no empty output folder behind."""
    folder = Path(folder)
    created = []   # the folders this call makes, deepest first
    probe = folder.absolute()
    while not probe.exists() and probe != probe.parent:
        created.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with _locked(folder / LOCK_NAME, what or str(folder), wait=False, remedy=remedy) as outermost:
            if outermost:
                sweep_temporaries(folder)
            yield folder
    finally:
        for made in created:
            try:
                made.rmdir()  # only if empty
            except OSError:
                break


@contextmanager
def path_lock(path: str | os.PathLike, what: str | None = None, *, wait: bool = False,
              remedy: str = "or choose another output", companions: tuple[str, ...] = ()) -> Iterator[Path]:
    """Hold the output `path` (a file, or a folder renamed into place) through `PARENT/.NAME.lock`. `wait`:
    wait for another holder (a cache entry it is making) instead of refusing. Taking it sweeps the
    atomic-write temporaries of `path` and of the sibling files named in `companions` (its records)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_name(f".{path.name}.lock"), what or str(path), wait=wait, remedy=remedy) as outermost:
        if outermost:
            sweep_temporaries(path.parent, names=(path.name, *companions))
        yield path


def lock_holder(lock_file: str | os.PathLike) -> dict[str, Any] | None:
    """The record of a live holder of `lock_file`, or None when nobody holds it (tests, messages)."""
    try:
        f = open(lock_file, encoding="utf-8")  # noqa: SIM115
    except FileNotFoundError:
        return None
    with f:
        try:
            _flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_record(f) or {}
        _flock(f.fileno(), fcntl.LOCK_UN)
        return None


def is_held_here(path: str | os.PathLike) -> bool:
    """Whether this process holds the `path_lock` of `path`."""
    path = Path(path)
    with _guard:
        return str(path.with_name(f".{path.name}.lock").absolute()) in _held


def is_atomic_temporary(name: str) -> bool:
    """Whether `name` is a temporary of `awarl.io.atomic_write_bytes` (`.NAME.<8 random>.tmp`) or of
    `save_figure` (`.NAME.tmp.EXT`)."""
    if not name.startswith("."):
        return False
    if name.endswith(".tmp"):
        stem = name[1:-4]
        base, _, rand = stem.rpartition(".")
        return bool(base) and len(rand) == 8 and rand.replace("_", "").isalnum()
    base, _, ext = name[1:].rpartition(".")
    return base.endswith(".tmp") and bool(ext) and "." not in ext


def _temporary_of(name: str, names: tuple[str, ...]) -> bool:
    return any(name.startswith(f".{n}.") and is_atomic_temporary(name) for n in names)


def sweep_temporaries(folder: Path, names: tuple[str, ...] | None = None) -> list[str]:
    """Remove the atomic-write temporaries a killed process left at the top of `folder` (its holder is gone:
    the caller holds the lock of the folder, or of the files `names`, whose temporaries alone are then
    removed). Returns their names."""
    removed = []
    for entry in folder.iterdir():
        if (is_atomic_temporary(entry.name) if names is None else _temporary_of(entry.name, names)) \
                and entry.is_file():
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    if removed:
        log.warning("%s: removed %d temporary file(s) a killed write left behind (%s)", folder, len(removed),
                    ", ".join(removed[:5]))
    return removed


def is_main_process() -> bool:
    """Whether this is the process of a launch that takes the locks (rank 0, or no launcher at all): the other
    ranks of a multi-process training run write into the folder their rank 0 holds."""
    return os.environ.get("RANK", "0") == "0"
