"""collbench: benchmark collective communication across message sizes and backends.

``collbench.read_results(path_or_paths)`` reads result files into a pandas DataFrame
(docs/python-api.md). It is imported on first use, so that ``import collbench``, and every run,
leaves pandas out. Nothing else is imported here: ``python -m collbench`` takes its signals as
soon as this package is loaded (``collbench.__main__``).
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "read_results":
        from collbench.results.dataframe import read_results

        return read_results
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted([*globals(), "read_results"])
