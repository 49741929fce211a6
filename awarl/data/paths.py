"""Where a dataset file named in a config or on the command line is read from.

- `hf://datasets/OWNER/NAME[@REVISION]/PATH/IN/REPO`: a file of a Hugging Face Hub dataset repository (the
  URL form of `huggingface_hub`'s file system), downloaded once into the Hub cache (`HF_HUB_CACHE`, default
  `~/.cache/huggingface/hub`) and read from there; offline (`HF_HUB_OFFLINE=1`) the cached copy is used.
  E.g. FlashRAG's `hf://datasets/RUC-NLPIR/FlashRAG_datasets/hotpotqa/dev.jsonl` or Search-R1's
  `hf://datasets/PeterJinGo/nq_hotpotqa_train/train.parquet`.
- a relative path is read from the working directory; when it is not there, from the awarl checkout, so
  the shipped configs that name `data/...` work from any directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from awarl.io import DataError, repo_root

HF_PREFIX = "hf://"
_HF_URL = re.compile(r"^hf://datasets/(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[\w./-]+?))?/(?P<file>.+)$")


def parse_hf_url(url: str) -> tuple[str, str | None, str]:
    """(repo_id, revision or None, file path in the repo) of an `hf://datasets/...` URL."""
    m = _HF_URL.match(url)
    if not m or ".." in m["file"].split("/"):
        raise DataError(f"{url}: expected hf://datasets/OWNER/NAME[@REVISION]/PATH/IN/REPO (a dataset "
                        "repository's file, e.g. hf://datasets/RUC-NLPIR/FlashRAG_datasets/hotpotqa/dev.jsonl)")
    return m["repo"], m["rev"], m["file"]


class HubUnavailable(DataError):
    """An `hf://` file that is neither in the local Hub cache nor reachable (offline): a launch with network
    fetches it, so a dry run on an offline node plans without it."""


def download_hf_file(url: str) -> Path:
    """The local (cached) copy of an `hf://datasets/...` file; DataError naming the URL when unavailable."""
    repo, rev, filename = parse_hf_url(url)
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as e:  # a transformers dependency, so normally present
        raise DataError(f"{url}: reading from the Hub needs huggingface_hub ({e})") from None
    try:
        # cache_dir is read here (not at import) so that HF_HUB_CACHE set by the caller is honoured.
        return Path(hf_hub_download(repo, filename, repo_type="dataset", revision=rev,
                                    cache_dir=os.environ.get("HF_HUB_CACHE") or None))
    except LocalEntryNotFoundError:
        raise HubUnavailable(f"{url}: not in the local Hub cache and the Hub cannot be reached (offline? "
                        "HF_HUB_OFFLINE is set, or no network); download it once with network access") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise DataError(f"{url}: cannot download from the Hugging Face Hub: {str(e)[:300]}") from None


def resolve_data_path(path: str | os.PathLike[str]) -> Path:
    """The local file to read for a dataset path (see the module docstring)."""
    s = str(path)
    if s.startswith(HF_PREFIX):
        return download_hf_file(s)
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    alt = repo_root() / p
    return alt if alt.exists() else p
