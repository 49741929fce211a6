"""A tiny random-init Qwen2 model + byte-level BPE tokenizer, built offline in seconds.

Tests and the CPU demo need a real tokenizer and a real causal LM with the same interfaces as a released
checkpoint (chat template, special tokens, `generate`), without network access. The tokenizer is
trained on the shipped data so question/passage text tokenises compactly; the agent protocol tags are
single *non-special* tokens, because TRL decodes completions with `skip_special_tokens=True` and the
tags must survive that.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from awarl.io import DataError, atomic_write_folder, atomic_write_json, loads_json, shipped_data_dir

log = logging.getLogger(__name__)

PROTOCOL_TAGS: tuple[str, ...] = (
    "<think>", "</think>", "<search>", "</search>", "<information>", "</information>",
    "<cite>", "</cite>", "<answer>", "</answer>",
)
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
TINY_INFO = "tiny_model.json"  # build settings; marks a folder `build_tiny_model` may replace

# Qwen2.5-style ChatML. A default system message is added only when the conversation has none, like
# Qwen's own template, so prompts rendered for the tiny model look like those of the real checkpoints.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Protocol-shaped snippets so the BPE merges cover the structure the agent produces.
_PROTOCOL_TEXTS: tuple[str, ...] = (
    "<think> I need to find the answer. </think>",
    "<search> query </search>",
    "<information> [1] Title: Example\ntext </information>",
    "<cite> 1, 2 </cite>",
    "<answer> not enough information </answer>",
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time "
    "you get new information. You can search with <search> query </search>.",
)


def _json_records(path: Path) -> list:
    try:
        if path.suffix == ".jsonl":
            return [loads_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        data = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read shipped data for the tokenizer: {e}") from None
    return data if isinstance(data, list) else [data]


def shipped_texts(data_dir: Path | None = None) -> Iterator[str]:
    """Questions, answers, context paragraphs and wiki-18 passages from the shipped samples.

    Reads the raw files directly (not through the loaders) so building the tokenizer has no dependency
    on the rest of the package.
    """
    root = Path(data_dir) if data_dir else shipped_data_dir()
    for name in ("hotpotqa", "2wikimultihopqa"):
        for path in sorted((root / name).glob("*.json")):
            for rec in _json_records(path):
                yield str(rec.get("question", ""))
                yield str(rec.get("answer", ""))
                for item in rec.get("context", []):
                    if isinstance(item, list) and len(item) == 2:
                        yield str(item[0])
                        yield " ".join(str(s) for s in item[1])
    for path in sorted((root / "musique").glob("*.jsonl")):
        for rec in _json_records(path):
            yield str(rec.get("question", ""))
            yield str(rec.get("answer", ""))
            yield from (str(a) for a in rec.get("answer_aliases", []))
            for p in rec.get("paragraphs", []):
                yield f"{p.get('title', '')}\n{p.get('paragraph_text', '')}"
    for path in sorted((root / "wiki18").glob("*.jsonl")):
        for rec in _json_records(path):
            yield str(rec.get("contents", ""))


def build_tokenizer(texts: Iterable[str], vocab_size: int = 4096):
    """Train the byte-level BPE and wrap it as a `PreTrainedTokenizerFast` with ChatML special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2,
    )
    tok.train_from_iterator(list(texts) + list(_PROTOCOL_TEXTS), trainer=trainer)
    # Non-special and not normalised: matched verbatim, kept by decode(skip_special_tokens=True).
    tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in PROTOCOL_TAGS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        unk_token=None, additional_special_tokens=[BOS_TOKEN], padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(out_dir: str | Path, *, seed: int = 0, vocab_size: int = 4096, hidden: int = 128,
                     layers: int = 2, heads: int = 4, texts: Iterable[str] | None = None) -> Path:
    """Build and save a tiny random-init Qwen2ForCausalLM + tokenizer to `out_dir`; returns the path.

    Deterministic for a given seed and texts; loadable offline with AutoTokenizer/AutoModelForCausalLM. The
    folder is written atomically with its build settings in `tiny_model.json` (TINY_INFO); an `out_dir` that
    holds anything but an earlier tiny model (a trained checkpoint, say) is refused, not overwritten.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    kv_heads = max(1, heads // 2)
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    # Checked here, not at the first forward: the query heads are shared out over heads // 2 key/value heads,
    # and rotary embeddings rotate pairs of a head's dimensions.
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be divisible by its {kv_heads} key/value heads (heads // 2): "
                         "use 1, 2 or an even number")
    if (hidden // heads) % 2:
        raise ValueError(f"hidden / heads ({hidden} / {heads} = {hidden // heads}) must be even (rotary "
                         "embeddings rotate pairs of dimensions)")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (out / TINY_INFO).is_file():
        # checked before the tokenizer is trained: the refusal should not take a minute
        raise ValueError(f"{out}: exists and holds something else (no {TINY_INFO}); choose another folder")
    tokenizer = build_tokenizer(texts if texts is not None else shipped_texts(), vocab_size=vocab_size)
    n_vocab = len(tokenizer)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    cfg = Qwen2Config(
        vocab_size=n_vocab, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id,
        rope_theta=10000.0, use_sliding_window=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=True)

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / TINY_INFO, {"seed": seed, "vocab_size": vocab_size, "hidden": hidden,
                                            "layers": layers, "heads": heads, "shipped_texts": texts is None})

    atomic_write_folder(out, TINY_INFO, fill)
    log.info("tiny model (%.2fM params, vocab %d) saved to %s",
             sum(p.numel() for p in model.parameters()) / 1e6, n_vocab, out)
    return out
