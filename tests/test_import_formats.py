"""The import's parsing layer (``precompute.data.parsing``): every format on small files written here, where
the right answer is known, including malformed rows; strict mode; chunk boundaries; progress. No database."""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from precompute.data.parsing import DEFAULT_EVENT_TYPES, source, GENRES, RatingRule, Report, read_events, read_items
from precompute.data.parsing.cells import each, to_int
from precompute.errors import ConfigError, InvalidInput

# numpy warns when it meets a zone it would ignore, and a file left open warns when collected: both are errors
# here. A database connection another test left to the garbage collector is not this module's business.
pytestmark = [pytest.mark.filterwarnings("error"),
              pytest.mark.filterwarnings("ignore:Exception ignored in.*BaseConnection.__del__"
                                         ":pytest.PytestUnraisableExceptionWarning")]

BIG = 2**63 - 1
VIEW, CLICK, CONTACT, PURCHASE = (DEFAULT_EVENT_TYPES[t] for t in ("view", "click", "contact", "purchase"))
T0 = 1714550400.0                                       # 2024-05-01T08:00:00Z


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def items(path: Path, fmt: str, report: Report | None = None, **kw) -> dict:
    """Every chunk of ``read_items`` joined: one list per field, categories as a list per item."""
    report = Report() if report is None else report
    out = {"item_id": [], "categories": [], "price": [], "created_at": [], "attributes": [], "lines": []}
    for chunk in read_items(path, fmt, report=report, **{"max_future": 60, **kw}):
        assert chunk.category_offsets[0] == 0 and chunk.category_offsets[-1] == len(chunk.categories)
        out["item_id"] += chunk.item_id.tolist()
        out["categories"] += [chunk.categories_of(i).tolist() for i in range(len(chunk))]
        out["price"] += chunk.price.tolist()
        out["created_at"] += chunk.created_at.tolist()
        out["attributes"] += [{k: v[i] for k, v in chunk.attributes.items()} for i in range(len(chunk))]
        out["lines"] += chunk.lines.tolist()
        assert chunk.item_id.dtype == np.int64 and chunk.categories.dtype == np.int64
        assert chunk.price.dtype == np.float64 and chunk.created_at.dtype == np.float64
    return out


def events(path: Path, fmt: str, report: Report | None = None, **kw) -> dict:
    report = Report() if report is None else report
    out = {k: [] for k in ("user_id", "item_id", "ts", "type", "value", "event_id", "lines")}
    for chunk in read_events(path, fmt, report=report, **{"max_future": 60, **kw}):
        for k in out:
            column = getattr(chunk, k)
            out[k] += [None] * len(chunk) if column is None else column.tolist()
        assert chunk.user_id.dtype == np.int64 and chunk.ts.dtype == np.float64 and chunk.value.dtype == np.float64
    return out


def nan_equal(got: list, want: list) -> bool:
    return np.array_equal(np.array(got, dtype=float), np.array(want, dtype=float), equal_nan=True)


def refused(report: Report) -> list[tuple[int, str]]:
    return [(row.line, row.reason) for row in report.bad_rows]


# ---------------------------------------------------------------------------------------------------- MovieLens
U_ITEM = (b"1|Toy Story (1995)|01-Jan-1995||http://us.imdb.com/M/title-exact?Toy%20Story%20(1995)"
          b"|0|0|0|1|1|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n"
          b"267|unknown||||1|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0\n"
          b"1300|\xc1 c\xe9u aberto (1931)|5-Mar-1931||http://x|0|0|0|0|0|0|0|0|1|0|0|0|0|0|1|0|0|0|1\n")


def test_u_item_flags_become_genre_categories_and_the_release_date_created_at(tmp_path):
    # given ML-100K's u.item: pipe-separated Latin-1, 19 genre flags, an empty date, a title in Latin-1
    # when read, then each flag set is its genre index, the date is UTC midnight, and there is no price
    got = items(write(tmp_path, "u.item", U_ITEM), "movielens")
    assert got["item_id"] == [1, 267, 1300]
    assert got["categories"] == [[3, 4, 5], [0], [8, 14, 18]]     # Animation, Children's, Comedy / unknown / ...
    assert nan_equal(got["created_at"], [788918400, np.nan, -1225324800])   # 1995-01-01, 1931-03-05
    assert nan_equal(got["price"], [np.nan] * 3)
    assert got["attributes"] == [{}, {}, {}]


