"""Groups measuring at once (--split, --split-mask), the mpi backend's buffers (--buffers) and
mpi-pickle's payloads (--payload): real launches, every result checked, the rows' new columns
read back; refusals in one line. Splits across hosts are in test_multihost.py."""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest

from collbench.results.loader import load_result
from collbench.benchmarks.registry import ORDER
from conftest import FAST, cli, load_json, mpirun

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


def _rows(path):
    return load_json(path)["rows"]


def _yielding(backends: str) -> list:
    """Four ranks on 2 cores: MPI ranks that yield while they wait (a run takes 2 s, not 5)."""
    return ["--thread-level", "multiple"] if "mpi" in backends else []


@pytest.mark.parametrize("backends", ["mpi,mpi-pickle", pytest.param("gloo", marks=needs_torch)])
def test_two_groups_measure_at_once_each_with_its_rows(tmp_path, backends):
    out = tmp_path / "r.json"
    proc = cli(["all", "--split", "2", "-n", "4", "--root", "1", "--backend", backends,
                *_yielding(backends), "--sizes", "8,4K", *FAST,
                "-o", str(out)], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out)
    moving = [r for r in rows if r["collective"] != "barrier"]
    assert moving and all(r["check"] == "ok" for r in moving)
    assert {(r["split"], r["group_size"], r["world_size"]) for r in rows} == {("2", 2, 4)}
    for backend in backends.split(","):
        for coll in {r["collective"] for r in rows}:
            groups = sorted(r["group"] for r in rows
                            if r["backend"] == backend and r["collective"] == coll
                            and r["size_bytes"] == (0 if coll == "barrier" else 4096))
            assert groups == [0, 1], (backend, coll, groups)
    assert all(r["group_hosts"] for r in rows)
    # the table shows the slowest group and the spread, once per size
    table = proc.stdout
    assert ("split 2, groups of 2" in table and "spread" in table
            and "slowest of the 2 groups" in table)


