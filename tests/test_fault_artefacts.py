"""Fault injection, round 4 (issue 44): artefacts are checked whole before they are used.

An index folder put together from two builds of one corpus, GGUF files whose tensors do not match their
declared architecture, a cached conversion cut short or changed after it was written, and chat templates
(code that comes with a model) that loop without end or build huge values. Real parts: `awarl index build`
and `awarl model from-gguf` in process, small real GGUF files written with the gguf package, the tiny
tokenizer and its chat template. docs/reliability.md (round 4) gives what each did before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from awarl.cli import main
from awarl.io import SAMPLE_BLOCK, file_sha256
from awarl.retrieval import RetrievalIndexError, build_index, load_index, verify_index

ROOT = Path(__file__).resolve().parent.parent

def one_error(capsys) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if " error: " in x or "Traceback" in x]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# ----------------------------------------------------------------------------------------- index builds
@pytest.fixture(scope="module")
def two_builds(tmp_path_factory, shipped_bm25_dir) -> tuple[Path, Path]:
    """The shipped closed corpus built twice: with the default BM25 settings, and with k1 3.0, b 0.9 (same
    names, same sizes, other scores)."""
    root = tmp_path_factory.mktemp("builds")
    corpus = shipped_bm25_dir.parent / "corpus.jsonl"
    a = build_index(corpus, "bm25", root / "a", show_progress=False)
    b = build_index(corpus, "bm25", root / "b", show_progress=False, k1=3.0, b=0.9)
    return a, b


def test_an_index_put_together_from_two_builds_is_refused_by_info_and_by_load(two_builds, tmp_path, capsys):
    """Before: `index info` passed and the folder served other passages (3 of 3 queries' top 3 changed)."""
    a, b = two_builds
    mixed = tmp_path / "mixed"
    shutil.copytree(a, mixed)
    shutil.copy(b / "data.csc.index.npy", mixed / "data.csc.index.npy")
    assert (a / "data.csc.index.npy").stat().st_size == (mixed / "data.csc.index.npy").stat().st_size
    meta = json.loads((a / "index_meta.json").read_text())
    assert main(["index", "info", str(mixed)]) == 2
    line = one_error(capsys)
    assert f"{mixed / 'data.csc.index.npy'}: not the file of this index's build {meta['build_id'][:12]}" in line
    assert "rebuild the index" in line
    with pytest.raises(RetrievalIndexError, match="put together from two builds"):
        load_index(mixed)
    # each build on its own is whole, and records every file it wrote
    assert main(["index", "info", str(a)]) == 0
    assert sorted(meta["files"]) == sorted(p.name for p in a.iterdir() if p.name != "index_meta.json")
    assert meta["build_id"] != json.loads((b / "index_meta.json").read_text())["build_id"]


def test_load_checks_samples_of_each_file_and_info_every_byte(two_builds, tmp_path):
    """A load reads about a megabyte per file (16 sampled blocks), `index info` hashes them whole: a byte
    changed between the samples of the 3.5 MB docstore passes the one and not the other."""
    a, _ = two_builds
    idx = tmp_path / "i"
    shutil.copytree(a, idx)
    store = idx / "docstore.jsonl"
    data = bytearray(store.read_bytes())
    assert len(data) > 16 * SAMPLE_BLOCK
    at = SAMPLE_BLOCK + 10     # past the first sampled block, before the second
    assert (len(data) - SAMPLE_BLOCK) / 15 > at + 1
    data[at:at + 1] = b"#" if data[at:at + 1] != b"#" else b"%"
    store.write_bytes(bytes(data))
    load_index(idx)
    with pytest.raises(RetrievalIndexError, match=r"docstore\.jsonl: not the file of this index's build"):
        verify_index(idx)


# ----------------------------------------------------------------------------------------------- GGUF
from awarl.models.pretrained import SOURCE_FILE, PretrainedError, gguf_folder  # noqa: E402

# the GGUF cases write real GGUF files with the gguf package (the [pretrained] extra): skipped without it
needs_gguf = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="needs the gguf package")


def write_model_gguf(path: Path, **kw) -> Path:
    from test_pretrained_errors import write_model_gguf as write

    return write(path, **kw)



