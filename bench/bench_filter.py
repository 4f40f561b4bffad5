#!/usr/bin/env python3
"""Filter evaluation speed: `MessageSelector.matches` on one core, evaluations per second.

Each SQL92 selector is compiled once into a Python function (mqlite.filter._sqlcompile);
this measures the per-message cost the store and consumers pay. Every case is run
`--repeat` times with `--n` evaluations each and the best run is printed (the
least disturbed by other work on the machine). The property maps look like real
ones: the user properties plus the system properties a producer adds.

  matching       the selector is TRUE for the message
  non-matching   FALSE (the first term of an AND fails, or a later one)
  missing        the property the selector reads is absent (NULL: no match)
  error          a Java exception, a non-numeric value compared with a number

The target is 1,000,000 evaluations/s for `a > 5 AND b = 'x'` on one core.

  .venv/bin/python bench/bench_filter.py
  .venv/bin/python bench/bench_filter.py --n 200000 --repeat 7
"""
from __future__ import annotations

import argparse
import timeit

from mqlite.filter import MessageSelector

SYSTEM = {"WAIT": "true", "UNIQ_KEY": "7F000001000118B4AAC2486F6A8B0000", "KEYS": "order-1"}

CASES: list[tuple[str, str, str, dict[str, str]]] = [  # (label, type, expression, user properties)
    ("matching", "sql", "a > 5 AND b = 'x'", {"a": "10", "b": "x"}),
    ("non-matching", "sql", "a > 5 AND b = 'x'", {"a": "1", "b": "x"}),
    ("non-matching", "sql", "a > 5 AND b = 'x'", {"a": "10", "b": "y"}),
    ("missing", "sql", "a > 5 AND b = 'x'", {"b": "x"}),
    ("missing", "sql", "a > 5 AND b = 'x'", {"a": "10"}),
    ("error", "sql", "a > 5 AND b = 'x'", {"a": "3.5", "b": "x"}),
    ("matching", "sql", "price BETWEEN 10 AND 99.5", {"price": "42"}),
    ("matching", "sql", "region IN ('eu', 'us', 'ap') OR vip = 'true'", {"region": "cn", "vip": "true"}),
    ("non-matching", "sql", "region IN ('eu', 'us', 'ap') OR vip = 'true'", {"region": "cn"}),
    ("matching", "sql", "TAGS IS NOT NULL AND TAGS NOT CONTAINS 'test' AND a <> 3", {"TAGS": "TagA", "a": "4"}),
    ("matching", "sql", "NOT (a > 5 OR b = 'x') AND c >= 1.5", {"a": "1", "b": "y", "c": "2.5"}),
    ("matching", "tag", "TagA || TagB", {"TAGS": "TagB"}),
    ("non-matching", "tag", "TagA || TagB", {"TAGS": "TagC"}),
    ("missing", "tag", "TagA || TagB", {}),
    ("matching", "tag", "*", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300_000, help="evaluations per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the best is printed")
    args = parser.parse_args()
    print(f"{'evals/s':>12}  {'case':<13} {'type':<4} expression  |  properties")
    for label, kind, expression, user_props in CASES:
        selector = MessageSelector.by_sql(expression) if kind == "sql" else MessageSelector.by_tag(expression)
        props = {**SYSTEM, **user_props}
        assert selector.matches(props) == (label == "matching"), (expression, user_props)
        best = min(timeit.repeat("matches(props)", globals={"matches": selector.matches, "props": props},
                                 number=args.n, repeat=args.repeat))
        print(f"{args.n / best:>12,.0f}  {label:<13} {kind:<4} {expression}  |  {user_props}")


if __name__ == "__main__":
    main()
