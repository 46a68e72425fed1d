"""One launcher seam (issue 39): what differs between the launchers is decided in rcea/launch.py. Elsewhere no
code reads `outputs_visible` / `in_container` (the flags that turned checks off under Compose are gone), and the
branches left on a `[launch]` record's launcher or device are exactly those docs/architecture.md names."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEAM = ROOT / "rcea" / "launch.py"
CODE = ("rcea", "orchestrate", "infer", "train", "aggregate", "benchmarks", "scripts", "tasks.py")
LAUNCH_ATTRS = {"local", "gpus", "launcher"}   # what a Launch record or a unit says about where it runs


def sources() -> list[Path]:
    found = []
    for top in CODE:
        path = ROOT / top
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [p for p in found if p != SEAM]


def branches(path: Path, root: Path = ROOT) -> list[str]:
    """`file:function` of each if / conditional expression whose test reads a launcher or device value: an
    attribute local, gpus or launcher, or an attribute `device` compared with "cpu" / "gpu"."""
    tree, found = ast.parse(path.read_text()), []

    def reads_launch(test) -> bool:
        for node in ast.walk(test):
            if isinstance(node, ast.Attribute) and node.attr in LAUNCH_ATTRS:
                return True
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "device" \
                    and any(isinstance(c, ast.Constant) and c.value in ("cpu", "gpu") for c in node.comparators):
                return True
        return False

    def visit(node, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else where
            if isinstance(child, (ast.If, ast.IfExp, ast.While)) and reads_launch(child.test):
                found.append(f"{path.relative_to(root)}:{name}")
            if isinstance(child, ast.comprehension) and any(reads_launch(t) for t in child.ifs):
                found.append(f"{path.relative_to(root)}:{name}")
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_no_visibility_flag_is_left_outside_the_seam():
    words = re.compile(r"\b(outputs_visible|in_container)\b")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sources() for i, line in enumerate(p.read_text().splitlines(), 1)
            if words.search(line)]
    assert hits == [], hits


def test_the_branches_on_launcher_or_device_outside_the_seam_are_the_documented_two():
    found = sorted({b for p in sources() for b in branches(p)})
    assert len(found) <= 2, found
    doc = (ROOT / "docs" / "architecture.md").read_text()
    listed = sorted(set(re.findall(r"`([\w/.]+\.py:\w+)`", doc.split("## Branches outside the seam", 1)[1])))
    assert found == listed, (found, listed)


def test_the_branch_finder_sees_a_branch(tmp_path):
    """The check above can fail: each form it looks for is found in a file that has it, and a runtime device
    (torch's "cuda") is not a launcher value."""
    probe = tmp_path / "probe.py"
    probe.write_text("def a(lc):\n    return 1 if lc.local else 2\n\n\ndef b(u):\n    if u.device == 'gpu':\n"
                     "        pass\n\n\ndef c(us):\n    return [u for u in us if u.launcher == 'compose']\n\n\n"
                     "def d(x):\n    if x.device.startswith('cuda'):\n        pass\n")
    assert branches(probe, tmp_path) == ["probe.py:a", "probe.py:b", "probe.py:c"]
