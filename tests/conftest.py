"""Shared fixtures: one local Spark session for every Spark test of the run.

The session starts on first request (only Spark tests ask for `spark`), so
other test runs pay nothing and need no pyspark; it is stopped when the run
ends. Settings from reference/spark-notes.md section 2: no UI or progress bar,
2 shuffle partitions, loopback networking, a quiet log4j, and C1-only JIT with
the serial GC, which starts the JVM faster (benchmarks use the default JIT).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A `local[2]` SparkSession shared by the whole run (skips when pyspark is not installed)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    # Python workers must run this interpreter (with mqlite and pyarrow), not python3 from PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    tmp = tmp_path_factory.mktemp("spark")
    log4j = tmp / "log4j2.properties"
    log4j.write_text(_LOG4J)
    java_options = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.configurationFile=file:{log4j}"
    session = (SparkSession.builder.master("local[2]").appName("mqlite-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.local.dir", str(tmp / "local"))
               .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
               .config("spark.driver.extraJavaOptions", java_options)
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