def test_u_item_refuses_bad_rows_with_their_line_and_keeps_the_rest(tmp_path):
    # given rows with a bad id, a flag that is not 0/1, a bad date, a missing field and an extra one
    bad = (b"0|zero id|01-Jan-1995||u|" + b"0|" * 18 + b"1\n"
           b"5|flag two|01-Jan-1995||u|" + b"0|" * 18 + b"2\n"
           b"6|bad date|31-Foo-1995||u|" + b"0|" * 18 + b"1\n"
           b"7|short|01-Jan-1995||u|" + b"0|" * 17 + b"1\n"
           b"8|long|01-Jan-1995||u|" + b"0|" * 19 + b"1\n")
    report = Report()
    got = items(write(tmp_path, "u.item", U_ITEM + bad), "movielens", report)
    # then the good rows are all there, and each bad one is named by line, counted and skipped
    assert got["item_id"] == [1, 267, 1300]
    assert [line for line, _ in refused(report)] == [4, 5, 6, 7, 8]
    reasons = dict(refused(report))
    assert "item_id '0' is not an id" in reasons[4]
    assert "genre flags must be 0 or 1" in reasons[5]
    assert "release date '31-Foo-1995'" in reasons[6]
    assert reasons[7] == "expected 24 fields, found 23" and reasons[8] == "expected 24 fields, found 25"
    assert report.refused == 5 and report.accepted == 3


MOVIES_CSV = ('movieId,title,genres\n'
              '1,Toy Story (1995),Adventure|Animation|Children|Comedy|Fantasy\n'
              '2,"American President, The (1995)",Comedy|Drama|Romance\n'
              '3,"Quoted ""Title"" (2001)",(no genres listed)\n'
              '4,Avatar (2009),IMAX|Sci-Fi|Space Opera|Action\n')


def test_movies_csv_genre_names_use_the_same_table_as_u_item(tmp_path):
    # given movies.csv with quoted titles holding commas, (no genres listed), IMAX and a genre outside the table
    report = Report()
    got = items(write(tmp_path, "movies.csv", MOVIES_CSV), "movielens", report)
    space_opera = (1 << 32) + zlib.crc32(b"Space Opera")
    # then names map to u.item's indices (Children = Children's = 4), IMAX is 19, the unknown name a stable id
    assert got["item_id"] == [1, 2, 3, 4]
    assert got["categories"] == [[2, 3, 4, 5, 9], [5, 8, 14], [], [1, 15, 19, space_opera]]
    assert GENRES["Children"] == GENRES["Children's"] == 4
    assert report.refused == 0 and report.notes == [
        f"{tmp_path / 'movies.csv'}: genre 'Space Opera' is not a MovieLens genre: category id {space_opera}"]
    assert nan_equal(got["created_at"], [np.nan] * 4) and nan_equal(got["price"], [np.nan] * 4)


def test_a_utf8_file_with_a_latin1_byte_refuses_that_row_but_u_item_is_latin1(tmp_path):
    # given movies.csv (UTF-8) where one title was written in Latin-1
    path = write(tmp_path, "movies.csv", MOVIES_CSV.encode() + b"5,Caf\xe9 (1999),Drama\n6,Ok,Drama\n")
    report = Report()
    got = items(path, "movielens", report)
    # then that row is refused as not UTF-8, naming its line, and the next row is read
    assert got["item_id"] == [1, 2, 3, 4, 6]
    assert refused(report) == [(6, "not valid utf-8 (is the file in another encoding?)")]
    # and the same byte in u.item is a letter, since u.item is Latin-1
    assert items(write(tmp_path, "u.item", U_ITEM), "movielens")["item_id"] == [1, 267, 1300]
    # and a generic CSV can say its encoding
    latin = write(tmp_path, "latin.csv", b"item_id,price\n7,1.5\n")
    assert items(latin, "csv", encoding="latin-1")["item_id"] == [7]


U_DATA = "196\t242\t3\t881250949\n186\t302\t4\t891717742\n22\t377\t1\t878887116\n244\t51\t5\t880606923\n"


def test_u_data_ratings_become_one_event_each_by_the_rating_rule(tmp_path):
    # given u.data (user, item, rating, time, tab-separated)
    got = events(write(tmp_path, "u.data", U_DATA), "movielens")
    # then every rating is one event, value = rating; ≥ 4 is a purchase, below a view
    assert got["user_id"] == [196, 186, 22, 244] and got["item_id"] == [242, 302, 377, 51]
    assert got["ts"] == [881250949, 891717742, 878887116, 880606923]
    assert got["value"] == [3, 4, 1, 5]
    assert got["type"] == [VIEW, PURCHASE, VIEW, PURCHASE]
    assert got["event_id"] == [None] * 4


