"""What every pre-registered study script shares (round 8 on; rounds 2-7 keep their own copies, frozen with their
results): the protocol's commit, which the results record, and a refusal to run an uncommitted protocol; from round
10 on, the loader of earlier rounds' scripts (rounds 8 and 9 keep their own copy, frozen)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
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


def load_script(name: str):  # noqa: ANN201 - a module
    """scripts/NAME.py as a module registered under NAME (the process pool pickles its functions by that name);
    loaded once. Round 10 on load earlier rounds through this instead of a copy of the loader."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, repo_root() / "scripts" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]
