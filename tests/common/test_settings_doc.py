"""docs/settings.md is generated from the TOML files (python -m rcea.settings_doc) and must be current."""

import re
import shutil

from rcea.config import _read_settings
from rcea.paths import configs_dir, project_root
from rcea.settings_doc import main, render


def test_the_committed_settings_document_is_current():
    assert main(["--check"]) == 0, "run: python -m rcea.settings_doc"


def test_every_setting_appears_once_with_its_status_and_reason():
    text = (project_root() / "docs" / "settings.md").read_text(encoding="utf-8")
    settings = _read_settings(configs_dir() / "base.toml")
    settings.update(_read_settings(configs_dir() / "objectives.toml", prefix="objectives."))
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert len(rows) == len(settings)
    for key, s in settings.items():
        assert s.doc.strip(), f"{key} has no doc text: say what it is and why it has this value"
        assert f"`{key.rpartition('.')[0]}`" in text
        assert any(r.startswith(f"| `{key.rpartition('.')[2]}` |") and f"| {s.status} |" in r for r in rows), key


def test_a_changed_doc_or_scale_value_changes_the_document(tmp_path):
    cdir = tmp_path / "configs"
    shutil.copytree(configs_dir(), cdir)
    base = (cdir / "base.toml").read_text()
    (cdir / "base.toml").write_text(re.sub(r'(?m)^(lora_rank = .*doc = ")', r"\1a | pipe, ", base))
    (cdir / "scales" / "7b.toml").write_text((cdir / "scales" / "7b.toml").read_text() + "\n[probe]\nk = 16\n")
    text = render(cdir)
    assert text != render(configs_dir())
    assert "a \\| pipe, " in text  # a pipe inside a cell is escaped
    row = next(ln for ln in text.splitlines() if ln.startswith("| `k` |"))
    assert row.split("|")[2:5] == [" `32` ", " `8` ", " `16` "]  # 3B value, then each scale's change