def test_ratings_csv_and_the_rule_parameters(tmp_path):
    # given ratings.csv with half-star ratings
    path = write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n1,296,5.0,1147880044\n"
                                          "1,306,3.5,1147868817\n2,307,4.0,1147868828\n2,665,0.5,1147878820\n")
    got = events(path, "movielens")
    assert got["user_id"] == [1, 1, 2, 2] and got["value"] == [5.0, 3.5, 4.0, 0.5]
    assert got["type"] == [PURCHASE, VIEW, PURCHASE, VIEW]
    # when the threshold and types are changed, or there is no threshold, the types follow
    rule = RatingRule(threshold=3.5, strong="contact", base="click")
    assert events(path, "movielens", rating_rule=rule)["type"] == [CONTACT, CONTACT, CONTACT, CLICK]
    assert events(path, "movielens", rating_rule=RatingRule(threshold=None))["type"] == [VIEW] * 4
    # and custom declared types work; a rule naming an undeclared type fails before any row is read
    types = {"watch": 7, "love": 9}
    got = events(path, "movielens", types=types, default_type="watch", rating_rule=RatingRule(4.0, "love", "watch"))
    assert got["type"] == [9, 7, 9, 7]
    with pytest.raises(ConfigError, match="'purchase' is not declared"):
        read_events(path, "movielens", report=Report(), max_future=60, types={"view": 1})


def test_ratings_refuse_bad_ids_ratings_times_and_field_counts(tmp_path):
    path = write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n"
                                          "1,296,5.0,1147880044\n"
                                          "-1,296,5.0,1147880044\n"       # 3 negative user
                                          "1,29.6,5.0,1147880044\n"       # 4 non-integer item
                                          "1,296,,1147880044\n"           # 5 missing rating
                                          "1,296,five,1147880044\n"       # 6 bad rating
                                          "1,296,5.0,yesterday\n"         # 7 bad time
                                          "1,296,5.0\n"                   # 8 missing field
                                          "1,296,5.0,1147880044,9\n"      # 9 extra field
                                          "3,4,2.0,1147880045\n")
    report = Report()
    got = events(path, "movielens", report)
    assert got["user_id"] == [1, 3] and got["lines"] == [2, 10]
    assert [line for line, _ in refused(report)] == [3, 4, 5, 6, 7, 8, 9]
    reasons = dict(refused(report))
    assert reasons[3] == "userId '-1' is not an id (an integer from 1 to 2**63-1)"
    assert reasons[4] == "movieId '29.6' is not an id (an integer from 1 to 2**63-1)"
    assert reasons[5] == "rating is missing" and reasons[6] == "rating 'five' is not a number"
    assert reasons[7] == "timestamp 'yesterday' is not unix seconds or an ISO-8601 time"
    assert reasons[8] == "expected 4 fields, found 3" and reasons[9] == "expected 4 fields, found 5"


def test_dat_files_of_ml_1m_are_refused_with_a_hint(tmp_path):
    path = write(tmp_path, "ratings.dat", "1::1193::5::978300760\n")
    with pytest.raises(InvalidInput, match="not supported.*sed"):
        read_events(path, "movielens", report=Report(), max_future=60)


# ---------------------------------------------------------------------------------------------------- generic CSV
ITEMS_CSV = ("quality,price,item_id,categories,created_at,photos\n"
             "0.8,9.99,17,3|12,2024-05-01T10:00:00Z,2\n"
             ",,9223372036854775807,,,\n"
             "nan,0,5,12|3|3,1714550400,\n"
             "1e-1,,6,0,2024-05-01,7\n")


def test_generic_items_csv_finds_columns_by_name_in_any_order(tmp_path):
    # given columns in another order, multi-category items, items without price, a 64-bit id, attribute columns
    report = Report()
    got = items(write(tmp_path, "items.csv", ITEMS_CSV), "csv", report)
    # then every field lands where its header says; categories sorted and distinct; empty = NaN
    assert got["item_id"] == [17, BIG, 5, 6]
    assert got["categories"] == [[3, 12], [], [3, 12], [0]]
    assert nan_equal(got["price"], [9.99, np.nan, 0.0, np.nan])
    assert nan_equal(got["created_at"], [T0 + 7200, np.nan, T0, T0 - 8 * 3600])
    assert [sorted(a) for a in got["attributes"]] == [["photos", "quality"]] * 4
    assert nan_equal([a["quality"] for a in got["attributes"]], [0.8, np.nan, np.nan, 0.1])
    assert nan_equal([a["photos"] for a in got["attributes"]], [2, np.nan, np.nan, 7])
    assert report.refused == 0 and report.notes == []


