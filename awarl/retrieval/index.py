"""Build, verify and load passage indexes (BM25 or dense), each a folder with `index_meta.json`.

A build streams the corpus once: every passage goes to the docstore and, in chunks, to the kind's builder;
the corpus sha256 is computed on the same pass. It writes into a temporary sibling folder and renames it
into place at the end, so an interrupted build never leaves something that looks like an index (and two
processes racing to build the same index both end up using one complete copy).

Loading checks the meta against the files (missing files, passage counts, docstore size) and, when the
corpus is still at its recorded path, its size and hash, and refuses anything inconsistent.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import re
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from awarl.io import DataError, atomic_write_json, file_sample_sha256, file_sha256, loads_json
from awarl.locks import path_lock
from awarl.retrieval.docstore import DOCSTORE_FILE, OFFSETS_FILE, CorpusReader, Docstore, DocstoreWriter
from awarl.retrieval.passage_ids import POLICIES, SeenIds
from awarl.retrieval.types import IndexRetriever, Retriever

if TYPE_CHECKING:
    from awarl.config import RetrievalConfig

log = logging.getLogger(__name__)

META_FILE = "index_meta.json"
FORMAT_VERSION = 1
KINDS = ("bm25", "dense")


class IndexBuilder(Protocol):
    """What an index kind builds from the streamed corpus (BM25Builder, DenseBuilder): passages in chunks, then
    its files in the build folder, returning the settings it used (index_meta.json)."""

    def add(self, texts: Iterable[str]) -> None: ...

    def finish(self, out_dir: Path) -> dict[str, Any]: ...


class RetrievalIndexError(DataError):
    """An index folder is missing, incomplete, corrupt, or does not match its corpus."""


DENSE_ONLY = ("model", "hnsw", "batch_size", "device", "query_prefix", "passage_prefix", "index_type", "nlist",
              "pq_m", "nprobe", "train_size")
BM25_ONLY = ("k1", "b", "stemmer", "stopwords", "method", "chunk_size", "memory_mb")


def _make_builder(kind: str, settings: dict[str, Any], show_progress: bool, work_dir: Path) -> tuple[IndexBuilder, int]:
    """(builder, chunk size in passages)."""
    settings = dict(settings)
    if kind == "bm25":
        from awarl.retrieval.bm25_build import DEFAULT_MEMORY_MB, BM25Builder

        chunk = int(settings.pop("chunk_size", 10_000))
        for unused in DENSE_ONLY:
            settings.pop(unused, None)
        if settings.get("memory_mb") is None:
            settings["memory_mb"] = DEFAULT_MEMORY_MB
        return BM25Builder(show_progress=show_progress, work_dir=work_dir, **settings), chunk
    if kind == "dense":
        from awarl.retrieval.dense import DenseBuilder

        for unused in BM25_ONLY:
            settings.pop(unused, None)
        if settings.get("model") is None:
            settings.pop("model", None)
        builder = DenseBuilder(**settings)
        # a few encoder batches per chunk keeps the GPU busy without holding many texts
        return builder, builder.settings["batch_size"] * 16
    raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")


def build_index(corpus_path: str | os.PathLike, kind: str, out_dir: str | os.PathLike, *,
                overwrite: bool = False, show_progress: bool = True, duplicate_ids: str = "fail",
                wait: bool = False, **settings: Any) -> Path:
    """Build a `kind` ("bm25" | "dense") index of the corpus JSONL into `out_dir`; returns `out_dir`.

    duplicate_ids: "fail" (a repeated passage id is a DataError naming both lines) or "keep_first" (later
    passages with a seen id are left out, counted in the meta's `duplicate_ids` and logged).

    settings: bm25: k1, b, method, stopwords ("en"|"none"), stemmer ("s"|"snowball"|"none"), memory_mb (the
    build's memory target, default 2048); dense: model, query_prefix, passage_prefix, index_type
    ("flat"|"hnsw"|"ivfpq"), hnsw, hnsw_m, ef_construction, ef_search, nlist, pq_m, nprobe, train_size,
    batch_size, device. Raises DataError (naming file:line) on a malformed corpus line. `wait`: another process
    building this index is waited for (an index built on first use), not refused (OutputInUse).
    """
    corpus_path, out_dir = Path(corpus_path), Path(out_dir)
    if kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    if not corpus_path.is_file():
        raise FileNotFoundError(f"corpus not found: {corpus_path}")
    if out_dir.exists() and not out_dir.is_dir():
        raise RetrievalIndexError(f"{out_dir} is a file, not an index folder; choose another --out")
    if corpus_path.resolve().is_relative_to(out_dir.resolve()):
        # an --overwrite would swap the folder out, corpus and all, and the index would point at nothing
        raise RetrievalIndexError(f"the corpus {corpus_path} is inside --out {out_dir}; build the index into "
                                  "a folder of its own")
    # One builder per index folder (awarl.locks): `wait` (an index built on first use) waits for another
    # process building it and then takes its copy; otherwise a second build is refused, naming the first.
    with path_lock(out_dir, f"index {out_dir}", wait=wait, remedy="or choose another --out"):
        if wait and not overwrite and (out_dir / META_FILE).is_file():
            log.info("index %s was built by another process meanwhile; using it", out_dir)
            return out_dir
        return _build_locked(corpus_path, kind, out_dir, overwrite=overwrite, show_progress=show_progress,
                             duplicate_ids=duplicate_ids, settings=settings)


def _build_locked(corpus_path: Path, kind: str, out_dir: Path, *, overwrite: bool, show_progress: bool,
                  duplicate_ids: str, settings: dict[str, Any]) -> Path:
    """`build_index` once the index folder's lock is held."""
    from awarl import __version__

    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise RetrievalIndexError(f"{out_dir} already exists and is not empty; pass overwrite=True "
                                      "(--overwrite) to replace it")
        if not (out_dir / META_FILE).is_file():
            raise RetrievalIndexError(f"{out_dir} holds no {META_FILE}: it is not an index, and --overwrite "
                                      "replaces an index only (the whole folder is deleted); choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(out_dir)
    tmp = out_dir.with_name(f"{_build_prefix(out_dir)}{_HOST}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    t0 = time.time()
    try:
        builder, chunk_size = _make_builder(kind, settings, show_progress, tmp / ".shards")
        reader = CorpusReader(corpus_path)
        duplicates = _Duplicates(corpus_path, duplicate_ids)
        count, store_bytes = _stream(reader, builder, DocstoreWriter(tmp), chunk_size, kind, show_progress,
                                     duplicates)
        if count == 0:
            raise DataError(f"{corpus_path}: corpus has no passages")
        if duplicates.dropped:
            log.warning("%s: left out %d passage(s) whose id repeats an earlier one (duplicate_ids=keep_first; "
                        "first: %s)", corpus_path, duplicates.dropped, ", ".join(duplicates.examples))
        used = builder.finish(tmp)
        build_id = uuid.uuid4().hex
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": kind,
            "build_id": build_id,
            "corpus": str(corpus_path.resolve()),
            "corpus_sha256": reader.sha256,
            "corpus_bytes": reader.bytes_read,
            "passage_count": count,
            "duplicate_ids": duplicates.meta(),
            "docstore_bytes": store_bytes,
            "settings": used,
            "awarl_version": __version__,
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "build_seconds": round(time.time() - t0, 3),
        }
        if kind == "bm25":
            from awarl.retrieval.bm25_build import BM25Builder

            assert isinstance(builder, BM25Builder)
            meta["build"] = {"memory_mb": builder.memory_mb, "shards": builder.shards_written}
        meta["files"] = build_files(tmp)
        atomic_write_json(tmp / META_FILE, meta)  # the mode of a plain open() (awarl.io.FILE_MODE): shareable
        _move_into_place(tmp, out_dir, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("built %s index of %d passages in %s (%.1fs)", kind, count, out_dir, time.time() - t0)
    return out_dir


def build_files(folder: Path) -> dict[str, dict[str, Any]]:
    """Each file of a finished build (but the meta): its size, sha256 and sampled sha256 (`file_sample_sha256`),
    recorded in the meta under the build's id so that `index info` (every byte) and every load (the samples)
    refuse a folder put together from two builds: the same corpus built twice with other settings gives files
    of the same names, and often of the same sizes, that search differently. (The files themselves keep
    their formats: bm25s refuses a params file with a key it does not know, and .npy headers take none.)"""
    return {f.name: {"bytes": f.stat().st_size, "sha256": file_sha256(f), "sample_sha256": file_sample_sha256(f)}
            for f in sorted(folder.iterdir()) if f.is_file() and f.name != META_FILE}


def check_build_files(index_dir: Path, meta: dict[str, Any], *, full: bool) -> None:
    """RetrievalIndexError unless every file the build recorded is the one it wrote (size and sampled hash;
    with `full`, the sha256 of every byte). A meta without the record (an index built before awarl kept it)
    is not checked."""
    files, build_id = meta.get("files"), meta.get("build_id")
    if not isinstance(files, dict) or not build_id:
        return
    for name, rec in files.items():
        path = index_dir / name
        if not path.is_file():
            raise RetrievalIndexError(f"{index_dir}: index is incomplete, missing {name}; rebuild it")
        got = path.stat().st_size
        if got != rec.get("bytes") or file_sample_sha256(path) != rec.get("sample_sha256") or (
                full and file_sha256(path) != rec.get("sha256")):
            what = f"{got} bytes, the build wrote {rec.get('bytes')}" if got != rec.get("bytes") else \
                "its contents differ from what the build wrote"
            raise RetrievalIndexError(f"{path}: not the file of this index's build {build_id[:12]} ({what}): a "
                                      "folder put together from two builds, or a damaged file; rebuild the index")


def _stream(reader: CorpusReader, builder: IndexBuilder, store: DocstoreWriter, chunk_size: int, kind: str,
            show_progress: bool, duplicates: _Duplicates) -> tuple[int, int]:
    """Read the corpus once into the docstore and, chunk by chunk, the builder, leaving out repeated ids
    (`duplicates`); (passages, docstore bytes)."""
    from tqdm import tqdm

    chunk: list[tuple[str, str, int]] = []
    with tqdm(total=reader.path.stat().st_size, unit="B", unit_scale=True, desc=f"index {kind}",
              disable=not show_progress, mininterval=1.0) as bar:
        seen = 0
        for pid, contents in reader:
            chunk.append((pid, contents, reader.line))
            if len(chunk) >= chunk_size:
                _add_chunk(chunk, builder, store, duplicates)
                chunk = []
                bar.update(reader.bytes_read - seen)
                seen = reader.bytes_read
                bar.set_postfix(passages=store.count, refresh=False)
        if chunk:
            _add_chunk(chunk, builder, store, duplicates)
        bar.update(reader.bytes_read - seen)
        bar.set_postfix(passages=store.count)
    return store.close()


class _Duplicates:
    """Repeated passage ids of one build: refused (`fail`, naming both lines) or left out and counted."""

    def __init__(self, corpus: Path, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"duplicate_ids must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.corpus, self.policy = corpus, policy
        self.seen = SeenIds()
        self.dropped = 0
        self.examples: list[str] = []   # the first few, as `id (line N)`

    def keep(self, pid: str, line: int, repeat: bool) -> bool:
        if not repeat:
            return True
        if self.policy == "fail":
            first = _first_line(self.corpus, pid, before=line)
            if first is None:   # two ids with one 64-bit hash: not a repeat
                return True
            raise DataError(f"{self.corpus}:{line}: duplicate passage id {pid!r} (first at line {first}); "
                            "ids must be unique (--duplicate-ids keep-first keeps the first and counts the rest)")
        self.dropped += 1
        if len(self.examples) < 5:
            self.examples.append(f"{pid} (line {line})")
        return False

    def meta(self) -> dict[str, Any]:
        return {"policy": self.policy, "dropped": self.dropped, "examples": self.examples}


def _add_chunk(chunk: list[tuple[str, str, int]], builder: IndexBuilder, store: DocstoreWriter,
               duplicates: _Duplicates) -> None:
    repeats = duplicates.seen.add([pid for pid, _, _ in chunk])
    kept = []
    for (pid, contents, line), repeat in zip(chunk, repeats, strict=True):
        if duplicates.keep(pid, line, bool(repeat)):
            store.add(pid, contents)
            kept.append(contents)
    if kept:
        builder.add(kept)


def _first_line(corpus: Path, pid: str, before: int) -> int | None:
    """The first line before `before` whose id is `pid` (one more pass over the corpus, on the error path)."""
    reader = CorpusReader(corpus)
    for other, _ in reader:
        if reader.line >= before:
            return None
        if other == pid:
            return reader.line
    return None


# ----------------------------------------------------------------------------- build folders, swap
_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"


def _build_prefix(out_dir: Path) -> str:
    return f".{out_dir.name}.building-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_builds(out_dir: Path) -> list[Path]:
    """Remove the temporary folders that killed builds of `out_dir` left (`.NAME.building-HOST-PID`, and the
    older `.NAME.building-PID`) when their process is no longer running on this host, and the old copies
    an interrupted `--overwrite` swap left (`.NAME.replaced-HOST-PID`); logs each one. Folders of builds
    still running, or of other hosts (a shared filesystem), are left alone."""
    removed = []
    for prefix in (_build_prefix(out_dir), f".{out_dir.name}.replaced-"):
        for path in out_dir.parent.glob(glob.escape(prefix) + "*"):
            tag = path.name[len(prefix):]
            host, _, pid = tag.rpartition("-")
            if not pid.isdigit() or host not in ("", _HOST) or (int(pid) == os.getpid() and host == _HOST):
                continue
            if _pid_alive(int(pid)):
                continue
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            shutil.rmtree(path, ignore_errors=True)
            log.warning("removed %s, left by a build that did not finish (process %s is gone; %.1f MB)", path,
                        pid, size / 1e6)
            removed.append(path)
    return removed


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def _move_into_place(tmp: Path, out_dir: Path, overwrite: bool) -> None:
    """Rename the finished build to `out_dir`. With overwrite, the old index is swapped out in one atomic
    step (or, where that is unsupported, renamed aside first), and deleted only once the new one is in
    place: at every instant `out_dir` is a complete index, old or new."""
    if overwrite and out_dir.exists() and any(out_dir.iterdir()):
        if _exchange(tmp, out_dir):
            shutil.rmtree(tmp, ignore_errors=True)  # now the old index
            return
        aside = out_dir.with_name(f".{out_dir.name}.replaced-{_HOST}-{os.getpid()}")
        os.rename(out_dir, aside)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            os.rename(aside, out_dir)  # put the old index back rather than leave none
            raise
        shutil.rmtree(aside, ignore_errors=True)
        return
    try:
        os.rename(tmp, out_dir)  # replaces an empty folder
    except OSError:
        if (out_dir / META_FILE).is_file():  # another process finished the same build first
            log.info("index %s was built concurrently; using that copy", out_dir)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise


def read_meta(index_dir: str | os.PathLike) -> dict[str, Any]:
    index_dir = Path(index_dir)
    path = index_dir / META_FILE
    if not index_dir.is_dir():
        raise RetrievalIndexError(f"index folder not found: {index_dir}")
    if not path.is_file():
        raise RetrievalIndexError(f"{index_dir}: no {META_FILE}; not an index, or its build did not "
                                  "finish (rebuild with `awarl index build`)")
    try:
        meta = loads_json(path.read_text())
    except ValueError as e:
        raise RetrievalIndexError(f"{path}: corrupt meta file: {e}") from None
    for key in ("kind", "passage_count", "docstore_bytes", "settings", "corpus_sha256"):
        if key not in meta:
            raise RetrievalIndexError(f"{path}: missing key {key!r}")
    if meta["kind"] not in KINDS:
        raise RetrievalIndexError(f"{path}: unknown kind {meta['kind']!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise RetrievalIndexError(f"{path}: index format {meta.get('format_version')} but this awarl reads "
                                  f"format {FORMAT_VERSION}; rebuild the index")
    return meta


def verify_index(index_dir: str | os.PathLike, *, verify_corpus: bool = True, deep: bool = True
                 ) -> dict[str, Any]:
    """Check an index folder against its meta; returns the meta or raises RetrievalIndexError.

    deep: also open the BM25 arrays and vocabulary / the faiss index and check them against each other and
    the meta, as loading does (so `awarl index info` finds what `awarl serve` would refuse). load_index
    passes deep=False because opening the index does the same checks."""
    import numpy as np

    index_dir = Path(index_dir)
    meta = read_meta(index_dir)
    n = int(meta["passage_count"])
    kind_files: tuple[str, ...]
    if meta["kind"] == "bm25":
        from awarl.retrieval.bm25 import BM25_FILES

        kind_files = BM25_FILES
    else:
        from awarl.retrieval.dense import FAISS_FILE

        kind_files = (FAISS_FILE,)
    missing = [f for f in (DOCSTORE_FILE, OFFSETS_FILE, *kind_files) if not (index_dir / f).is_file()]
    if missing:
        raise RetrievalIndexError(f"{index_dir}: index is incomplete, missing {', '.join(missing)}; rebuild it")
    try:
        offsets = np.load(index_dir / OFFSETS_FILE, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise RetrievalIndexError(f"{index_dir / OFFSETS_FILE}: unreadable: {e}") from None
    if len(offsets) != n + 1:
        raise RetrievalIndexError(f"{index_dir}: meta says {n} passages but the docstore offsets table has "
                                  f"{len(offsets) - 1}")
    size = (index_dir / DOCSTORE_FILE).stat().st_size
    if size != int(meta["docstore_bytes"]) or int(offsets[-1]) != size:
        raise RetrievalIndexError(f"{index_dir / DOCSTORE_FILE}: {size} bytes, expected "
                                  f"{meta['docstore_bytes']}; the docstore was modified or truncated")
    if meta["kind"] == "bm25":
        from awarl.retrieval.bm25 import read_bm25_num_docs

        try:
            got = read_bm25_num_docs(index_dir)
        except (ValueError, KeyError, TypeError) as e:
            raise RetrievalIndexError(f"{index_dir}: unreadable BM25 params: {e}") from None
        if got != n:
            raise RetrievalIndexError(f"{index_dir}: meta says {n} passages but the BM25 index has {got}")
    if deep:
        _open_kind(index_dir, meta, mmap=True, workers=1, device="cpu")   # no docstore: the files only
        check_build_files(index_dir, meta, full=True)   # after opening them, whose messages say more
    corpus = Path(meta.get("corpus") or "")
    if verify_corpus and meta.get("corpus") and corpus.is_file() and (
            corpus.stat().st_size != meta.get("corpus_bytes") or file_sha256(corpus) != meta["corpus_sha256"]):
        raise RetrievalIndexError(f"{index_dir}: corpus {corpus} changed since the index was built "
                                  "(sha256 differs); rebuild the index")
    return meta


def _open_kind(index_dir: Path, meta: dict[str, Any], *, mmap: bool, workers: int, device: str | None,
               docstore: Docstore | None = None) -> Any:
    """The BM25 or dense retriever of a verified folder (or, without a docstore, just its checked index
    files); unreadable or inconsistent files raise RetrievalIndexError naming the folder."""
    if meta["kind"] == "bm25":
        from awarl.retrieval.bm25 import BM25Retriever, load_bm25_arrays, load_bm25_vocab

        try:
            if docstore is None:
                _, _, indptr, _ = load_bm25_arrays(index_dir, mmap=True)
                load_bm25_vocab(index_dir, len(indptr) - 1)
                return None
            return BM25Retriever(index_dir, meta["settings"], docstore, mmap=mmap, workers=workers)
        except (ValueError, OSError, KeyError, TypeError) as e:  # truncated .npy, corrupt vocab/params JSON
            raise RetrievalIndexError(f"{index_dir}: the BM25 index files are unreadable ({type(e).__name__}: "
                                      f"{str(e)[:300]}); rebuild the index") from None
    from awarl.retrieval.dense import FAISS_FILE, DenseRetriever, read_faiss

    try:
        index = read_faiss(index_dir, mmap=mmap)
    except RuntimeError as e:  # faiss reports a truncated or corrupt file as RuntimeError
        raise RetrievalIndexError(f"{index_dir / FAISS_FILE}: unreadable faiss index ({str(e)[:300]}); "
                                  "rebuild the index") from None
    if index.ntotal != meta["passage_count"]:
        raise RetrievalIndexError(f"{index_dir}: meta says {meta['passage_count']} passages but the faiss "
                                  f"index has {index.ntotal}")
    if docstore is None:
        return None
    return DenseRetriever(index_dir, meta["settings"], docstore, index=index, device=device)


MMAP_AUTO_BYTES = 1 << 30  # retrieval.mmap=auto memory-maps indexes whose arrays are larger than this


def index_bytes(index_dir: Path) -> int:
    """Bytes of the arrays searching loads (BM25 arrays or the faiss file)."""
    return sum(p.stat().st_size for p in index_dir.glob("*.index*") if p.is_file())


def load_index(index_dir: str | os.PathLike, *, verify_corpus: bool = True, device: str | None = None,
               mmap: bool | str | None = "auto", workers: int = 1) -> IndexRetriever:
    """Verify and open an index folder as a Retriever (BM25Retriever or DenseRetriever).

    mmap: True memory-maps the index arrays and the docstore (RAM stays free, the OS pages them in and
    shares them between processes), False reads them into RAM, "auto"/None does so for indexes up to
    1 GiB and memory-maps larger ones. workers: BM25 search threads."""
    index_dir = Path(index_dir)
    meta = verify_index(index_dir, verify_corpus=verify_corpus, deep=False)
    use_mmap = index_bytes(index_dir) > MMAP_AUTO_BYTES if mmap in (None, "auto") else bool(mmap)
    docstore = Docstore(index_dir, mmap=use_mmap)
    retriever = _open_kind(index_dir, meta, mmap=use_mmap, workers=workers, device=device, docstore=docstore)
    check_build_files(index_dir, meta, full=False)  # sizes and sampled hashes: a megabyte read per file
    retriever.meta = meta
    return retriever


def warn_if_other_corpus(corpus: Path, index_dir: Path, meta: dict[str, Any]) -> bool:
    """Log a warning (and return True) when `corpus` (retrieval.corpus) is not the size of the corpus the index
    was built from: an existing index is loaded as it is, so a config naming another corpus would otherwise
    search the old one without a word. One stat, no hashing (wiki-18 is 14 GB): a same-size other file
    passes, and the corpus at the recorded path is checked by its hash when loading (retrieval.verify_corpus)."""
    recorded = meta.get("corpus_bytes")
    try:
        size = corpus.stat().st_size
    except OSError:
        return False  # no corpus to compare: the index is self-contained
    if recorded is None or size == int(recorded):
        return False
    log.warning("retrieval.corpus=%s (%d bytes) is not the corpus index %s was built from (%s, %d bytes); "
                "searching the index as it is (to index retrieval.corpus, point retrieval.index_dir at a new "
                "folder or rebuild with `awarl index build --overwrite`)", corpus, size, index_dir,
                meta.get("corpus"), int(recorded))
    return True


def build_settings(cfg: RetrievalConfig) -> dict[str, Any]:
    """The `build_index` settings a run config asks for (embedding model and index type of a dense index, the
    build's memory budget of a BM25 one, what to do with duplicate ids): every index awarl builds for a run
    config is built with them, whichever stage builds it first."""
    from awarl.retrieval.dense import model_reference

    # The model as the index records it, so that the default index's cache key and the check at load time
    # tell two folders of one relative name apart.
    settings: dict[str, Any] = ({"model": model_reference(cfg.embedding_model), "index_type": cfg.dense_index}
                                if cfg.kind == "dense" else {"memory_mb": cfg.build_memory_mb})
    return {**settings, "duplicate_ids": cfg.duplicate_ids}


def load_retriever(cfg: RetrievalConfig) -> Retriever:
    """The retriever a run config asks for: an index (built from `cfg.corpus` if absent) or the HTTP client."""
    from awarl.config import ConfigError

    if cfg.kind == "server":
        from awarl.retrieval.client import RetrievalClient

        client = RetrievalClient(cfg.server_url, timeout_s=cfg.timeout_s, retries=cfg.retries)
        client.check_reachable(cfg.wait_s)  # before any model loads
        return client
    if not cfg.index_dir:
        raise ConfigError(f"retrieval.index_dir: required for retrieval.kind={cfg.kind}")
    index_dir = Path(cfg.index_dir)
    if not (index_dir / META_FILE).is_file():
        if not cfg.corpus:
            raise ConfigError(f"retrieval.index_dir: {index_dir} holds no index and retrieval.corpus is not "
                              "set to build one from")
        log.info("building %s index %s from %s", cfg.kind, index_dir, cfg.corpus)
        build_index(cfg.corpus, cfg.kind, index_dir, wait=True, **build_settings(cfg))
    retriever = load_index(index_dir, verify_corpus=cfg.verify_corpus, mmap=cfg.mmap, workers=cfg.workers)
    if cfg.corpus:
        warn_if_other_corpus(Path(cfg.corpus), index_dir, retriever.meta)
    kind = retriever.meta["kind"]
    if kind != cfg.kind:
        raise ConfigError(f"retrieval.kind: {cfg.kind} but {index_dir} is a {kind} index")
    if kind == "dense" and retriever.meta["settings"]["model"] != build_settings(cfg)["model"]:
        log.warning("retrieval.embedding_model=%s but index %s was built with %s; using the index's model",
                    cfg.embedding_model, index_dir, retriever.meta["settings"]["model"])
    return retriever
