"""The pages under the host buffers (--pages): the same for every buffer whatever its size,
recorded with what the kernel gave, and warned of by compare where two runs differ.

numpy alone asks for huge pages from 4 MiB of array, so a row used to depend on the largest size
of its run (bcast 1 MiB at MPI_THREAD_MULTIPLE: 82 µs in a sweep to 2 MiB, 44 µs to 4 MiB).
Real ranks under collbench's own launch and under a real mpiexec; the kernel's own account of
the pages (smaps_rollup) is what is checked, not collbench's word.
"""

import json

import numpy as np
import pytest

from conftest import cli, load_json, mpirun
from collbench.analysis.comparability import PAGES_BEFORE, metadata_warnings, pages as pages_of
from collbench.backends import pages
from collbench.backends.devices import HostDevice
from collbench.benchmarks.dtypes import DTYPES
from collbench.results.loader import load_result

MIB = 1024 * 1024
SETTING = pages.kernel_setting()
HAS_HUGE = SETTING in ("always", "madvise")
QUICK = ["--iters", "5", "--warmup", "1", "--rounds", "1", "-q"]


def huge_kib(array) -> int:
    """KiB of the mappings under ``array`` on huge pages, from /proc/self/smaps: the array's own,
    whatever the kernel does to the rest of the process meanwhile (khugepaged may collapse
    memory that earlier tests advised)."""
    start, end = array.ctypes.data, array.ctypes.data + array.nbytes
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if "-" in first and not first.endswith(":"):
            low, high = (int(part, 16) for part in first.split("-"))
            inside = low < end and start < high
        elif inside and first == "AnonHugePages:":
            total += int(line.split()[1])
    return total


@pytest.fixture
def policy():
    """Sets this process's policy for one test and puts the default back."""
    yield pages.use
    pages.use(pages.DEFAULT)


@pytest.mark.skipif(not HAS_HUGE,
                    reason=f"the kernel gives no transparent huge pages ({SETTING or 'unknown'})")
def test_huge_asks_the_kernel_for_huge_pages_and_gets_them(policy):
    policy("huge")
    array = pages.zeros(16 * MIB)
    got = huge_kib(array)
    assert got >= 2048, f"16 MiB advised huge, {got} KiB on huge pages"
    assert pages.huge_now() >= got          # what a round records: the process's whole count
    assert (array.ctypes.data % pages.huge_size() == 0 and array.nbytes == 16 * MIB
            and not array.any())


@pytest.mark.skipif(SETTING != "madvise",
                    reason="only where the kernel gives huge pages to those who ask")
def test_small_keeps_every_buffer_on_small_pages_and_numpy_stops_asking(policy):
    policy("small")
    buffers = HostDevice().allocate(4 * MIB, 4 * MIB, DTYPES["float32"], in_place=False)
    # numpy alone would ask from 4 MiB. Its array is 64 MiB so that malloc maps it afresh: a
    # smaller one may come from memory this process's earlier tests advised (seen under xdist)
    kept = [pages.zeros(16 * MIB), np.ones(64 * MIB, np.uint8),
            buffers.send, buffers.recv]
    assert [huge_kib(array) for array in kept] == [0, 0, 0, 0]


def test_the_kernels_setting_is_read_as_the_word_it_chose(tmp_path, monkeypatch):
    path = tmp_path / "enabled"
    path.write_text("always [madvise] never\n")
    monkeypatch.setattr(pages, "SETTING", path)
    assert pages.kernel_setting() == "madvise"
    monkeypatch.setattr(pages, "SETTING", tmp_path / "absent")
    assert pages.kernel_setting() == ""
    with pytest.raises(ValueError):
        pages.use("giant")


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """bcast of 8 MiB self-launched on small and on huge pages, and once under a real mpiexec."""
    folder = tmp_path_factory.mktemp("pages")
    for name in ("small", "huge"):
        proc = cli(["bcast", "-n", "2", "--sizes", "8M", "--pages", name, "-o", f"{name}.json",
                    *QUICK], folder)
        assert proc.returncode == 0, proc.stderr
    proc = mpirun(2, ["bcast", "--sizes", "8M", "--pages", "huge", "-o", "launcher.json", *QUICK],
                  folder)
    assert proc.returncode == 0, proc.stderr
    return folder


@pytest.mark.parametrize("name", ["small", "huge", "launcher"])
def test_each_round_records_the_pages_asked_the_kernels_setting_and_what_the_buffers_got(
        both, name):
    doc = load_json(both / f"{name}.json")
    asked = "small" if name == "small" else "huge"
    assert doc["metadata"]["settings"]["pages"] == asked
    (record,) = doc["metadata"]["rounds"]
    assert record["pages"] == asked and record["transparent_hugepages"] == [SETTING, SETTING]
    got = record["huge_pages_kib"]
    assert len(got) == 2 and all(isinstance(kib, int) for kib in got)
    if asked == "huge" and HAS_HUGE:          # each rank's 8 MiB buffer
        assert all(kib >= 2048 for kib in got), got
    if asked == "small" and SETTING == "madvise":
        assert got == [0, 0]


def test_compare_warns_where_the_buffers_were_on_other_pages(both, tmp_path):
    small, huge = load_result(both / "small.json"), load_result(both / "huge.json")
    assert (pages_of(small), pages_of(huge)) == ("small", "huge")
    assert any("other pages: small in a, huge in b" in w
               for w in metadata_warnings(small, huge, "a", "b"))
    assert not any("pages" in w
                   for w in metadata_warnings(huge, load_result(both / "launcher.json"), "a", "b"))
    # a file written before collbench chose the pages: numpy's, said
    doc = load_json(both / "small.json")
    del doc["metadata"]["settings"]["pages"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = load_result(tmp_path / "old.json")
    assert pages_of(old) == PAGES_BEFORE
    proc = cli(["compare", str(tmp_path / "old.json"), str(both / "small.json")], tmp_path)
    assert f"the buffers were on other pages: {PAGES_BEFORE}" in proc.stderr


def test_a_collective_that_moves_no_data_takes_no_pages(tmp_path):
    proc = cli(["barrier", "-n", "2", "--pages", "huge", "--no-save"], tmp_path)
    assert proc.returncode == 2 and "--pages" in proc.stderr and "moves no data" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_huge_pages_asked_of_a_kernel_that_gives_none_is_said_per_host():
    from collbench.run.runner import _without_huge_pages

    assert _without_huge_pages("small", ["a", "b"], ["never", "never"]) == []
    assert _without_huge_pages("huge", ["a", "b"], ["madvise", "always"]) == []
    (note,) = _without_huge_pages("huge", ["a", "a", "b"], ["never", "never", "madvise"])
    assert (note.startswith("--pages huge: the kernel of a gives no transparent huge pages")
            and "small pages" in note)
