"""docs/config.md is generated from the config's field descriptions and must not go stale."""

from __future__ import annotations

from awarl.config import AwarlConfig
from awarl.config_docs import docs_path, main, render_config_markdown


def test_docs_config_md_is_current():
    assert docs_path().read_text(encoding="utf-8") == render_config_markdown(), \
        "docs/config.md is stale: run `python -m awarl.config_docs`"


def test_every_section_and_key_is_documented_with_a_description():
    text = render_config_markdown()
    for section, field in AwarlConfig.model_fields.items():
        assert f"## `{section}`" in text
        model = field.annotation
        for name, f in model.model_fields.items():
            assert f.description, f"{section}.{name} has no description"
            assert f"| `{name}` |" in text


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    import awarl.config_docs as cd

    stale = tmp_path / "config.md"
    stale.write_text("old\n")
    monkeypatch.setattr(cd, "docs_path", lambda: stale)
    assert main(["--check"]) == 1 and "stale" in capsys.readouterr().out
    assert main([]) == 0 and main(["--check"]) == 0
