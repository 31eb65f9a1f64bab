import pytest

from collbench.errors import UsageError
from collbench.measure.sizes import format_size, parse_bytes, parse_sizes

K, M, G = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize("spec,expected", [
    ("4096", [4096]),
    ("8", [8]),
    ("64K", [64 * K]),
    ("1k", [K]),
    ("1KiB", [K]),
    ("2MiB", [2 * M]),
    ("1GiB", [G]),
    ("3B", [3]),
    ("1K-8K", [K, 2 * K, 4 * K, 8 * K]),
    ("1K-1G", [K << i for i in range(21)]),
    ("8-1M:x4", [8 * 4 ** i for i in range(9)]),
    ("1K-64K:+8K", [K + 8 * K * i for i in range(8)]),
    ("1K-64K:x2", [K << i for i in range(7)]),
    ("8,1K,1M", [8, K, M]),
    ("1M,8,1K,8", [8, K, M]),
    ("8-32,1K", [8, 16, 32, K]),
    ("100-1000", [100, 200, 400, 800]),
    (" 1K - 4K ", [K, 2 * K, 4 * K]),
])
def test_parse_forms(spec, expected):
    assert parse_sizes(spec) == expected


def test_factor_range_stays_within_end():
    assert parse_sizes("8-1M:x4")[-1] == 512 * K   # 8 * 4^8; the next, 2M, is past the end
    assert parse_sizes("1K-1M:+300K")[-1] == K + 3 * 300 * K


@pytest.mark.parametrize("spec,fragment", [
    ("", "empty"),
    ("1K,,2K", "empty"),
    ("1X", "unknown unit"),
    ("1KB", "unknown unit"),
    ("abc", "bad size"),
    ("0", "positive"),
    ("0-1K", "positive"),
    ("-5", "START-END"),
    ("1K-", "START-END"),
    ("8K-1K", "start is larger"),
    ("1K-1M:x1", "factor"),
    ("1K-1M:x", "xN"),
    ("1K-1M:xfoo", "xN"),
    ("1K-1M:+0", "step"),
    ("1K-1M:+", "step"),
    ("1K-1M:/2", "use xN"),
    ("2T", "1 TiB"),
    ("1-1M:+1", "more than"),
    ("1.5K", "bad size"),
    ("\u0668", "bad size"),               # an Arabic-Indic 8: ASCII digits only
    ("\uff18K", "bad size"),              # a fullwidth 8
    ("8_0", "bad size"),
    ("8-1M:x4_0", "xN"),
    ("8-1M:x\u0664", "xN"),
])
def test_bad_forms(spec, fragment):
    with pytest.raises(UsageError) as info:
        parse_sizes(spec)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_bytes_units():
    assert parse_bytes("1T") == 1 << 40
    assert parse_bytes("7") == 7


@pytest.mark.parametrize("n,label", [(8, "8"), (1024, "1K"), (1536, "1536"), (64 * K, "64K"),
                                     (M, "1M"), (3 * G, "3G"), (100, "100")])
def test_format_size(n, label):
    assert format_size(n) == label
