"""The README's quick-start test command and .ci/run must never drift apart."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _last_command(text: str) -> str:
    return [line for line in text.splitlines() if line.startswith("python3 -m venv")][-1].strip()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert _last_command(ci) in readme.splitlines()


def test_readme_quick_start_runs_all_on_embedded_mpich():
    readme = (ROOT / "README.md").read_text()
    first = [line for line in readme.splitlines() if line.startswith("python3 -m venv")][0]
    assert '".[mpich]"' in first and "collbench all -n 2" in first
