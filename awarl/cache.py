"""awarl's cache folder: what is built once on first use and reused (the shipped closed corpus and its
indexes, awarl.stages.resources; converted released checkpoints, awarl.models.pretrained)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """AWARL_CACHE, else ~/.cache/awarl."""
    return Path(os.environ.get("AWARL_CACHE") or Path.home() / ".cache" / "awarl")
