"""No import cycle anywhere in the project's packages (read from the source: every import, top level or
inside a function, counts), so each module can be understood and tested from its dependencies up."""

from __future__ import annotations

import ast

from rcea.paths import project_root

PACKAGES = ("rcea", "orchestrate", "train", "infer", "aggregate", "benchmarks")
ROLES = ("train", "infer", "aggregate")


def import_graph(packages=PACKAGES) -> dict[str, set[str]]:
    """{module: project modules it imports}, a package's `__init__` named by the package."""
    root, graph = project_root(), {}
    for top in packages:
        for path in (root / top).rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            pkg = name if rel.name == "__init__" else name.rsplit(".", 1)[0]
            found = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:  # relative: from the package, `level - 1` packages up
                        parts = pkg.split(".")
                        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                    found.add(base)
                    found |= {f"{base}.{a.name}" for a in node.names}
            graph[name] = {m for m in found if m.split(".")[0] in packages and m != name}
    return {k: {m for m in v if m in graph} for k, v in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle (as a path that returns to its start), found by depth-first search."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_the_project_s_imports():
    graph = import_graph()
    assert "rcea.layout" in graph["infer.worker"] and "train.objectives.registry" in graph["train.objectives.loss"]
    assert len(graph) > 80


def test_no_import_cycle_in_the_project():
    assert cycles(import_graph()) == []


def arrows(graph, sources, targets) -> list[tuple[str, str]]:
    """Every import from a module of a `sources` package to one of a `targets` package."""
    return sorted((m, d) for m, deps in graph.items() if m.split(".")[0] in sources
                  for d in deps if d.split(".")[0] in targets)


def test_the_arrow_finder_sees_a_forbidden_import():
    graph = {"rcea.a": {"orchestrate.units"}, "infer.b": {"rcea.a"}, "orchestrate.units": {"rcea.a"}}
    assert arrows(graph, ("rcea",), ("orchestrate", *ROLES)) == [("rcea.a", "orchestrate.units")]
    assert arrows(graph, ROLES, ("orchestrate",)) == []


def test_the_shared_core_imports_no_role_and_not_the_orchestration():
    """rcea/ is what every role stands on: no module of it imports train, infer, aggregate or the orchestration
    room (the Ray engine learns a run's measurement jobs from `python -m infer plan`, the role's command line)."""
    assert arrows(import_graph(), ("rcea",), ("orchestrate", *ROLES, "benchmarks")) == []


def test_no_role_imports_the_orchestration():
    """A unit is data to a role (a spec its command line reads; its output names live in rcea.layout), so
    train/, infer/ and aggregate/ never import orchestrate/ (their images need not carry it to run)."""
    assert arrows(import_graph(), ROLES, ("orchestrate",)) == []


def test_no_role_imports_the_benchmarks():
    """The benchmarks measure the roles, not the other way round: a role's device check (infer.gpu_check) runs
    the role's own measurement (infer.entropy_bench), so its image needs no benchmarks/."""
    assert arrows(import_graph(), ROLES, ("benchmarks",)) == []


def test_the_orchestration_starts_roles_only_through_their_command_lines():
    assert arrows(import_graph(), ("orchestrate",), ROLES) == []


def test_the_orchestration_is_a_room_of_its_own():
    """The study, its stages, units, engines and command builders live in orchestrate/, not in the shared core."""
    from rcea.paths import project_root

    root = project_root()
    assert not any((root / "rcea" / name).exists() for name in ("ops", "executors", "engines", "units.py"))
    assert {"units", "engines", "engines.ray_exec", "engines.ray_stage", "ops.study", "ops.commands"} <= {
        m.partition(".")[2] for m in import_graph() if m.startswith("orchestrate.")}
