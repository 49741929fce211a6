"""docs/config.md, generated from the config's own field descriptions: every section, key, type, default.

    python -m awarl.config_docs            # rewrite docs/config.md
    python -m awarl.config_docs --check    # exit 1 when docs/config.md is stale (the test suite checks it)
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from awarl.choices import ALL as REGISTRIES
from awarl.config import REGISTERED_KEYS, AwarlConfig, section_model
from awarl.io import atomic_write_text, repo_root
from awarl.registry import Registry

HEADER = """# Configuration reference

Generated from the field descriptions in `awarl/config.py` by `python -m awarl.config_docs`; do not edit by
hand (`tests/test_config_docs.py` fails when this file is stale). Every key can be set in a YAML file under
`configs/` (files may `extends:` one another) or on the command line as a dotted override, e.g.
`reward.gamma=0.25`; unknown keys are errors. Precedence, lowest first: defaults, the config file, a
command's own flags (e.g. `awarl eval --index D` is `retrieval.index_dir=D`), then `KEY=VALUE` overrides in
order. Defaults marked (R) are our reconstruction of constants the AWA-RL paper does not publish
([method](method.md)). Every run saves its resolved config as `resolved_config.yaml`;
`awarl config show --config C.yaml [KEY=VALUE ...]` prints it before a run, each key with the file and line,
`extends:` parent, override or default that set it.

Every YAML file awarl reads (configs, sweep files, templates, override values) is read within bounds, each
breach a one-line error naming the file, line and column: at most 32 levels of nesting and 100,000 values
with YAML aliases expanded (anchors and `<<:` merges work; an "alias bomb" of a few lines that expands to
billions of values is refused at once), no key twice in one mapping (`duplicate key 'topk' (first at line
2)`), and `extends:` a file name or a list of them. An integer key takes integers only: `true`, `3.0` or
`0.0` for `retrieval.topk` is refused, not read as a number.
"""


def type_name(annotation: Any) -> str:
    """A short, readable name of a field's type (`int | None`, `one of: a, b`, `list[(float, float)]`)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is typing.Annotated:  # a tagged union's branch, or a bounded type: its bounds are printed with it
        return type_name(args[0]) + "".join(_bounds_of(m) for m in args[1:])
    if origin is Literal:
        return "one of: " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin in (list, tuple):
        inner = ", ".join(type_name(a) for a in args if a is not Ellipsis)
        return f"list[{inner}]" if origin is list else f"({inner})"
    if origin is dict:
        return f"mapping {type_name(args[0])} -> {type_name(args[1])}" if args else "mapping"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


def _bounds_of(*metadata: Any) -> str:
    parts = [f"{sym} {getattr(m, key)}" for m in metadata for key, sym in _BOUNDS.items()
             if getattr(m, key, None) is not None]
    for m in metadata:  # Field(ge=..., lt=...) inside Annotated keeps its bounds in its own metadata
        parts += [f"{sym} {getattr(x, key)}" for x in getattr(m, "metadata", ()) for key, sym in _BOUNDS.items()
                  if getattr(x, key, None) is not None]
    return f" ({', '.join(parts)})" if parts else ""


def bounds_text(field: Any) -> str:
    """The numeric range a field is validated against, e.g. ` (≥ 0, < 1)`."""
    return _bounds_of(*field.metadata)


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        if isinstance(field.annotation, type):  # a section: its own table follows
            return "(section)"
        value = value.model_dump()  # one branch of a union (reward.refusal_warmup's mapping)
    if isinstance(value, enum.Enum):
        value = value.value
    return "`" + json.dumps(value, ensure_ascii=False, default=str) + "`"


def field_rows(model: type[BaseModel]) -> list[str]:
    """One table row per field of a config model: key, type (with bounds), default, description."""
    rows = []
    for name, field in model.model_fields.items():
        desc = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}` | {type_name(field.annotation) + bounds_text(field)} | {default_text(field)} | {desc} |")
    return rows


def render_section(model: type[BaseModel], path: str, out: list[str]) -> None:
    """One table per section; sub-sections (and lists of them, like data.train) follow as their own."""
    doc = " ".join((model.__dict__.get("__doc__") or "").split())
    out.append(f"\n## `{path}`\n")
    if doc:
        out.append(doc + "\n")
    out.append("| key | type | default | description |\n|---|---|---|---|")
    out.extend(field_rows(model))
    nested: list[tuple[type[BaseModel], str]] = []
    for name, field in model.model_fields.items():
        sub = section_model(field.annotation)
        if sub is not None:
            suffix = "[]" if get_origin(field.annotation) is list else ""
            nested.append((sub, f"{path}.{name}{suffix}"))
    for sub, sub_path in nested:
        render_section(sub, sub_path, out)


CHOICES_HEADER = """
## Registered choices

The values of the keys below come from one registry each, in `awarl/choices.py` (name, implementation,
description); the config's allowed values, `--help` and this page are generated from it, and the code
dispatches through it. [extending.md](extending.md) says how to add one (a new file and one registry line).
"""


def render_registry(reg: Registry, out: list[str]) -> None:
    keys = [k for k, r in REGISTERED_KEYS.items() if r is reg] or [reg.key]
    out.append(f"\n### {reg.what}: {', '.join(f'`{k}`' for k in keys)}\n")
    out.append(f"An implementation is {reg.contract}.\n")
    out.append("| value | description | implementation |\n|---|---|---|")
    for name, desc in reg.extras.items():
        out.append(f"| `{name}` | {desc} | (none) |")
    for e in reg:
        target = f"`data/{e.target}`" if reg.data_files else f"`{e.target}`"
        out.append(f"| `{e.name}` | {e.description.replace('|', chr(92) + '|')} | {target} |")
    for e in reg:
        model = reg.options_model(e.name) if e.options else None
        if model is not None:
            out.append(f"\n#### `{reg.options_key}.{e.name}`: the settings of `{e.name}` (`{e.options}`)\n")
            out.append("| key | type | default | description |\n|---|---|---|---|")
            out.extend(field_rows(model))


def render_config_markdown() -> str:
    out = [HEADER]
    for name, field in AwarlConfig.model_fields.items():
        section = section_model(field.annotation)
        assert section is not None, f"AwarlConfig.{name} is not a section"  # every top-level key is one
        render_section(section, name, out)
    out.append(CHOICES_HEADER)
    for reg in REGISTRIES:
        render_registry(reg, out)
    return "\n".join(out).rstrip() + "\n"


def docs_path() -> Path:
    return repo_root() / "docs" / "config.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m awarl.config_docs", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when docs/config.md is stale")
    args = p.parse_args(argv)
    text, path = render_config_markdown(), docs_path()
    if args.check:
        stale = not path.is_file() or path.read_text(encoding="utf-8") != text
        print(f"{path}: {'stale: run python -m awarl.config_docs' if stale else 'up to date'}")
        return 1 if stale else 0
    atomic_write_text(path, text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