def test_declared_attributes_keep_only_those_columns(tmp_path):
    report = Report()
    got = items(write(tmp_path, "items.csv", ITEMS_CSV), "csv", report, attributes=["quality", "sold"])
    assert [sorted(a) for a in got["attributes"]] == [["quality"]] * 4
    assert report.notes == [f"{tmp_path / 'items.csv'}: column 'photos' is not a declared attribute: ignored"]


def test_generic_items_csv_refuses_bad_ids_numbers_categories_and_times(tmp_path):
    rows = ["item_id,categories,price,created_at,quality",
            "1,,,,",
            "0,,,,",                            # 3 zero id
            "9223372036854775808,,,,",          # 4 one past 2**63-1
            "abc,,,,",                          # 5 not a number
            "2,3|x,,,",                         # 6 bad category
            "3,3||4,,,",                        # 7 empty category in a list
            "4,-1,,,",                          # 8 negative category
            "5,,-0.01,,",                       # 9 negative price
            "6,,inf,,",                         # 10 infinite price
            "7,,,2024-13-01,",                  # 11 no 13th month
            "8,,,2024-05-01T10:00:00+25:00,",   # 12 no such zone
            "9,,,,high",                        # 13 attribute not a number
            ",,,,",                             # 14 no id
            "10,7,1.5,1714550400,0.5"]
    report = Report()
    got = items(write(tmp_path, "items.csv", "\n".join(rows) + "\n"), "csv", report)
    assert got["item_id"] == [1, 10] and got["lines"] == [2, 15]
    assert got["categories"] == [[], [7]]                # the refused rows' categories are gone with them
    reasons = dict(refused(report))
    assert sorted(reasons) == list(range(3, 15))
    assert reasons[4] == "item_id '9223372036854775808' is not an id (an integer from 1 to 2**63-1)"
    assert reasons[6] == "categories: 'x' is not a category id (an integer from 0 to 2**63-1)"
    assert "''" in reasons[7] and "'-1'" in reasons[8]
    assert reasons[9] == "price '-0.01' is below 0" and reasons[10] == "price 'inf' is not a number"
    assert "created_at '2024-13-01'" in reasons[11] and "created_at '2024-05-01T10:00:00+25:00'" in reasons[12]
    assert reasons[13] == "quality 'high' is not a number" and reasons[14] == "item_id is missing"


def test_a_file_that_cannot_be_read_as_a_whole_raises_in_either_mode(tmp_path):
    no_id = write(tmp_path, "items.csv", "id,price\n1,2\n")
    with pytest.raises(InvalidInput, match=r"items.csv:1: no 'item_id' column in the header \(found: id, price\)"):
        read_items(no_id, "csv", report=Report(), max_future=60)
    twice = write(tmp_path, "twice.csv", "item_id,price,price\n1,2,3\n")
    with pytest.raises(InvalidInput, match="'price' appears twice"):
        read_items(twice, "csv", report=Report(), max_future=60)
    with pytest.raises(InvalidInput, match="no header"):
        read_items(write(tmp_path, "empty.csv", ""), "csv", report=Report(), max_future=60)
    with pytest.raises(InvalidInput, match="cannot read"):
        read_items(tmp_path / "absent.csv", "csv", report=Report(), max_future=60)
    with pytest.raises(InvalidInput, match="unknown item format 'xml'"):
        read_items(no_id, "xml", report=Report(), max_future=60)
    with pytest.raises(InvalidInput, match="no 'ts' column"):
        read_events(write(tmp_path, "ev.csv", "user_id,item_id,time\n"), "csv", report=Report(), max_future=60)


EVENTS_CSV = ("ts,item_id,user_id,type,value,event_id,session\n"
              "2024-05-01T10:00:00+02:00,17,42,purchase,19.99,order-1,a\n"
              "1714550400,18,42,,,,a\n"
              "2024-05-01T08:00:00Z,19,9223372036854775807,2,nan,e3,b\n"
              "2024-05-01 13:30:00+0530,20,7,contact,-1,,c\n"
              "2024-05-01T07:00:00-01,21,7,view,0,,c\n"
              "2024-05-01T08:00:00.250,22,7,4,,,c\n"
              "1714550400.5,23,7,view,,,c\n")


