"""House rules that no linter checks (docs/training.md "Tests"): a function short enough to read on one screen,
the type check over the whole package, and no module that imports itself through others."""

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


def import_edges(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, every import counted (module level, inside a function, under
    TYPE_CHECKING): each is a dependency a reader follows, and a circle of them has no floor to start from."""
    pkg = root.name
    files = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}

    def module_of(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom)
                     and node.level == 0 and node.module else [a.name for a in node.names]
                     if isinstance(node, ast.Import) else [])
            for n in names:
                target = module_of(n) if n.split(".")[0] == pkg else None
                if target and target != mod:
                    edges[mod].add(target)
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_of_the_package_imports_itself_through_others():
    """Registries that named their kinds' classes made 55 modules one circle (the config imports the registries,
    the kinds import the config); a bm25 kind beside its search imported its build, which imported it back."""
    assert import_circles(import_edges(repo_root() / "awarl")) == []


def test_the_circle_rule_finds_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    assert import_circles(import_edges(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]
