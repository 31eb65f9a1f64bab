"""gloo for real (self-launched, under mpiexec, under torchrun) and nccl's error paths."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collbench.benchmarks.registry import ORDER
from conftest import FAST, cli, gloo_lacks, load_json, mpirun
from collbench.results.loader import load_result

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SIZES = "8,4K,48K"
HAS_GPU = torch.cuda.is_available() and torch.cuda.device_count() > 0


def _assert_all_ok(rows, backends, n=2, without=()):
    assert {r["collective"] for r in rows} == set(ORDER) - set(without)
    assert {r["backend"] for r in rows} == set(backends)
    bad = [r for r in rows if r["check"] != ("skipped" if r["collective"] == "barrier" else "ok")
           or r["world_size"] != n]
    assert not bad, bad


def test_gloo_self_launched_every_collective(run_dir):
    proc = cli(["all", "-n", "2", "--backend", "gloo", "--sizes", SIZES, *FAST, "-v", "-o",
                "g.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    assert "local processes" in proc.stderr and "127.0.0.1" in proc.stderr
    doc = load_json(run_dir / "g.json")
    _assert_all_ok(doc["rows"], ["gloo"], without=gloo_lacks())
    assert doc["metadata"]["launcher"] == "collbench"
    assert doc["metadata"]["versions"]["torch"].startswith(torch.__version__.split("+")[0])


def test_gloo_under_mpiexec_every_collective(run_dir):
    proc = mpirun(2, ["all", "--backend", "gloo", "--sizes", SIZES, *FAST, "-o", "g.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    doc = load_json(run_dir / "g.json")
    _assert_all_ok(doc["rows"], ["gloo"], without=gloo_lacks())
    assert doc["metadata"]["launcher"] == "mpiexec"


def test_mpi_and_gloo_side_by_side(run_dir):
    proc = cli(["allreduce", "-n", "2", "--backend", "mpi,gloo", "--sizes", "1K-64K:x8", *FAST,
                "-o", "m.json"],
               run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "m.json")["rows"]
    assert [(r["backend"], r["size_bytes"]) for r in rows] == [
        ("mpi", 1024), ("mpi", 8192), ("mpi", 65536), ("gloo", 1024), ("gloo", 8192),
        ("gloo", 65536)]
    assert all(r["check"] == "ok" for r in rows)
    assert "gloo/mpi" in proc.stdout and proc.stdout.count("allreduce · float32 sum") == 1


def test_gloo_dtypes_and_ops_as_comma_lists(run_dir):
    dtypes, ops = ["float16", "int64", "float64", "int32"], ["sum", "prod", "max", "min"]
    proc = cli(["reduce_scatter", "-n", "2", "--backend", "gloo", "--sizes", "4K", "--dtype",
                ",".join(dtypes), "--op", ",".join(ops), *FAST, "-o", "r.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "r.json")["rows"]
    assert sorted((r["dtype"], r["op"]) for r in rows) == sorted(
        (d, o) for d in dtypes for o in ops)
    assert all(r["check"] == "ok" for r in rows)


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="no torchrun")
def test_gloo_under_torchrun_and_mpi_refused(run_dir):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    ok = subprocess.run([torchrun, "--nproc-per-node", "2", "-m", "collbench", "bcast", "--backend",
                         "gloo",
                         "--sizes", "1K", *FAST, "-o", "t.json"], cwd=run_dir, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    doc = load_json(run_dir / "t.json")
    assert doc["metadata"]["launcher"] == "torchrun" and doc["rows"][0]["check"] == "ok"
    bad = subprocess.run([torchrun, "--nproc-per-node", "2", "-m", "collbench", "bcast",
                          "--backend", "mpi",
                          "--sizes", "1K", "--no-save"], cwd=run_dir, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0
    assert "backend mpi needs an MPI launcher" in bad.stderr


def test_without_torch_gloo_is_one_line_exit_2(run_dir):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from collbench.cli.app import main\n"
            "main(['allreduce', '--backend', 'gloo', '-n', '2', '--no-save'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=run_dir, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert ("torch is not installed" in proc.stderr
            and 'pip install "collbench[torch]"' in proc.stderr)
    assert "Traceback" not in proc.stderr


def test_all_without_torch_skips_torch_backends(run_dir):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from collbench.cli.app import main\n"
            "main(['barrier', '--backend', 'all', '-n', '1', '--iters', '5', '-o', 'b.json'])")
    # One rank runs in this very process, where torch cannot be imported.
    proc = subprocess.run([sys.executable, "-c", code], cwd=run_dir, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "skipping backends gloo, nccl: torch is not installed" in proc.stderr
    assert {r["backend"] for r in load_json(run_dir / "b.json")["rows"]} == {"mpi", "mpi-pickle"}


@pytest.mark.skipif(HAS_GPU, reason="a CUDA device is visible")
def test_nccl_without_gpu_is_one_line_exit_2(run_dir):
    proc = cli(["allreduce", "--backend", "nccl"], run_dir)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "CUDA" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device visible")
def test_nccl_on_gpu(run_dir):
    n = torch.cuda.device_count()
    proc = cli(["all", "--backend", "nccl,gloo", "-n", str(n), "--sizes", "1K-1M:x32", *FAST, "-o",
                "n.json"],
               run_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "n.json")["rows"]
    _assert_all_ok(rows, ["nccl", "gloo"], n)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device visible")
def test_nccl_every_timing_side_by_side_on_gpu(run_dir):
    """latency, throughput, graph (CUDA graph replays) and device (CUDA events, the stream held)
    for every collective, checked on the GPU, with the timings side by side and the overhead."""
    n = torch.cuda.device_count()
    proc = cli(["all", "--backend", "nccl", "-n", str(n), "--sizes", "1K-16M:x16", "--timing",
                "latency,throughput,graph,device", "--iters", "5", "--warmup", "2", "--rounds", "1",
                "-o", "t.json"],
               run_dir, timeout=300, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    rows = load_json(run_dir / "t.json")["rows"]
    for timing in ("latency", "throughput", "graph", "device"):
        mine = [r for r in rows if r["timing"] == timing]
        # torch's barrier synchronises on the host: it takes the host's timings only, said once
        _assert_all_ok(mine, ["nccl"], n,
                       without=() if timing in ("latency", "throughput") else ("barrier",))
        assert all(r["time_us_p50"] > 0 for r in mine)
    assert proc.stderr.count("barrier: --timing graph, device not taken") == 1
    # NCCL queues nothing for an in-place collective on one rank: said, not warned
    if n == 1:
        for name in ("allreduce", "bcast", "reduce"):
            assert (f"{name} on nccl, in-place, graph timing: the captured calls put no work on "
                    "the GPU" in proc.stderr)
        assert "CUDA Graph is empty" not in proc.stderr
    graphs = [d["calls_per_sample"] for r in rows if r["timing"] == "graph"
              for d in r["round_details"]]
    assert graphs and all(1 <= k <= 100 for k in graphs)
    assert "timings side by side" in proc.stdout and "overhead µs" in proc.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device visible")
def test_nccl_wrong_result_is_caught_on_the_gpu(run_dir, plugin_env):
    proc = cli(["allreduce", "-n", "1", "--backend", "faulty-nccl", "--sizes", "1K,64M", *FAST,
                "-o", "c.json"],
               run_dir, env={**plugin_env, "FAULTY_CORRUPT": "0"})
    assert proc.returncode == 1
    assert ("CHECK FAILED: allreduce on faulty-nccl" in proc.stderr
            and "3 wrong elements" in proc.stderr)
    assert [r.check for r in load_result(run_dir / "c.json").rows] == ["wrong:3", "wrong:3"]


def test_gloo_under_mpiexec_uses_master_addr_when_set(run_dir):
    import socket

    from collbench.launch.network.addresses import free_port
    ok = mpirun(2, ["bcast", "--backend", "gloo", "--sizes", "4K", *FAST, "-o", "g.json"], run_dir,
                env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    assert ok.returncode == 0, ok.stderr
    assert load_json(run_dir / "g.json")["rows"][0]["check"] == "ok"
    # The same run pointed at a port something else holds fails: the variables were used.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        bad = mpirun(2, ["bcast", "--backend", "gloo", "--sizes", "4K", *FAST, "--no-save",
                         "--timeout", "8"],
                     run_dir, env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
                     timeout=120)
    # Rank 0 cannot host the store there: it finds so before torch tries, and every rank ends
    # with its one line (bad input, exit 2).
    assert bad.returncode == 2, bad.stderr
    assert (f"collbench: error: MASTER_PORT {port}: rank 0 cannot listen there"
            in bad.stderr), bad.stderr
    assert "Traceback" not in bad.stderr and "DistNetworkError" not in bad.stderr


def test_bfloat16_on_gloo_checks_every_collective_and_mpi_refuses_it(run_dir):
    pytest.importorskip("torch")
    proc = cli(["all", "-n", "3", "--backend", "gloo", "--dtype", "bfloat16", "--sizes", "48,48K",
                *FAST, "-o", "b.json"], run_dir)
    assert proc.returncode == 0, proc.stderr
    rows = load_result(run_dir / "b.json").rows
    assert len(rows) == 9 * 2 + 1 and {r.dtype for r in rows} == {"bfloat16"}
    assert all(r.check == ("skipped" if r.collective == "barrier" else "ok") for r in rows)
    both = cli(["all", "-n", "2", "--backend", "mpi,gloo", "--dtype", "bfloat16", "--sizes", "48",
                *FAST, "-o", "m.json"], run_dir)
    assert both.returncode == 0, both.stderr
    pairs = {(r.collective, r.backend) for r in load_result(run_dir / "m.json").rows}
    # no data: it runs
    assert ("barrier", "mpi") in pairs and {c for c, b in pairs if b == "mpi"} == {"barrier"}
    # one note, not 8
    assert (both.stdout + both.stderr).count("numpy has no bfloat16") == 1
    refused = cli(["allreduce", "-n", "2", "--backend", "mpi", "--dtype", "bfloat16", *FAST],
                  run_dir)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        "collbench: error: allreduce on mpi with bfloat16 sum: mpi4py sends numpy arrays and numpy "
        "has no bfloat16; use gloo or nccl")
