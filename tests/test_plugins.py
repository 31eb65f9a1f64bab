"""Backends as plugins: the package in tests/plugin, installed with pip, found through the
``collbench.backends`` entry points by a real collbench process."""

import json
import os
import subprocess
import sys

import pytest

from conftest import FAST, cli, load_json, mpirun
from collbench.results.loader import load_result

pytestmark = pytest.mark.mpi


def test_a_plugin_backend_runs_through_its_entry_point(run_dir, plugin_env):
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi,plain-mpi", "--sizes", "8,1K", *FAST,
                "-o", "p.json"],
               run_dir, env=plugin_env)
    assert proc.returncode == 0, proc.stderr
    rows = load_result(run_dir / "p.json").rows
    assert [(r.backend, r.size_bytes, r.check) for r in rows] == [
        ("mpi", 8, "ok"), ("mpi", 1024, "ok"), ("plain-mpi", 8, "ok"), ("plain-mpi", 1024, "ok")]
    assert "plain-mpi/mpi" in proc.stdout          # side by side, as any two backends


def test_a_plugin_backend_under_a_users_mpiexec(run_dir, plugin_env):
    proc = mpirun(2, ["bcast", "--backend", "plain-mpi", "--sizes", "4K", *FAST, "-o", "b.json"],
                  run_dir, env=plugin_env)
    assert proc.returncode == 0, proc.stderr
    (row,) = load_result(run_dir / "b.json").rows
    assert (row.backend, row.world_size, row.check) == ("plain-mpi", 2, "ok")


