"""A registry of one choice of the run (dataset formats, citation judges, reward strategies, ...): name ->
where the implementation lives ("package.module:attr") and a one-line description.

The names are known without importing any implementation (the target is imported on first `load`), so
`awarl.config` builds its allowed values from them without importing torch, httpx or vLLM. The config's
Literal, the CLI's choices and help, the generated docs/config.md and the dispatch all read this one table;
the registries themselves are in `awarl.choices` (docs/extending.md).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

T = TypeVar("T")

_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]*\Z")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
_DATA_FILE = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[\w.\-/]+\Z")  # relative, no `..`


@dataclass(frozen=True)
class Entry:
    name: str
    target: str  # "package.module:attr" (attr may be dotted: "module:Class.method"), or a file under data/
    description: str


class Registry:
    """The entries of one choice, in the order they are listed (and tried, where order matters: format
    detection). `extras`: values the config accepts that no implementation stands behind (`auto`, `none`),
    listed first, with their descriptions. `data_files`: the targets are files under data/ (the shipped dev
    samples), not code."""

    def __init__(self, what: str, key: str, contract: str, extras: Mapping[str, str] | None = None, *,
                 data_files: bool = False) -> None:
        self.what = what          # "dataset format"
        self.key = key            # the config key(s) it fills, e.g. "critic.judge"
        self.contract = contract  # what a target must be, in words (docs/extending.md)
        self.extras = dict(extras or {})
        self.data_files = data_files
        self._entries: dict[str, Entry] = {}
        self._loaded: dict[str, object] = {}

    def add(self, name: str, target: str, description: str) -> None:
        """Register `name`: the one line a new implementation adds (in awarl/choices.py)."""
        if not _NAME.match(name):
            raise ValueError(f"{self.what} name {name!r}: use lowercase letters, digits, '_' or '-'")
        if name in self._entries or name in self.extras:
            raise ValueError(f"{self.what} {name!r} is registered already ({self.key})")
        if not (_DATA_FILE if self.data_files else _TARGET).match(target):
            form = "a relative path under data/" if self.data_files else "'package.module:attr'"
            raise ValueError(f"{self.what} {name!r}: target {target!r} must be {form}")
        if not description.strip():
            raise ValueError(f"{self.what} {name!r}: needs a description (it goes to --help and docs/config.md)")
        self._entries[name] = Entry(name, target, " ".join(description.split()))

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names (no extras), in registry order."""
        return tuple(self._entries)

    @property
    def choices(self) -> tuple[str, ...]:
        """What the config accepts: the extras, then the registered names."""
        return (*self.extras, *self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise ValueError(self.unknown(name))
        return self._entries[name]

    def unknown(self, name: object) -> str:
        """The one-line error of a name that is not registered."""
        return f"{self.key}: unknown {self.what} {name!r}; choose one of {', '.join(self.choices)}"

    @overload
    def load(self, name: str) -> object: ...

    @overload
    def load(self, name: str, kind: type[T]) -> T: ...

    def load(self, name: str, kind: type[T] | None = None) -> object:
        """The implementation registered as `name`, imported on first use (cached). `kind`: what the registry's
        targets are (`DataFormat`, `Strategy`, `JudgeKind`, ...): the target is checked to be one, and typed so."""
        obj = self._load(name)
        if kind is not None and not isinstance(obj, kind):
            raise TypeError(f"{self.key}: {self.what} {name!r} is registered as {self.entry(name).target!r}, which is "
                            f"a {type(obj).__name__}, not a {kind.__name__} ({self.contract})")
        return obj

    def _load(self, name: str) -> object:
        if self.data_files:
            raise TypeError(f"{self.key}: the {self.what} registry holds data files, not code: use entry(name).target")
        if name not in self._loaded:
            entry = self.entry(name)
            module, _, attr = entry.target.partition(":")
            try:
                obj: Any = importlib.import_module(module)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as e:
                raise ImportError(f"{self.key}: {self.what} {name!r} is registered as {entry.target!r}, which "
                                  f"cannot be loaded: {e}") from e
            self._loaded[name] = obj
        return self._loaded[name]

    def describe(self, *, extras: bool = True) -> str:
        """`a`: what a is; `b`: what b is (for field descriptions and --help)."""
        items = [*(self.extras.items() if extras else ()), *((e.name, e.description) for e in self)]
        return "; ".join(f"`{name}`: {desc}" for name, desc in items)

    def literal(self, *, extras: bool = True) -> Any:
        """`Literal[...]` of the choices (with the extras) or of the names: a config field's type."""
        return literal_of(*(self.choices if extras else self.names))


def literal_of(*values: str) -> Any:
    """`Literal[values]` built at run time (a config field's allowed values from a registry's names)."""
    if not values:
        raise ValueError("a Literal needs at least one value")
    return Literal[values]  # Literal[("a", "b")] is Literal["a", "b"]
