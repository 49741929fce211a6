"""What the command line says when the system, not the input, stops a command: one line naming the path and
what to do, never a traceback (a traceback is for bugs; `-v` shows it anyway).

The one place these are handled is `awarl.cli.main`: it turns an OSError (a full disk, a file-size limit, a
read-only or forbidden output, a folder gone), an error of a library that wraps one (torch's checkpoint writer,
safetensors), and an OverflowError into `describe(...)`, and SIGTERM into SystemExit so that every cleanup a
command has (temporary folders, locks) runs.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import signal
from pathlib import Path
from typing import Any

# What to do, by errno (the message names the path before it); {rerun} is how to continue (`resume_advice`).
_ADVICE = {
    errno.ENOSPC: "no space left on the device: free some space or write elsewhere, then {rerun} (finished work "
                  "is kept)",
    errno.EDQUOT: "disk quota exceeded: free some space or write elsewhere, then {rerun}",
    errno.EFBIG: "file too large for the file-size limit (`ulimit -f`) or the filesystem: raise the limit or "
                 "write elsewhere, then {rerun}",
    errno.EROFS: "read-only filesystem: point the output (--out, run.out_dir, AWARL_CACHE, HOME) at a writable "
                 "folder",
    errno.EACCES: "permission denied: make it writable (readable) for this user, or choose another path",
    errno.EPERM: "operation not permitted: choose another path",
    errno.ENOENT: "no such file or folder",
    errno.EMFILE: "too many open files: raise `ulimit -n`",
    errno.ENOMEM: "out of memory",
}
# Libraries that report a failed write in their own words: safetensors (Rust's io error, with its code), torch's
# checkpoint writer (no code: a failed write there is a full disk or a file-size limit).
_RUST_CODE = re.compile(r"Os \{ code: (\d+)|\(os error (\d+)\)")
_TORCH_WRITE = ("PytorchStreamWriter failed writing file", "file write failed", "unexpected pos")


def os_error_in(e: BaseException, where: str | None = None) -> OSError | None:
    """The OSError behind `e`: itself, one in its cause/context chain, or one rebuilt from a library's message
    that carries an errno (safetensors) or can only mean a failed write (torch's writer, whose cause is told
    from the state of `where`, the command's output: a full disk or the file-size limit)."""
    seen = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno is not None:
            return cur
        text = str(cur)
        if (m := _RUST_CODE.search(text)) is not None:
            code = int(m.group(1) or m.group(2))
            return OSError(code, os.strerror(code))
        if any(t in text for t in _TORCH_WRITE):
            return _failed_write(where)
        cur = cur.__cause__ or cur.__context__
    return None


def _failed_write(where: str | None) -> OSError:
    """A write a library reported without its errno: ENOSPC when the output's disk is (nearly) full, EFBIG
    when a file-size limit is set, else EIO."""
    probe = Path(where) if where else None
    while probe is not None and not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe is not None and shutil.disk_usage(probe).free < (1 << 20):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    return OSError(errno.EIO, "a write failed")


def describe(e: OSError, where: str | None = None, rerun: str = "rerun the same command") -> str:
    """One line: the path (the error's own, else the command's output `where`), what happened, what to do
    (`rerun`: how to continue once the cause is fixed)."""
    paths = [p for p in (e.filename, e.filename2) if isinstance(p, (str, bytes, os.PathLike))]
    advice = _ADVICE.get(e.errno or -1, e.strerror or str(e)).format(rerun=rerun)
    if paths:
        return f"{' -> '.join(os.fsdecode(p) for p in paths)}: {advice}"
    return f"writing under {where}: {advice}" if where else advice


def output_of(args: Any) -> str | None:
    """Where the command writes: its --out, else the config's output of `train` (run.out_dir) and `estimate`
    (estimate.out); None when it cannot be told."""
    if getattr(args, "out", None):
        return str(args.out)
    if args.command in ("train", "estimate"):
        from awarl.commands.common import config_from_args
        from awarl.data.estimates import estimates_path

        try:
            cfg = config_from_args(args)
        except Exception:  # noqa: BLE001 - a message's detail only
            return None
        return cfg.run.out_dir if args.command == "train" else str(estimates_path(cfg.estimate.out, cfg.run.out_dir))
    return None


def overflow(e: OverflowError) -> str:
    return (f"a number is out of range ({e}); check the numbers in the config and on the command line "
            "(timeouts, seeds, sizes)")


def missing_cwd() -> str | None:
    """A message when the working folder is gone (deleted or moved under the shell), else None: every relative
    path would fail with a bare `[Errno 2]` naming no file."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return (f"the current folder {os.environ.get('PWD', '(unknown)')} no longer exists (deleted or moved); "
                "cd to an existing folder and rerun")
    return None


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread (`terminate_as_exit`)."""


def terminate_as_exit() -> None:
    """SIGTERM (a scheduler, `kill`, `timeout`) raises Terminated (exit 143) in the main thread instead of ending
    the process at once, so `finally` blocks and `except BaseException` cleanups run (a killed `from-gguf` left
    its `.gguf-*` folder behind, a killed run its lock file)."""
    def handler(signum: int, frame: Any) -> None:
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def resume_advice(args: Any) -> str:
    """What to run to continue an interrupted command: the same command, but for a training run that has a
    complete checkpoint and was started without --resume, the same command with `--resume` (without it the
    rerun is refused: it would train from step 0 over the run)."""
    if args.command == "train" and not getattr(args, "dry_run", False) and not getattr(args, "resume", None):
        from awarl.commands.common import config_from_args
        from awarl.locks import command_line
        from awarl.training.checkpoints import newest_complete

        try:
            ckpt = newest_complete(config_from_args(args).run.out_dir)
        except Exception:  # noqa: BLE001 - advice only: the plain rerun is the fallback
            ckpt = None
        if ckpt is not None:
            return f"continue from {ckpt.name} with: {command_line()} --resume"
    if args.command in ("eval", "estimate", "train", "demo", "demo-real", "sweep"):
        return "rerun the same command to resume"
    return "rerun the same command"
