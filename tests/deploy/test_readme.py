"""What README.md and docs/ tell a reader to type exists: every `scripts/...` file, every Invoke task (and
the options given to it), every project module run with `python -m`, every in-page link's heading; and the
first screen holds what it is, the two commands and where to go next."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from invoke import Collection

import tasks

ROOT = Path(tasks.__file__).resolve().parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROJECT_PACKAGES = {"rcea", "orchestrate", "train", "infer", "aggregate", "benchmarks", "mathdata", "tests", "scripts"}
INVOKE_CORE = {"--dry", "--list", "--help", "-l", "-h", "--complete"}


def code_of(text: str) -> list[str]:
    """The lines of fenced blocks and the inline code spans (what a reader copies)."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    return [line for block in fenced for line in block.splitlines()] + re.findall(r"`([^`\n]+)`", rest)


def commands(doc: Path) -> list[str]:
    """Each command of a code line: split at `;`, `&&`, `|` and a trailing `# comment`."""
    out = []
    for line in code_of(doc.read_text(encoding="utf-8")):
        line = re.sub(r"\s#\s.*$", "", line)
        out += [c.strip() for c in re.split(r"\s*(?:;|&&|\|\|?)\s*", line) if c.strip()]
    return out


TASKS = Collection.from_module(tasks)


def task_flags(name: str) -> set[str]:
    body = TASKS[name].body
    params = list(inspect.signature(body).parameters)[1:]  # after the context
    return {"--" + p.replace("_", "-") for p in params} | {"-" + p[0] for p in params}


def problems(doc: Path) -> list[str]:
    """Each command of ``doc`` that names a missing script, task, task option or project module."""
    wrong = []
    for cmd in commands(doc):
        for path in re.findall(r"(?:^|[\s=(])((?:\./)?scripts/[\w./-]+)", cmd):
            if not (ROOT / path).exists():
                wrong.append(f"{cmd}: no file {path}")
        m = re.search(r"(?:^|\s)(?:scripts/run|invoke)\s+((?:--?[\w-]+\s+)*)([a-z][\w-]*)(.*)$", cmd)
        if m and not cmd.startswith(("pip ", "uv ")):
            pre, name, args = m.groups()
            if name not in TASKS.task_names:
                wrong.append(f"{cmd}: no task {name!r} (tasks: {', '.join(sorted(TASKS.task_names))})")
            else:
                flags = set(re.findall(r"(?:^|\s)(--?[a-z][\w-]*)", args))
                bad = flags - task_flags(name) - INVOKE_CORE
                if bad:
                    wrong.append(f"{cmd}: task {name} has no option {', '.join(sorted(bad))}")
            bad_pre = set(pre.split()) - INVOKE_CORE
            if bad_pre:
                wrong.append(f"{cmd}: invoke has no option {', '.join(sorted(bad_pre))}")
        for mod in re.findall(r"python3? -m ([\w.]+)", cmd):
            if mod.split(".")[0] in PROJECT_PACKAGES:
                base = ROOT / mod.replace(".", "/")
                if not (base.with_suffix(".py").exists() or (base / "__main__.py").exists()):
                    wrong.append(f"{cmd}: no module {mod}")
    return wrong


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_script_task_and_module_named_exists(doc):
    wrong = problems(doc)
    assert not wrong, "\n".join(wrong)


def test_the_readme_names_tasks_and_scripts():
    """The checks above have something to check: README's commands include tasks with options."""
    cmds = commands(ROOT / "README.md")
    assert "scripts/run demo" in cmds and "scripts/test" in cmds
    assert sum(bool(re.search(r"invoke \w+ --", c)) for c in cmds) >= 10


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", s).replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_in_page_links_name_a_heading(doc):
    assert not dangling_anchors(doc), f"{doc.name}: links to no heading: {dangling_anchors(doc)}"


def dangling_anchors(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M)}
    return [a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in anchors]


def test_the_first_screen_says_what_it_is_the_two_commands_and_where_to_go():
    first = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:45])
    assert "scripts/run demo" in first and "scripts/test" in first
    assert "Where to go next" in first and "docs/measurements.md" in first
    assert "reproduction harness" in first


def test_the_checks_catch_what_they_look_for(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("Run `scripts/nothing` and `invoke trian --scale tiny`, then `invoke train --colour red`, "
                   "`python -m rcea.nothing` and see [below](#nowhere).\n\n# Somewhere\n")
    found = problems(doc)
    assert len(found) == 4, found
    assert any("no file scripts/nothing" in w for w in found) and any("no task 'trian'" in w for w in found)
    assert any("no option --colour" in w for w in found) and any("no module rcea.nothing" in w for w in found)
    assert dangling_anchors(doc) == ["nowhere"]
    assert slug("On a GPU host (3b, 7b)") == "on-a-gpu-host-3b-7b"
    assert slug("Several GPU hosts: the study on a Ray cluster") == "several-gpu-hosts-the-study-on-a-ray-cluster"
