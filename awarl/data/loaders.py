"""Read any supported dataset file into `QAExample`s: format detection, record errors, seeded subsampling.

The container is detected from the bytes (parquet magic, a JSON array, or JSON Lines), independently of
the record format, so e.g. a FlashRAG file saved as a JSON array still loads. Record locations in error
messages are `file:LINE` for JSON Lines and `file: record INDEX` (0-based) for JSON arrays and parquet.
JSON Lines are read with `awarl.io.iter_jsonl`'s line-length cap; a parquet file that pyarrow cannot read
(truncated, corrupt, not parquet) is a DataError naming the file.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awarl.choices import DEV_SETS, FORMATS
from awarl.data.formats import DataFormat, RecordError
from awarl.data.types import QAExample
from awarl.io import DataError, iter_jsonl, loads_json, shipped_data_dir

log = logging.getLogger(__name__)

# The shipped dev samples (awarl.choices.DEV_SETS), relative to `awarl.io.shipped_data_dir()`.
SHIPPED_DEV: dict[str, str] = {e.name: e.target for e in DEV_SETS}
# Other shipped samples (not evaluation sets of the paper, but handy for tests and demos).
SHIPPED_OTHER: dict[str, str] = {
    "flashrag-nq": "flashrag/nq_test17.jsonl",
    "searchr1-train": "searchr1/train_sample512_nq_hotpotqa.parquet",
}

_HEAD_BYTES = 1 << 20  # enough for the first record of every official file we know


# Why an answerable record without a gold answer is refused where answers are needed (evaluation, p_i
# estimation, training): no prediction can match it, so it counts as a wrong answer or abstention and
# drives its p_i to 0.
NO_ANSWER = ("no gold answer (no answer and no aliases): an answerable question without one can never be "
             "scored correct and drives its p_i to 0; fix the record, skip it (on_error=skip), or load an "
             "unlabeled test split with require_answers=False (awarl data prepare --allow-no-answers)")


@dataclass
class LoadResult:
    examples: list[QAExample]
    skipped: list[str] = field(default_factory=list)  # one message per skipped record, with its location
    format: str = ""
    path: str = ""
    # one message per kept record whose malformed optional metadata (context, supporting facts, evidences,
    # decomposition) was dropped, with its location
    warnings: list[str] = field(default_factory=list)


def _parquet_rows(path: Path, batch_size: int) -> Iterator[dict[str, Any]]:
    """Rows of a parquet file; DataError naming the file when pyarrow cannot read it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        if pf.metadata.num_rows == 0:
            raise DataError(f"{path}: parquet file has no rows")
        for batch in pf.iter_batches(batch_size=batch_size):
            for row in batch.to_pylist():
                yield _json_values(row)
    except (pa.ArrowException, OSError) as e:  # ArrowInvalid (no footer), OSError (corrupt pages), ...
        raise DataError(f"{path}: not a readable parquet file (truncated or corrupt?): {e}") from None


