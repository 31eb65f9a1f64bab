"""collbench: benchmark collective communication across message sizes and backends."""

__version__ = "0.1.0"
