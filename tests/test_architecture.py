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
    __init__ counts: importing harness.report.cells first runs harness/report/__init__.py."""
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


def is_facade(mod: str) -> bool:
    """A package __init__ that only re-exports names of its own modules: a docstring, `from .x import ...` /
    `from pkg.x import ...` of its own submodules, and __all__; it runs nothing else (model/__init__.py)."""
    path = sources()[mod]
    if path.name != "__init__.py":
        return False
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue                                            # the docstring
        if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith(mod + ".")
                                                 or node.module == "__future__"):
            continue
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"]:
            continue
        return False
    return True


def import_graph_with_packages() -> dict[str, set[str]]:
    """The import graph with the packages a module runs first: importing harness.report.cells runs
    harness/report/__init__.py (and harness/__init__.py) before it. A facade's re-exports are left out of
    its own edges: it holds no code a submodule could need half-initialized."""
    graph = {}
    for mod, (deps, _) in imports().items():
        parents = {".".join(mod.split(".")[:i]) for i in range(1, len(mod.split(".")))} & set(sources())
        graph[mod] = set(deps) | parents
    for mod in graph:
        if is_facade(mod):
            graph[mod] = {d for d in graph[mod] if not d.startswith(mod + ".")}
    return graph


def test_the_import_graph_has_no_cycle():
    graph = import_graph_with_packages()
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


def test_facades_are_recognized_and_the_report_package_runs_nothing():
    assert is_facade("model") and is_facade("harness.train")
    assert not is_facade("harness.paper")                      # it loads the tables: code, not re-exports
    # The report package's __init__ imports nothing: its registry lives in writers.py, so that importing
    # harness.report.cells does not first import every layout, which import it (a loop).
    assert imports()["harness.report"] == (set(), {"__future__"}) or imports()["harness.report"] == (set(), set())


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


def test_two_study_modules_import_ray_and_the_two_halves_of_tracking_mlflow():
    users = {pkg: sorted(m for m, (_, ext) in imports().items() if pkg in ext) for pkg in ("ray", "mlflow")}
    assert users == {"ray": ["harness.study.parallel", "harness.study.runner"],
                     "mlflow": ["harness.logged", "harness.tracking"]}


# --- ARCHITECTURE.md's "may import" table ---------------------------------------------------------------

def _path_module(path: str) -> str:
    """`harness/data/` -> harness.data; `harness/trial.py` -> harness.trial; `harness/__init__.py` -> harness."""
    parts = path.strip("/").removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _short(path: str) -> str:
    """How the table's last column names a part: `harness/data/` -> data, `harness/trial.py` -> trial."""
    return path.strip("/").removesuffix(".py").split("/")[-1]


def import_table(text: str) -> dict[str, set[str]]:
    """ARCHITECTURE.md's table -> {module prefix: the short names of the parts it may import}. A row may
    name several paths (all in its first cell, each in backticks); "any part" allows everything ("*")."""
    import re
    table = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        paths = re.findall(r"`([^`]+)`", cells[0])
        allowed = {"*"} if "any part" in cells[-1] else set(re.findall(r"`([^`]+)`", cells[-1]))
        for p in paths:
            table[_path_module(p)] = allowed | {_short(q) for q in paths}
    return table