def test_generic_events_csv_types_values_ids_and_zones(tmp_path):
    # given columns in any order, type names and codes, an empty type, ISO times with Z, offsets and none
    report = Report()
    got = events(write(tmp_path, "events.csv", EVENTS_CSV), "csv", report)
    # then every time is the same instant in UTC, the empty type is the default, codes are taken as they are
    assert got["ts"] == [T0, T0, T0, T0, T0, T0 + 0.25, T0 + 0.5]
    assert got["type"] == [PURCHASE, VIEW, CLICK, CONTACT, VIEW, PURCHASE, VIEW]
    assert nan_equal(got["value"], [19.99, np.nan, np.nan, -1, 0, np.nan, np.nan])
    assert got["event_id"] == ["order-1", None, "e3", None, None, None, None]
    assert got["user_id"] == [42, 42, BIG, 7, 7, 7, 7]
    assert report.notes == [f"{tmp_path / 'events.csv'}: column 'session' is not an event field: ignored"]
    # and a byte-order mark (as spreadsheets write) is not part of the first column's name
    bom = write(tmp_path, "bom.csv", "\ufeff" + EVENTS_CSV)
    assert repr(events(bom, "csv")) == repr(got)
    # and without type or event_id columns every event is the default type and event_id is None
    bare = write(tmp_path, "bare.csv", "user_id,item_id,ts\n1,2,3\n")
    got = events(bare, "csv", default_type="click")
    assert got["type"] == [CLICK] and got["event_id"] == [None]
    empty_type = write(tmp_path, "empty_type.csv", "user_id,item_id,ts,type\n1,2,3,\n1,2,3,view\n")
    assert events(empty_type, "csv", default_type="contact")["type"] == [CONTACT, VIEW]


def test_generic_events_csv_refuses_unknown_types_long_ids_and_millisecond_times(tmp_path):
    path = write(tmp_path, "events.csv", "user_id,item_id,ts,type,event_id\n"
                                         "1,2,1714550400,like,\n"
                                         f"1,2,1714550400,view,{'x' * 65}\n"
                                         "1,2,1714550400000,view,\n"
                                         "1,2,,view,\n"
                                         "1,2,1714550400,9,\n"
                                         f"1,2,1714550400,view,{'x' * 64}\n")
    report = Report()
    got = events(path, "csv", report)
    assert got["lines"] == [7] and got["event_id"] == ["x" * 64]
    assert refused(report) == [
        (2, "type 'like' is not one of view (1), click (2), contact (3), purchase (4)"),
        (3, "event_id is longer than 64 characters"),
        (4, "ts '1714550400000' is not seconds since 1970 (milliseconds?)"),
        (5, "ts is missing"),
        (6, "type '9' is not one of view (1), click (2), contact (3), purchase (4)")]


def test_quoted_fields_across_lines_blank_lines_and_crlf_keep_line_numbers(tmp_path):
    # given a CSV written on Windows with a quoted field spanning two lines and blank lines
    text = ('item_id,title,price\r\n1,"plain",1\r\n2,"two\r\nlines, and a comma",2\r\n\r\n'
            '3,"say ""hi""",x\r\n4,,4\r\n')
    report = Report()
    got = items(write(tmp_path, "items.csv", text), "csv", report, attributes=[])
    # then rows after the quoted field have their true lines, the blank line is skipped, the bad row named
    assert got["item_id"] == [1, 2, 4] and got["lines"] == [2, 3, 7]
    assert got["price"] == [1, 2, 4]
    assert refused(report) == [(6, "price 'x' is not a number")]


# ---------------------------------------------------------------------------------------------------- JSON lines
def jsonl(*objects) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects)


