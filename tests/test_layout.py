"""The layout holds: each package imports only what its ``__init__`` says it may, and nothing but
the backends imports mpi4py or torch. (Modules are cut by concept, not by a line count.)"""

import ast
from pathlib import Path

import pytest

import collbench

ROOT = Path(collbench.__file__).parent
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())

#: what each package may import of collbench besides itself and ``collbench.errors`` (as its
#: ``__init__`` docstring says); a name covers its submodules
MAY_IMPORT = {
    "benchmarks": set(),
    "measure": {"benchmarks", "backends.base"},
    "backends": {"benchmarks", "launch", "results.records"},
    "launch": {"run.rounds", "results.journal", "results.recover"},
    "results": {"measure", "benchmarks.registry"},
    "analysis": {"measure", "results", "benchmarks"},
    "run": {"measure", "benchmarks", "backends", "launch", "results"},
    "cli": {"run", "analysis", "results", "measure", "benchmarks", "backends", "launch"},
}
#: third-party modules a package may import at all (the standard library always)
THIRD_PARTY = {
    "benchmarks": {"numpy"},
    "measure": {"numpy"},
    "backends": {"numpy", "mpi4py", "torch"},
    "launch": set(),          # a guardian forks before anything heavy is imported
    "results": {"numpy", "rich"},
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
    return sorted((ROOT / package).glob("*.py"))


def test_every_package_is_in_the_rules_and_says_what_it_may_import():
    assert set(PACKAGES) == set(MAY_IMPORT)
    for package in PACKAGES:
        assert "May import" in (ROOT / package / "__init__.py").read_text(), package


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_what_it_may(package):
    import sys

    allowed = {f"collbench.{name}" for name in MAY_IMPORT[package] | {package, "errors"}}
    wrong = []
    for path in _modules(package):
        for line, name in _imports(path):
            top = name.split(".")[0]
            if top == "collbench":
                if name == "collbench":          # the version
                    continue
                if not any(name == a or name.startswith(a + ".") for a in allowed):
                    wrong.append(f"{path.name}:{line} imports {name}")
            elif top not in sys.stdlib_module_names and top != "__future__" and top not in THIRD_PARTY[package]:
                wrong.append(f"{path.name}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)

