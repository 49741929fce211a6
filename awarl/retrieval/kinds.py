"""What a retrieval kind is (`retrieval.kind`, awarl.choices.RETRIEVAL_KINDS; docs/extending.md): how a run
config opens its retriever, and what the stages must know of it without comparing its name. An index kind
(bm25, dense) also says how `awarl/retrieval/index.py` builds, checks and opens its folder; a remote kind
(server) has no index here. Light on purpose: the config and the CLI load kinds while building their choices,
so the shipped ones live next to their code (`bm25.py`, `dense.py`, `client.py`) and import the heavy parts
(bm25s, faiss, sentence-transformers) only when they build or open something."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import argparse

    from awarl.config import RetrievalConfig
    from awarl.retrieval.types import IndexRetriever, Retriever


class IndexBuilder(Protocol):
    """What an index kind builds from the streamed corpus (BM25Builder, DenseBuilder): passages in chunks, then
    its files in the build folder, returning the settings it used (index_meta.json)."""

    def add(self, texts: Iterable[str]) -> None: ...

    def finish(self, out_dir: Path) -> dict[str, Any]: ...


@dataclass(frozen=True)
class IndexKind:
    """The local index side of a retrieval kind: what `build_index`, `verify_index` and `load_index` call.

    `builder(settings, show_progress, work_dir) -> (builder, chunk size in passages)`: `settings` are
    `build_index`'s keyword settings, of every kind (it keeps its own). `files`: its files in the folder besides
    the docstore (a folder missing one is incomplete). `check(index_dir, meta)`: a cheap consistency check of
    those files against the meta (RetrievalIndexError). `open(index_dir, meta, *, mmap, workers, device,
    docstore)`: the retriever, or with `docstore=None` only its files opened and checked. `record(builder)`:
    what the build records under the meta's `build` (None: nothing). `from_args(args)`: the build settings of
    `awarl index build`'s flags. `config_settings(cfg)`: the settings a run config asks for (an index built
    from `retrieval.corpus`); `check_config(cfg, meta, index_dir)`: warn where the loaded index differs from
    what the config asks (it is searched as it is)."""

    builder: Callable[[dict[str, Any], bool, Path], tuple[IndexBuilder, int]]
    own_settings: tuple[str, ...]
    files: tuple[str, ...]
    open: Callable[..., IndexRetriever | None]
    from_args: Callable[[argparse.Namespace], dict[str, Any]]
    config_settings: Callable[[RetrievalConfig], dict[str, Any]]
    check: Callable[[Path, dict[str, Any]], None] | None = None
    record: Callable[[Any], dict[str, Any]] | None = None
    check_config: Callable[[RetrievalConfig, dict[str, Any], Path], None] | None = None


@dataclass(frozen=True)
class RetrievalKind:
    """A registered retrieval kind: `open(cfg: RetrievalConfig) -> Retriever` (the retriever a run config asks
    for, checked before any model loads), `identity` (the RetrievalConfig fields that name what it searches,
    recorded with a p_i estimate's inputs, after `kind` and `topk`) and `index` (its local index side; None for a
    remote kind, searched at `retrieval.server_url`: nothing to build, a server to check)."""

    open: Callable[[RetrievalConfig], Retriever]
    identity: tuple[str, ...]
    index: IndexKind | None = None

    @property
    def remote(self) -> bool:
        """Searched by a server elsewhere (`retrieval.server_url`): no index folder here to find or build."""
        return self.index is None


def retrieval_kind(name: str) -> RetrievalKind:
    """The registered retrieval kind `name` (ValueError naming the choices when there is none)."""
    from awarl.choices import RETRIEVAL_KINDS

    return RETRIEVAL_KINDS.load(name)


def index_kinds() -> tuple[str, ...]:
    """The registered kinds with a local index (what `awarl index build --kind` accepts)."""
    from awarl.choices import RETRIEVAL_KINDS

    return tuple(n for n in RETRIEVAL_KINDS.names if RETRIEVAL_KINDS.load(n).index is not None)


def index_kind(name: str) -> IndexKind:
    """The index side of the registered kind `name`: ValueError naming the index kinds when it has none."""
    from awarl.choices import RETRIEVAL_KINDS

    index = RETRIEVAL_KINDS.load(name).index if name in RETRIEVAL_KINDS else None
    if index is None:
        raise ValueError(f"unknown index kind {name!r}; choose one of {', '.join(index_kinds())}")
    return index