def test_jsonl_items_with_category_lists_and_an_attributes_object(tmp_path):
    path = write(tmp_path, "items.jsonl", jsonl(
        {"item_id": 17, "categories": [3, 12, 3], "price": 9.99, "created_at": "2024-05-01T10:00:00+02:00",
         "attributes": {"quality": 0.8}, "title": "ignored"},
        {"item_id": str(BIG), "attributes": {"photos": 3}},
        "  \t",
        {"item_id": 1.0},                                   # 4 float id
        {"item_id": 2, "categories": "3|4"},                # 5 not a list
        {"item_id": 3, "attributes": [1]},                  # 6 not an object
        {"item_id": 4, "price": True},                      # 7 not a number
        "{not json",                                        # 8
        "[1, 2]",                                           # 9
        {"item_id": 5, "categories": [], "price": None}))
    report = Report()
    got = items(path, "jsonl", report)
    assert got["item_id"] == [17, BIG, 5] and got["lines"] == [1, 2, 10]
    assert got["categories"] == [[3, 12], [], []]
    assert nan_equal(got["price"], [9.99, np.nan, np.nan])
    assert nan_equal(got["created_at"], [T0, np.nan, np.nan])
    assert nan_equal([a["quality"] for a in got["attributes"]], [0.8, np.nan, np.nan])
    assert nan_equal([a["photos"] for a in got["attributes"]], [np.nan, 3, np.nan])
    reasons = dict(refused(report))
    assert sorted(reasons) == [4, 5, 6, 7, 8, 9]
    assert reasons[4] == "item_id '1.0' is not an id (an integer from 1 to 2**63-1)"
    assert reasons[5].startswith("categories is not a list of ids") and reasons[6].startswith("attributes is not")
    assert reasons[7] == "price 'true' is not a number"
    assert reasons[8].startswith("not valid JSON") and reasons[9] == "not a JSON object"
    # and declared attributes: undeclared keys are noted and left out
    report = Report()
    got = items(path, "jsonl", report, attributes=["quality"])
    assert [sorted(a) for a in got["attributes"]] == [["quality"]] * 3
    assert report.notes == [f"{path}: attributes 'photos' is not declared: ignored"]


def test_jsonl_events(tmp_path):
    path = write(tmp_path, "events.jsonl", jsonl(
        {"user_id": 1, "item_id": str(BIG), "ts": "2024-05-01T09:30:00+01:30", "type": "click", "value": 3},
        {"user_id": 2, "item_id": 5, "ts": T0, "event_id": "a-1", "page": "home"},
        {"user_id": 2, "item_id": 5, "ts": T0, "type": 4, "event_id": None},
        {"user_id": True, "item_id": 5, "ts": T0},
        {"user_id": 3, "item_id": 5}))
    report = Report()
    got = events(path, "jsonl", report)
    assert got["user_id"] == [1, 2, 2] and got["item_id"] == [BIG, 5, 5]
    assert got["ts"] == [T0] * 3 and got["type"] == [CLICK, VIEW, PURCHASE]
    assert nan_equal(got["value"], [3, np.nan, np.nan]) and got["event_id"] == [None, "a-1", None]
    assert refused(report) == [(4, "user_id 'true' is not an id (an integer from 1 to 2**63-1)"),
                               (5, "ts is missing")]


# ---------------------------------------------------------------------------------------------------- across formats
def test_strict_mode_raises_on_the_first_bad_row_naming_file_and_line(tmp_path):
    path = write(tmp_path, "events.csv", "user_id,item_id,ts\n1,2,3\n1,2,3\n0,2,3\n1,x,3\n")
    with pytest.raises(InvalidInput) as raised:
        events(path, "csv", Report(strict=True))
    assert str(raised.value) == f"{path}:4: user_id '0' is not an id (an integer from 1 to 2**63-1)"
    assert "\n" not in str(raised.value)
    # and in chunks of one row, the rows before it come out first, then the error: nothing after it
    chunks = read_events(path, "csv", report=Report(strict=True), max_future=60, chunk_rows=1)
    assert [len(next(chunks)), len(next(chunks))] == [1, 1]
    with pytest.raises(InvalidInput, match=r"events.csv:4: user_id '0'"):
        next(chunks)


def test_reports_keep_a_capped_list_and_count_everything(tmp_path):
    path = write(tmp_path, "events.csv", "user_id,item_id,ts\n" + "x,1,1\n" * 250 + "1,1,1\n")
    report = Report(keep=3)
    assert events(path, "csv", report)["user_id"] == [1]
    assert report.refused == 250 and report.accepted == 1
    assert [row.line for row in report.bad_rows] == [2, 3, 4]


def test_every_bad_cell_of_a_column_is_found(tmp_path):
    # the halving search in cells.each finds any pattern of bad cells, and only them
    rng = np.random.default_rng(7)
    cells = [str(v) for v in rng.integers(1, 1000, 500)]
    bad = set(rng.choice(500, 60, replace=False).tolist()) | {0, 499}
    for i in bad:
        cells[i] = rng.choice(["", "x", "1.5", "9" * 30])
    values, failed = each(to_int, cells, np.int64)
    assert set(np.flatnonzero(failed).tolist()) == bad
    good = [i for i in range(500) if i not in bad]
    assert values[good].tolist() == [int(cells[i]) for i in good]


