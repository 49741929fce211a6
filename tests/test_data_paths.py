"""Dataset paths: hf://datasets/... files through the real huggingface_hub client and cache, and the
checkout fallback for relative data/ paths.

The Hub cannot be reached here, so the Hub cache is filled by hand in huggingface_hub's on-disk layout
(refs/main -> snapshots/<commit>/<file>) and the client runs offline against it: the same code path a user
takes after the first download."""

from __future__ import annotations

import shutil

import pytest

from awarl.data.paths import parse_hf_url, resolve_data_path
from awarl.io import DataError, repo_root, shipped_data_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    """An offline Hub cache holding RUC-NLPIR/FlashRAG_datasets' nq/test.jsonl (the shipped FlashRAG sample)."""
    import huggingface_hub.constants as hc

    repo = tmp_path / "hub" / "datasets--RUC-NLPIR--FlashRAG_datasets"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    target = repo / "snapshots" / COMMIT / "nq" / "test.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copy(shipped_data_dir() / "flashrag" / "nq_test17.jsonl", target)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return target


def test_parse_hf_url():
    assert parse_hf_url("hf://datasets/RUC-NLPIR/FlashRAG_datasets/hotpotqa/dev.jsonl") == \
        ("RUC-NLPIR/FlashRAG_datasets", None, "hotpotqa/dev.jsonl")
    assert parse_hf_url("hf://datasets/a/b@v1.0/x.parquet") == ("a/b", "v1.0", "x.parquet")
    for bad in ("hf://models/a/b/x.json", "hf://datasets/a/x.json", "hf://datasets/a/b/../../etc/passwd"):
        with pytest.raises(DataError, match="expected hf://datasets/OWNER/NAME"):
            parse_hf_url(bad)


def test_hub_file_is_read_from_the_cache_and_loads(hub_cache, tmp_path):
    from awarl.cli import main
    from awarl.data.loaders import load_examples

    url = "hf://datasets/RUC-NLPIR/FlashRAG_datasets/nq/test.jsonl"
    assert resolve_data_path(url) == hub_cache
    res = load_examples(resolve_data_path(url))
    assert res.format == "flashrag" and len(res.examples) == 17
    out = tmp_path / "nq.jsonl"
    assert main(["data", "prepare", url, "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 17


def test_hub_file_missing_offline_is_a_clear_error(hub_cache, capsys):
    from awarl.cli import main

    with pytest.raises(DataError, match="not in the local Hub cache"):
        resolve_data_path("hf://datasets/RUC-NLPIR/FlashRAG_datasets/hotpotqa/dev.jsonl")
    assert main(["data", "stats", "hf://datasets/nobody/nothing/x.jsonl"]) == 2
    assert "hf://datasets/nobody/nothing/x.jsonl" in capsys.readouterr().err


def test_eval_reads_hub_files_and_records_the_cached_path(hub_cache):
    from awarl.config import load_config
    from awarl.stages.questions import load_eval_set

    cfg = load_config(None, ["data.eval=[{path: hf://datasets/RUC-NLPIR/FlashRAG_datasets/nq/test.jsonl, "
                             "format: flashrag, dataset: nq}]", "eval.limit=5"])
    ev = load_eval_set(cfg.data, cfg.eval, cfg.run.seed)
    assert len(ev.examples) == 5 and ev.files == {"nq": str(hub_cache)}  # the path holds the commit


def test_relative_data_path_falls_back_to_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = "data/flashrag/nq_test17.jsonl"
    assert resolve_data_path(rel) == repo_root() / rel
    assert str(resolve_data_path("nowhere/x.json")) == "nowhere/x.json"  # left for the loader to report
