import pytest

from collbench.cli.app import cli
from conftest import cli as run_cli

SUBCOMMANDS = sorted(cli.commands)


def test_top_level_help(tmp_path):
    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0
    for name in ("allreduce", "all", "env"):
        assert name in proc.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help(name, tmp_path):
    proc = run_cli([name, "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Usage: collbench {name}")
    assert "Traceback" not in proc.stderr
    assert "None]" not in proc.stdout          # -n's help said "[x<=None]"


def test_version(tmp_path):
    proc = run_cli(["--version"], tmp_path)
    assert proc.returncode == 0 and "collbench" in proc.stdout


def test_help_does_not_import_torch_or_mpi(tmp_path):
    import subprocess
    import sys
    code = ("import sys; from collbench.cli.app import main\ntry:\n    main(['allreduce', "
            "'--help'])\nexcept SystemExit:\n    pass\nbad = [m for m in ('torch', 'mpi4py.MPI', "
            "'matplotlib', 'pandas') if m in sys.modules]\nprint('IMPORTED', bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert "IMPORTED []" in out.stdout, out.stdout + out.stderr


def test_env_reports_launcher_mpi_and_backends(tmp_path):
    proc = run_cli(["env"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for fragment in ("launcher", "mpiexec", "MPI library", "backend mpi", "backend gloo",
                     "backend nccl"):
        assert fragment in proc.stdout


def test_env_says_what_every_torch_run_would_refuse(tmp_path):
    bad = run_cli(["env"], tmp_path, env={"MASTER_PORT": "notaport", "COLUMNS": "300"})
    good = run_cli(["env"], tmp_path, env={"COLUMNS": "300"})
    assert bad.returncode == 0 and "MASTER_PORT='notaport' is not a TCP port" in bad.stdout
    assert "rendezvous" not in good.stdout
