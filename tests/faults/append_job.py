"""A writer for the fault-injection tests (tests/test_fault_injection.py): appends numbered batches to a JSONL
file with awarl.io.append_jsonl until it is killed, going on after the last complete batch on a rerun.

Usage: python tests/faults/append_job.py FILE ROWS_PER_BATCH ROW_BYTES

Every row carries its batch number and the batch's size, so a reader can tell a whole batch from part of one.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from awarl.io import append_jsonl, finish_interrupted_append


def main() -> int:
    path, rows, size = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    finish_interrupted_append(path)
    last = -1
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                last = max(last, json.loads(line)["batch"])
    batch = last + 1
    pad = "x" * size
    while True:
        append_jsonl(path, [{"batch": batch, "row": i, "of": rows, "pad": pad} for i in range(rows)])
        batch += 1


if __name__ == "__main__":
    sys.exit(main())