@pytest.mark.parametrize("name,fmt,content,reader", [
    ("u.item", "movielens", U_ITEM * 3, items),
    ("movies.csv", "movielens", MOVIES_CSV + MOVIES_CSV.split("\n", 1)[1], items),
    ("items.csv", "csv", ITEMS_CSV + "8,,,,,\nbad,,,,,\n\n" + ITEMS_CSV.split("\n", 1)[1], items),
    ("items.jsonl", "jsonl", jsonl({"item_id": 1, "categories": [2, 1]}, "", {"item_id": 2, "attributes": {"a": 1}},
                                   "{", {"item_id": 3, "attributes": {"b": 2}}), items),
    ("u.data", "movielens", U_DATA * 3, events),
    ("events.csv", "csv", EVENTS_CSV + '1,"2\n",3,view,,,\n' + EVENTS_CSV.split("\n", 1)[1], events),
    ("events.jsonl", "jsonl", jsonl({"user_id": 1, "item_id": 2, "ts": 3}, {"user_id": 0}, "",
                                    {"user_id": 1, "item_id": 2, "ts": "2024-05-01Z"}), events),
])
def test_chunk_size_does_not_change_the_result(tmp_path, name, fmt, content, reader):
    # given the same file read in one chunk and in chunks of 1, 2, 3 and 5 rows
    path = write(tmp_path, name, content)
    whole_report = Report()
    whole = reader(path, fmt, whole_report)
    for size in (1, 2, 3, 5):
        report = Report()
        got = reader(path, fmt, report, chunk_rows=size)
        # then the rows, their lines and the refused rows are the same
        if reader is items:
            # attribute names a JSON chunk sees differ; NaN for the missing ones is the same answer
            got["attributes"] = [{k: v for k, v in a.items() if not np.isnan(v)} for a in got["attributes"]]
            whole["attributes"] = [{k: v for k, v in a.items() if not np.isnan(v)} for a in whole["attributes"]]
        assert {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in whole.items()}, size
        assert refused(report) == refused(whole_report) and report.accepted == whole_report.accepted


def test_progress_reports_bytes_read_up_to_the_file_size(tmp_path, monkeypatch):
    # given a file of 200 lines read in blocks of 256 bytes and chunks of 30 rows
    monkeypatch.setattr(source, "BLOCK_BYTES", 256)
    path = write(tmp_path, "u.data", U_DATA * 50)
    seen: list[int] = []
    events(path, "movielens", chunk_rows=30, progress=seen.append)
    # then each chunk reports the bytes read so far, growing, and the last one the file's size
    assert len(seen) == 7 and seen[-1] == path.stat().st_size
    assert all(a < b for a, b in zip(seen, seen[1:]))


def test_a_read_that_is_abandoned_or_fails_closes_its_file(tmp_path):
    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    path = write(tmp_path, "u.data", U_DATA * 10)
    before = open_files()
    started = read_events(path, "movielens", report=Report(), max_future=60, chunk_rows=2)
    next(started)
    unstarted = read_events(path, "movielens", report=Report(), max_future=60)
    assert open_files() == before + 2
    del started, unstarted
    assert open_files() == before
    # and a file refused for its header is closed even while the caller keeps the error (and its frames)
    with pytest.raises(InvalidInput) as raised:
        read_items(write(tmp_path, "no_id.csv", "id\n1\n"), "csv", report=Report(), max_future=60)
    assert open_files() == before and raised.value


def test_a_row_the_csv_module_cannot_read_is_refused_and_reading_goes_on(tmp_path):
    # given a quoted field over the csv module's field limit (128 KiB) between good rows
    huge = '"' + "x" * 200_000 + '"'
    path = write(tmp_path, "items.csv", f"item_id,title,price\n1,a,1\n2,{huge},2\n3,b,3\n4,c,4\n")
    report = Report()
    got = items(path, "csv", report, attributes=[], chunk_rows=2)
    # then that row is refused with its line and the csv module's reason; the rows after it keep their lines
    assert got["item_id"] == [1, 3, 4] and got["lines"] == [2, 4, 5]
    assert [(line, reason[:40]) for line, reason in refused(report)] == [
        (3, "unreadable CSV: field larger than field ")]


def test_blanks_around_cells_are_read_as_a_person_means_them(tmp_path):
    # given a CSV typed with a space after each comma, and a one-column file with blank lines
    path = write(tmp_path, "events.csv", "user_id, item_id, ts, type, value\n1, 2, 1714550400, click,  \n"
                                         "1, 3, 2024-05-01T08:00:00Z , purchase, 2.5 \n")
    got = events(path, "csv")
    assert got["item_id"] == [2, 3] and got["ts"] == [T0, T0] and got["type"] == [CLICK, PURCHASE]
    assert nan_equal(got["value"], [np.nan, 2.5])
    one_column = write(tmp_path, "items.csv", "item_id\n1\n\n2\n\n")
    report = Report()
    assert items(one_column, "csv", report)["item_id"] == [1, 2] and report.refused == 0


