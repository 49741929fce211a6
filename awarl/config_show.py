"""`awarl config show`: the resolved config, one key a line, each with where its value came from.

A key's origin is the config file that set it (with the line), an `extends:` parent of it, a command-line
`KEY=VALUE` override, or the default. The config is resolved and validated by `load_config`, as every command
does (so a bad key or override is the same one-line error), and the origins are the ones it keeps for its own
error messages (`read_config_yaml`, `claim_overrides`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from awarl.config import Origins, claim_overrides, load_config, read_config_yaml, yaml_key_lines

OriginKind = Literal["file", "extends", "override", "default"]

# Values longer than this do not push every origin comment further right (they carry their own).
VALUE_COLUMN_MAX = 48


@dataclass(frozen=True)
class Setting:
    key: str                       # dotted, e.g. reward.gamma
    value: Any                     # as the resolved config dumps it (JSON types)
    origin: OriginKind
    file: Path | None = None       # origin file / extends: the file that set it
    line: int | None = None        # its line there, when known
    override: str | None = None    # origin override: the KEY=VALUE that set it


def _flat(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(key path, value) of every leaf of the dumped config; lists and empty mappings are leaves."""
    if isinstance(data, dict) and data:
        return [leaf for k, v in data.items() for leaf in _flat(v, (*prefix, str(k)))]
    return [(prefix, data)]


def _section_holds(value: Any, rest: tuple[str, ...]) -> bool:
    """Whether an override's value (a section) holds the key path `rest`."""
    for part in rest:
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def _origin(key: tuple[str, ...], files: Origins, root: Path | None,
            claimed: dict[tuple[str, ...], tuple[str, Any]], lines: dict[Path, dict[tuple[str, ...], int]]
            ) -> tuple[OriginKind, Path | None, int | None, str | None]:
    for n in range(len(key), 0, -1):   # the override that set the key or its nearest section
        if key[:n] in claimed:
            text, value = claimed[key[:n]]
            if _section_holds(value, key[n:]):
                return "override", None, None, text
            return "default", None, None, None   # the section was replaced without this key
    path = files.get(key)
    if path is None:
        return "default", None, None, None
    if path not in lines:
        lines[path] = yaml_key_lines(path)
    return ("file" if path == root else "extends"), path, lines[path].get(key), None


def resolve_with_origins(path: str | os.PathLike | None, overrides: list[str]) -> list[Setting]:
    """Every key of the resolved config, in the config's order, with its origin. Raises ConfigError as
    load_config does."""
    cfg = load_config(path, overrides)
    files: Origins = {}
    root = Path(path).resolve() if path else None
    if path:
        read_config_yaml(Path(path), origins=files)
    claimed = claim_overrides(files, overrides)
    lines: dict[Path, dict[tuple[str, ...], int]] = {}
    out = []
    for key, value in _flat(cfg.model_dump(mode="json")):
        origin, file, line, override = _origin(key, files, root, claimed, lines)
        out.append(Setting(".".join(key), value, origin, file, line, override))
    return out


# ------------------------------------------------------------------------------------------ output
def _shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is under it, else whole."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _origin_words(s: Setting) -> str:
    if s.origin == "override":
        return f"override {s.override}"
    if s.file is None:
        return "default"
    where = _shown_path(s.file) + (f":{s.line}" if s.line else "")
    return where if s.origin == "file" else f"{where} (extends)"


def _flow(value: Any) -> str:
    """One value as YAML on one line (`0.5`, `null`, `[a, b]`, `{k: 1}`)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), sort_keys=False).strip()
    return text.removesuffix("\n...").strip()


def render_yaml(settings: list[Setting]) -> str:
    """`key: value   # origin`, one key a line, values and comments aligned."""
    rows = [(f"{s.key}:", _flow(s.value), _origin_words(s)) for s in settings]
    key_w = max((len(k) for k, _, _ in rows), default=0)
    value_w = min(max((len(v) for _, v, _ in rows), default=0), VALUE_COLUMN_MAX)
    return "\n".join(f"{k:<{key_w}} {v:<{value_w}}  # {o}" for k, v, o in rows)


def render_json(settings: list[Setting], path: str | os.PathLike | None, overrides: list[str]) -> str:
    """{"config", "overrides", "keys": {key: {value, origin[, file, line][, override]}}}."""
    keys: dict[str, dict[str, Any]] = {}
    for s in settings:
        entry: dict[str, Any] = {"value": s.value, "origin": s.origin}
        if s.file is not None:
            entry.update(file=str(s.file), line=s.line)
        if s.override is not None:
            entry["override"] = s.override
        keys[s.key] = entry
    return json.dumps({"config": str(path) if path else None, "overrides": list(overrides), "keys": keys},
                      indent=2, ensure_ascii=False)
