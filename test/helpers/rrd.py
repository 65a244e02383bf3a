"""Rerun recordings (.rrd) read back with rerun's own reader (test_view, test_live_view,
test_mavlink_node)."""

from __future__ import annotations

from collections import Counter


def read_rrd(path):
    """``(rows, static, batches)``: temporal rows and static rows per entity path, and the record
    batches per entity, read with rerun's own RRD reader."""
    from rerun.chunk import RrdReader

    rows, static, batches = Counter(), Counter(), {}
    for chunk in RrdReader(path).stream():
        (static if chunk.is_static else rows)[chunk.entity_path] += chunk.num_rows
        batches.setdefault(chunk.entity_path, []).append(chunk.to_record_batch())
    return rows, static, batches


def column(batches, entity, name):
    """Every value of column ``name`` (e.g. ``"LineStrips3D:strips"``) of ``entity``'s chunks."""
    return [v for b in batches[entity] if name in b.schema.names for v in b.column(name).to_pylist()]
