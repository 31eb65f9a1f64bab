import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collbench.launch.self_launch.mpiexec import find_mpiexec, mpiexec_command

def gloo_lacks() -> set:
    """The collectives whose calls gloo has not (uneven pieces): skipped with a note under all."""
    from collbench.benchmarks.registry import COLLECTIVES
    return {name for name, c in COLLECTIVES.items() if "gloo" in c.lacks}


FAST = ["--iters", "10", "--warmup", "1", "--rounds", "1"]   # one round: tests of rounds say so

# The width of the tests' output is theirs to choose: a COLUMNS left in the environment (a shell's
# export, pytest-xdist's workers set 80) would make collbench drop the columns tests look for.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def pytest_configure(config):
    """``pytest -m "not live"``: the tests that run in this process alone. A test is live when
    it starts a process (real ranks, a launcher, the command line in a subprocess, pip): rather
    than a list kept by hand, any attempt to start one skips the test there, fixtures of a wider
    scope included, so a new test is sorted by what it does."""
    config.addinivalue_line("markers", "live: starts a process (skipped as soon as it tries under "
                                       "-m 'not live')")
    if "not live" in (config.getoption("markexpr", "") or ""):
        # pytest-xdist's controller starts the workers, and runs no test: the workers skip
        if not _xdist_controller(config):
            _processes_skip()
        # a line per live test skipped would bury the answer: they are counted at the end instead
        config.option.reportchars = ((config.option.reportchars or "").replace("a", "fEX")
                                     .replace("s", ""))


def pytest_sessionstart(session):
    """Compile collbench's bytecode before any test starts a process. An editable install keeps
    no ``.pyc``, and under ``PYTHONDONTWRITEBYTECODE`` (the development VM sets it) every process
    compiled every module again: 0.75 of the 1.85 CPU-seconds of a two-rank launch of one size.
    A pip install compiles them the same way; a source newer than its ``.pyc`` still wins."""
    import compileall

    import collbench
    compileall.compile_dir(Path(collbench.__file__).parent, quiet=1)


def pytest_terminal_summary(terminalreporter, config):
    live = [r for r in terminalreporter.stats.get("skipped", [])
            if "live: it starts a process" in str(r.longrepr)]
    if live:
        terminalreporter.write_line(f"{len(live)} live tests skipped where they started a process "
                                    "(run the whole suite for them)")


def _xdist_controller(config) -> bool:
    return not hasattr(config, "workerinput") and (config.getoption("dist", "no") or "no") != "no"


def _processes_skip() -> None:
    import multiprocessing.context
    import platform

    platform.platform()        # asks uname -p once and keeps it (pytest-xdist's worker asks it)

    def live(*_args, **_kwargs):
        pytest.skip("live: it starts a process", allow_module_level=True)

    subprocess.Popen._execute_child = live
    os.fork = os.posix_spawn = os.posix_spawnp = os.system = live
    multiprocessing.context.BaseContext.Process = live


def cli(args, cwd, *, timeout=120, env=None, input=None):
    """Run ``python -m collbench ARGS`` for real; returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                 "COLLBENCH_LAUNCHED"):
        full_env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "collbench", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, input=input)


def mpirun(n, args, cwd, *, timeout=180, env=None):
    """Run collbench under a real ``mpiexec -n N`` (the one beside this Python)."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    full_env = {**os.environ, **(env or {})}
    cmd = mpiexec_command(mpiexec, n, [sys.executable, "-m", "collbench", *args], full_env)
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def tmp_of_its_own(args, cwd) -> tuple:
    """(a folder, the shell line) that runs ``collbench ARGS`` with /tmp as an overlay whose
    upper layer is the folder's ``upper`` (on /dev/shm: a layer may not lie in the /tmp it
    covers); (None, None) where that cannot be (not root, no unshare or overlay). What MPICH's
    mpiexec leaves in /tmp (``hydra_hwloc_xmlfile_*``) then lands in the layer, where the files of
    jobs beside it, the suite's other workers' among them, cannot be taken for its own. The
    line execs collbench in the end: its pid is collbench's. Remove the folder when done."""
    import shlex
    import shutil
    import tempfile

    if os.geteuid() != 0 or shutil.which("unshare") is None or not os.path.isdir("/dev/shm"):
        return None, None
    layer = Path(tempfile.mkdtemp(prefix="cbov-", dir="/dev/shm"))
    (layer / "upper").mkdir()
    (layer / "work").mkdir()
    mount = (f"mount -t overlay overlay -o lowerdir=/tmp,upperdir={layer}/upper,"
             f"workdir={layer}/work /tmp")
    try:                                  # under -m "not live" starting it skips the test
        probe = subprocess.run(["unshare", "--mount", "sh", "-c", mount], capture_output=True)
    except BaseException:
        shutil.rmtree(layer, ignore_errors=True)
        raise
    if probe.returncode != 0:
        shutil.rmtree(layer, ignore_errors=True)
        return None, None
    return layer, (f"exec unshare --mount sh -c '{mount} && cd \"$0\" && exec \"$@\"' "
                   + shlex.join([str(cwd), sys.executable, "-m", "collbench", *args]))


def load_json(path):
    return json.loads(Path(path).read_text())


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path


@pytest.fixture(scope="session")
def plugin_env(tmp_path_factory):
    """The test plugins of ``tests/plugin`` installed for real (``pip install --target``), as a
    third-party backend would be; returns the environment that makes them importable."""
    import shutil

    source = tmp_path_factory.mktemp("plugin-source") / "plugin"
    shutil.copytree(Path(__file__).parent / "plugin", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = tmp_path_factory.mktemp("plugin-site")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
           str(source)]
    try:
        import setuptools  # noqa: F401
        # no download when the build backend is here already
        cmd.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture(autouse=True)
def _a_job_per_test():
    """A process says the line that ends its job once (``notes.say``); tests that run a guardian
    or a coordinator in this process each stand for a job of their own."""
    from collbench.launch import notes

    notes._said_here.clear()
    yield