def test_env_lists_plugins_and_why_a_broken_one_cannot_run(run_dir, plugin_env):
    shown = cli(["env"], run_dir, env={**plugin_env, "COLUMNS": "200"})
    assert (shown.returncode == 0 and "backend plain-mpi" in shown.stdout
            and "backend broken" in shown.stdout)
    code = ("import json; from collbench.cli.env import environment_report; "
            "print(json.dumps(environment_report()))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=run_dir,
                          env={**os.environ, **plugin_env},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["backend plain-mpi"] == "usable (plugin collbench_test_plugins:PlainMpi)"
    assert info["backend broken"].startswith("unusable: plugin "
                                             "collbench_test_plugins_missing:Nothing did not "
                                             "import (ModuleNotFoundError")
    assert "not a subclass of collbench.backends.base.Backend" in info["backend not-a-backend"]
    assert info["backend mpi"] == "usable"          # a plugin cannot take a built-in name
    assert "backend all" not in info                # nor the word that means every backend


def test_all_skips_plugins_that_cannot_run_with_a_note(run_dir, plugin_env):
    proc = cli(["barrier", "-n", "2", "--backend", "all", *FAST, "--no-save"], run_dir,
               env={**plugin_env, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    for name in ("broken", "not-a-backend", "raising-check", "unfinished"):
        assert f"skipping backend {name}: " in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name,message", [
    ("broken",
     "backend broken is not usable: plugin collbench_test_plugins_missing:Nothing did not import"),
    ("not-a-backend", "is not a subclass of collbench.backends.base.Backend"),
    ("raising-check", "backend raising-check is not usable: its availability check failed "
                      "(RuntimeError: cannot tell)"),
    ("unfinished", "plugin collbench_test_plugins:Unfinished does not implement barrier, bind, "
                   "rank, setup, size"),
    ("plain-mpj", "unknown backend 'plain-mpj'; choose from: mpi, mpi-pickle, gloo, nccl, broken,"),
])
def test_a_plugin_that_cannot_run_is_one_line_and_exit_2(run_dir, plugin_env, name, message):
    proc = cli(["allreduce", "-n", "2", "--backend", name, "--sizes", "8", *FAST], run_dir,
               env=plugin_env)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_plugin_whose_answers_fail_is_named_in_one_line(run_dir, plugin_env):
    proc = cli(["allreduce", "-n", "2", "--backend", "raising-supports", "--sizes", "8", *FAST],
               run_dir, env=plugin_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("collbench: error: allreduce on raising-supports with float32 "
                                   "sum: its supports() failed (KeyError: 'sum')")
    proc = cli(["allreduce", "--backend", "text-ranks", "--sizes", "8", *FAST], run_dir,
               env=plugin_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("collbench: error: backend plugin text-ranks: its "
                                   "self_launch_ranks() gave '2', not a number of ranks "
                                   "(1 or more) or None")
    proc = cli(["all", "-n", "2", "--backend", "mpi,raising-supports", "--sizes", "8", *FAST,
                "--no-save"],
               run_dir, env=plugin_env)
    assert proc.returncode == 0, proc.stderr
    assert "on raising-supports: its supports() failed (KeyError: 'sum'); skipped" in proc.stderr


@pytest.mark.parametrize("odd,said",
                         [("\x1be[31mred", "buffers '\\x1be[31mred' is not printable text"),
                                      ("x" * 300,
                                       "is not printable text of at most 256 characters"),
                                      ("#5", "buffers 5 is not printable text")])
def test_a_plugin_whose_rows_its_loader_would_refuse_is_declined(run_dir, plugin_env, odd, said):
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi,odd-axes", "--sizes", "8", *FAST, "-o",
                "o.json"], run_dir,
               env={**plugin_env, "ODD_AXES": odd})
    assert proc.returncode == 0, proc.stderr
    assert "skipping backend odd-axes: its row_axes() gave " in proc.stderr and said in proc.stderr
    assert "\x1b" not in proc.stderr + proc.stdout
    # the file reads back
    assert {r.backend for r in load_result(run_dir / "o.json").rows} == {"mpi"}


def test_an_unsupported_combination_is_refused_before_any_rank_starts(run_dir, plugin_env):
    proc = cli(["allreduce", "-n", "2", "--backend", "no-prod-mpi", "--op", "prod", "--sizes", "8",
                *FAST], run_dir,
               env=plugin_env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("collbench: error: allreduce on no-prod-mpi with float32 prod: "
                                   "no-prod-mpi has no product reduction")
    # nothing launched, nothing written
    assert "rank" not in proc.stderr and not list(run_dir.iterdir())


def test_under_all_an_unsupported_combination_is_a_note_and_the_rest_runs(run_dir, plugin_env):
    proc = cli(["all", "-n", "2", "--backend", "mpi,no-prod-mpi", "--op", "prod", "--sizes", "1K",
                *FAST, "-o", "a.json"], run_dir, env=plugin_env)
    assert proc.returncode == 0, proc.stderr
    result = load_result(run_dir / "a.json")
    pairs = {(r.collective, r.backend) for r in result.rows}
    assert {("allreduce", "mpi"), ("reduce", "mpi"), ("reduce_scatter", "mpi"),
            ("bcast", "no-prod-mpi"),
            ("barrier", "no-prod-mpi")} <= pairs
    assert not {c for c, b in pairs if b == "no-prod-mpi"} & {"allreduce", "reduce",
                                                              "reduce_scatter", "reduce_scatterv"}
    note = ("allreduce, reduce, reduce_scatter, reduce_scatterv on no-prod-mpi: no-prod-mpi has no "
            "product reduction; skipped")
    assert note in result.notes and (proc.stderr + proc.stdout).count("no product reduction") == 1
    assert all(r.check in ("ok", "skipped") for r in result.rows)


def test_a_plugin_timing_is_one_module_and_one_entry_point(run_dir, plugin_env):
    """``two`` (tests/plugin/collbench_test_timing.py and one line of its pyproject.toml): taken
    by --timing beside a built-in timing, on every host backend, its rows checked and recorded,
    its k the harness's, listed in --help."""
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi", "--timing", "latency,two", "--sizes",
                "8,1K", *FAST,
                "-o", "t.json"], run_dir, env={**plugin_env, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    rows = load_result(run_dir / "t.json").rows
    assert sorted((r.timing, r.size_bytes, r.check) for r in rows) == [
        ("latency", 8, "ok"), ("latency", 1024, "ok"), ("two", 8, "ok"), ("two", 1024, "ok")]
    details = [d for r in load_json(run_dir / "t.json")["rows"] if r["timing"] == "two"
               for d in r["round_details"]]
    assert details and {d["calls_per_sample"] for d in details} == {2}
    assert "· two" in proc.stdout
    shown = cli(["allreduce", "--help"], run_dir, env={**plugin_env, "COLUMNS": "200"})
    assert "latency|throughput|graph|device|two|both" in shown.stdout
    unknown = cli(["allreduce", "--timing", "three", "--no-save"], run_dir, env=plugin_env)
    assert unknown.returncode == 2 and "'three' is not one of" in unknown.stderr
