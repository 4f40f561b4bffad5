"""`MqliteDataSource`: the PySpark data source named "mqlite".

    df = spark.read.format("mqlite").option("subscribe", "orders").load("./mq")
    stream = spark.readStream.format("mqlite").option("subscribe", "orders").load("./mq")
    df.write.format("mqlite").mode("append").save("./mq")

Reads go through files only (`StoreReader`: read-only, no lock, no
threads), never through a live `Broker`, because Spark runs every piece in
other processes: `schema()` in one, `reader()` and `partitions()` in a
planner, `read()` in executor workers, each on a pickled copy. So nothing
here holds an open file between those steps; options are checked on the
driver side (`reader()`, `streamReader()`) and travel as a frozen
`ReadOptions`.

No `pushFilters`: in PySpark 4.3 it fails every read unless a conf is set,
and then returns wrong results when a DataFrame is reused (see
reference/spark-notes.md, 3.6). Ranges and filters are options instead, fixed
per DataFrame.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from ..errors import ConfigError
from ..reader import StoreReader
from .arrowread import read_range
from .options import ReadOptions, parse_read_options, parse_schema_options
from .plan import QueueRange, plan_batch
from .schema import check_user_schema, default_schema
from .stream import MqliteStreamReader

__all__ = ["MqliteDataSource", "MqliteBatchReader"]


class MqliteBatchReader(DataSourceReader):
    """A batch read: `partitions()` plans from one snapshot, `read()` yields Arrow batches.

    Deliberately no `pushFilters` (see the module docstring).
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema  # the StructType, not DDL: workers cannot parse DDL without a JVM

    def partitions(self) -> list[QueueRange]:
        """One range per subscribed queue (more with minPartitions), fixed now."""
        with StoreReader(self.options.path) as store:
            return plan_batch(store, self.options)

    def read(self, partition: Any) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        return read_range(self.options, to_arrow_schema(self.schema, timezone="UTC"), partition)


def _check_store(path: str) -> None:
    if not os.path.isdir(path):
        raise ConfigError(f"no store at {path!r}: load(path) needs an existing mqlite or RocketMQ store directory")


class MqliteDataSource(DataSource):
    """The data source `spark.read.format("mqlite")` finds (through `pyspark_mqlite` or `register`)."""

    @classmethod
    def name(cls) -> str:
        return "mqlite"

    def _options(self) -> dict[str, str]:
        return {str(k).lower(): v for k, v in self.options.items()}

    def schema(self) -> StructType:
        """The read schema: `rocketmq` (default) or `kafka` columns; see `mqlite.spark.schema`."""
        name, include_properties = parse_schema_options(self._options())
        return default_schema(name, include_properties)

    def _read_options(self, schema: StructType, *, streaming: bool) -> ReadOptions:
        options = parse_read_options(self._options(), streaming=streaming)
        check_user_schema(schema, options.schema_name)
        _check_store(options.path)
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqliteBatchReader(self._read_options(schema, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqliteStreamReader(self._read_options(schema, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import MqliteBatchWriter  # type: ignore[attr-defined]

        options = self._options()
        return MqliteBatchWriter(options.get("path") or "", options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import MqliteStreamWriter  # type: ignore[attr-defined]

        options = self._options()
        return MqliteStreamWriter(options.get("path") or "", options, schema, overwrite)
