"""Lets `spark.read.format("mqlite")` find mqlite with no register call.

At a session's first use of a Python data source, PySpark imports every
top-level module whose name starts with `pyspark_` and registers its
`DefaultSource` under `DefaultSource.name()` ("mqlite"). Kept to one import:
it runs in every Spark session on this interpreter.
"""

from mqlite.spark.source import MqliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