def test_mask_groups_the_ranks_that_agree_under_it(tmp_path):
    out = tmp_path / "r.json"
    proc = mpirun(4, ["allreduce", "--thread-level", "multiple", "--split-mask", "0x1", "--sizes",
                      "64", *FAST, "-o", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out)
    assert sorted((r["split"], r["group"], r["group_size"], r["check"]) for r in rows) == [
        ("mask:0x1", 0, 2, "ok"), ("mask:0x1", 1, 2, "ok")]


@pytest.mark.parametrize("args, says", [
    (["--split", "3"], "cannot make 3 equal groups of 4 ranks"),
    (["--split", "4"], "group of its own"),
    (["--split", "inter"], "all 4 ranks are on one host"),
    (["--split", "2", "--split-mask", "1"], "give one"),
    (["--split", "0"], "not intra, inter or a number of groups"),
    (["--split-mask", "zz"], "not a mask"),
])
def test_a_split_that_makes_no_sense_is_one_line(tmp_path, args, says):
    proc = cli(["allreduce", "-n", "4", "--sizes", "8", *FAST, "--no-save", *args], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr


def test_a_point_to_point_benchmark_takes_no_split(tmp_path):
    proc = cli(["pingpong", "--split", "2", "--no-save"], tmp_path)
    assert proc.returncode == 2 and "pingpong takes no --split" in proc.stderr


def test_the_mpi_backend_measures_on_the_buffers_asked_for(tmp_path):
    """numpy's buffers and MPI's own (MPI.Alloc_mem), side by side in one run of each command."""
    out, kinds = tmp_path / "r.json", {"numpy", "mpi"}
    proc = cli(["all", "--buffers", "numpy,mpi", "-n", "3", "--thread-level", "multiple",
                "--sizes", "8,64K", *FAST, "-o", str(out)], tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in _rows(out) if r["collective"] != "barrier"]
    assert rows and all(r["check"] == "ok" for r in rows)
    assert Counter(r["buffers"] for r in rows) == {k: len(rows) // 2 for k in kinds}
    for bench in ("pingpong", "bw", "sendrecv"):
        proc = cli([bench, "--buffers", "numpy,mpi", "--sizes", "8,64K", *FAST, "-o", str(out),
                    "--force"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert {(r["buffers"], r["check"]) for r in _rows(out)} == {(k, "ok") for k in kinds}


def test_cuda_buffers_without_a_gpu_are_skipped_with_a_note(tmp_path):
    proc = cli(["allreduce", "--buffers", "cuda", "--sizes", "8", *FAST, "--no-save"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "skipping backend mpi (cuda buffers): --buffers cuda" in proc.stderr


def test_comma_lists_measure_each_kind_of_buffers_and_payload_side_by_side(tmp_path):
    """One run, one backend set up once per choice: rows told apart by their buffers and payload
    columns, each checked, each a column of the table under the label its rows have."""
    out = tmp_path / "r.json"
    proc = cli(["allreduce", "--backend", "mpi,mpi-pickle", "--buffers", "numpy,mpi", "--payload",
                "array,list",
                "--sizes", "8,4K", *FAST, "-o", str(out), "--format", "markdown"], tmp_path,
               timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out)
    assert sorted((r["backend"], r["buffers"], r["payload"], r["size_bytes"])
                  for r in rows) == sorted(
        (backend, buffers, payload, size) for backend, buffers, payload in
        [("mpi", "numpy", ""), ("mpi", "mpi", ""), ("mpi-pickle", "numpy", "array"),
         ("mpi-pickle", "numpy", "list")]
        for size in (8, 4096))
    assert all(r["check"] == "ok" for r in rows)
    assert load_json(out)["metadata"]["settings"]["backends"] == [
        "mpi", "mpi (mpi buffers)", "mpi-pickle", "mpi-pickle (list payload)"]
    header = next(line for line in proc.stdout.splitlines() if "p50" in line)
    for label in ("mpi p50", "mpi (mpi buffers) p50", "mpi-pickle p50",
                  "mpi-pickle (list payload) p50"):
        assert label in header


@pytest.mark.parametrize("args,says", [
    (["--buffers", "numpy,gpu"], "'gpu' is not one of numpy, mpi, cuda"),
    (["--payload", "array,"], "'' is not one of array, bytes, list, dict"),
    (["--backend", "mpi", "--payload", "array,dict"], "--payload dict is for mpi-pickle"),
])
def test_a_bad_comma_list_is_one_line(tmp_path, args, says):
    proc = cli(["allreduce", *args, "--sizes", "8", *FAST, "--no-save"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_each_payload_is_sent_and_checked(tmp_path):
    """Every payload of the pickle API side by side, in one run of every collective and one of
    bw."""
    out, payloads = tmp_path / "r.json", ["array", "bytes", "list", "dict"]
    proc = cli(["all", "--backend", "mpi-pickle", "--payload", ",".join(payloads), "-n", "3",
                "--thread-level", "multiple", "--sizes", "12,3K", "--op", "max", *FAST, "-o",
                str(out)], tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in _rows(out) if r["collective"] != "barrier"]
    assert all(r["check"] == "ok" for r in rows)
    assert Counter(r["payload"] for r in rows) == {p: 2 * (len(ORDER) - 1) for p in payloads}
    proc = cli(["bw", "--backend", "mpi-pickle", "--payload", ",".join(payloads), "--sizes",
                "8,4K", *FAST, "-o", str(out), "--force"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {(r["payload"], r["check"]) for r in _rows(out)} == {(p, "ok") for p in payloads}


def test_a_backend_option_no_backend_of_the_run_takes_is_refused(tmp_path):
    proc = cli(["allreduce", "--backend", "mpi", "--payload", "list", "--no-save"], tmp_path)
    assert proc.returncode == 2 and "--payload list is for mpi-pickle" in proc.stderr
    proc = cli(["allreduce", "--backend", "mpi-pickle", "--buffers", "mpi", "--no-save"], tmp_path)
    assert proc.returncode == 2 and "--buffers mpi is for mpi" in proc.stderr


def test_older_files_read_with_the_usual_buffers_payload_and_whole_world(tmp_path):
    """A schema-4 file (before these columns) loads with the values its rows had."""
    old = tmp_path / "old.json"
    doc = load_json(_a_run(tmp_path))
    doc["schema_version"] = 4
    for row in doc["rows"]:
        for name in ("buffers", "payload", "split", "group", "group_size", "group_hosts",
                     "init_method"):
            del row[name]
    import json
    old.write_text(json.dumps(doc))
    run = load_result(old)
    assert {(r.backend, r.buffers, r.payload, r.split, r.group, r.group_size)
            for r in run.rows} == {
        ("mpi", "numpy", "", "", 0, 2), ("mpi-pickle", "numpy", "array", "", 0, 2)}


def _a_run(tmp_path):
    out = tmp_path / "new.json"
    proc = cli(["allreduce", "--backend", "mpi,mpi-pickle", "--sizes", "8", *FAST, "-o", str(out)],
               tmp_path)
    assert proc.returncode == 0, proc.stderr
    return out
