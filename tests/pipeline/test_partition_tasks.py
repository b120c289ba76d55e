"""partition_tasks.sort_order, the Python tasks' sort (the offline intervals' and leadership
timelines' order), gives Arrow's stable sort_indices with nulls first, row for row: on random
tables of integer and string columns with nulls, ties, the least int64, empty and non-ASCII
strings, constant and all-null columns, several chunks, and tables it leaves to Arrow."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline

LEAST, GREATEST = -(2**63), 2**63 - 1


def _arrow_order(table: Any, columns: list[str]) -> list[int]:
    import pyarrow.compute as pc

    return pc.sort_indices(table, sort_keys=[(name, "ascending", "at_start") for name in columns]).to_pylist()


def _random_table(rng: random.Random, rows: int) -> Any:
    import pyarrow as pa

    def ints(low: int, high: int, nulls: float, edge: tuple[int, ...] = (LEAST, GREATEST, 0, -1)) -> list[int | None]:
        return [
            None if rng.random() < nulls else (rng.choice(edge) if rng.random() < 0.05 else rng.randint(low, high))
            for _ in range(rows)
        ]

    def strings(choices: list[str], nulls: float) -> list[str | None]:
        return [None if rng.random() < nulls else rng.choice(choices) for _ in range(rows)]

    columns = {
        "partition": pa.array(ints(-3, 12, 0.05), pa.int64()),
        "topic": pa.array(strings(["t1", "t10", "t2", "", "T", "tö", "t\u00e9", "a b"], 0.1), pa.string()),
        "cluster": pa.array(strings(["east", "west"], 0.0), pa.string()),
        "ts": pa.array(ints(0, 5, 0.2), pa.int64()),
        "small": pa.array(ints(-50, 50, 0.1, (-128, 127)), pa.int8()),
        "code": pa.array(ints(0, 3, 0.0, (-(2**31), 2**31 - 1)), pa.int32()),
        "constant": pa.array([7] * rows, pa.int64()),
        "none": pa.array([None] * rows, pa.string()),
        "mid": pa.array(ints(0, 2, 0.3), pa.int64()),
    }
    table = pa.table(columns)
    # Several chunks, as a table read from several files is.
    cut = rows // 3
    return pa.concat_tables([table.slice(0, cut), table.slice(cut, cut), table.slice(2 * cut)])


def test_the_order_is_arrows_stable_sort_with_nulls_first() -> None:
    from controller_svc.analytics import partition_tasks

    rng = random.Random(5)
    for _ in range(40):
        table = _random_table(rng, rng.choice([0, 1, 2, 17, 300]))
        columns = rng.sample(table.column_names, rng.randint(1, len(table.column_names)))
        order = partition_tasks.sort_order(table, columns)
        assert list(order) == _arrow_order(table, columns), columns
        sorted_table = partition_tasks.sorted_by(table, columns)
        assert sorted_table.to_pylist() == [table.slice(row, 1).to_pylist()[0] for row in _arrow_order(table, columns)]


def test_the_least_int64_sorts_after_null() -> None:
    """A null is before the least int64 (a sentinel in its place would tie them), and the tie
    between two equal keys keeps the table's order for the next column."""
    import pyarrow as pa

    from controller_svc.analytics import partition_tasks

    table = pa.table(
        {
            "a": pa.array([LEAST, None, LEAST, None, 3], pa.int64()),
            "b": pa.array(["x", "y", None, "x", ""], pa.string()),
        }
    )
    assert list(partition_tasks.sort_order(table, ["a"])) == [1, 3, 0, 2, 4]
    assert list(partition_tasks.sort_order(table, ["a", "b"])) == [3, 1, 2, 0, 4]


def test_other_types_are_left_to_arrow() -> None:
    """A float column (NaN's place in the order is Arrow's own) is sorted by Arrow."""
    import pyarrow as pa

    from controller_svc.analytics import partition_tasks

    table = pa.table(
        {"f": pa.array([1.5, None, float("nan"), -2.0, 1.5], pa.float64()), "i": pa.array([2, 1, 0, 3, 1], pa.int64())}
    )
    assert list(partition_tasks.sort_order(table, ["f", "i"])) == _arrow_order(table, ["f", "i"])
