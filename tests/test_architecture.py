"""The rules of ARCHITECTURE.md, checked on the source: the import graph of harness/ and model/ (imports
inside functions count), which parts may reach torch, ray and mlflow, and how long a function may be."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "model")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=1)
def sources() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (the longest known prefix), or None if external."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in mods:
            return ".".join(parts[:i])
    return None


@lru_cache(maxsize=1)
def imports() -> dict[str, tuple[set[str], set[str]]]:
    """module -> (project modules it imports, top-level external packages it imports)."""
    mods = sources()
    out = {}
    for mod, path in mods.items():
        internal, external = set(), set()
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                # `from pkg import sub` depends on pkg.sub alone; `from pkg import name` on pkg.
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                names = subs + ([base] if len(subs) < len(node.names) else [])
            for name in names:
                target = _resolve(name, mods)
                if target is not None and target != mod:
                    internal.add(target)
                elif target is None and name:
                    external.add(name.split(".")[0])
        out[mod] = (internal, external)
    return out


def reach(mod: str) -> tuple[set[str], set[str]]:
    """Every project module and external package that importing `mod` can import, transitively. A package's
    __init__ counts: importing harness.report.common first runs harness/report/__init__.py."""
    graph, seen, ext, todo = imports(), set(), set(), [mod]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        internal, external = graph[m]
        ext |= external
        parents = [".".join(m.split(".")[:i]) for i in range(1, len(m.split(".")))]
        todo += [p for p in parents if p in graph] + sorted(internal)
    return seen - {mod}, ext


def test_the_import_graph_has_no_cycle():
    graph = {m: deps for m, (deps, _) in imports().items()}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):                                   # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles: {cycles}"


def test_the_checker_sees_imports_inside_functions():
    internal, _ = imports()["harness.cli"]
    assert "harness.study.runner" in internal            # imported lazily, inside a function


@pytest.mark.parametrize("mod", sorted(m for m in sources() if m.startswith("harness.report")))
def test_reports_never_reach_torch_or_the_model(mod):
    internal, external = reach(mod)
    assert "torch" not in external and "ray" not in external
    assert not any(m == "model" or m.startswith("model.") for m in internal), sorted(internal)


@pytest.mark.parametrize("mod", ["harness.trial", "harness.train"])
def test_a_trial_knows_no_ray_and_no_study(mod):
    internal, external = reach(mod)
    assert "ray" not in external
    assert not any(m.startswith("harness.study") for m in internal), sorted(internal)


def test_the_model_core_knows_nothing_of_the_harness():
    for mod in (m for m in sources() if m.split(".")[0] == "model"):
        internal, external = imports()[mod]
        assert not any(m.startswith("harness") for m in internal), mod
        assert external <= {"torch", "__future__", "dataclasses", "typing", "math", "warnings", "inspect",
                            "contextlib", "functools", "difflib", "collections", "itertools"}, (mod, external)


def test_two_study_modules_import_ray_and_one_mlflow():
    users = {pkg: sorted(m for m, (_, ext) in imports().items() if pkg in ext) for pkg in ("ray", "mlflow")}
    assert users == {"ray": ["harness.study.parallel", "harness.study.runner"], "mlflow": ["harness.tracking"]}


def test_no_function_is_over_80_lines_outside_the_made_up_grammar():
    long = []
    for mod, path in sources().items():
        if mod == "harness.data.synth":               # the grammar: one function per construction, long by nature
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{mod}.{node.name}: {n} lines")
    assert long == []
