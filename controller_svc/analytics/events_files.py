"""The events table's usable records in a local directory, read with Arrow: what the driver's
and the Python tasks' computations of whole tables read instead of Spark's queries
(controller_tables.py, offline_files.py, leadership_scan.py), with the columns Spark's reader
and ingest.events give them (a cluster per file, node ids as Spark's cast reads them)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from controller_svc.analytics.ingest import ClusterBy

# Where ingest.write puts the usable records: one directory per kind (ingest's partitionBy).
USABLE_DIR = "status=ok"
# The node-name prefixes of contract 5's roles (timelines._named_as).
CONTROLLER_PREFIX, BROKER_PREFIX = "controller-", "broker-"
# Spark's cast of a string to a long trims these (UTF8String.trimAll) and takes an optional sign
# and ASCII digits only; anything else (a decimal point, an exponent, other digits) is null.
_SPARK_TRIMMED = "".join(chr(code) for code in range(0x21))
_SPARK_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_RANGE = (-(2**63), 2**63 - 1)


def dictionary_string() -> Any:
    """The Arrow type EventsFiles.read gives a string column read dictionary-encoded."""
    import pyarrow as pa

    return pa.dictionary(pa.int32(), pa.string())


class NotExact(Exception):
    """Records a computation from the files cannot treat exactly as Spark's query does (a null
    where Spark would group or order nulls): the job lets Spark compute that table."""


def node_id(node: str | None) -> int | None:
    """ingest._node_id in Python: the name's part after its last '-' (the whole name without
    one) as Spark's try_cast to a long reads it."""
    if node is None:
        return None
    text = node.rsplit("-", 1)[-1].strip(_SPARK_TRIMMED)
    if not _SPARK_LONG.fullmatch(text):
        return None
    value = int(text)
    return value if _LONG_RANGE[0] <= value <= _LONG_RANGE[1] else None


def has_role(node: str | None, role: str) -> bool:
    """timelines.of_role's test in Python: named as a `role` node (controller-N, broker-N) with
    an id (ingest._node_role)."""
    return node is not None and node.startswith(f"{role}-") and node_id(node) is not None


@dataclasses.dataclass(frozen=True)
class EventsFiles:
    """The events table's usable records in a local directory, and each file's cluster
    (ClusterBy.attach): `clusters` maps a file_id to its cluster, None for one cluster."""

    events_dir: str
    clusters: Mapping[int, str | None] | None

    def cluster(self, file_id: int | None) -> str | None:
        if self.clusters is None:
            return "default"
        return None if file_id is None else self.clusters.get(file_id)

    def read(
        self,
        kind: str | None,
        columns: Mapping[str, Any],
        node_prefix: str | None = None,
        nodes: Sequence[str] | None = None,
        with_cluster: bool = True,
        with_position: bool = True,
    ) -> Any:
        """The records of `kind` (every kind: None) with `columns` (name: Arrow type; file_id,
        and with_position block and mid, are there too) and, `with_cluster`, a `cluster` column
        (else cluster_codes gives it from the file ids); a column a kind's files lack is
        null, as Spark's reader with the table's schema gives it. A string column asked for as
        dictionary_string() is read dictionary-encoded, as the files hold it (no string per row).
        `node_prefix`: only nodes named so, which the files' statistics of `node` mostly decide
        (a fast file holds one node); `nodes`: only these nodes (`node` must be among
        `columns`), decided so too."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        fields = {**columns, "file_id": pa.int32()}
        if with_position:
            fields.update({"block": pa.int64(), "mid": pa.int64()})
        wanted = pa.schema([pa.field(name, kind_type) for name, kind_type in fields.items()])
        encoded = [name for name, kind_type in fields.items() if pa.types.is_dictionary(kind_type)]
        directory = os.path.join(self.events_dir, USABLE_DIR)
        if kind is not None:
            directory = os.path.join(directory, f"kind_group={kind}")
        if not os.path.isdir(directory):
            empty = wanted.empty_table()
            return _with_column(empty, "cluster", pa.array([], pa.string())) if with_cluster else empty
        file_format = (
            ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=encoded))
            if encoded
            else "parquet"
        )
        found = ds.dataset(directory, format=file_format, schema=wanted)
        condition = None
        if node_prefix is not None:
            # starts_with as a range, which Parquet's statistics can decide: '-' + 1 is '.'.
            after = node_prefix[:-1] + chr(ord(node_prefix[-1]) + 1)
            condition = (ds.field("node") >= node_prefix) & (ds.field("node") < after)
        if nodes is not None:
            named = ds.field("node").isin(sorted(nodes))
            condition = named if condition is None else condition & named
        table = found.to_table(filter=condition).replace_schema_metadata(None)
        return self.with_clusters(table) if with_cluster else table

    def with_clusters(self, table: Any) -> Any:
        """`table` (read without its cluster) with the `cluster` column read() gives."""
        return _with_column(table, "cluster", self._clusters_of(table["file_id"]))

    def cluster_codes(self, file_ids: Any) -> tuple[Any, list[str]]:
        """Each row's cluster (cluster(): the `cluster` column read() gives) as an index into
        the names returned, -1 for none, as a numpy array: no string per row."""
        import numpy as np
        import pyarrow.compute as pc

        if self.clusters is None:
            return np.zeros(len(file_ids), dtype=np.int64), ["default"]
        names = sorted({name for name in self.clusters.values() if name is not None})
        index = {name: code for code, name in enumerate(names)}
        known = {file_id: name for file_id, name in self.clusters.items() if name is not None and file_id >= 0}
        lookup = np.full(max(known, default=-1) + 2, -1, dtype=np.int64)  # the last entry: no file
        for file_id, name in known.items():
            lookup[file_id] = index[name]
        ids = pc.fill_null(file_ids, -1).to_numpy().astype(np.int64)
        ids[(ids < 0) | (ids >= len(lookup))] = len(lookup) - 1
        return lookup[ids], names

    def _clusters_of(self, file_ids: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.clusters is None:
            return pa.repeat(pa.scalar("default", pa.string()), len(file_ids))
        ids = sorted(self.clusters)
        names = pa.array([self.clusters[file_id] for file_id in ids], pa.string())
        return names.take(pc.index_in(file_ids, value_set=pa.array(ids, pa.int32())))


def _with_column(table: Any, name: str, values: Any) -> Any:
    return table.append_column(name, values)


def events_files(out: str, cluster_by: ClusterBy, file_rows: Sequence[tuple[int, str]]) -> EventsFiles:
    """The events table of the job writing to the local directory `out`, its records clustered
    by `cluster_by` (`file_rows`: the files table's rows, ingest.file_rows)."""
    if cluster_by.mode != "dir":
        return EventsFiles(os.path.join(out, "events"), None)
    clusters = {file_id: cluster_by.of_file(name) for file_id, name in file_rows}
    return EventsFiles(os.path.join(out, "events"), clusters)
