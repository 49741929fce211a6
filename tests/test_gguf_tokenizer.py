"""The repairs awarl makes to the tokenizer transformers builds from a Gemma GGUF file
(awarl/models/gguf_tokenizer.py): SentencePiece BPE pieces read as a Unigram model, and a dropped <bos>.

The tokenizer here is built by transformers' own GGUF Gemma converter (the one `from_pretrained(gguf_file=)`
uses) from a small vocabulary laid out as Gemma's is: special pieces, byte pieces, then pieces in merge order
with the negated order as score, and a tab piece of its own at the end. The real 262,144-piece vocabulary is the
`gemma` tier's (tests/test_pretrained_gemma.py)."""

from __future__ import annotations

import pytest

from awarl.models.gguf_tokenizer import ADD_BOS, SPM_BPE, repair_tokenizer, repairs_for

BYTES = [f"<0x{b:02X}>" for b in range(256)]
CHARS = ["▁", "c", "a", "p", "i", "t", "l", "o", "f"]
# merge order: a piece's score is minus its rank, so "▁capital" (made last) scores below its parts' sum
MERGES = ["▁c", "ap", "it", "al", "▁o", "▁of", "ital", "apital", "▁capital"]


def gemma_like_tokenizer():
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.ggml import GGUFGemmaConverter

    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", *BYTES, *MERGES, *CHARS, "\t"]
    n0 = 4 + len(BYTES)
    scores = [0.0] * n0 + [-float(10 * (i + 1)) for i in range(len(MERGES))] \
        + [-1000.0 - i for i in range(len(CHARS))] + [-2000.0]
    # the late merges rank far below their parts (as in Gemma's vocabulary): a Unigram reading of the scores
    # then prefers the short pieces
    scores[tokens.index("ital")], scores[tokens.index("apital")], scores[tokens.index("▁capital")] = -200, -300, -400
    types = [3, 3, 3, 2] + [6] * len(BYTES) + [1] * (len(MERGES) + len(CHARS) + 1)
    conv = GGUFGemmaConverter({"tokens": tokens, "scores": scores, "token_type": types, "bos_token_id": 2,
                               "eos_token_id": 1, "unk_token_id": 3, "padding_token_id": 0,
                               "add_space_prefix": False})
    tok = PreTrainedTokenizerFast(tokenizer_object=conv.converted(), bos_token="<bos>", eos_token="<eos>",
                                  unk_token="<unk>", pad_token="<pad>")
    meta = {"architecture": "gemma3", "tokenizer_model": "llama", "has_merges": False, "add_bos_token": True,
            "bos_token_id": 2}
    return tok, meta


def pieces(tok, text, special=True):
    return [tok.convert_ids_to_tokens(i) for i in tok(text, add_special_tokens=special)["input_ids"]]


def test_transformers_reads_the_bpe_scores_as_unigram_and_drops_bos():
    """What the repair is for: this fails the day transformers converts Gemma's GGUF tokenizer itself."""
    tok, _ = gemma_like_tokenizer()
    assert pieces(tok, " capital of") == ["▁c", "ap", "it", "al", "▁of"]
    assert tok.convert_ids_to_tokens(4 + 9) == "\t" and tok.convert_ids_to_tokens(len(tok) - 1) == "\t"


def test_the_repair_merges_as_sentencepiece_bpe_keeps_ids_and_adds_bos(tmp_path):
    from transformers import AutoTokenizer

    tok, meta = gemma_like_tokenizer()
    ids_before = {t: tok.convert_tokens_to_ids(t) for t in ["▁capital", "▁of", "<eos>", "<0x41>"]}
    assert repairs_for(meta) == [SPM_BPE, ADD_BOS]
    tok = repair_tokenizer(tok, meta)
    assert pieces(tok, " capital of") == ["<bos>", "▁capital", "▁of"]
    assert pieces(tok, " capital of", special=False) == ["▁capital", "▁of"]
    assert {t: tok.convert_tokens_to_ids(t) for t in ids_before} == ids_before
    # the byte piece keeps its name, the tab piece its own id; unknown characters fall back to bytes
    assert tok.convert_ids_to_tokens(4 + 9) == "<0x09>" and pieces(tok, "\t", special=False) == ["\t"]
    assert pieces(tok, "A", special=False) == ["<0x41>"] and tok.decode(tok("A c\tof")["input_ids"],
                                                                        skip_special_tokens=True) == "A c\tof"
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert pieces(again, " capital of") == ["<bos>", "▁capital", "▁of"]


@pytest.mark.parametrize(("meta", "want"), [
    ({"architecture": "llama", "tokenizer_model": "gpt2", "has_merges": True, "add_bos_token": False}, []),
    ({"architecture": "gemma3", "tokenizer_model": "llama", "has_merges": True, "add_bos_token": None}, []),
    ({"architecture": "llama", "tokenizer_model": "llama", "has_merges": False, "add_bos_token": True,
      "bos_token_id": 1}, [ADD_BOS]),
])
def test_repairs_apply_only_where_the_file_calls_for_them(meta, want):
    assert repairs_for(meta) == want


def test_a_conversion_made_before_the_repairs_is_converted_and_exported_again(tmp_path):
    """A GGUF file that asks for <bos> (`tokenizer.ggml.add_bos_token`): its conversion adds it and records the
    repair; a cached folder and an --out export whose records list no repairs (an older awarl's, which kept
    transformers' tokenizer) are made again rather than handed out."""
    pytest.importorskip("gguf")
    import json

    from test_pretrained_errors import write_model_gguf
    from transformers import AutoTokenizer

    from awarl.io import atomic_write_json
    from awarl.models.pretrained import SOURCE_FILE, gguf_folder

    f = write_model_gguf(tmp_path / "m.gguf", add_bos=True)
    out = gguf_folder(f, tmp_path / "out", cache_root=tmp_path / "cache")
    tok = AutoTokenizer.from_pretrained(out)
    assert tok("ab")["input_ids"][0] == tok.bos_token_id == 1
    cached = next((tmp_path / "cache").glob("gguf-*"))
    for folder in (cached, out):   # the export's files are hard links to the cache's: replaced, not rewritten
        rec = json.loads((folder / SOURCE_FILE).read_text())
        assert rec["tokenizer_repairs"] == [ADD_BOS]
        del rec["tokenizer_repairs"]   # as an awarl without the repairs wrote it
        atomic_write_json(folder / SOURCE_FILE, rec)
    before = (cached / "model.safetensors").stat().st_ino
    assert gguf_folder(f, tmp_path / "out", cache_root=tmp_path / "cache") == out
    assert (cached / "model.safetensors").stat().st_ino != before   # converted again
    for folder in (cached, out):
        assert json.loads((folder / SOURCE_FILE).read_text())["tokenizer_repairs"] == [ADD_BOS]
