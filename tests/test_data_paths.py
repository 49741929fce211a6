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
    assert len(ev.examples) == 5 and ev.files == {"nq": [str(hub_cache)]}  # the path holds the commit


def test_relative_data_path_falls_back_to_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = "data/flashrag/nq_test17.jsonl"
    assert resolve_data_path(rel) == repo_root() / rel
    assert str(resolve_data_path("nowhere/x.json")) == "nowhere/x.json"  # left for the loader to report


def _split_nq(tmp_path):
    """The shipped FlashRAG NQ sample cut into two files of one dataset, as a dev set kept in shards."""
    lines = (shipped_data_dir() / "flashrag" / "nq_test17.jsonl").read_text(encoding="utf-8").splitlines()
    a, b = tmp_path / "nq_a.jsonl", tmp_path / "nq_b.jsonl"
    a.write_text("\n".join(lines[:8]) + "\n", encoding="utf-8")
    b.write_text("\n".join(lines[8:]) + "\n", encoding="utf-8")
    return a, b


def _eval_cfg(*paths):
    from awarl.config import load_config

    entries = ", ".join(f"{{path: {p}, format: flashrag, dataset: nq}}" for p in paths)
    return load_config(None, [f"data.eval=[{entries}]"])


def test_two_eval_files_of_one_dataset_are_both_in_the_manifest(tmp_path):
    """Both files are recorded and hashed, so a resume notices an edit to the second, not only the first."""
    from awarl.stages.eval_manifest import data_record, resume_conflicts
    from awarl.stages.questions import load_eval_set

    a, b = _split_nq(tmp_path)
    cfg = _eval_cfg(a, b)
    ev = load_eval_set(cfg.data, cfg.eval, cfg.run.seed)
    assert len(ev.examples) == 17 and ev.files == {"nq": [str(a), str(b)]}
    before = {"data": {ds: data_record(p) for ds, p in ev.files.items()}}
    assert [f["path"] for f in before["data"]["nq"]["files"]] == [str(a), str(b)]

    b.write_text(b.read_text(encoding="utf-8").replace('"id": "test_8"', '"id": "test_8b"'), encoding="utf-8")
    after = {"data": {ds: data_record(p) for ds, p in load_eval_set(cfg.data, cfg.eval, cfg.run.seed).files.items()}}
    assert [c.split(":")[0] for c in resume_conflicts(before, after)] == ["data.nq.sha256"]
    # one file keeps the single-file record that older manifests have
    assert data_record([str(a)]).keys() == {"path", "sha256"}


def test_one_id_with_two_questions_across_eval_files_is_refused(tmp_path):
    """Predictions are keyed by (dataset, id): a second question under the same key would go unscored."""
    from awarl.stages.questions import load_eval_set

    a, b = _split_nq(tmp_path)
    b.write_text(b.read_text(encoding="utf-8").replace('"id": "test_8"', '"id": "test_0"'), encoding="utf-8")
    cfg = _eval_cfg(a, b)
    with pytest.raises(DataError, match=r"nq_b\.jsonl: question id 'test_0' of dataset 'nq' is also in .*nq_a"):
        load_eval_set(cfg.data, cfg.eval, cfg.run.seed)
    # the same question listed in two files is legitimate: it is generated once
    c = tmp_path / "nq_c.jsonl"
    c.write_text(a.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    cfg = _eval_cfg(a, c)
    assert len(load_eval_set(cfg.data, cfg.eval, cfg.run.seed).examples) == 9


def test_the_eval_limit_is_per_dataset_over_all_its_files(tmp_path):
    """Before: the limit went to each file, so nq split over two files got 2 x 3 questions."""
    from awarl.data.loaders import load_examples
    from awarl.stages.questions import load_eval_set

    a, b = _split_nq(tmp_path)
    cfg = _eval_cfg(a, b)
    ev = load_eval_set(cfg.data, cfg.eval, cfg.run.seed, limit=3)
    assert len(ev.examples) == 3 and ev.files == {"nq": [str(a), str(b)]}
    assert load_eval_set(cfg.data, cfg.eval, cfg.run.seed, limit=3).examples == ev.examples  # seeded
    # one file: the subsample a file's own limit draws, as before
    one = _eval_cfg(a)
    assert load_eval_set(one.data, one.eval, 5, limit=4).examples == load_examples(
        a, format="flashrag", dataset="nq", limit=4, seed=5).examples