def _json_values(value: Any) -> Any:
    """A parquet row's values as JSON holds them, as a JSON Lines record of the same data would be: a
    timestamp, date or time as its ISO text, bytes as UTF-8 text (hex when not UTF-8), a decimal as a float.
    A kept metadata value that JSON cannot hold failed when the unified file was written, naming no record."""
    if isinstance(value, dict):
        return {k: _json_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_values(v) for v in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _container(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PAR1":
        return "parquet"
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        text = f.read(_HEAD_BYTES)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "jsonl"
    if not stripped:
        raise DataError(f"{path}: file is empty")
    # JSON Lines may open with a value that is no record (`null`, `[]`): that line is an error of its own
    # (skipped with on_error="skip"), not a reason to read the file as something else. A first line that is a
    # whole JSON value with more lines after it is JSON Lines; an array spanning the file is a JSON array.
    first_line, _, rest = stripped.partition("\n")
    if _whole_json(first_line) and (rest.strip() or not stripped.startswith("[")):
        return "jsonl"
    if stripped.startswith("["):
        return "json"
    raise DataError(f"{path}: not parquet, a JSON array or JSON Lines (starts with {stripped[:20]!r})")


def _whole_json(line: str) -> bool:
    try:
        loads_json(line)
    except ValueError:
        return False
    return True


def _first_jsonl_record(path: Path, text: str) -> Any:
    """The first parseable line of the first 100 decides, so a broken line does not block on_error="skip"."""
    first_error = None
    lines = text.split("\n")  # not splitlines(): U+2028 and friends may sit inside a JSON string
    complete = lines if len(text) < _HEAD_BYTES or text.endswith("\n") else lines[:-1]
    for n, line in enumerate(complete[:100], 1):
        if not line.strip():
            continue
        try:
            rec = loads_json(line)
        except ValueError as e:
            first_error = first_error or f"{path}:{n}: not valid JSON: {e}"
            continue
        if isinstance(rec, dict):
            return rec
        first_error = first_error or f"{path}:{n}: expected a JSON object, got {type(rec).__name__}"
    if len(complete) < min(len(lines), 100):
        # A line longer than the head: read on, each line under iter_jsonl's length cap.
        errors: list[str] = []
        for n, rec in iter_jsonl(path, on_error="skip", errors=errors):
            if n > 100:
                break
            return rec
        first_error = first_error or (errors[0] if errors else None)
    raise DataError(first_error or f"{path}: no JSON line in the first 100 lines")


def _first_record(path: Path, container: str) -> Any:
    if container == "parquet":
        return next(_parquet_rows(path, batch_size=1))
    # errors="replace": a bad byte further down must not stop detection; reading the records reports it
    # with its line (JSONL) or fails the whole array with the file named (JSON).
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        text = f.read(_HEAD_BYTES)
    if container == "jsonl":
        return _first_jsonl_record(path, text)
    body = text.lstrip()[1:].lstrip()
    try:
        first = json.JSONDecoder().raw_decode(body)[0]
        if isinstance(first, dict):
            return first
    except (ValueError, RecursionError):
        pass  # the first record is longer than the head (or the file is broken): parse it all
    data = _json_array(path)
    return next((rec for rec in data if isinstance(rec, dict)), data[0] if data else None)


def _json_array(path: Path) -> list[Any]:
    """A whole JSON-array file; DataError naming the file when it is not valid JSON or not an array."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = loads_json(f.read())
    except ValueError as e:
        raise DataError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    return data


def sniff_record(rec: Any) -> str | None:
    """The first registered format (awarl.choices.FORMATS, in order) whose `sniff` accepts this raw record,
    or None when none does."""
    if not isinstance(rec, dict):
        return None
    return next((name for name in FORMATS.names if data_format(name).sniff(rec)), None)


def data_format(name: str) -> DataFormat:
    """The registered format `name` (ValueError naming the choices when there is none)."""
    return FORMATS.load(name, DataFormat)


def detect_format(path: str | os.PathLike[str]) -> str:
    """A registered format's name (awarl.choices.FORMATS), from the file's content (its first record's keys)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {path}")
    container = _container(path)
    rec = _first_record(path, container)
    fmt = sniff_record(rec)
    if fmt is None:
        keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
        raise DataError(f"{path}: cannot detect the dataset format from the first record (keys: {keys}); "
                        f"name it with --format (awarl data), `format:` (a data.train / data.eval entry) "
                        f"or format= (load_examples): one of {', '.join(FORMATS.names)}")
    return fmt


def _records(path: Path, on_error: str, errors: list[str]) -> Iterator[tuple[str, Any]]:
    """Yield (location, raw record)."""
    container = _container(path)
    if container == "parquet":
        for i, row in enumerate(_parquet_rows(path, batch_size=1024)):
            yield f"{path}: record {i}", row
    elif container == "json":
        for i, rec in enumerate(_json_array(path)):
            yield f"{path}: record {i}", rec
    else:
        for n, rec in iter_jsonl(path, on_error=on_error, errors=errors):
            yield f"{path}:{n}", rec


def subsample(items: list[Any], limit: int | None, seed: int) -> list[Any]:
    """A seeded random subset of at most `limit` items, in their original order."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]


def load_examples(path: str | os.PathLike[str], format: str = "auto", dataset: str | None = None,
                  on_error: str = "fail", limit: int | None = None, seed: int = 0,
                  require_answers: bool = True) -> LoadResult:
    """Load a dataset file. `on_error="fail"` raises DataError at the first malformed record (naming the
    file and line / record index); `"skip"` drops it and records the message in `.skipped`.

    A malformed question, id or answer is a malformed record. Malformed optional metadata (a FlashRAG /
    Search-R1 row's context, supporting facts, evidences) is not: the field is dropped, the record kept, and
    the message recorded in `.warnings` (logged once per file with the count). With `require_answers` (the
    default: evaluation, estimation and training need gold answers) an answerable record with no answer and
    no alias is malformed; pass False to load an unlabeled test split (answers stay empty)."""
    path = Path(path)
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {path}")
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise DataError(f"{path}: {FORMATS.unknown(fmt)}")
    spec = data_format(fmt)
    convert = spec.convert
    ds = dataset or spec.dataset(path)
    skipped: list[str] = []
    warnings: list[str] = []
    examples: list[QAExample] = []
    seen: dict[tuple[str, str], str] = {}
    for where, rec in _records(path, on_error, skipped):
        notes: list[str] = []
        try:
            ex = convert(rec, ds, notes)
            key = (ex.dataset, ex.id)
            if key in seen:
                raise RecordError(f"duplicate id {ex.id!r} (first seen at {seen[key]})")
            if require_answers and ex.answerable and not ex.answers:
                raise RecordError(NO_ANSWER)
        except RecordError as e:
            msg = f"{where}: {fmt} record: {e}"
            if on_error == "fail":
                raise DataError(msg) from None
            skipped.append(msg)
            continue
        if notes:
            warnings.append(f"{where}: {fmt} record {ex.id!r}: {'; '.join(notes)}")
        seen[key] = where
        examples.append(ex)
    if skipped:
        log.warning("%s: skipped %d malformed record(s); first: %s", path, len(skipped), skipped[0])
    if warnings:
        log.warning("%s: dropped malformed optional metadata (context, supporting facts, evidences) of %d "
                    "record(s), which keep their question and answers; first: %s", path, len(warnings), warnings[0])
    return LoadResult(examples=subsample(examples, limit, seed), skipped=skipped, format=fmt, path=str(path),
                      warnings=warnings)


def shipped_path(name: str) -> Path:
    """Absolute path of a shipped sample (a SHIPPED_DEV or SHIPPED_OTHER key)."""
    table = {**SHIPPED_DEV, **SHIPPED_OTHER}
    if name not in table:
        raise DataError(f"no shipped sample named {name!r}; choose one of {', '.join(table)}")
    return shipped_data_dir() / table[name]


def load_shipped(dataset: str, limit: int | None = None, seed: int = 0) -> list[QAExample]:
    """Examples of one shipped dev sample (a name of awarl.choices.DEV_SETS)."""
    if dataset not in SHIPPED_DEV:
        raise DataError(f"no shipped dev sample for {dataset!r}; choose one of {', '.join(SHIPPED_DEV)}")
    return load_examples(shipped_path(dataset), dataset=dataset, limit=limit, seed=seed).examples
