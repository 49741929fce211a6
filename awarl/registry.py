"""A registry of one choice of the run (dataset formats, citation judges, reward strategies, ...): name ->
where the implementation lives ("package.module:attr") and a one-line description.

The names are known without importing any implementation (the target is imported on first `load`), so
`awarl.config` builds its allowed values from them without importing torch, httpx or vLLM. The config's
Literal, the CLI's choices and help, the generated docs/config.md and the dispatch all read this one table;
the registries themselves are in `awarl.choices` (docs/extending.md). An implementation with settings of its
own names their model (`options=`), validated under the registry's `options_key` (`critic.options.NAME`).
Plug-ins outside awarl register the same way from their own modules, named in $AWARL_PLUGINS (`load_plugins`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ValidationError

T = TypeVar("T")

_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]*\Z")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
_DATA_FILE = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[\w.\-/]+\Z")  # relative, no `..`


@dataclass(frozen=True)
class Entry:
    name: str
    target: str  # "package.module:attr" (attr may be dotted: "module:Class.method"), or a file under data/
    description: str
    options: str | None = None  # "package.module:Model": the pydantic model of its own settings, if any


class Registry:
    """The entries of one choice, in the order they are listed (and tried, where order matters: format
    detection). `extras`: values the config accepts that no implementation stands behind (`auto`, `none`),
    listed first, with their descriptions. `data_files`: the targets are files under data/ (the shipped dev
    samples), not code."""

    def __init__(self, what: str, key: str, contract: str, extras: Mapping[str, str] | None = None, *,
                 data_files: bool = False, options_key: str | None = None) -> None:
        self.what = what          # "dataset format"
        self.key = key            # the config key(s) it fills, e.g. "critic.judge"
        self.contract = contract  # what a target must be, in words (docs/extending.md)
        self.extras = dict(extras or {})
        self.data_files = data_files
        self.options_key = options_key  # the config key of its implementations' own settings ("critic.options")
        self._entries: dict[str, Entry] = {}
        self._loaded: dict[str, object] = {}

    def add(self, name: str, target: str, description: str, *, options: str | None = None) -> None:
        """Register `name`: the one line a new implementation adds (in awarl/choices.py, or a plug-in's module).
        `options`: "package.module:Model", the pydantic model of its settings (`{options_key}.NAME.KEY`)."""
        if not _NAME.match(name):
            raise ValueError(f"{self.what} name {name!r}: use lowercase letters, digits, '_' or '-'")
        if name in self._entries or name in self.extras:
            raise ValueError(f"{self.what} {name!r} is registered already ({self.key})")
        if not (_DATA_FILE if self.data_files else _TARGET).match(target):
            form = "a relative path under data/" if self.data_files else "'package.module:attr'"
            raise ValueError(f"{self.what} {name!r}: target {target!r} must be {form}")
        if not description.strip():
            raise ValueError(f"{self.what} {name!r}: needs a description (it goes to --help and docs/config.md)")
        if options is not None and (self.options_key is None or not _TARGET.match(options)):
            raise ValueError(f"{self.what} {name!r}: options {options!r} must be 'package.module:Model'"
                             if self.options_key else f"{self.what} {name!r}: a {self.what} has no settings of "
                             f"its own ({self.key})")
        self._entries[name] = Entry(name, target, " ".join(description.split()), options)

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
            self._loaded[name] = self._import(name, self.entry(name).target)
        return self._loaded[name]

    def _import(self, name: str, target: str) -> object:
        module, _, attr = target.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise ImportError(f"{self.key}: {self.what} {name!r} is registered as {target!r}, which cannot be "
                              f"loaded: {e}") from e
        return obj

    def options_model(self, name: str) -> type[BaseModel] | None:
        """The model of `name`'s own settings (None when it has none), imported on first use."""
        target = self.entry(name).options
        if target is None:
            return None
        model = self._import(name, target)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{self.key}: the options of {self.what} {name!r} ({target!r}) are not a pydantic model")
        return model

    def validate_options(self, options: Mapping[str, Any], selected: str | None) -> dict[str, dict[str, Any]]:
        """`{options_key}` validated: each key a registered name with settings of its own, each value what its
        model makes of it (defaults filled in); the selected implementation's defaults added when absent, so a
        run's resolved config records them. ValueError naming `NAME.KEY` and what is wrong."""
        out: dict[str, dict[str, Any]] = {}
        with_options = [e.name for e in self if e.options]
        for name in [*options, *([selected] if selected in with_options and selected not in options else [])]:
            model = self.options_model(name) if name in self else None
            if model is None:
                raise ValueError(f"{name!r} is no {self.what} with settings of its own; those that have some: "
                                 f"{', '.join(with_options) or 'none'}")
            try:
                out[name] = model.model_validate(options.get(name) or {}).model_dump(mode="json")
            except ValidationError as e:
                raise ValueError("; ".join(f"{name}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                                           for err in e.errors())) from None
        return out

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


PLUGINS_ENV = "AWARL_PLUGINS"


def load_plugins(spec: str) -> list[str]:
    """Import the plug-in modules of `spec` ($AWARL_PLUGINS: module names, comma-separated), each of which adds
    its registry lines (`from awarl.choices import JUDGES; JUDGES.add(...)`), so that a judge, backend, format,
    strategy or reading of a package outside awarl is a choice like the shipped ones (the config, --help and
    docs/config.md list it) without editing awarl. Returns the modules imported."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            raise ImportError(f"{PLUGINS_ENV}: {name!r} is not a module name (modules, comma-separated)")
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"{PLUGINS_ENV}: the plug-in module {name!r} cannot be imported: {e}") from e
    return names
