"""mqlite as a PySpark data source: `spark.read`, `spark.readStream` and `df.write` with `format("mqlite")`.

    df = spark.read.format("mqlite").option("subscribe", "orders").load("./mq")

Installed with `pip install mqlite[spark]` (pyspark and pyarrow), the source
is found by name with no setup (the top-level module `pyspark_mqlite`);
`register(spark)` registers it explicitly, for sessions whose Python workers
run another interpreter. Options and columns: `mqlite.spark.options`,
`mqlite.spark.schema`; the reading path: `mqlite.spark.arrowread`; streams:
`mqlite.spark.stream`; writes: `mqlite.spark.writer`.

The mqlite core never imports this package.
"""

from __future__ import annotations

import importlib.util
from typing import Any

for _needed in ("pyspark", "pyarrow"):  # pyarrow: Spark's workers import it for every Python data-source read
    if importlib.util.find_spec(_needed) is None:  # pragma: no cover - depends on the installation
        raise ImportError(f"mqlite.spark needs pyspark and pyarrow ({_needed} is missing): pip install 'mqlite[spark]'")

from .groupoffsets import group_offsets
from .source import MqliteDataSource

__all__ = ["MqliteDataSource", "register", "group_offsets"]


def register(spark: Any) -> None:
    """Register the "mqlite" data source with `spark` (a `SparkSession`; per session)."""
    spark.dataSource.register(MqliteDataSource)
