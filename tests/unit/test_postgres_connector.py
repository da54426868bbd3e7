"""The pure parts of the ``postgres`` connector: pgoutput decoding, which changes a finished
chunk already holds, change records (pre- and post-images, key changes, TOASTed values
left unchanged), splits on the wire and options."""

from __future__ import annotations

import struct

import orjson
import pytest
from psycopg.conninfo import conninfo_to_dict

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate_connectors.postgres.changes import ChangeDecoder, ChunkFilter
from sluicegate_connectors.postgres.chunk_book import ChunkBook
from sluicegate_connectors.postgres.lsn import format_lsn, parse_lsn
from sluicegate_connectors.postgres.options import PostgresOptions, conninfo_of
from sluicegate_connectors.postgres.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    Relation,
    Update,
    decode,
)
from sluicegate_connectors.postgres.split import ChunkSplit, Piece, PostgresSplitCodec, StreamSplit
from sluicegate_connectors.postgres.values import RowMaker, TextValues, record_row, record_value

INT8, TEXT = 20, 25


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _tuple(*values: str | None) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        out += b"n" if v is None else b"t" + struct.pack(">i", len(v.encode())) + v.encode()
    return out


def _relation_bytes() -> bytes:
    columns = b"".join(
        struct.pack(">b", 1) + _s(name) + struct.pack(">Ii", oid, -1) for name, oid in [("id", INT8), ("body", TEXT)]
    )
    return b"R" + struct.pack(">I", 7) + _s("public") + _s("docs") + b"f" + struct.pack(">h", 2) + columns


def test_pgoutput_messages_decode_to_what_they_say() -> None:
    relation = decode(_relation_bytes())
    assert isinstance(relation, Relation)
    assert relation.qualified_name == "public.docs" and relation.replica_identity == "f"
    assert [(c.name, c.type_oid) for c in relation.columns] == [("id", INT8), ("body", TEXT)]

    begin = decode(b"B" + struct.pack(">QqI", 0x1_0000_0010, 1_000_000, 42))
    assert begin == Begin(0x1_0000_0010, 946_684_801_000, 42)
    commit = decode(b"C" + struct.pack(">bQQq", 0, 0x10, 0x38, 0))
    assert commit == Commit(0x10, 0x38, 946_684_800_000)

    assert decode(b"I" + struct.pack(">I", 7) + b"N" + _tuple("1", None)) == Insert(7, ("1", None))
    update = decode(
        b"U"
        + struct.pack(">I", 7)
        + b"O"
        + _tuple("1", "old")
        + b"N"
        + struct.pack(">h", 2)
        + b"t"
        + struct.pack(">i", 1)
        + b"1u"
    )
    assert update == Update(7, ("1", "old"), False, ("1", UNCHANGED_TOAST))
    assert decode(b"D" + struct.pack(">I", 7) + b"K" + _tuple("1", None)) == Delete(7, ("1", None), True)


def test_lsns_read_and_write_as_postgresql_does() -> None:
    assert parse_lsn("16/B374D848") == 0x16_B374D848
    assert format_lsn(parse_lsn("0/15480D8")) == "0/15480D8"


def _chunks() -> ChunkFilter:
    """Keys 1..10 at point 100, 11..20 read in two pieces (to 15 at 200, then at 300), and
    from 21 on at 400."""
    chunks = ChunkFilter({"public.docs": (INT8,)})
    chunks.add(ChunkSplit("public.docs", 0, None, ("10",), [Piece(("10",), 100)], done=True))
    chunks.add(ChunkSplit("public.docs", 2, ("20",), None, [Piece(None, 400)], done=True))
    chunks.add(ChunkSplit("public.docs", 1, ("10",), ("20",), [Piece(("15",), 200), Piece(("20",), 300)], done=True))
    return chunks


def test_a_key_has_the_point_of_the_piece_of_its_chunk_that_holds_it() -> None:
    chunks = _chunks()
    # numeric order, not text order: 9 < 10 < 100
    assert [chunks.point_of("public.docs", (k,)) for k in ("1", "9", "10", "11", "15", "16", "20", "21", "100")] == [
        100,
        100,
        100,
        200,
        200,
        300,
        300,
        400,
        400,
    ]
    chunks.add(ChunkSplit("public.docs", 0, None, ("10",), [Piece(("10",), 100)], done=True))
    assert chunks.count == 3  # a chunk reported again counts once


