"""The columns the Spark source produces: RocketMQ's (default) and Kafka's.

`rocketmq` (camelCase, as Spark's connectors name columns):

| column          | type                | from                                                     |
|-----------------|---------------------|----------------------------------------------------------|
| topic           | string              | the consume queue's topic                                |
| queueId         | int                 | the consume queue's id                                   |
| queueOffset     | long                | the unit's position in the consume queue                 |
| msgId           | string              | `UNIQ_KEY`, else the offset id (store host + offset)     |
| tags            | string              | the `TAGS` property                                      |
| keys            | array<string>       | the `KEYS` property split on spaces                      |
| body            | binary              | the body (decompressed)                                  |
| properties      | map<string,string>  | every property (left out with includeProperties=false)   |
| flag            | int                 | FLAG                                                     |
| bornTimestamp   | timestamp           | BORNTIMESTAMP                                            |
| storeTimestamp  | timestamp           | STORETIMESTAMP                                           |
| reconsumeTimes  | int                 | RECONSUMETIMES                                           |
| commitLogOffset | long                | the unit's commit-log offset                             |
| storeSize       | int                 | the record's size                                        |

`kafka` (Spark's Kafka source): `key` (the `KEYS` property as UTF-8), `value`
(body), `topic`, `partition` (queue id), `offset` (queue offset), `timestamp`
(store time), `timestampType` (1, LogAppendTime: the broker's store time) and,
with includeProperties=true, `headers` (the properties as key/value pairs).

A user schema (`spark.read.schema("body binary, queueOffset long")`) picks
columns by name; PySpark 4.3 has no column pruning, so this is how a query
avoids decoding columns it does not need.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import ConfigError

__all__ = ["full_schema", "default_schema", "check_user_schema", "ROCKETMQ_COLUMNS", "KAFKA_COLUMNS",
           "PROPERTY_COLUMNS"]

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

ROCKETMQ_COLUMNS: tuple[tuple[str, DataType], ...] = (
    ("topic", StringType()),
    ("queueId", IntegerType()),
    ("queueOffset", LongType()),
    ("msgId", StringType()),
    ("tags", StringType()),
    ("keys", ArrayType(StringType())),
    ("body", BinaryType()),
    ("properties", MapType(StringType(), StringType())),
    ("flag", IntegerType()),
    ("bornTimestamp", TimestampType()),
    ("storeTimestamp", TimestampType()),
    ("reconsumeTimes", IntegerType()),
    ("commitLogOffset", LongType()),
    ("storeSize", IntegerType()),
)

KAFKA_COLUMNS: tuple[tuple[str, DataType], ...] = (
    ("key", BinaryType()),
    ("value", BinaryType()),
    ("topic", StringType()),
    ("partition", IntegerType()),
    ("offset", LongType()),
    ("timestamp", TimestampType()),
    ("timestampType", IntegerType()),
    ("headers", ArrayType(_HEADER)),
)

#: The column that includeProperties adds, per schema.
PROPERTY_COLUMNS = {"rocketmq": "properties", "kafka": "headers"}


def full_schema(schema_name: str) -> StructType:
    """Every column the schema `schema_name` can produce."""
    columns = ROCKETMQ_COLUMNS if schema_name == "rocketmq" else KAFKA_COLUMNS
    return StructType([StructField(name, dtype) for name, dtype in columns])


def default_schema(schema_name: str, include_properties: bool) -> StructType:
    """The schema a read has when the user gives none.

    >>> default_schema("kafka", False).fieldNames()
    ['key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType']
    """
    skip = None if include_properties else PROPERTY_COLUMNS[schema_name]
    return StructType([f for f in full_schema(schema_name).fields if f.name != skip])


#: Columns that are null for some messages (no TAGS; no KEYS): a user schema may not declare them NOT NULL,
#: which Spark would trust and then fail on inside the task.
MAY_BE_NULL = frozenset({"tags", "key"})


def check_user_schema(schema: StructType, schema_name: str) -> None:
    """Refuse a user schema with a column the source cannot produce, or with another type."""
    available = {f.name: f.dataType for f in full_schema(schema_name).fields}
    names = [f.name for f in schema.fields]
    if len(set(names)) != len(names):
        raise ConfigError(f"the schema names a column twice: {names}")
    for field in schema.fields:
        expected = available.get(field.name)
        if expected is None:
            other = "kafka" if schema_name == "rocketmq" else "rocketmq"
            hint = (f" (it is a column of the {other} schema: add .option(\"schema\", \"{other}\"))"
                    if field.name in full_schema(other).fieldNames() else "")
            raise ConfigError(f"column {field.name!r} is not a column of the {schema_name} schema{hint}; "
                              f"its columns are {', '.join(available)}")
        if field.dataType != expected:
            raise ConfigError(f"column {field.name!r} must have type {expected.simpleString()}, "
                              f"not {field.dataType.simpleString()}")
        if not field.nullable and field.name in MAY_BE_NULL:
            raise ConfigError(f"column {field.name!r} can be null (a message without one); "
                              f"declare it nullable (drop NOT NULL)")
