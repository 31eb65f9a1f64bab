"""The layout holds: each package imports only what its ``__init__`` says it may, nothing but
the backends imports mpi4py or torch, no module imports one that imports it back (imports
inside functions count), every environment variable and /proc's process records are read in
one place. (Modules are cut by concept, not by a line count.)"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import collbench

ROOT = Path(collbench.__file__).parent
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())

#: what each package may import of collbench besides itself and ``collbench.errors`` (as its
#: ``__init__`` docstring says); a name covers its submodules
MAY_IMPORT = {
    "stats": set(),
    "benchmarks": set(),
    "measure": {"benchmarks", "stats"},
    "backends": {"benchmarks", "measure", "launch"},
    "launch": set(),
    "results": {"stats", "measure", "benchmarks.registry"},
    "render": {"results", "measure", "benchmarks.registry"},
    "live": {"results", "render", "launch.journal"},
    "analysis": {"stats", "measure", "results", "render", "benchmarks"},
    "run": {"stats", "measure", "benchmarks", "backends", "launch", "results", "render", "live"},
    "cli": {"run", "analysis", "results", "render", "live", "stats", "measure", "benchmarks",
            "backends",
            "launch"},
}
#: third-party modules a package may import at all (the standard library always)
THIRD_PARTY = {
    "stats": {"numpy"},
    "benchmarks": {"numpy"},
    "measure": {"numpy"},
    "backends": {"numpy", "mpi4py", "torch"},
    "launch": set(),          # a guardian forks before anything heavy is imported
    "results": {"numpy", "pandas"},   # pandas: the Python API alone (read_results)
    "render": {"numpy", "rich"},
    "live": {"rich"},
    "analysis": {"numpy", "rich", "matplotlib"},
    "run": {"numpy"},
    "cli": {"click", "rich", "mpi4py"},
}


def _imports(path: Path):
    """(line, imported module) for every import of ``path``, inside functions too."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:             # from collbench.launch import spawn: a module
                inner = f"{node.module}.{alias.name}"
                yield node.lineno, inner if _is_module(inner) else node.module


def _is_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "collbench" or len(parts) == 1:
        return False
    where = ROOT.joinpath(*parts[1:])
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def _modules(package: str):
    return sorted((ROOT / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_package_is_in_the_rules_and_says_what_it_may_import():
    assert set(PACKAGES) == set(MAY_IMPORT)
    for package in PACKAGES:
        assert "May import" in (ROOT / package / "__init__.py").read_text(), package


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_what_it_may(package):
    import sys

    allowed = {f"collbench.{name}" for name in MAY_IMPORT[package] | {package, "errors",
                                                                      "environment", "versions"}}
    wrong = []
    for path in _modules(package):
        for line, name in _imports(path):
            top = name.split(".")[0]
            if top == "collbench":
                if name == "collbench":          # the version
                    continue
                if not any(name == a or name.startswith(a + ".") for a in allowed):
                    wrong.append(f"{path.name}:{line} imports {name}")
            elif (top not in sys.stdlib_module_names and top != "__future__"
                  and top not in THIRD_PARTY[package]):
                wrong.append(f"{path.name}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def _graph() -> dict:
    """Every collbench module and the collbench modules it imports, inside functions too (a
    name imported from a package counts as the package's import, a submodule's as the
    submodule's)."""
    graph = {}
    for path in sorted(ROOT.rglob("*.py")):
        graph[_module_name(path)] = {name for _, name in _imports(path)
                                     if name.startswith("collbench.")
                                     and name != _module_name(path)}
    return graph


def _cycles(graph: dict) -> list:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back():
    graph = _graph()
    assert ("collbench.launch.liveness.supervise" in graph
            and graph["collbench.cli.app"]), "the graph is read"
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_made_of_lazy_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


#: launch's rooms, lowest first: a room imports only rooms before it (and launch's own modules)
ROOMS = ["origin", "liveness", "network", "self_launch"]


def test_launch_rooms_import_only_rooms_below_them():
    wrong = []
    for room in ROOMS:
        below = ROOMS[:ROOMS.index(room) + 1]
        for path in _modules(f"launch/{room}"):
            for line, name in _imports(path):
                parts = name.split(".")
                if parts[:2] == ["collbench", "launch"] and len(parts) > 2 and parts[2] in ROOMS \
                        and parts[2] not in below:
                    wrong.append(f"{room}/{path.name}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


#: what is read from /proc's per-process records, and the one module that reads them
_PROC_STAT = re.compile(r"/proc/\{[^}]*\}/stat\b")


def test_one_reader_of_a_process_record():
    readers = sorted(str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
                     if _PROC_STAT.search(path.read_text()))
    assert readers == ["launch/processes.py"]


_VARIABLE = re.compile(r"^(COLLBENCH_[A-Z0-9_]+|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|"
                       r"LOCAL_WORLD_SIZE|GLOO_SOCKET_IFNAME|TORCHELASTIC_[A-Z_]+|SLURM_[A-Z_]+|"
                       r"PMIX?_[A-Z_]+|OMPI_COMM_WORLD_[A-Z_]+|COLUMNS)$")


def test_each_environment_variable_is_named_in_one_module():
    """Its name and meaning in one place: collbench's own and torch's in ``collbench.environment``,
    the launchers' that only the launcher detection reads there."""
    where = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and _VARIABLE.match(node.value)):
                where.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    assert "COLLBENCH_STATE" in where and "PMI_RANK" in where, "the scan finds variables"
    spread = {name: sorted(modules) for name, modules in where.items() if len(modules) > 1}
    assert spread == {}
    own = {name: sorted(modules) for name, modules in where.items()
           if name.startswith("COLLBENCH_") and modules != {"environment.py"}}
    assert own == {}


_REPORT_IMPORTS = """import atexit, os, sys

def _report():
    heavy = sorted(m for m in ("torch", "pandas") if m in sys.modules)
    with open(os.path.join(os.environ["IMPORT_REPORT"], str(os.getpid())), "w") as fh:
        fh.write(" ".join(heavy))

atexit.register(_report)
"""


def test_an_mpi_only_run_imports_neither_torch_nor_pandas(tmp_path):
    """Every process of a self-launched two-rank mpi run that writes its JSON and CSV files
    (``sitecustomize`` reports each one's modules at its exit): torch and pandas stay out."""
    site, report = tmp_path / "site", tmp_path / "report"
    site.mkdir()
    report.mkdir()
    (site / "sitecustomize.py").write_text(_REPORT_IMPORTS)
    env = {**os.environ, "PYTHONPATH": str(site), "IMPORT_REPORT": str(report)}
    proc = subprocess.run([sys.executable, "-m", "collbench", "allreduce", "-n", "2", "--backend",
                           "mpi", "--sizes",
                           "8-64", "--rounds", "1", "-o", "r.json", "-o", "r.csv"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.json").exists() and (tmp_path / "r.csv").exists()
    reports = {path.name: path.read_text() for path in report.iterdir()}
    assert len(reports) >= 3, reports                 # the launching process and both ranks
    assert set(reports.values()) == {""}, reports
