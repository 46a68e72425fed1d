"""Scales come from configs/scales/*.toml: adding a scale is adding one file (issue 39)."""
import shutil
import subprocess
import sys

from rcea.config import SCALES, _scale_names
from rcea.paths import configs_dir, project_root


def test_scales_are_the_scale_files_local_first():
    stems = {p.stem for p in (configs_dir() / "scales").glob("*.toml")}
    assert set(SCALES) == stems and len(SCALES) == len(stems)
    assert SCALES[0] == "tiny"                      # the local CPU default leads every listing
    assert list(SCALES[1:]) == sorted(SCALES[1:])   # then by name
    assert _scale_names() == SCALES


def test_one_toml_file_adds_a_scale(tmp_path):
    """In a copy of the tree, a new scales/mini.toml (tiny's values, a smaller LoRA) is a valid scale everywhere the
    scale list is read: the config loads with its values, its launch record reads, and the CLI lists it."""
    root = project_root()
    for part in ("rcea", "configs"):
        shutil.copytree(root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    text = (root / "configs/scales/tiny.toml").read_text().replace("lora_rank = 8", "lora_rank = 4")
    assert "lora_rank = 4" in text
    (tmp_path / "configs/scales/mini.toml").write_text(text)
    code = ("from rcea.config import SCALES, load_config; from rcea.launch import launch; "
            "print(','.join(SCALES)); c = load_config('mini'); print(c['train.lora_rank'], launch('mini').local)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    names, values = out.stdout.split()[0], out.stdout.split()[1:]
    assert names == "mini,tiny,3b,7b"
    assert values == ["4", "True"]