def test_a_change_of_a_key_no_finished_chunk_holds_is_an_error_never_a_drop() -> None:
    chunks = ChunkFilter({"public.docs": (INT8,)})
    chunks.add(ChunkSplit("public.docs", 0, None, ("10",), [Piece(("10",), 100)], done=True))
    with pytest.raises(SourceError, match="no finished chunk"):
        chunks.point_of("public.docs", ("11",))


def _decoder(filtered_until: int | None = 350) -> ChangeDecoder:
    decoder = ChangeDecoder({"public.docs": ("id",)}, _chunks(), filtered_until)
    decoder.feed(decode(_relation_bytes()))
    return decoder


def _transaction(decoder: ChangeDecoder, final_lsn: int, *changes: Insert | Update | Delete) -> list[dict[str, object]]:
    decoder.feed(Begin(final_lsn, 946_684_800_000, 1))
    for change in changes:
        decoder.feed(change)
    done = decoder.feed(Commit(final_lsn, final_lsn + 8, 946_684_800_000))
    assert done is not None and done.end_lsn == final_lsn + 8
    return done.records


def test_a_change_is_left_out_where_its_chunk_piece_was_read_after_it_committed() -> None:
    decoder = _decoder()
    # committed at 250: after key 3's chunk (100) and key 12's piece (200), before key 17's (300)
    records = _transaction(decoder, 250, Insert(7, ("3", "a")), Insert(7, ("12", "b")), Insert(7, ("17", "c")))
    assert [(r["id"], r["_change_type"], r["_lsn"], r["_seq"]) for r in records] == [
        (3, "insert", 250, 0),
        (12, "insert", 250, 1),
    ]
    # past filtered_until everything is emitted, and the decoder stops checking
    records = _transaction(decoder, 350, Insert(7, ("17", "d")))
    assert [r["id"] for r in records] == [17] and decoder.filtered_until is None


def test_an_update_gives_both_images_and_keeps_a_toasted_value_it_left_unchanged() -> None:
    records = _transaction(_decoder(None), 500, Update(7, ("5", "large"), False, ("5", UNCHANGED_TOAST)))
    assert [(r["_change_type"], r["id"], r["body"]) for r in records] == [
        ("update_preimage", 5, "large"),
        ("update_postimage", 5, "large"),
    ]
    assert records[0]["_table"] == "public.docs" and records[0]["_commit_timestamp"] == "2000-01-01T00:00:00+00:00"


def test_an_update_of_the_key_is_a_delete_and_an_insert() -> None:
    records = _transaction(_decoder(None), 500, Update(7, ("5", "x"), False, ("6", "x")), Delete(7, ("6", "x"), False))
    assert [(r["_change_type"], r["id"], r["_seq"]) for r in records] == [
        ("delete", 5, 0),
        ("insert", 6, 0),
        ("delete", 6, 1),
    ]


def test_an_update_without_its_old_row_is_refused_naming_the_fix() -> None:
    decoder = _decoder(None)
    decoder.feed(Begin(500, 0, 1))
    with pytest.raises(SourceError, match="REPLICA IDENTITY FULL"):
        decoder.feed(Update(7, None, False, ("5", "x")))


def test_a_truncate_stops_the_stream_naming_the_table() -> None:
    decoder = _decoder(None)
    with pytest.raises(SourceError, match=r"TRUNCATE of public\.docs"):
        decoder.feed(decode(b"T" + struct.pack(">ibI", 1, 0, 7)))


def test_splits_travel_and_come_back_the_same() -> None:
    codec = PostgresSplitCodec()
    chunk = ChunkSplit("public.orders", 3, ("Ab", "1"), None, [Piece(("Zz", "9"), 77)], done=False)
    stream = StreamSplit(lsn=123, emitted_of_next=4, filtered_until=900, chunk_count=12)
    for split in (chunk, stream):
        assert codec.from_wire(codec.to_wire(split)) == split
    assert chunk.read_to == ("Zz", "9")
    # a piece read at the same point extends the last one
    grown = chunk.with_piece(("Zz", "99"), 77, done=False).with_piece(None, 80, done=True)
    assert grown.pieces == [Piece(("Zz", "99"), 77), Piece(None, 80)] and grown.done


