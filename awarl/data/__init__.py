"""Dataset loaders (every format of `awarl.choices.FORMATS`: HotpotQA, 2Wiki, MuSiQue, FlashRAG, Search-R1,
unified JSONL, ...), closed corpora, gold evidence, stats."""

from awarl.data.corpus import build_corpus, shipped_closed_corpus, write_corpus
from awarl.data.evidence import GoldEvidence, gold_evidence, title_key
from awarl.data.loaders import SHIPPED_DEV, LoadResult, detect_format, load_examples, load_shipped
from awarl.data.types import Paragraph, QAExample

__all__ = ["SHIPPED_DEV", "GoldEvidence", "LoadResult", "Paragraph", "QAExample", "build_corpus", "detect_format",
           "gold_evidence", "load_examples", "load_shipped", "shipped_closed_corpus", "title_key", "write_corpus"]