def part_of(mod: str, table: dict[str, set[str]]) -> str | None:
    """The table's row a module belongs to: the longest path prefix (harness.data.ptb -> harness.data)."""
    best = None
    for prefix in table:
        if (mod == prefix or mod.startswith(prefix + ".")) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def table_violations(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    """Every import the table does not allow, and every module in no row of it."""
    out = []
    for mod in sorted(graph):
        part = part_of(mod, table)
        if part is None:
            out.append(f"{mod} belongs to no part of the table")
            continue
        for dep in sorted(graph[mod]):
            dep_part = part_of(dep, table)
            if dep_part is None or dep_part == part or "*" in table[part]:
                continue
            if _short(dep_part.replace(".", "/")) not in table[part]:
                out.append(f"{mod} imports {dep}, but {part} may import only {sorted(table[part])}")
    return out


def test_every_import_is_one_the_architecture_table_allows():
    table = import_table((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert len(table) >= 16 and table["model"] == {"model"}, table     # the table was found and read
    graph = {m: deps for m, (deps, _) in imports().items()}
    assert table_violations(graph, table) == []


def test_the_table_check_catches_a_wrong_import():
    # What a deliberately wrong import does to the check: the model core reaching into the data layer, and
    # a report reaching the trainer, are each named; a module outside every row is too.
    table = import_table((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    graph = {m: set(deps) for m, (deps, _) in imports().items()}
    graph["model.layers"].add("harness.data.batching")
    graph["harness.report.table3"].add("harness.train.loop")
    graph["stray.module"] = set()
    found = table_violations(graph, table)
    assert found == ["harness.report.table3 imports harness.train.loop, but harness.report may import only "
                     "['errors', 'io', 'logged', 'measure', 'metrics', 'paper', 'probes', 'record', 'report', "
                     "'tracking']",
                     "model.layers imports harness.data.batching, but model may import only ['model']",
                     "stray.module belongs to no part of the table"]


def test_no_function_is_over_80_lines():
    long = []
    for mod, path in sources().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{mod}.{node.name}: {n} lines")
    assert long == []


# Modules that write plain files only inside a directory that io.atomic_dir renames into place whole.
WRITES_INSIDE_ATOMIC_DIRS = {"harness.data.parse", "harness.data.synth.corpus"}


def test_every_file_is_written_through_io():
    """No write_text / write_bytes / open(..., "w" or "a") outside harness/io.py, except inside directories
    that atomic_dir publishes whole, and the metrics log, which a run appends to line by line."""
    found = []
    for mod, path in sources().items():
        if mod in {"harness.io"} | WRITES_INSIDE_ATOMIC_DIRS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            at = 0 if isinstance(node.func, ast.Attribute) else 1          # path.open(mode) or open(path, mode)
            modes = [a.value for a in node.args[at:at + 1] + [k.value for k in node.keywords if k.arg == "mode"]
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name in ("write_text", "write_bytes") or (name == "open" and any(set(m) & set("wx") for m in modes)):
                found.append(f"{mod}:{node.lineno} {name}")
    assert found == []


def test_the_readme_layout_names_every_module_and_nothing_else():
    """README.md's Layout block: every module of model/ and harness/ appears under its folder, and every file
    and folder it names exists."""
    import re
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    folder, named = "", {}
    for line in block.splitlines():
        head = re.match(r"^( {0,2})([a-z_]+/(?:[a-z_]+/)*)", line)     # data/ or data/synth/
        if head:
            folder = head.group(2) if not head.group(1) else "harness/" + head.group(2)
        for name in re.findall(r"\b([a-z_0-9]+\.(?:py|yaml|md))\b", line):
            named.setdefault(folder, set()).add(name)
    for folder, names in named.items():
        for name in names - {"table2.py", "table3.py"}:         # "table1.py ... table4.py"
            assert (ROOT / folder / name).exists() or (ROOT / name).exists(), f"{folder}{name} does not exist"
    packages = [p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("__init__.py")]
    for pkg in ("model", "harness", *(p for p in packages if p != "harness")):
        modules = {p.name for p in (ROOT / pkg).glob("*.py") if p.name != "__init__.py"}
        assert modules <= named.get(pkg + "/", set()) | {"table2.py", "table3.py"}, \
            (pkg, sorted(modules - named.get(pkg + "/", set())))


# --- "From a Table 3 row to the line that uses it": the table a newcomer follows, kept true ---

def _definition(path: Path, qualname: str) -> str | None:
    """The source of the class or function `qualname` (e.g. MultiHeadAttention.__init__) in `path`, or None."""
    text = path.read_text(encoding="utf-8")
    body: list = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return ast.get_source_segment(text, node)


def row_trace_problems(line: str, study_rows: dict) -> list[str]:
    """What is wrong with one line of the table (empty: nothing): each row sets the key in the study file,
    and each place named exists and reads one of the fields."""
    import re
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    _, rows, key, fields, where = cells
    key = key.strip("`")
    fields = re.findall(r"`([a-z_]+)`", fields)
    problems = [f"row {r} does not set {key}" for r in (x.strip() for x in rows.split(","))
                if key not in (study_rows.get(r) or {})]
    for place in re.findall(r"`([\w/.]+\.py)::([\w.]+)`", where):
        source = _definition(ROOT / place[0], place[1])
        if source is None:
            problems.append(f"{place[0]} has no {place[1]}")
        elif not any(re.search(rf"\b{f}\b", source) for f in fields):
            problems.append(f"{place[0]}::{place[1]} reads none of {fields}")
    return problems


def test_architecture_md_follows_each_table3_column_from_its_row_to_the_line_that_reads_it():
    import yaml
    doc = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = doc.split("## From a Table 3 row to the line that uses it", 1)[1]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| Table 3")]
    study_rows = yaml.safe_load((ROOT / "studies" / "table3.yaml").read_text())["rows"]
    assert len(lines) >= 10
    for line in lines:
        assert row_trace_problems(line, study_rows) == [], line
    covered = {c.strip() for ln in lines for c in ln.split("|")[2].split(",")}
    assert covered >= {r for r in study_rows if r not in ("base", "Dbase")}, "a row of Table 3 is not traced"
    # the check can fail: a wrong key, a wrong place, a field that place does not read
    assert row_trace_problems("| h | A1 | `d_ff` | `d_ff` | `model/layers.py::FeedForward.__init__` |", study_rows)
    assert row_trace_problems("| h | A1 | `n_heads` | `n_heads` | `model/layers.py::Nowhere.__init__` |", study_rows)
    assert row_trace_problems("| h | A1 | `n_heads` | `n_heads` | `model/layers.py::FeedForward.__init__` |",
                              study_rows)


def test_tests_share_helpers_through_one_module_not_each_other():
    """What several tests need lives in tests/helpers.py; a test module imports no other test module."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name} imports {n}" for n in names if n.startswith("tests.test_")]
    assert found == []
