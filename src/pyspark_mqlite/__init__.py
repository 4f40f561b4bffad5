"""Lets `spark.read.format("mqlite")` find mqlite with no register call.

At a session's first use of a Python data source, PySpark imports every
top-level module whose name starts with `pyspark_` and registers its
`DefaultSource` under `DefaultSource.name()` ("mqlite"). That look-up runs in
every Spark session on this interpreter and does not survive an import error,
so this module imports only PySpark's own `DataSource`: the source itself
(`mqlite.spark.source.MqliteDataSource`, with numpy, pyarrow and the mqlite
core) is imported when a query first uses it, and a missing `pyarrow` then
fails that query with a message, not every other data source of the session.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

__all__ = ["DefaultSource"]


class DefaultSource(DataSource):
    """`mqlite.spark.source.MqliteDataSource`, imported on first use (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        """The format name: `spark.read.format("mqlite")`."""
        return "mqlite"

    def _source(self) -> DataSource:
        from mqlite.spark.source import MqliteDataSource

        return MqliteDataSource(self.options)

    def schema(self) -> Any:
        """The read schema (`MqliteDataSource.schema`)."""
        return self._source().schema()

    def reader(self, schema: Any) -> Any:
        """A batch reader (`MqliteDataSource.reader`)."""
        return self._source().reader(schema)

    def streamReader(self, schema: Any) -> Any:
        """A stream reader (`MqliteDataSource.streamReader`)."""
        return self._source().streamReader(schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        """A batch writer (`MqliteDataSource.writer`)."""
        return self._source().writer(schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """A streaming sink (`MqliteDataSource.streamWriter`)."""
        return self._source().streamWriter(schema, overwrite)
