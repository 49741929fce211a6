"""Dataset loaders (HotpotQA, 2Wiki, MuSiQue, FlashRAG, Search-R1, unified JSONL), closed corpora, stats."""

from awarl.data.corpus import build_corpus, shipped_closed_corpus, write_corpus
from awarl.data.loaders import SHIPPED_DEV, LoadResult, detect_format, load_examples, load_shipped
from awarl.data.types import Paragraph, QAExample

__all__ = ["SHIPPED_DEV", "LoadResult", "Paragraph", "QAExample", "build_corpus", "detect_format",
           "load_examples", "load_shipped", "shipped_closed_corpus", "write_corpus"]
