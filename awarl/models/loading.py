"""Loading a user-named model: a local folder or a Hugging Face Hub id, with errors that say which."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def looks_local(ref: str) -> bool:
    """A path rather than a hub id (`org/name`): it exists, or is absolute/relative/home-based, or has more
    than one `/`."""
    return Path(ref).expanduser().exists() or ref.startswith(("/", "./", "../", "~")) or ref.count("/") > 1


def load_tokenizer(ref: str, key: str = "model") -> Any:
    """AutoTokenizer of `ref`; FileNotFoundError / ValueError naming `key` (the option or config key that
    gave it) instead of a transformers traceback."""
    from transformers import AutoTokenizer

    if looks_local(ref):
        path = Path(ref).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"{key}: model folder not found: {ref}")
        if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
            raise FileNotFoundError(f"{key}: {ref} holds no tokenizer (tokenizer.json / tokenizer_config.json); "
                                    "is it a model folder, e.g. a training run's final/ or checkpoint-N/?")
    try:
        return AutoTokenizer.from_pretrained(ref)
    except OSError as e:
        where = "the folder" if looks_local(ref) else "the Hugging Face Hub (check the id, the network, HF_HUB_OFFLINE)"
        raise ValueError(f"{key}: cannot load the tokenizer of {ref!r} from {where}: {str(e)[:300]}") from None
