"""House rules that no linter checks (docs/training.md "Tests"): a function short enough to read on one screen,
and the type check over the whole package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from awarl.io import repo_root

MAX_FUNCTION_LINES = 80  # decorators, signature, docstring and body


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (n lines)` of every function or method under `root` longer than `limit` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = (node.end_lineno or node.lineno) - start + 1
                if n > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_in_the_package_is_over_80_lines():
    """`_train` (94 lines) mixed the algorithm with resume, finished-run checks, LoRA merge and CPU forcing; the
    recipe now reads top to bottom (awarl/stages/train.py) and run management has its own module."""
    assert long_functions(repo_root() / "awarl") == []


def test_the_rule_counts_a_long_function_and_not_a_short_one(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    def body(n: int) -> str:
        return "".join(f"    x{i} = {i}\n" for i in range(n))

    # 80 lines (the limit) and 81 (its decorator counted): only the second is named, at its `def` line
    (pkg / "m.py").write_text(f"def short():\n{body(79)}\n\n@staticmethod\ndef long():\n{body(79)}",
                              encoding="utf-8")
    assert long_functions(pkg) == ["pkg/m.py:84 long (81 lines)"]


def test_mypy_checks_the_whole_package_the_scripts_and_the_benchmarks():
    """mypy covered 76 of the package's files: config.py, cli.py, commands/, upstream/, most of retrieval/ and
    models/ went unchecked (46 errors there, some real: the Retriever protocol lacked the meta load_index set)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (pyproject allows 3.10)
    mypy = tomllib.loads((repo_root() / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert sorted(mypy["files"]) == ["awarl", "benchmarks", "scripts"]
    strict = {m for o in mypy.get("overrides", []) if o.get("disallow_any_generics") for m in o["module"]}
    assert {"awarl.rewards.*", "awarl.critic.*", "awarl.data.*", "awarl.metrics"} <= strict