@needs_gguf
@pytest.mark.parametrize("kw,says", [
    ({"drop": ("blk.0.attn_q.weight",)}, "1 missing (blk.0.attn_q.weight)"),
    ({"drop": ("output_norm.weight",)}, "1 missing (output_norm.weight)"),
    ({"arch": "qwen2"}, "3 missing (blk.0.attn_k.bias, blk.0.attn_q.bias, blk.0.attn_v.bias)"),
    ({"extra": ("blk.0.attn_q.bias",)}, "1 with no place in it (blk.0.attn_q.bias)"),
])
def test_a_gguf_whose_tensors_do_not_fit_its_architecture_is_not_converted(tmp_path, kw, says):
    """Before: each converted with exit 0 (the missing weights random, the extra one dropped) and was cached."""
    f = write_model_gguf(tmp_path / "m.gguf", **kw)
    with pytest.raises(PretrainedError, match="its tensors do not match its declared architecture") as e:
        gguf_folder(f, cache_root=tmp_path / "cache")
    assert f"{f}: its tensors do not match its declared architecture '{kw.get('arch', 'llama')}'" in str(e.value)
    assert says in str(e.value)
    models = tmp_path / "cache" / "models"
    assert not models.exists() or not [p for p in models.iterdir() if not p.name.endswith(".lock")]