def test_options_take_spark_jdbc_urls_and_refuse_what_they_do_not_know() -> None:
    options = PostgresOptions.parse(
        {"url": "jdbc:postgresql://db.example:6543/shop?sslmode=require", "dbtable": "orders, sales.items"}
    )
    assert options.tables == ("public.orders", "sales.items")
    assert "host='db.example' port=6543 dbname='shop'" in options.conninfo and "sslmode='require'" in options.conninfo
    assert options.slot == options.publication and options.slot.startswith("sluicegate_")
    parsed = conninfo_to_dict(conninfo_of("jdbc:postgresql://h/d", "u", "it's a \\ secret"))
    assert (parsed["user"], parsed["password"], parsed["dbname"]) == ("u", "it's a \\ secret", "d")
    with pytest.raises(ConfigError, match=r"'chunk_sise'.*'chunk_size'"):
        PostgresOptions.parse({"url": "jdbc:postgresql://h/d", "dbtable": "t", "chunk_sise": "10"})
    with pytest.raises(ConfigError, match="'url'"):
        PostgresOptions.parse({"url": "jdbc:mysql://h/d", "dbtable": "t"})
    with pytest.raises(ConfigError, match="'startup_mode'"):
        PostgresOptions.parse({"url": "jdbc:postgresql://h/d", "dbtable": "t", "startup_mode": "everything"})


def test_the_chunk_book_keeps_bounds_once_and_chunks_as_indexes_and_comes_back_the_same() -> None:
    book = ChunkBook()
    chunks = book.cut("public.docs", [("10",), ("20",), ("30",)])
    assert [(c.lo, c.hi) for c in chunks] == [(None, ("10",)), (("10",), ("20",)), (("20",), ("30",)), (("30",), None)]
    assert book.finish(chunks[0].with_piece(("10",), 100, done=True))
    assert not book.finish(chunks[0].with_piece(("10",), 100, done=True))  # a report sent again
    in_pieces = chunks[1].with_piece(("15",), 200, done=False).with_piece(("20",), 300, done=True)
    assert book.finish(in_pieces)
    half_read = chunks[2].with_piece(("25",), 250, done=False)
    state = book.to_json([half_read, chunks[3]])
    assert state["pending"] == {"public.docs": [3, 4]} and len(state["pending_partial"]) == 1

    again, pending = ChunkBook.from_json(orjson.loads(orjson.dumps(state)))
    assert pending == [half_read, chunks[3]]
    assert sorted(c.split_id for c in again.finished()) == ["public.docs#0", "public.docs#1"]
    assert next(c for c in again.finished() if c.index == 1).pieces == in_pieces.pieces
    assert (again.done_count, again.chunk_count, again.greatest_point()) == (2, 4, 300)


def test_the_account_of_300000_chunks_is_small() -> None:
    """Flink CDC's enumerator ran out of memory at about 300,000 finished chunks; written as
    one object per chunk, the account was 47 MB of JSON at every commit."""
    book = ChunkBook()
    chunks = book.cut("public.big", [(str(i * 8192),) for i in range(1, 300_000)])
    for chunk in chunks:
        book.finish(chunk.with_piece(chunk.hi, 10_000_000 + chunk.index, done=True))
    size = len(orjson.dumps(book.to_json([])))
    assert size < 12_000_000, f"{size:,} bytes"


def test_a_row_made_by_column_type_is_the_row_made_value_by_value() -> None:
    """The per-column converters (the fast path) give exactly what ``record_value`` gives."""
    values = TextValues()
    texts = {
        16: "t",
        20: "9007199254740993",
        25: "é",
        700: "1.5",
        1700: "79.190",
        2950: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        17: "\\x00ff",
        1082: "2024-02-29",
        1114: "2024-02-29 23:59:59.5",
        1184: "2024-02-29 23:59:59+02",
        3802: '{"a": [1, 2.5, null]}',
        1007: "{1,NULL,3}",
        1009: '{"a b",c}',
        1186: "1 day 02:00:00",
    }
    oids = list(texts)
    loaded = [values.load(oid, text) for oid, text in texts.items()]
    names = [f"c{oid}" for oid in oids]
    assert RowMaker(names, oids)([*loaded]) == record_row(names, loaded)
    assert RowMaker(names, oids)([None] * len(oids)) == dict.fromkeys(names)
    assert [values.record_converter(oid)(text) for oid, text in texts.items()] == [record_value(v) for v in loaded]
