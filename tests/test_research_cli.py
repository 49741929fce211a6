"""Issue 24, inputs: `--help` examples that run as written (each research example through --dry-run, each
other command's with --help, and every repository path they name exists), blank and over-long questions
refused (CLI and API) before anything loads, and endpoint errors that name the option that set the
endpoint."""

from __future__ import annotations

import shlex

import pytest
from conftest import free_port

from awarl.io import repo_root

# What `make demo` writes under runs/demo that a checkpoint example may name (awarl/stages/demo.py: the
# warm-up policy, and the trainer's final model).
DEMO_OUTPUTS = {"runs/demo/final", "runs/demo/model/warmup", "runs/demo/model/init"}


def examples(epilog: str) -> list[list[str]]:
    """The example command lines of an epilog (continuations joined), as argv lists without `awarl`."""
    lines, cur = [], ""
    for raw in epilog.splitlines():
        line = raw.strip()
        if not (cur or line.startswith("awarl ")):
            continue
        cur += " " + line.rstrip("\\").strip()
        if not line.endswith("\\"):
            lines.append(shlex.split(cur.split("  #")[0].strip())[1:])
            cur = ""
    return lines


def check_paths(argv: list[str]) -> None:
    for tok in argv:
        value = tok.split("=", 1)[-1]
        if value.startswith(("configs/", "data/")):
            assert (repo_root() / value).exists(), f"{value} named by an example does not exist"
        if value.startswith("runs/demo/"):
            assert value in DEMO_OUTPUTS, f"{value}: `make demo` writes no such folder"


def test_every_research_example_runs_as_written_in_a_dry_run(capsys, monkeypatch):
    from awarl.cli import main
    from awarl.commands.research import EPILOG

    monkeypatch.chdir(repo_root())
    found = examples(EPILOG)
    assert len(found) == 4
    for argv in found:
        check_paths(argv)
        assert main([*argv, "--dry-run"]) == 0, argv
        said = capsys.readouterr().out
        assert said.startswith("dry run, nothing loaded") and "loop judge (research.judge)" in said
    gpu = next(a for a in found if "configs/research_qwen2.5-7b.yaml" in a)
    main([*gpu, "--dry-run"])
    assert "loop judge (research.judge): openai Qwen/Qwen2.5-7B-Instruct" in capsys.readouterr().out


def test_every_eval_and_compare_example_parses_and_names_existing_paths(capsys):
    from awarl.cli import main
    from awarl.commands.eval import EPILOG

    found = examples(EPILOG)
    assert {a[0] for a in found} == {"eval", "compare"} and len(found) == 4
    for argv in found:
        check_paths(argv)
        with pytest.raises(SystemExit) as e:
            main([*argv, "--help"])
        assert e.value.code == 0
    capsys.readouterr()


@pytest.mark.parametrize("question, says", [
    ("   \n\t ", "empty or only whitespace"),
    ("x" * 2001, "2,001 characters, over the limit of 2,000 (research.max_question_chars)"),
])
def test_blank_and_over_long_questions_are_refused_before_anything_loads(question, says, tmp_path, capsys):
    from awarl.cli import main

    # a model path that does not exist: had anything tried to load, the error would be about it
    assert main(["research", question, "--model", str(tmp_path / "no-model")]) == 2
    err = capsys.readouterr().err
    assert says in err and "no-model" not in err


def test_the_length_limit_is_a_setting(capsys):
    from awarl.cli import main

    assert main(["research", "x" * 2001, "--dry-run", "research.max_question_chars=3000"]) == 0
    assert "(2001 characters, limit 3000)" in capsys.readouterr().out


def test_the_api_refuses_what_the_cli_refuses():
    from awarl.research.loop import ResearchRun
    from awarl.research.planner import DecompositionPlanner

    def run(question="Who?", **kw):
        args = {"approve_threshold": 0.8, "max_iterations": 3, "abstention_phrase": "not enough information", **kw}
        return ResearchRun(question, DecompositionPlanner(), **args)

    with pytest.raises(ValueError, match=r"max_iterations must be an integer >= 1 \(research.max_iterations\), got 0"):
        run(max_iterations=0)
    with pytest.raises(ValueError, match="empty or only whitespace"):
        run("  ")
    with pytest.raises(ValueError, match="research.approve_threshold"):
        run(approve_threshold=1.5)
    with pytest.raises(ValueError, match="research.max_question_chars"):
        run("y" * 50, max_question_chars=10)
    assert len(run().steps) == 1


def test_endpoint_errors_name_the_option_that_set_the_endpoint(tmp_path):
    from awarl.config import load_config
    from awarl.critic import JudgeUnavailable
    from awarl.research.records import make_loop_judge, make_planner

    dead = f"http://127.0.0.1:{free_port()}/v1"
    cfg = load_config(None, ["research.planner=openai", f"research.planner_base_url={dead}", "critic.timeout_s=2"])
    with pytest.raises(JudgeUnavailable, match=r"research planner: cannot reach research.planner_base_url=http.*"
                                               r"or set research.planner to decomposition"):
        make_planner(cfg, tmp_path, check=True)
    cfg = load_config(None, ["research.planner=openai", f"critic.base_url={dead}", "critic.timeout_s=2"])
    with pytest.raises(JudgeUnavailable, match=r"cannot reach critic.base_url \(research.planner_base_url is unset\)"):
        make_planner(cfg, tmp_path, check=True)
    cfg = load_config(None, ["research.judge=openai", f"critic.base_url={dead}", "critic.timeout_s=2"])
    with pytest.raises(JudgeUnavailable, match=r"critic-loop judge \(research.judge: openai\): cannot reach critic.base_url"):
        make_loop_judge(cfg, tmp_path, check=True)
