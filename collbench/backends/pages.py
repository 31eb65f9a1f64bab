"""The pages under a rank's host buffers: small (4 KiB) or huge (transparent huge pages).

Left to itself, numpy gives huge pages only to arrays of 4 MiB or more, so a row's time
depended on the other sizes of its run. Here the pages are a choice (``--pages``), made the
same way for every buffer whatever its size, and recorded. The advice is given before the
buffer is first written, so the pages it faults in follow it. Why, and the figures:
docs/methodology.md, "The pages under the buffers"; benchmarks/README.md, "The buffers' pages".
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path
from typing import Optional

import numpy as np

POLICIES = ("small", "huge")
DEFAULT = "small"
PAGE = mmap.PAGESIZE
#: the kernel's switch, and the size of one of its huge pages
SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_SIZE = Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
#: Linux's madvise advice values (asm-generic/mman-common.h)
MADV_HUGEPAGE, MADV_NOHUGEPAGE = 14, 15

_policy = DEFAULT
_libc = None


def use(policy: str) -> None:
    """Every host buffer this process allocates from now on is on ``policy``'s pages; numpy's own
    advice (huge from 4 MiB) is switched off, so that only this one decides."""
    global _policy
    if policy not in POLICIES:
        raise ValueError(f"pages: {policy!r} is not one of {', '.join(POLICIES)}")
    _policy = policy
    try:
        from numpy._core import multiarray
    except ImportError:                     # numpy 1.x
        from numpy.core import multiarray
    multiarray._set_madvise_hugepage(False)


def policy() -> str:
    return _policy


def kernel_setting() -> str:
    """The kernel's transparent huge page setting ("always", "madvise", "never"), or "" where
    it has none to read (not Linux, or a kernel built without them)."""
    try:
        text = SETTING.read_text()
    except OSError:
        return ""
    chosen = [word.strip("[]") for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else ""


def huge_size() -> int:
    try:
        return int(HUGE_SIZE.read_text())
    except (OSError, ValueError):
        return 2 * 1024 * 1024


def advise(address: int, nbytes: int, policy_name: Optional[str] = None) -> bool:
    """Advise the whole pages of ``[address, address + nbytes)`` as ``policy_name`` (this
    process's policy if not given); False where the kernel took no advice (not Linux)."""
    global _libc
    advice = MADV_HUGEPAGE if (policy_name or _policy) == "huge" else MADV_NOHUGEPAGE
    start = -(-address // PAGE) * PAGE
    end = (address + nbytes) // PAGE * PAGE
    if end <= start:
        return True
    if _libc is None:
        # the process's own symbols, libc's among them: find_library would start ldconfig, a
        # process forked from a rank that may hold MPI
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return _libc.madvise(start, end - start, advice) == 0


def zeros(nbytes: int) -> np.ndarray:
    """``nbytes`` zeroed bytes on this process's pages: a fresh anonymous mapping of their own
    (not the heap, whose pages an earlier buffer may already have faulted in), starting on a
    page (as OSU aligns its buffers) or on a huge page where huge pages are asked for, advised
    before it is written; unmapped when the last array over it goes."""
    align = huge_size() if _policy == "huge" else PAGE
    # private, as malloc's is: an anonymous mmap is shared by default, and shared memory takes
    # huge pages by another switch (shmem_enabled)
    memory = mmap.mmap(-1, nbytes + align, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(memory, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    array = raw[offset:offset + nbytes]
    advise(array.ctypes.data, max(nbytes, 1))
    array[:] = 0
    return array


def huge_now() -> Optional[int]:
    """KiB of this process's anonymous memory on huge pages now (/proc/self/smaps_rollup), None
    where the kernel does not say: what the advice got, read after a block's buffers are filled."""
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
