"""`python -m awarl.upstream`: probe every shim against the installed libraries (run it after an upgrade).
Exits 1 when a shape changed."""

from __future__ import annotations

import sys

from awarl.upstream import report


def main() -> int:
    rows = report()
    bad = 0
    for s, version, status in rows:
        bad += status not in ("ok",) and not status.startswith("skipped")
        print(f"{s.name:28} {s.dist + ' ' + version:26} checked {s.checked:24} {status}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
