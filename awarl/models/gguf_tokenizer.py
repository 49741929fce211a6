"""Repairs to the tokenizer transformers builds from a GGUF file, where that tokenizer is not the model's.

Gemma's vocabulary is a SentencePiece BPE model: a GGUF file stores its pieces and their scores (the negated
merge order) but no merges (`tokenizer.ggml.model` "llama", no `tokenizer.ggml.merges`). transformers' GGUF
converter for gemma2 / gemma3 / gemma4 reads those scores as a Unigram model's log-probabilities, under which
short pieces outscore whole words: Gemma-3-270M's converted tokenizer cut "The capital of France is" into 10
pieces ("The", " c", "ap", "it", "al", " of", " Fr", "an", "ce", " is"; Gemma's own: 5) and `<search>` into 8
single characters, and the model, fed text it never saw, continued it with "1 1 1". The repair rebuilds
the BPE model from the same pieces and scores, with the merges SentencePiece applies (a piece is the merge of
its two sub-pieces, ranked by its score: transformers' own `generate_merges`, which its sentencepiece-based
Gemma converter uses), keeping every id, added token, normalizer and decoder.

The same converter also drops the file's `tokenizer.ggml.add_bos_token`: Gemma is trained with <bos> first and
a prompt encoded without it reads as text from the middle of a document. The repair makes the tokenizer add it,
as the file says.

Each repair applies only where the file calls for it (`repairs_for`), and the conversion record lists those it
made (`tokenizer_repairs`), so a folder converted before a repair existed is converted again (pretrained.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

SPM_BPE = "spm_bpe_merges"
ADD_BOS = "add_bos"
# The architectures whose GGUF tokenizer transformers builds as a Unigram model from BPE scores
# (transformers.integrations.ggml.GGUF_TO_FAST_CONVERTERS: GGUFGemmaConverter).
_UNIGRAM_FROM_BPE = frozenset({"gemma2", "gemma3", "gemma4"})


def repairs_for(meta: dict[str, Any]) -> list[str]:
    """The repairs the GGUF file described by `meta` (pretrained.read_gguf_meta) needs, in the order applied."""
    out = []
    if meta.get("architecture") in _UNIGRAM_FROM_BPE and meta.get("tokenizer_model") == "llama" \
            and not meta.get("has_merges"):
        out.append(SPM_BPE)
    if meta.get("add_bos_token") is True and meta.get("bos_token_id") is not None:
        out.append(ADD_BOS)
    return out


def repair_tokenizer(tokenizer: Any, meta: dict[str, Any]) -> Any:
    """`tokenizer` (a transformers fast tokenizer loaded from the GGUF file) with `repairs_for(meta)` made.
    Raises ValueError when the tokenizer is not what the repair expects (another converter's output)."""
    from tokenizers import Tokenizer

    from awarl.upstream.transformers import set_backend_tokenizer

    repairs = repairs_for(meta)
    if not repairs:
        return tokenizer
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    if SPM_BPE in repairs:
        spec["model"] = _bpe_model(spec["model"])
    if ADD_BOS in repairs:
        bos = tokenizer.convert_ids_to_tokens(int(meta["bos_token_id"]))
        spec["post_processor"] = _bos_first(bos, int(meta["bos_token_id"]))
    set_backend_tokenizer(tokenizer, Tokenizer.from_str(json.dumps(spec)))
    if ADD_BOS in repairs:
        # what the tokenizer's config records, so a reload keeps the post-processor's <bos>
        tokenizer.add_bos_token = True
    return tokenizer


def _bpe_model(model: dict[str, Any]) -> dict[str, Any]:
    """The BPE model of a Unigram model built from SentencePiece BPE pieces and scores: the same ids, the
    merges SentencePiece's BPE makes from them, byte fallback as before."""
    from transformers.convert_slow_tokenizer import generate_merges

    if model.get("type") != "Unigram":
        raise ValueError(f"expected the Unigram model transformers builds from SentencePiece BPE scores, got "
                         f"{model.get('type')!r}")
    pieces = _byte_pieces_restored([(str(p), float(s)) for p, s in model["vocab"]])
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise ValueError("the GGUF vocabulary repeats a piece; its BPE model cannot be rebuilt")
    unk_id = model.get("unk_id")
    return {"type": "BPE", "dropout": None, "unk_token": pieces[unk_id][0] if unk_id is not None else None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": bool(model.get("byte_fallback", True)), "ignore_merges": False, "vocab": vocab,
            "merges": [list(m) for m in generate_merges(vocab, pieces)]}


_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


def _byte_pieces_restored(pieces: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The converter renames the byte-fallback piece `<0x09>` to a tab, which Gemma's vocabulary also holds as a
    piece of its own (ids 247 and 255968): two ids for one piece. The one among the byte pieces gets its byte
    name back (what transformers' sentencepiece-based Gemma converter keeps when a tab piece exists)."""
    seen: dict[str, int] = {}
    dups = set()
    for i, (p, _) in enumerate(pieces):
        if p in seen:
            dups.add(p)
        seen.setdefault(p, i)
    out = list(pieces)
    for i, (p, score) in enumerate(pieces):
        if p in dups and len(p) == 1 and ord(p) < 256 and any(
                0 <= j < len(pieces) and _BYTE_PIECE.fullmatch(pieces[j][0]) for j in (i - 1, i + 1)):
            out[i] = (f"<0x{ord(p):02X}>", score)
    return out


def _bos_first(bos: str, bos_id: int) -> dict[str, Any]:
    """A post-processor that puts `bos` before every sequence (and before the second of a pair, as
    transformers' Gemma tokenizer does)."""
    special = {"SpecialToken": {"id": bos, "type_id": 0}}
    return {"type": "TemplateProcessing",
            "single": [special, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [special, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
