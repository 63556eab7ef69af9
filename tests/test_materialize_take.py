"""Token lists taken as byte blocks (prep.materialize.rows.take) give exactly Arrow's take, for every column type."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from prep.materialize.rows import held as held_module
from prep.materialize.rows.held import Held, rows_at
from prep.materialize.rows.take import byte_view


def _table(rows: int = 50) -> pa.Table:
    return pa.table({
        "id": pa.array(np.arange(rows), pa.uint64()),
        "input_ids": pa.array([[1, 2], None, [], [3, 4, 5], [6]] * (rows // 5), pa.list_(pa.int32())),
        "big": pa.array([[1.5], [2.5, 3.5], None, [], [7.0]] * (rows // 5), pa.large_list(pa.float64())),
        "null_values": pa.array([[1, None], [2], None, [], [3]] * (rows // 5), pa.list_(pa.int8())),  # left to Arrow
        "flags": pa.array([[True], [False], None, [], [True]] * (rows // 5)),  # bits, not bytes: left to Arrow
        "text": pa.array(["x", None, "yy", "", "z"] * (rows // 5)),
    })


@pytest.mark.parametrize("view", ["whole", "sliced"])
def test_block_take_is_arrows_take(view):
    table = _table() if view == "whole" else _table().slice(7, 31).combine_chunks()
    if view == "sliced":
        assert table.column("input_ids").chunk(0).offset == 7  # views and takes must honour the offset
    rng = np.random.default_rng(0)
    for index in (rng.integers(0, len(table), 40), np.arange(len(table))[::-1], np.zeros(0, np.int64)):
        got, want = rows_at([table], np.arange(len(table)), index), table.take(pa.array(index))
        assert got.schema == want.schema
        assert got.to_pylist() == want.to_pylist()
        assert got.equals(want)
    assert pa.types.is_large_binary(byte_view(table).schema.field("input_ids").type)
    assert byte_view(table).schema.field("null_values").type == table.schema.field("null_values").type


@pytest.mark.parametrize("pick_rows", [held_module.PICK_ROWS, 20])
@pytest.mark.parametrize("clump", [1, 16, 64])
def test_held_rows_come_out_in_any_order_exactly(clump, pick_rows, monkeypatch):
    """Held takes runs (clumps) as slices and single rows as blocks, from the pieces holding them: Arrow's take."""
    monkeypatch.setattr(held_module, "PICK_ROWS", pick_rows)  # 20: many takes per split, as with large splits
    table = _table(200)
    starts = np.random.default_rng(1).permutation(range(0, 200, clump))
    order = np.concatenate([np.arange(a, min(a + clump, 200)) for a in starts])
    two_chunks = pa.concat_tables([table.slice(13, 4), table.slice(17, 20)])
    pieces = [table.slice(0, 13), table.slice(13, 0), two_chunks, table.slice(37)]
    for positions in (np.arange(100, 300), np.arange(0, 400, 2)):  # a range of positions, and scattered ones
        for held in (Held([table], positions), Held(pieces, positions)):  # one piece, or cut anywhere as read
            for batch_rows in (7, 200):  # batches of single rows and runs, or of long runs (sliced)
                batches = list(held.batches(positions[order], batch_rows=batch_rows))
                assert [b.num_rows for b in batches[:-1]] == [batch_rows] * (len(batches) - 1)  # the write batches
                assert pa.Table.from_batches(batches).equals(table.take(pa.array(order)))