@needs_gguf
def test_the_command_says_so_in_one_line(tmp_path):
    f = write_model_gguf(tmp_path / "m.gguf", drop=("blk.0.attn_q.weight",))
    r = subprocess.run([sys.executable, "-m", "awarl.cli", "model", "from-gguf", str(f)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "AWARL_CACHE": str(tmp_path / "cache"),
                                                    "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    errors = [x for x in r.stderr.splitlines() if " error: " in x or "Traceback" in x]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-2000:]
    assert errors[0].startswith(f"awarl model: error: {f}: its tensors do not match") and "1 missing" in errors[0]


@needs_gguf
def test_a_whole_gguf_converts_and_its_record_lists_every_file(tmp_path):
    folder = gguf_folder(write_model_gguf(tmp_path / "m.gguf"), cache_root=tmp_path / "cache")
    record = json.loads((folder / SOURCE_FILE).read_text())
    assert sorted(record["files"]) == sorted(p.name for p in folder.iterdir() if p.name != SOURCE_FILE)
    assert record["files"]["model.safetensors"]["sha256"] == file_sha256(folder / "model.safetensors")


@needs_gguf
@pytest.mark.parametrize("damage", ["truncate", "flip", "no record"])
def test_a_damaged_cached_conversion_is_converted_again_not_handed_out(tmp_path, caplog, damage):
    """Before: a truncated cached model.safetensors was handed out (exit 0), and loading it failed later with
    a SafetensorError."""
    from transformers import AutoModelForCausalLM

    f = write_model_gguf(tmp_path / "m.gguf")
    folder = gguf_folder(f, cache_root=tmp_path / "cache")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "truncate":
        weights.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "flip":
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    else:   # a conversion by an awarl that recorded no file hashes
        record = json.loads((folder / SOURCE_FILE).read_text())
        del record["files"]
        (folder / SOURCE_FILE).write_text(json.dumps(record))
    assert gguf_folder(f, cache_root=tmp_path / "cache") == folder
    assert "converting it again" in caplog.text
    assert weights.read_bytes() == bytes(data) if damage == "no record" else len(weights.read_bytes()) == len(data)
    AutoModelForCausalLM.from_pretrained(folder)


@needs_gguf
def test_a_damaged_export_is_exported_again(tmp_path, caplog):
    f = write_model_gguf(tmp_path / "m.gguf")
    out = gguf_folder(f, tmp_path / "out", cache_root=tmp_path / "cache")
    (out / "model.safetensors").unlink()
    cached = next(p for p in (tmp_path / "cache").iterdir() if p.name.startswith("gguf-"))
    shutil.copy(cached / "config.json", out / "model.safetensors")   # something else under the name
    assert gguf_folder(f, tmp_path / "out", cache_root=tmp_path / "cache") == out
    assert "exporting it again" in caplog.text
    assert json.loads((out / SOURCE_FILE).read_text())["files"]["model.safetensors"]["sha256"] == \
        file_sha256(out / "model.safetensors")


@needs_gguf
def test_a_conversion_that_did_not_finish_is_swept_by_the_next(tmp_path):
    """A conversion killed without its cleanup (SIGKILL) leaves `.gguf-<sha>.<random>`: the next run on the cache
    removes it (its entry's lock is free); a folder whose conversion still holds its lock stays."""
    f = write_model_gguf(tmp_path / "m.gguf")
    models = tmp_path / "cache"
    (models / ".gguf-0123456789abcdef.k2j3h4").mkdir(parents=True)
    (models / ".gguf-0123456789abcdef.k2j3h4" / "model.safetensors").write_bytes(b"x" * 100)
    gguf_folder(f, cache_root=tmp_path / "cache")
    assert not (models / ".gguf-0123456789abcdef.k2j3h4").exists()


# --------------------------------------------------------------------------------------- chat templates
from awarl.agent.chat_template import ChatTemplateError, render_chat_template  # noqa: E402

QWEN_LIKE = (  # the shape of Qwen2.5's template: a default system turn, tojson, namespace, loop.last
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(n=0) %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}{%- set ns.n = ns.n + 1 %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}"
    "{%- if loop.last and false %}{{ message | tojson }}{% endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@pytest.fixture()
def tiny_tok(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.mark.parametrize("template", [None, QWEN_LIKE,
                                      "{% for m in messages %}{% generation %}{{ m.content | tojson }}"
                                      "{% endgeneration %}{{ eos_token }}{% endfor %}"])
def test_the_bounded_rendering_is_what_transformers_renders(tiny_tok, template):
    from awarl.agent.templates import load_template, render_prompt

    if template is not None:
        tiny_tok.chat_template = template
    messages = load_template("awarl").messages("Who wrote \"Hamlet\"? {{ not a tag }}")
    assert render_chat_template(tiny_tok, messages) == tiny_tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False)
    ids = tiny_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert render_prompt(load_template("awarl"), "Who wrote \"Hamlet\"? {{ not a tag }}", tiny_tok) == list(ids)


@pytest.mark.parametrize("template,says", [
    ("{% for a in range(100000) %}{% for b in range(100000) %}{{ messages[0]['content'] }}{% endfor %}"
     "{% endfor %}", "more than 2,000,000 characters"),
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "stopped after 5 s"),
    ("{{ 'x' * 10000000000 }}", "a value of 10,000,000,000 items"),
    ("{{ 7 ** 100000000 }}", "a number of more than 4096 bits"),
])
def test_a_chat_template_that_runs_away_is_stopped_within_its_bounds(tiny_tok, template, says):
    """The issue's case is the first (nested loops that print: before, a MemoryError after 63 s at 2.9 GB
    under a 4 GB limit); the others stop a loop that prints nothing and a value built in one expression."""
    import resource

    tiny_tok.chat_template = template
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError, match=says):
        render_chat_template(tiny_tok, [{"role": "user", "content": "x" * 40}])
    # the 5 s alarm is wall time; the margin is for a loaded machine (CI shares its cores)
    assert time.monotonic() - t0 < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000   # KB: under 200 MB grown


@needs_gguf
def test_a_gguf_chat_template_that_loops_fails_the_first_prompt_in_one_line(tmp_path, shipped_bm25_dir):
    """End to end: the template comes inside a GGUF file, is converted into the model folder, and `awarl eval`
    stops at the first prompt with one line instead of hanging."""
    loop = ("{% for a in range(100000) %}{% for b in range(100000) %}{{ messages[0]['content'] }}{% endfor %}"
            "{% endfor %}")
    model = gguf_folder(write_model_gguf(tmp_path / "m.gguf", chat_template=loop), tmp_path / "model",
                        cache_root=tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "awarl.cli", "eval", "--model", str(model), "--index",
                        str(shipped_bm25_dir), "--limit", "1", "--datasets", "hotpotqa", "--out", str(tmp_path / "e"),
                        "critic.judge=lexical"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    # no wall-clock bound here (a loaded CI machine took over 90 s to start the command): a hang is the
    # subprocess timeout's failure, the stop is the one line below
    errors = [x for x in r.stderr.splitlines() if " error: " in x or "Traceback" in x]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-2000:]
    assert f"the chat template of {model} was stopped" in errors[0]
    assert not (tmp_path / "e" / "predictions.jsonl").exists()
