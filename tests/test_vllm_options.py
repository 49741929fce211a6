"""The GPU recipes' vLLM options, checked before any weights load: `awarl train --dry-run` validates them
with vLLM's own config checks (real vLLM, its CPU build, tests marked `vllm`) and names the config key of
an option vLLM rejects; without vLLM it checks what the model's config.json can tell. Also the rule for
vLLM on CPU (`effective_settings`): colocated only, and only with vLLM's CPU build."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import HAS_VLLM

REPO = Path(__file__).resolve().parents[1]
COLOCATE = REPO / "configs" / "qwen2.5-3b_1gpu.yaml"   # use_vllm, colocate, gpu_memory_utilization 0.35
SERVER = REPO / "configs" / "qwen2.5-7b_cold_8gpu.yaml"  # use_vllm, server; generation.backend vllm


def dry_run(capsys, recipe: Path, *overrides: str) -> tuple[int, str, str]:
    from awarl.cli import main

    code = main(["train", "--config", str(recipe), "--dry-run", *overrides])
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------------------- with vLLM
@pytest.mark.vllm
def test_dry_run_accepts_the_colocated_recipes_vllm_options(capsys, tiny_dir):
    # The tiny model stands in for Qwen2.5-3B (4096 positions, not 32768: the trajectory budget shrinks).
    code, out, err = dry_run(capsys, COLOCATE, f"train.model={tiny_dir}", "agent.max_trajectory_tokens=1024")
    assert code == 0, err
    assert "accepts generation.dtype, generation.gpu_memory_utilization, generation.tensor_parallel_size" in out
    assert "agent.max_trajectory_tokens (+ 2048 for the colocated engine)" in out
    assert "use_vllm: True" in out and "vLLM colocate, gpu_memory_utilization=0.35" in out


@pytest.mark.vllm
@pytest.mark.parametrize(("overrides", "expected"), [
    # the recipe's own trajectory budget: 3072 + 2048 = 5120 positions, more than the tiny model's 4096
    (["agent.max_trajectory_tokens=3072"],
     "agent.max_trajectory_tokens (+ 2048 for the colocated engine): vLLM rejects max_model_len=5120"),
    (["agent.max_trajectory_tokens=1024", "generation.max_model_len=8192"],
     "generation.max_model_len: vLLM rejects max_model_len=8192"),
    (["agent.max_trajectory_tokens=1024", "generation.tensor_parallel_size=3"],
     "generation.tensor_parallel_size: vLLM rejects tensor_parallel_size=3"),
])
def test_dry_run_names_the_key_of_an_option_vllm_rejects(capsys, tiny_dir, overrides, expected):
    code, _, err = dry_run(capsys, COLOCATE, f"train.model={tiny_dir}", *overrides)
    assert code == 2
    (line,) = [ln for ln in err.splitlines() if ln.startswith("awarl train: error:")]  # one line
    assert line.startswith(f"awarl train: error: {expected} for {tiny_dir}: ")
    assert ("greater than the derived max_model_len" in line) != ("attention heads (4)" in line)


@pytest.mark.vllm
def test_dry_run_of_a_server_recipe_checks_the_estimate_engine_and_says_why_training_falls_back(capsys, tiny_dir):
    code, out, err = dry_run(capsys, SERVER, f"train.model={tiny_dir}")
    assert code == 0, err
    assert "accepts generation.dtype, generation.gpu_memory_utilization" in out  # awarl's own engine
    assert "vllm_mode=server: TRL pushes the weights to the server over NCCL, which needs CUDA" in out
    assert "use_vllm: False" in out


# ---------------------------------------------------------------------------------- without vLLM
@pytest.mark.skipif(HAS_VLLM, reason="checks the dry run where vLLM is absent; vLLM is installed here")
def test_without_vllm_the_dry_run_checks_what_the_model_config_tells(capsys, tiny_dir):
    from awarl.agent.backends.vllm import check_engine_options
    from awarl.config import ConfigError

    note = check_engine_options(str(tiny_dir), {"generation.max_model_len": ("max_model_len", 4096),
                                                "generation.tensor_parallel_size": ("tensor_parallel_size", 2)})
    assert note.startswith("vLLM is not installed: only max_model_len and tensor_parallel_size were checked")
    with pytest.raises(ConfigError, match=r"^generation.max_model_len: max_model_len=8192 is more than the cont"):
        check_engine_options(str(tiny_dir), {"generation.max_model_len": ("max_model_len", 8192)})
    with pytest.raises(ConfigError, match=r"^generation.tensor_parallel_size: .* the 4 attention heads"):
        check_engine_options(str(tiny_dir), {"generation.tensor_parallel_size": ("tensor_parallel_size", 3)})
    code, out, err = dry_run(capsys, COLOCATE, f"train.model={tiny_dir}", "agent.max_trajectory_tokens=3072")
    assert code == 2 and err.startswith("awarl train: error: agent.max_trajectory_tokens")
    code, out, _ = dry_run(capsys, COLOCATE, "agent.max_trajectory_tokens=1024")  # a hub id, not downloaded
    assert code == 0 and "is not local" in out and "options not checked" in out


@pytest.mark.skipif(HAS_VLLM, reason="the CPU rule where vLLM is absent; vLLM is installed here")
def test_without_vllm_cpu_training_generates_with_transformers_and_says_why():
    from awarl.config import load_config
    from awarl.training.trainer import effective_settings

    eff, notes = effective_settings(load_config(str(COLOCATE), []).train, cpu=True)
    assert eff["use_vllm"] is False
    assert "train.use_vllm=true is forced off on CPU: no vLLM CPU build installed" in " ".join(notes)
    eff, _ = effective_settings(load_config(str(COLOCATE), []).train, cpu=False)
    assert eff["use_vllm"] is True  # a GPU machine keeps it


@pytest.mark.vllm
def test_with_vllms_cpu_build_only_colocated_training_keeps_vllm():
    from awarl.config import load_config
    from awarl.training.trainer import effective_settings

    eff, notes = effective_settings(load_config(str(COLOCATE), []).train, cpu=True)
    assert eff["use_vllm"] is True and eff["bf16"] is False
    assert any("runs colocated on vLLM's CPU build (vllm-cpu 0.32.0)" in n for n in notes)
    eff, notes = effective_settings(load_config(str(SERVER), []).train, cpu=True)
    assert eff["use_vllm"] is False and any("NCCL, which needs CUDA" in n for n in notes)


def test_colocated_tensor_parallelism_is_refused_before_a_launch(capsys, tiny_dir):
    """The colocated engine of training with tensor_parallel_size > 1 went to the one-generate-per-turn path,
    each rank calling generate with its own prompts and number of turns; the ranks of a tensor-parallel engine
    must run in lockstep (TRL gathers the prompts across the group; awarl's rollout does not): a hang on GPUs."""
    code, _, err = dry_run(capsys, COLOCATE, f"train.model={tiny_dir}", "agent.max_trajectory_tokens=1024",
                           "generation.tensor_parallel_size=2")
    assert code == 2 and "generation.tensor_parallel_size: 2 with train.vllm_mode colocate is not supported" in err
    code, _, err = dry_run(capsys, COLOCATE, f"train.model={tiny_dir}", "agent.max_trajectory_tokens=1024")
    assert code == 0, err


@pytest.mark.skipif(HAS_VLLM, reason="checks the error where vLLM is absent; vLLM is installed here")
def test_the_vllm_backend_without_vllm_is_a_one_line_error(capsys, tmp_path, tiny_dir, shipped_bm25_dir):
    """A plain ImportError, which the CLI does not report as an input error: some twenty lines of traceback
    ending in the install hint, exit 1."""
    from awarl.cli import main

    code = main(["eval", "--model", str(tiny_dir), "--datasets", "hotpotqa", "--limit", "1", "--out",
                 str(tmp_path / "o"), "--index", str(shipped_bm25_dir), "generation.backend=vllm"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("awarl eval: error: the vLLM backend needs vLLM") and "Traceback" not in err
