"""The `mqlite` command line: mqadmin's commands over a store directory.

    mqlite [--store PATH] COMMAND [PATH] [OPTIONS] [--json]

Also `python -m mqlite`; the store may come from `$MQLITE_STORE`. Commands
keep mqadmin's names, short flags and `#`-headed columns (`topicList`,
`topicStatus`, `updateTopic`, `deleteTopic`, `consumerProgress`,
`queryMsgById`, `queryMsgByKey`, `queryMsgByOffset`, `printMsg`,
`resetOffsetByTime`, `skipAccumulatedMessage`, `sendMessage`,
`consumeMessage`, `statsAll`, `storeInfo`, `verify`), plus the dashboard's
`queryDlq` and `resendDlq`. `--json` prints one JSON list of row objects
whose keys are the Python API's field names.

Read commands open the store read-only, beside a live writer; commands that
change it take the writer lock and refuse with one line while a live
process holds it. Exit status: 0 success, 1 when the command found a
problem (verify), a message is missing, or the store is locked or damaged,
2 on bad usage. Errors are one line on stderr, never a traceback.

Layout: `app` (parsing, running, errors), `commands` (the table: one
entry per command), `args` (option specs and value types, `parse_time`),
`context` (opening the store), `checks`, `output` (tables, JSON, progress),
and one module per family of commands.
"""

from __future__ import annotations

from .app import main

__all__ = ["main"]
