"""What every pre-registered study script shares (round 8 on; rounds 2-7 keep their own copies, frozen with their
results): the protocol's commit, which the results record, and a refusal to run an uncommitted protocol."""

from __future__ import annotations

import subprocess
from pathlib import Path

from awarl.io import repo_root


def protocol_commit(script: str | Path) -> str:
    """The last commit of `script` (a study's protocol file); SystemExit when it has uncommitted changes, so that
    results can only name a protocol that git holds, committed before them."""
    root = repo_root()
    rel = str(Path(script).resolve().relative_to(root))
    if subprocess.run(["git", "status", "--porcelain", "--", rel], cwd=root, capture_output=True, text=True,
                      check=True).stdout.strip():
        raise SystemExit(f"{rel} has uncommitted changes: commit the protocol before running the study")
    return subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
