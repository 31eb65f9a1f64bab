"""The README's quick-start commands, .ci/run and the CI recipe of docs/ci-recipe.md must never
drift apart."""

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


def test_the_readme_stays_a_front_page_and_its_links_lead_somewhere():
    """It had grown to 13.8 KB; the rest belongs in docs/."""
    import re

    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 12 * 1024
    for target, anchor in re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", readme):
        text = (ROOT / target).read_text()
        if anchor:
            headings = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                        for h in re.findall(r"^#+ (.*)$", text, re.M)}
            assert anchor in headings, f"{target}#{anchor}"


def _recipe_commands(recipe: str) -> list:
    """docs/ci-recipe.md's recipe: the baseline's commands, then the GitHub Actions job's, in order
    (a YAML step's ``run: `` taken off)."""
    part = recipe.split("## The baseline", 1)[1].split("## Choosing the numbers", 1)[0]
    lines = [line.strip() for line in part.splitlines()]
    lines = [line[len("run: "):] if line.startswith("run: ") else line for line in lines]
    return [line.split("   #")[0].strip() for line in lines
            if line.startswith(("collbench ", "git add"))]


def test_ci_recipe_makes_its_baseline_first_and_its_gate_runs(tmp_path):
    """The recipe's own commands, run here in order with fewer sizes and rounds (the recipe's
    take minutes): the baseline exists before the gate reads it, the gate exits 0, 1 or 3, never
    2."""
    import os
    import subprocess
    import sys

    recipe = (ROOT / "docs" / "ci-recipe.md").read_text()
    commands = _recipe_commands(recipe)
    assert ([c.split()[1] for c in commands if c.startswith("collbench")]
            == ["all", "all", "all", "merge", "report", "all", "compare"])
    assert commands.index(next(c for c in commands if "merge" in c)) < commands.index(
        next(c for c in commands if "compare" in c))
    (tmp_path / "results").mkdir()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    codes = []
    for command in commands:
        if command.startswith("git "):
            continue
        shrunk = (command.replace("--sizes 8-1M", "--sizes 8,64")
                  .replace("--rounds 10", "--rounds 2 --max-time 0.1"))
        proc = subprocess.run(["bash", "-c", "set -o pipefail; " + shrunk], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        codes.append(proc.returncode)
        assert proc.returncode in ((0, 1, 3) if "compare" in command
                                   else (0,)), (shrunk, proc.stderr)
    assert (tmp_path / "results" / "baseline.json").exists()
    assert (tmp_path / "summary.md").read_text().startswith("## collbench compare:")


def test_ci_recipe_leads_with_both_versions_in_one_job_and_its_step_runs(tmp_path):
    """The recipe's first job: main and the change built side by side, measured by collbench ab
    in one job. Its command runs here with this Python as both sides, fewer sizes, rounds and
    pairs."""
    import os
    import subprocess
    import sys

    recipe = (ROOT / "docs" / "ci-recipe.md").read_text()
    lead = recipe.split("## The recipe: both versions in one job", 1)[1].split("\n## ", 1)[0]
    assert "ref: main" in lead and "main/bin/pip install" in lead and "pr/bin/pip install" in lead
    (step,) = [line.strip() for line in lead.splitlines() if "collbench ab " in line]
    assert "--a-python main/bin/python" in step and "--b-python pr/bin/python" in step
    shrunk = (step.replace("pr/bin/collbench", f"{sys.executable} -m collbench")
              .replace("main/bin/python", sys.executable).replace("pr/bin/python", sys.executable)
              .replace("--sizes 8-1M", "--sizes 8,64")
              .replace("--rounds 10", "--rounds 2 --max-time 0.1")
              .replace(" -- all", " --max-rounds 2 -- all"))       # adding pairs: test_ab.py
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    for name in ("PMI_RANK", "PMI_SIZE", "COLLBENCH_LAUNCHED"):
        env.pop(name, None)
    proc = subprocess.run(["bash", "-c", "set -o pipefail; " + shrunk], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1, 3), (shrunk, proc.stderr)
    assert (tmp_path / "ab-main.json").exists() and (tmp_path / "ab-pr.json").exists()
    assert (tmp_path / "summary.md").read_text().startswith("## collbench compare:")
