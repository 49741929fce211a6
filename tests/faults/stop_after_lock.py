"""The `awarl` command line, stopped (SIGSTOP) the moment it holds a given output lock: a real awarl process
paused with its lock held, for the concurrency tests (tests/test_locks.py). The test then starts a second
command on the same output, and continues (SIGCONT) or kills (SIGKILL) this one.

Usage: python tests/faults/stop_after_lock.py LOCK_FILE awarl-arguments...

Only the private acquire step of awarl.locks is wrapped; everything else is the unchanged command.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from awarl import locks
from awarl.cli import main

_acquire = locks._acquire
TARGET = Path(sys.argv[1]).absolute()


def _acquire_then_stop(path: Path, *args, **kwargs):
    f = _acquire(path, *args, **kwargs)
    if path.absolute() == TARGET:
        os.kill(os.getpid(), signal.SIGSTOP)
    return f


if __name__ == "__main__":
    locks._acquire = _acquire_then_stop
    sys.argv = ["awarl", *sys.argv[2:]]
    sys.exit(main(sys.argv[1:]))