def test_a_bad_byte_inside_a_quoted_field_across_lines_refuses_its_row_at_any_chunk_size(tmp_path):
    content = b'item_id,note,price\n1,"first\nsecond \xe9",1\n2,ok,2\n'
    path = write(tmp_path, "items.csv", content)
    for size in (1, 2, 50):
        report = Report()
        assert items(path, "csv", report, attributes=[], chunk_rows=size)["item_id"] == [2]
        assert refused(report) == [(2, "not valid utf-8 (is the file in another encoding?)")]


# ---------------------------------------------------------------------------------------------------- the future
YEAR_5138 = 99_990_000_000                              # 5138-07-…: under MAX_ABS_SECONDS, so once read as seconds


def _future_files(soon: int, later: int) -> list[tuple[str, str, str | bytes, str]]:
    """(name, format, content, field) of files of every format: line 2 now, line 3 ``soon``, line 4 in 5138 (line 5
    ``later`` where the format can say it). ``u.item`` gives dates only, and ``movies.csv`` has no time at all."""
    far_iso = "5138-07-01T00:00:00Z"
    return [
        ("events.csv", "csv", f"user_id,item_id,ts\n1,2,{T0}\n1,3,{soon}\n1,4,{far_iso}\n1,5,{later}\n", "ts"),
        ("events.jsonl", "jsonl", jsonl({"user_id": 1, "item_id": 2, "ts": T0},
                                        {"user_id": 1, "item_id": 3, "ts": soon},
                                        {"user_id": 1, "item_id": 4, "ts": YEAR_5138},
                                        {"user_id": 1, "item_id": 5, "ts": later}), "ts"),
        ("u.data", "movielens", f"1\t2\t5\t{T0:.0f}\n1\t3\t5\t{soon}\n1\t4\t5\t{YEAR_5138}\n1\t5\t5\t{later}\n",
         "ts"),
        ("ratings.csv", "movielens", f"userId,movieId,rating,timestamp\n1,2,5.0,{T0:.0f}\n1,3,5.0,{soon}\n"
                                     f"1,4,5.0,{YEAR_5138}\n1,5,5.0,{later}\n", "timestamp"),
        ("items.csv", "csv", f"item_id,created_at\n2,{T0}\n3,{soon}\n4,{far_iso}\n5,{later}\n", "created_at"),
        ("items.jsonl", "jsonl", jsonl({"item_id": 2, "created_at": T0}, {"item_id": 3, "created_at": soon},
                                       {"item_id": 4, "created_at": far_iso},
                                       {"item_id": 5, "created_at": later}), "created_at"),
        ("u.item", "movielens", "2|A (1995)|01-Jan-1995||u|" + "0|" * 18 + "1\n"
                                "4|B (5138)|01-Jul-5138||u|" + "0|" * 18 + "1\n", "release date"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_time_further_ahead_than_the_allowed_future_refuses_its_row_and_keeps_the_rest(tmp_path, case):
    # given a file of each format with rows dated now, within the allowed future, in 5138 and an hour ahead
    now = int(time.time())
    name, fmt, content, field = _future_files(now + 30, now + 3600)[case]
    shift = 1 if name.startswith(("u.", "events.jsonl", "items.jsonl")) else 0    # no header line
    report = Report()
    reader = items if field in ("created_at", "release date") else events
    # when it is read with the allowed future of POST /events (PREFEED_EVENT_MAX_FUTURE's 60 s)
    got = reader(write(tmp_path, name, content), fmt, report, max_future=60)
    # then the rows past it are refused with their line and reason, counted, and every other row is kept
    ids = got["item_id"]
    assert 2 in ids and 4 not in ids and 5 not in ids, ids
    assert ids == ([2] if name == "u.item" else [2, 3]), ids
    lines = [line for line, _ in refused(report)]
    assert lines == ([3 - shift] if name == "u.item" else [4 - shift, 5 - shift]), refused(report)
    assert all(reason.startswith(field) and "more than 60 s after now" in reason for _, reason in refused(report))
    assert report.refused == len(lines) and report.accepted == len(ids)
    # and in strict mode the first of them stops the read, naming its line
    with pytest.raises(InvalidInput, match=f":{lines[0]}: {field}"):
        reader(write(tmp_path, name, content), fmt, Report(strict=True), max_future=60)
