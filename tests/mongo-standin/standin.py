#!/usr/bin/env python3
"""Tally's MongoDB stand-in: a small MongoDB wire-protocol server for tests.

The tests of Tally's MongoDB store talk to this process through the real Rust
`mongodb` driver when no real MongoDB server is available. Storage, query
matching and most update operators are delegated to the third-party engine
`mongomock`; BSON comes from `pymongo`'s `bson` package. On top of that the
stand-in enforces several rules a real server enforces and mongomock does
not (update path conflicts, real BSON comparison order for `$min`/`$max`,
numeric type promotion for `$inc`/`$mul`, per-document atomicity, ...). See
README.md next to this file.

Usage:
    python standin.py --port 0 [--verbose] [--ttl-monitor-secs 60]

It binds 127.0.0.1, prints exactly one line `LISTENING <port>` to stdout and
serves until killed or until its stdin reaches end-of-file. Lines written to
stdin are control commands (each answered by one line on stdout):

    down                      close every connection, refuse new ones
    up                        accept connections again
    dropAfterApply N          the next N write commands are applied, then the
                              connection is closed without a reply
    failNext N [CODE [MSG]]   the next N write commands fail with CODE
                              (default 91 ShutdownInProgress), unapplied
    failInserts on|off [CODE] every `insert` command fails with CODE
                              (default 91), unapplied; updates still work
    probeCode CODE|off        Tally's feature probes (its `~features`
                              document, TTL probe index and `collMod` on
                              `tally_writers`) fail with CODE
    reset                     clear all faults (and `down`)
    ttlPass                   run one TTL-monitor pass now; prints the count
    status                    print the fault state

SIGUSR1 / SIGUSR2 also switch `down` on / off.
"""

import argparse
import asyncio
import concurrent.futures
import copy
import datetime
import decimal
import functools
import gc
import logging
import math
import os
import random
import re
import signal
import struct
import sys
import threading
import time
import traceback
import uuid

import bson
from bson import ObjectId
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.decimal128 import Decimal128, create_decimal128_context
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.raw_bson import RawBSONDocument
from bson.regex import Regex
from bson.timestamp import Timestamp

import mongomock
from mongomock import collection as mm_collection
from mongomock import filtering as mm_filtering
from mongomock import helpers as mm_helpers

LOG = logging.getLogger("standin")

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

MSG_CHECKSUM_PRESENT = 1 << 0
MSG_MORE_TO_COME = 1 << 1
MSG_EXHAUST_ALLOWED = 1 << 16

MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
MAX_MESSAGE_SIZE = 48_000_000
MAX_WRITE_BATCH_SIZE = 100_000
MAX_WIRE_VERSION = 21  # MongoDB 7.0
SERVER_VERSION = "7.0.0"
DEFAULT_FIRST_BATCH = 101
# A decoded document re-encodes to the bytes it came in (same types, same
# order); the margin only guards against an exotic value that would not.
WIRE_SIZE_MARGIN = 64 * 1024
CURSOR_IDLE_TIMEOUT_SECS = 600

CODEC = CodecOptions(
    document_class=dict,
    tz_aware=False,
    datetime_conversion=DatetimeConversion.DATETIME_AUTO,
)

CODE_NAMES = {
    1: "InternalError",
    2: "BadValue",
    6: "HostUnreachable",
    9: "FailedToParse",
    13: "Unauthorized",
    14: "TypeMismatch",
    16: "InvalidLength",
    20: "IllegalOperation",
    26: "NamespaceNotFound",
    27: "IndexNotFound",
    28: "PathNotViable",
    40: "ConflictingUpdateOperators",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    52: "DollarPrefixedFieldName",
    56: "EmptyFieldName",
    59: "CommandNotFound",
    66: "ImmutableField",
    67: "CannotCreateIndex",
    72: "InvalidOptions",
    73: "InvalidNamespace",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    112: "WriteConflict",
    189: "PrimarySteppedDown",
    238: "NotImplemented",
    10107: "NotWritablePrimary",
    10334: "BSONObjectTooLarge",
    11000: "DuplicateKey",
    11600: "InterruptedAtShutdown",
    15975: "Location15975",
    31249: "Location31249",
    31253: "Location31253",
    31254: "Location31254",
    40414: "Location40414",
}

UPDATE_OPERATORS = {
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$setOnInsert",
    "$rename",
    "$currentDate",
    "$push",
    "$addToSet",
    "$pull",
    "$pullAll",
    "$pop",
}

WRITE_COMMANDS = {"insert", "update", "delete", "findAndModify"}

# What `hello` advertises and `startSession` answers, as mongod does.
SESSION_TIMEOUT_MINUTES = 30

# Answered on the event loop itself; everything else runs, one command at a
# time, on the engine thread, so a long batch never starves the driver's
# monitoring connections.
INLINE_COMMANDS = {"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo",
                   "endSessions", "connectionStatus"}


class CommandError(Exception):
    """A command-level failure: replied as {ok: 0, errmsg, code, codeName}."""

    def __init__(self, code, errmsg, **extra):
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.extra = extra

    def reply(self):
        doc = {"ok": 0.0, "errmsg": self.errmsg, "code": self.code,
               "codeName": CODE_NAMES.get(self.code, "Location%d" % self.code)}
        doc.update(self.extra)
        return doc


class StatementError(CommandError):
    """A per-statement failure of a write command (reported in writeErrors)."""

    def write_error(self, index):
        doc = {"index": index, "code": self.code, "errmsg": self.errmsg}
        doc.update(self.extra)
        return doc


class DropConnection(Exception):
    """Close the client connection without replying."""


# ---------------------------------------------------------------------------
# BSON helpers: real comparison order, numbers, formatting
# ---------------------------------------------------------------------------


def is_number(v):
    return isinstance(v, (int, float, Decimal128)) and not isinstance(v, bool)


def type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, Int64):
        return "long"
    if isinstance(v, int):
        return "int" if -(2**31) <= v < 2**31 else "long"
    if isinstance(v, float):
        return "double"
    if isinstance(v, Decimal128):
        return "decimal"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, bytes):
        return "binData"
    if isinstance(v, ObjectId):
        return "objectId"
    if isinstance(v, (datetime.datetime, bson.datetime_ms.DatetimeMS)):
        return "date"
    if isinstance(v, Timestamp):
        return "timestamp"
    if isinstance(v, (Regex, re.Pattern)):
        return "regex"
    if isinstance(v, MinKey):
        return "minKey"
    if isinstance(v, MaxKey):
        return "maxKey"
    return type(v).__name__


def fmt(v):
    """Render a value roughly the way the server prints it in messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, float):
        if v == int(v) and abs(v) < 1e15:
            return "%d.0" % int(v)
        return repr(v)
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, dict):
        return "{ " + ", ".join("%s: %s" % (k, fmt(x)) for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, (list, tuple)):
        return "[ " + ", ".join(fmt(x) for x in v) + " ]" if v else "[]"
    if isinstance(v, ObjectId):
        return "ObjectId('%s')" % v
    if isinstance(v, datetime.datetime):
        return "new Date(%d)" % int(v.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
    return str(v)


def canonical_order(v):
    """Canonical type ranks of the BSON comparison order."""
    if isinstance(v, MinKey):
        return 1
    if v is None:
        return 5
    if isinstance(v, bool):
        return 40
    if is_number(v):
        return 10
    if isinstance(v, str):
        return 15
    if isinstance(v, dict):
        return 20
    if isinstance(v, (list, tuple)):
        return 25
    if isinstance(v, bytes):
        return 30
    if isinstance(v, ObjectId):
        return 35
    if isinstance(v, (datetime.datetime, bson.datetime_ms.DatetimeMS)):
        return 45
    if isinstance(v, Timestamp):
        return 47
    if isinstance(v, (Regex, re.Pattern)):
        return 50
    if isinstance(v, MaxKey):
        return 127
    return 100


def _num_key(v):
    if isinstance(v, Decimal128):
        d = v.to_decimal()
        if d.is_nan():
            return None
        return d
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return decimal.Decimal("Infinity") if v > 0 else decimal.Decimal("-Infinity")
        return decimal.Decimal(v)
    return decimal.Decimal(int(v))


def _cmp(a, b):
    return (a > b) - (a < b)


def _dt_ms(v):
    if isinstance(v, bson.datetime_ms.DatetimeMS):
        return int(v)
    return bson.datetime_ms.DatetimeMS(v.replace(tzinfo=datetime.timezone.utc) if v.tzinfo is None else v).__int__()


def bson_cmp(a, b):
    """Compare two values in MongoDB's BSON order: -1, 0 or 1."""
    if type(a) is float and type(b) is float and a == a and b == b:
        # The common case ($min/$max of slots), without the detour through
        # Decimal below, which gives the same answer for non-NaN doubles.
        return (a > b) - (a < b)
    ta, tb = canonical_order(a), canonical_order(b)
    if ta != tb:
        return _cmp(ta, tb)
    if ta in (1, 5, 127):
        return 0
    if ta == 10:
        ka, kb = _num_key(a), _num_key(b)
        if ka is None or kb is None:  # NaN sorts below every other number
            return _cmp(ka is not None, kb is not None)
        return _cmp(ka, kb)
    if ta == 15:
        return _cmp(a.encode("utf-8"), b.encode("utf-8"))
    if ta == 20:
        ia, ib = list(a.items()), list(b.items())
        for (ka, va), (kb, vb) in zip(ia, ib):
            c = _cmp(canonical_order(va), canonical_order(vb))
            if c:
                return c
            c = _cmp(ka.encode("utf-8"), kb.encode("utf-8"))
            if c:
                return c
            c = bson_cmp(va, vb)
            if c:
                return c
        return _cmp(len(ia), len(ib))
    if ta == 25:
        for x, y in zip(a, b):
            c = bson_cmp(x, y)
            if c:
                return c
        return _cmp(len(a), len(b))
    if ta == 30:
        sa = getattr(a, "subtype", 0)
        sb = getattr(b, "subtype", 0)
        return _cmp((len(a), sa, bytes(a)), (len(b), sb, bytes(b)))
    if ta == 35:
        return _cmp(a.binary, b.binary)
    if ta == 40:
        return _cmp(bool(a), bool(b))
    if ta == 45:
        return _cmp(_dt_ms(a), _dt_ms(b))
    if ta == 47:
        return _cmp((a.time, a.inc), (b.time, b.inc))
    if ta == 50:
        pa = a.pattern if isinstance(a.pattern, str) else str(a.pattern)
        pb = b.pattern if isinstance(b.pattern, str) else str(b.pattern)
        return _cmp(pa, pb)
    return 0


_DEC_CTX = create_decimal128_context()


def num_arith(a, b, op):
    """a <op> b with MongoDB's numeric type promotion (int < long < double < decimal)."""
    ta, tb = type(a), type(b)
    if ta is float and tb is float:  # the common cases first, same results
        return a + b if op == "+" else a * b
    if ta is Int64 and tb is Int64:
        r = int(a) + int(b) if op == "+" else int(a) * int(b)
        if not -(2**63) <= r < 2**63:
            raise OverflowError()
        return Int64(r)
    kinds = {type_name(a), type_name(b)}
    if "decimal" in kinds:
        da = a.to_decimal() if isinstance(a, Decimal128) else decimal.Decimal(repr(a) if isinstance(a, float) else int(a))
        db = b.to_decimal() if isinstance(b, Decimal128) else decimal.Decimal(repr(b) if isinstance(b, float) else int(b))
        with decimal.localcontext(_DEC_CTX) as ctx:
            r = ctx.add(da, db) if op == "+" else ctx.multiply(da, db)
        return Decimal128(r)
    if "double" in kinds:
        return float(a) + float(b) if op == "+" else float(a) * float(b)
    r = int(a) + int(b) if op == "+" else int(a) * int(b)
    if "long" in kinds:
        if not -(2**63) <= r < 2**63:
            raise OverflowError()
        return Int64(r)
    if -(2**31) <= r < 2**31:
        return int(r)
    if not -(2**63) <= r < 2**63:
        raise OverflowError()
    return Int64(r)


def zero_like(v):
    if isinstance(v, Decimal128):
        return Decimal128("0")
    if isinstance(v, float):
        return 0.0
    if isinstance(v, Int64):
        return Int64(0)
    return 0


def fast_copy(doc):
    """Type-preserving deep copy of a stored document (BSON round trip)."""
    try:
        return bson.decode(bson.encode(doc, codec_options=CODEC), codec_options=CODEC)
    except Exception:  # noqa: BLE001 - fall back for odd values
        return copy.deepcopy(doc)


def store_key(_id):
    if isinstance(_id, dict):
        return mm_helpers.hashdict(_id)
    return _id


# ---------------------------------------------------------------------------
# Shared subdocuments of inserted documents
# ---------------------------------------------------------------------------
#
# Tally inserts thousands of pre-allocated documents that differ only in
# `_id`, `s`, `m` and `t`: every day document carries the same 86 KB of
# empty slots under `values`. Decoded into Python, that is ~3,000 objects
# and ~750 KB of memory per document, and ~1.6 ms of decoding; 20,000 day
# documents would not fit in memory.
#
# So an inserted document's large subdocuments (SHARE_MIN_BYTES or more of
# BSON) are decoded once per distinct byte string and shared, copy on write:
# the stand-in keeps a cache from raw bytes to a decoded tree of
# `SharedDict`s, and every document inserted with the same bytes points to
# the same tree. A `SharedDict` is never changed in place: `walk` (the only
# way the update engine reaches into a document) replaces each one it passes
# through with a private shallow copy first, recorded in the journal as an
# undoable non-modification; updates delegated to mongomock get a private
# deep copy of their documents first. Readers (filters, projections, BSON
# encoding) see ordinary dicts with the same content, so what a client
# observes is unchanged. Subdocuments with arrays are never shared.

SHARE_MIN_BYTES = 1024
SHARED_CACHE_MAX = 256


class SharedDict(dict):
    """A subdocument shared between stored documents; never modified in
    place (see above)."""

    __slots__ = ()


SHARED_CODEC = CodecOptions(
    document_class=SharedDict,
    tz_aware=False,
    datetime_conversion=DatetimeConversion.DATETIME_AUTO,
)
RAW_CODEC = CodecOptions(
    document_class=RawBSONDocument,
    tz_aware=False,
    datetime_conversion=DatetimeConversion.DATETIME_AUTO,
)
_SHARED = {}  # raw BSON bytes -> SharedDict tree


def decode_embedded(raw):
    """Decode a document's bytes exactly as if embedded in another document
    (where `{$ref, $id}` becomes a DBRef), as a command's array elements
    are."""
    wrapper = struct.pack("<i", len(raw) + 8) + b"\x03v\x00" + raw + b"\x00"
    return bson.decode(wrapper, codec_options=CODEC)["v"]


def _materialize(v):
    """A value decoded with RAW_CODEC, as CODEC would have decoded it."""
    if isinstance(v, RawBSONDocument):
        return decode_embedded(v.raw)
    if isinstance(v, list):
        return [_materialize(x) for x in v]
    return v


def _has_list(d):
    for v in d.values():
        if isinstance(v, list) or (isinstance(v, dict) and _has_list(v)):
            return True
    return False


def shared_subdocument(raw):
    """The decoded subdocument for these bytes: shared when large."""
    if len(raw) < SHARE_MIN_BYTES:
        return decode_embedded(raw)
    hit = _SHARED.get(raw)
    if hit is not None:
        return hit
    d = bson.decode(raw, codec_options=SHARED_CODEC)
    if "$ref" in d or _has_list(d):
        return decode_embedded(raw)
    if len(_SHARED) >= SHARED_CACHE_MAX:
        _SHARED.clear()
    _SHARED[raw] = d
    return d


def decode_document(raw, embedded):
    """An inserted document's bytes, decoded as CODEC would (`embedded`: it
    was an array element, not a document sequence entry), with its large
    subdocuments shared."""
    if len(raw) < SHARE_MIN_BYTES:
        return decode_embedded(raw) if embedded else bson.decode(raw, codec_options=CODEC)
    top = bson.decode(raw, codec_options=RAW_CODEC)
    if embedded and "$ref" in top:
        return decode_embedded(raw)
    out = {}
    for k, v in top.items():
        out[k] = shared_subdocument(v.raw) if isinstance(v, RawBSONDocument) else _materialize(v)
    return out


def decode_command(raw):
    """A command's body section: `bson.decode` with CODEC, except that the
    documents of an `insert` go through `decode_document`."""
    if raw[4:12] != b"\x02insert\x00":
        return bson.decode(raw, codec_options=CODEC)
    cmd = {}
    for k, v in bson.decode(raw, codec_options=RAW_CODEC).items():
        if k == "documents" and isinstance(v, list):
            cmd[k] = [decode_document(d.raw, True) if isinstance(d, RawBSONDocument)
                      else _materialize(d) for d in v]
        else:
            cmd[k] = _materialize(v)
    return cmd


def unshare_deep(doc):
    """A private copy of a stored document if any part of it is shared."""
    def shared(d):
        return any(type(v) is SharedDict or (isinstance(v, dict) and shared(v))
                   for v in d.values())
    return fast_copy(doc) if shared(doc) else doc


# ---------------------------------------------------------------------------
# Patches to mongomock: stricter, closer to a real server
# ---------------------------------------------------------------------------

# The _id of the document an update operator is currently applied to, for
# error messages.
_CURRENT = {"id": None}


def _id_text():
    return "{_id: %s}" % fmt(_CURRENT["id"])


def _list_index(doc, field_name):
    try:
        idx = int(field_name)
    except ValueError:
        raise StatementError(
            28, "Cannot apply array updates to non-array element %s: %s" % (field_name, fmt(doc))
        ) from None
    if idx < 0:
        raise StatementError(2, "Negative index provided")
    return idx


def _numeric_updater(opname, op):
    verb = "$inc" if op == "+" else "$mul"

    def updater(doc, field_name, value):
        if isinstance(doc, list):
            idx = _list_index(doc, field_name)
            present = idx < len(doc)
            current = doc[idx] if present else None
        else:
            present = field_name in doc
            current = doc.get(field_name)
        if not present:
            new = value if op == "+" else zero_like(value)
        else:
            if not is_number(current):
                raise StatementError(
                    14,
                    "Cannot apply %s to a value of non-numeric type. %s has the field '%s' of "
                    "non-numeric type %s" % (verb, _id_text(), field_name, type_name(current)),
                )
            try:
                new = num_arith(current, value, op)
            except OverflowError:
                raise StatementError(
                    2,
                    "Failed to apply %s operations to current value (%s) for document %s"
                    % (verb, fmt(current), _id_text()),
                ) from None
        _assign(doc, field_name, new)

    updater.__name__ = opname
    return updater


def _assign(doc, field_name, value):
    if isinstance(doc, list):
        idx = _list_index(doc, field_name)
        while len(doc) <= idx:
            doc.append(None)
        doc[idx] = value
    else:
        doc[field_name] = value


def _minmax_updater(sign):
    def updater(doc, field_name, value):
        if isinstance(doc, list):
            idx = _list_index(doc, field_name)
            present = idx < len(doc)
            current = doc[idx] if present else None
        else:
            present = field_name in doc
            current = doc.get(field_name)
        if not present or bson_cmp(value, current) * sign > 0:
            _assign(doc, field_name, value)

    return updater


_ORIG_SET = mm_collection._set_updater


def _set_updater(doc, field_name, value):
    if isinstance(doc, list):
        _list_index(doc, field_name)
    _ORIG_SET(doc, field_name, value)


def _update_document_single_field(self, doc, field_name, field_value, updater):
    """Walk a dotted path like a real server: create missing objects, refuse to
    traverse scalars (PathNotViable), pad arrays with nulls."""
    parts = field_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if isinstance(doc, list):
            if part == "$":
                doc = doc[0]
                continue
            try:
                idx = int(part)
            except ValueError:
                raise StatementError(
                    28, "Cannot create field '%s' in element {%s: %s}"
                    % (part, parts[i - 1] if i else "", fmt(doc))
                ) from None
            if idx >= len(doc):
                if updater is mm_collection._unset_updater:
                    return
                while len(doc) <= idx:
                    doc.append(None)
                doc[idx] = {}
            if doc[idx] is None and updater is not mm_collection._unset_updater:
                doc[idx] = {}
            doc = doc[idx]
        elif isinstance(doc, dict):
            if part not in doc:
                if updater is mm_collection._unset_updater:
                    return
                doc[part] = {}
            nxt = doc[part]
            if not isinstance(nxt, (dict, list)):
                if updater is mm_collection._unset_updater:
                    return
                raise StatementError(
                    28, "Cannot create field '%s' in element {%s: %s}"
                    % (parts[i + 1], part, fmt(nxt))
                )
            doc = nxt
        else:
            return
    updater(doc, parts[-1], field_value)


_ORIG_APPLY = mm_collection.Collection._apply_update_document


def _apply_update_document(self, existing_document, spec, document, was_insert):
    _CURRENT["id"] = existing_document.get("_id", spec.get("_id") if isinstance(spec, dict) else None)
    return _ORIG_APPLY(self, existing_document, spec, document, was_insert)


_ORIG_ITER = mm_collection.Collection._iter_documents


_RANGE_OPS = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _string_id_matcher(spec):
    """For `{_id: spec}` with spec a range of string bounds (`$gt`, `$gte`,
    `$lt`, `$lte`) or `$in` of strings only: a function telling whether a
    string _id matches, exactly as mongomock decides it (same-type values
    compare with Python's operators, which for str is code point order, the
    same as a server's byte order of UTF-8). None for any other spec."""
    if not isinstance(spec, dict) or not spec:
        return None
    if list(spec) == ["$in"]:
        values = spec["$in"]
        if not isinstance(values, list) or not all(type(v) is str for v in values):
            return None
        wanted = set(values)
        return wanted.__contains__
    bounds = []
    for op, bound in spec.items():
        cmp = _RANGE_OPS.get(op)
        if cmp is None or type(bound) is not str:
            return None
        bounds.append((cmp, bound))
    return lambda v: all(cmp(v, bound) for cmp, bound in bounds)


def _watermark_filter_applies(filter, doc):  # noqa: A002
    """Whether `doc`, found by the filter's scalar `_id`, matches a filter of
    the shape Tally's updates use, `{_id: X, "a.b": {$not: {$gte: N}}}`
    with N a number; None for any other filter, or when the document's
    side is not plain (arrays or non-numbers on the path), which mongomock
    then decides. The same answer as mongomock's: a missing field does not
    satisfy `$gte`, so `$not` matches it; numbers compare by value."""
    if len(filter) != 2:
        return None
    for key, cond in filter.items():
        if key == "_id":
            continue
        if type(cond) is not dict or len(cond) != 1 or "$not" not in cond:
            return None
        inner = cond["$not"]
        if type(inner) is not dict or len(inner) != 1 or "$gte" not in inner:
            return None
        bound = inner["$gte"]
        if type(bound) not in (int, Int64, float) or bound != bound:
            return None
        parts = _path_key(key)[0]
        if key.startswith("$") or "" in parts:
            return None
        cur = doc
        for part in parts:
            if not isinstance(cur, dict):
                return None
            if part not in cur:
                return True
            cur = cur[part]
        if type(cur) not in (int, Int64, float) or cur != cur:
            return None
        return not cur >= bound
    return None


def _iter_documents(self, filter):  # noqa: A002 - mongomock's signature
    """Fast paths for the filters Tally sends (mongomock matches every
    document against the filter in Python, ~30 us each):

    * `{_id: <scalar>, ...}`: a dict look-up, then the whole filter on that
      one document;
    * `{_id: {$gte: "a", $lt: "b"}}` (any string range) and
      `{_id: {$in: ["a", ...]}}` (strings only): a scan of the ids with
      Python comparisons, in store order as mongomock returns them; a
      document whose _id is not a string still goes through mongomock's
      matcher, so the result is the same.
    """
    if isinstance(filter, dict) and "_id" in filter:
        v = filter["_id"]
        if isinstance(v, (str, int, float, ObjectId, datetime.datetime)) and not isinstance(v, bool):
            docs = self._store._documents
            doc = docs.get(v)
            if doc is None:
                return iter(())
            match = _watermark_filter_applies(filter, doc)
            if match is None:
                match = mm_filtering.filter_applies(filter, doc)
            return iter((doc,)) if match else iter(())
        if len(filter) == 1:
            match = _string_id_matcher(v)
            if match is not None:
                if self._store.is_empty:
                    return iter(())
                out = []
                for doc in list(self._store.documents):
                    _id = doc.get("_id")
                    if type(_id) is str:
                        if match(_id):
                            out.append(doc)
                    elif mm_filtering.filter_applies(filter, doc):
                        out.append(doc)
                return iter(out)
    return _ORIG_ITER(self, filter)


class _BsonComparable:
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __lt__(self, other):
        return bson_cmp(self.obj, other.obj) < 0


mm_collection._updaters["$inc"] = _numeric_updater("_inc_updater", "+")
mm_collection._updaters["$mul"] = _numeric_updater("_mul_updater", "*")
mm_collection._updaters["$min"] = _minmax_updater(-1)
mm_collection._updaters["$max"] = _minmax_updater(1)
mm_collection._updaters["$set"] = _set_updater
mm_collection._set_updater = _set_updater
mm_collection.Collection._update_document_single_field = _update_document_single_field
mm_collection.Collection._apply_update_document = _apply_update_document
mm_collection.Collection._iter_documents = _iter_documents
mm_filtering.BsonComparable = _BsonComparable


# ---------------------------------------------------------------------------
# Validation a real server performs and mongomock does not
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def _path_key(path):
    """An update path as a tuple of its parts, and every proper prefix of
    it (as tuples). Cached: a flush sends the same few hundred paths in
    thousands of statements."""
    key = tuple(path.split("."))
    return key, tuple(key[:i] for i in range(1, len(key)))


def validate_update(u):
    """Validate an update document. Returns True for operator style, False
    for a replacement document."""
    keys = list(u.keys())
    if not keys:
        return False
    if not keys[0].startswith("$"):
        for k in keys:
            if k.startswith("$"):
                raise StatementError(
                    52,
                    "The dollar ($) prefixed field '%s' in '%s' is not allowed in the context of "
                    "an update's replacement document. Consider using an aggregation pipeline "
                    "with $replaceWith." % (k, k),
                )
        return False
    seen = []  # the parts (a tuple) of every path so far, in order
    # The same, for an O(depth) conflict test per path instead of comparing
    # with every earlier path (an hour document's statement has ~250 paths).
    seen_paths = set()  # the same, as a set
    seen_prefixes = set()  # every proper prefix of those, as a tuple
    for op in keys:
        fields = u[op]
        if op not in UPDATE_OPERATORS:
            raise StatementError(
                9,
                "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update "
                "specified as an array" % op,
            )
        if not isinstance(fields, dict):
            raise StatementError(
                9,
                "Modifiers operate on fields but we found type %s instead. For example: "
                "{$mod: {<field>: ...}} not {%s: %s}" % (type_name(fields), op, fmt(fields)),
            )
        for path, value in fields.items():
            paths = [path]
            if op == "$rename":
                if not isinstance(value, str):
                    raise StatementError(
                        2, "The 'to' field for $rename must be a string: %s: %s" % (path, fmt(value))
                    )
                paths.append(value)
            elif op in ("$inc", "$mul") and not is_number(value):
                raise StatementError(
                    14,
                    "Cannot %s with non-numeric argument: {%s: %s}"
                    % ("increment" if op == "$inc" else "multiply", path, fmt(value)),
                )
            elif op == "$pop" and (not is_number(value) or to_float(value) not in (1.0, -1.0)):
                raise StatementError(9, "$pop expects 1 or -1, found: %s" % fmt(value))
            elif op == "$pullAll" and not isinstance(value, list):
                raise StatementError(
                    2, "$pullAll requires an array argument but was given a %s" % type_name(value))
            elif op == "$currentDate":
                ok = value is True or value is False or (
                    isinstance(value, dict) and list(value.keys()) == ["$type"]
                    and value["$type"] in ("date", "timestamp"))
                if not ok:
                    raise StatementError(
                        2, "%s is not valid type for $currentDate. Please use a boolean ('true') or "
                        "a $type expression ({$type: 'timestamp/date'})." % type_name(value)
                    )
            for p in paths:
                if p == "":
                    raise StatementError(56, "An empty update path is not valid.")
                parts, prefixes = _path_key(p)
                if "" in parts:
                    raise StatementError(
                        56, "The update path '%s' contains an empty field name, which is not "
                        "allowed." % p
                    )
                if parts in seen_paths or parts in seen_prefixes \
                        or not seen_paths.isdisjoint(prefixes):
                    # A conflict: name it after the first earlier path it
                    # conflicts with, as a server does.
                    for other in seen:
                        n = min(len(parts), len(other))
                        if parts[:n] == other[:n]:
                            raise StatementError(
                                40, "Updating the path '%s' would create a conflict at '%s'"
                                % (p, ".".join(parts[:n]))
                            )
                seen.append(parts)
                seen_paths.add(parts)
                seen_prefixes.update(prefixes)
    return True


def validate_projection(projection):
    if projection is None:
        return
    if not isinstance(projection, dict):
        raise CommandError(14, "projection must be an object")
    mode = None
    paths = []
    for k, v in projection.items():
        if isinstance(v, dict):
            if not set(v.keys()) <= {"$slice", "$elemMatch"}:
                raise CommandError(238, "stand-in: projection operator %s is not supported" % list(v)[0])
        elif isinstance(v, (bool, int, float)):
            include = bool(v)
            if k != "_id":
                if mode is None:
                    mode = include
                elif mode != include:
                    if include:
                        raise CommandError(31253, "Cannot do inclusion on field %s in exclusion projection" % k)
                    raise CommandError(31254, "Cannot do exclusion on field %s in inclusion projection" % k)
        else:
            raise CommandError(238, "stand-in: projection expressions are not supported (%s)" % k)
        parts = k.split(".")
        for other in paths:
            n = min(len(parts), len(other))
            if parts[:n] == other[:n]:
                longer = parts if len(parts) >= len(other) else other
                raise CommandError(
                    31249, "Path collision at %s remaining portion %s"
                    % (".".join(longer), ".".join(longer[n:]) or longer[-1])
                )
        paths.append(parts)


def validate_sort(sort):
    if sort is None:
        return None
    if not isinstance(sort, dict):
        raise CommandError(14, "sort must be an object")
    out = []
    for k, v in sort.items():
        if isinstance(v, dict):
            raise CommandError(238, "stand-in: $meta sort is not supported")
        if not is_number(v) or to_float(v) not in (1.0, -1.0):
            raise CommandError(15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)")
        out.append((k, 1 if to_float(v) > 0 else -1))
    return out or None


def validate_namespace(db, coll=None):
    if not isinstance(db, str) or not db or any(c in db for c in '/\\. "$\0'):
        raise CommandError(73, "Invalid database name: '%s'" % (db,))
    if coll is not None:
        if not isinstance(coll, str):
            raise CommandError(
                2, "collection name has invalid type %s" % type_name(coll))
        if not coll or "$" in coll or "\0" in coll or coll.startswith("."):
            raise CommandError(73, "Invalid namespace specified '%s.%s'" % (db, coll))


# ---------------------------------------------------------------------------
# Field-operator update engine
#
# mongomock's own update path deep-copies the whole document twice per
# statement and is not atomic when an operator fails half-way. The field
# operators ($set, $unset, $inc, $mul, $min, $max, $setOnInsert, $currentDate)
# and the common array operators ($push, $addToSet, $pull, $pullAll, $pop)
# and replacement updates are therefore applied here, directly on mongomock's
# stored documents, with an undo journal; the rest ($rename, positional
# paths) goes to mongomock.
# ---------------------------------------------------------------------------

FIELD_OPERATORS = {"$set", "$unset", "$inc", "$mul", "$min", "$max", "$setOnInsert",
                   "$currentDate", "$push", "$addToSet", "$pull", "$pullAll", "$pop"}
ARRAY_READ_OPERATORS = {"$pull", "$pullAll", "$pop"}


def copy_value(v):
    """Copy the containers of a (freshly decoded) BSON value."""
    t = type(v)
    if t is dict:
        return {k: copy_value(x) for k, x in v.items()}
    if t is list:
        return [copy_value(x) for x in v]
    if isinstance(v, dict):
        return {k: copy_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [copy_value(x) for x in v]
    return v


def same_bson(a, b):
    """True when a and b would be stored as the same BSON (types included)."""
    if type_name(a) != type_name(b):
        return False
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return False
        return all(same_bson(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_bson(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _undo_del_key(container, key):
    del container[key]


def _undo_set(container, key, old):
    container[key] = old


def _undo_truncate(container, length):
    del container[length:]


def _undo_restore_dict(container, items):
    container.clear()
    container.update(items)


_PLAIN_SCALARS = (float, Int64, int, str, bool)


class Journal:
    """Records in-place changes to a stored document so they can be undone."""

    __slots__ = ("undo", "modified")

    def __init__(self):
        self.undo = []
        self.modified = False

    def put(self, container, key, value):
        if isinstance(container, list):
            if key >= len(container):
                self.undo.append((_undo_truncate, container, len(container)))
                container.extend([None] * (key + 1 - len(container)))
                container[key] = value
                self.modified = True
                return
            old = container[key]
        elif key in container:
            old = container[key]
        else:
            self.undo.append((_undo_del_key, container, key))
            container[key] = value
            self.modified = True
            return
        if not self.modified:
            t = type(old)
            if t is type(value) and t in _PLAIN_SCALARS:
                # same_bson for two values of one plain type, without its
                # type-name detour: equal, or both NaN.
                if not (old == value or (t is float and old != old and value != value)):
                    self.modified = True
            elif not same_bson(old, value):
                self.modified = True
        self.undo.append((_undo_set, container, key, old))
        container[key] = value

    def unshare(self, container, key, private):
        """Replace a SharedDict with a private copy of it: the same content,
        so not a modification."""
        self.undo.append((_undo_set, container, key, container[key]))
        container[key] = private

    def remove(self, container, key):
        self.undo.append((_undo_restore_dict, container, list(container.items())))
        del container[key]
        self.modified = True

    def rollback(self):
        for entry in reversed(self.undo):
            entry[0](*entry[1:])
        self.undo.clear()


def _array_index(part):
    if part.isdigit() and part.isascii():
        return int(part)
    return None


def fmt_short(v, limit=120):
    text = fmt(v)
    return text if len(text) <= limit else text[:limit] + "..."


def walk(doc, parts, journal, create):
    """Resolve all but the last path component. Returns (container, key) or
    (None, None) when the path does not exist and create is False."""
    cur = doc
    prev = ""
    for i, part in enumerate(parts[:-1]):
        if isinstance(cur, dict):
            if part in cur:
                nxt = cur[part]
                if type(nxt) is SharedDict:
                    nxt = dict(nxt)
                    journal.unshare(cur, part, nxt)
            elif create:
                nxt = {}
                journal.put(cur, part, nxt)
            else:
                return None, None
        else:  # list
            idx = _array_index(part)
            if idx is None:
                if not create:
                    return None, None
                raise StatementError(28, "Cannot create field '%s' in element {%s: %s}"
                                     % (part, prev, fmt_short(cur)))
            if idx < len(cur):
                nxt = cur[idx]
                if type(nxt) is SharedDict:
                    nxt = dict(nxt)
                    journal.unshare(cur, idx, nxt)
            elif create:
                nxt = {}
                journal.put(cur, idx, nxt)
            else:
                return None, None
        if not isinstance(nxt, (dict, list)):
            if not create:
                return None, None
            raise StatementError(28, "Cannot create field '%s' in element {%s: %s}"
                                 % (parts[i + 1], part, fmt_short(nxt)))
        prev = part
        cur = nxt
    last = parts[-1]
    if isinstance(cur, list):
        idx = _array_index(last)
        if idx is None:
            if not create:
                return None, None
            raise StatementError(28, "Cannot create field '%s' in element {%s: %s}"
                                 % (last, prev, fmt_short(cur)))
        return cur, idx
    return cur, last


def _peek(container, key):
    if isinstance(container, list):
        if key < len(container):
            return container[key], True
        return None, False
    if key in container:
        return container[key], True
    return None, False


@functools.lru_cache(maxsize=1 << 16)
def _path_sort_key(path):
    # MongoDB >= 5.0 applies update operators field by field in lexicographic
    # order, numeric field names in numeric order.
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split("."))


_TS_STATE = {"t": 0, "i": 0}


def _current_timestamp():
    now = int(time.time())
    if _TS_STATE["t"] == now:
        _TS_STATE["i"] += 1
    else:
        _TS_STATE["t"], _TS_STATE["i"] = now, 1
    return Timestamp(now, _TS_STATE["i"])


def now_date():
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def uses_field_engine(u):
    for op, fields in u.items():
        if op not in FIELD_OPERATORS:
            return False
        for path in fields:
            if "$" in path:
                return False
    return True


def apply_field_ops(doc, u, is_insert, journal):
    """Apply an operator-style update document to doc in place."""
    items = []
    for op, fields in u.items():
        if op == "$setOnInsert" and not is_insert:
            continue
        for path, value in fields.items():
            items.append((_path_sort_key(path), op, path, value))
    items.sort(key=lambda t: t[0])
    for _, op, path, value in items:
        parts = _path_key(path)[0]
        if op in ARRAY_READ_OPERATORS:
            container, key = walk(doc, parts, journal, create=False)
            if container is None:
                continue
            current, present = _peek(container, key)
            if not present:
                continue
            if not isinstance(current, list):
                if op == "$pop":
                    raise StatementError(
                        14, "Path '%s' contains an element of non-array type '%s'"
                        % (path, type_name(current)))
                raise StatementError(2, "Cannot apply %s to a non-array value" % op)
            if op == "$pop":
                if not current:
                    continue
                new = current[1:] if to_float(value) < 0 else current[:-1]
            elif op == "$pullAll":
                new = [x for x in current if not any(bson_cmp(x, v) == 0 for v in value)]
            else:
                new = [x for x in current if not _pull_matches(value, x)]
            if len(new) != len(current):
                journal.put(container, key, new)
            continue
        if op in ("$push", "$addToSet"):
            container, key = walk(doc, parts, journal, create=True)
            current, present = _peek(container, key)
            if present and not isinstance(current, list):
                if op == "$push":
                    raise StatementError(
                        2, "The field '%s' must be an array but is of type %s in document "
                        "{_id: %s}" % (path, type_name(current), fmt(doc.get("_id"))))
                raise StatementError(
                    2, "Cannot apply $addToSet to non-array field. Field named '%s' has "
                    "non-array type %s" % (parts[-1], type_name(current)))
            new = list(current) if present else []
            if op == "$push":
                _push(new, value)
            else:
                each = value["$each"] if isinstance(value, dict) and "$each" in value else [value]
                for v in each:
                    if not any(bson_cmp(v, x) == 0 for x in new):
                        new.append(copy_value(v))
            journal.put(container, key, new)
            continue
        if op == "$unset":
            container, key = walk(doc, parts, journal, create=False)
            if container is None:
                continue
            if isinstance(container, list):
                if key < len(container):
                    journal.put(container, key, None)
            elif key in container:
                journal.remove(container, key)
            continue
        container, key = walk(doc, parts, journal, create=True)
        current, present = _peek(container, key)
        if op in ("$set", "$setOnInsert"):
            journal.put(container, key, copy_value(value))
        elif op in ("$inc", "$mul"):
            if not present:
                new = value if op == "$inc" else zero_like(value)
            else:
                if not is_number(current):
                    raise StatementError(
                        14,
                        "Cannot apply %s to a value of non-numeric type. {_id: %s} has the field "
                        "'%s' of non-numeric type %s"
                        % (op, fmt(doc.get("_id")), parts[-1], type_name(current)))
                try:
                    new = num_arith(current, value, "+" if op == "$inc" else "*")
                except OverflowError:
                    raise StatementError(
                        2, "Failed to apply %s operations to current value (%s) for document "
                        "{_id: %s}" % (op, fmt(current), fmt(doc.get("_id")))) from None
            journal.put(container, key, new)
        elif op in ("$min", "$max"):
            sign = -1 if op == "$min" else 1
            if not present or bson_cmp(value, current) * sign > 0:
                journal.put(container, key, copy_value(value))
        elif op == "$currentDate":
            if isinstance(value, dict) and value.get("$type") == "timestamp":
                journal.put(container, key, _current_timestamp())
            else:
                journal.put(container, key, now_date())


def _push(arr, value):
    """$push value (or {$each, $position, $sort, $slice}) onto arr in place."""
    if not (isinstance(value, dict) and "$each" in value):
        arr.append(copy_value(value))
        return
    unknown = set(value) - {"$each", "$position", "$sort", "$slice"}
    if unknown:
        raise StatementError(2, "Unrecognized clause in $push: %s" % sorted(unknown)[0])
    each = value["$each"]
    if not isinstance(each, list):
        raise StatementError(2, "The argument to $each in $push must be an array but it was "
                             "of type: %s" % type_name(each))
    each = [copy_value(v) for v in each]
    pos = value.get("$position")
    if pos is None:
        arr.extend(each)
    else:
        pos = int(pos)
        if pos < 0:
            pos = max(0, len(arr) + pos)
        arr[pos:pos] = each
    if "$sort" in value:
        spec = value["$sort"]
        if isinstance(spec, dict):
            for field, direction in reversed(list(spec.items())):
                arr.sort(key=functools.cmp_to_key(_sort_cmp(field, direction)),
                         reverse=direction < 0)
        else:
            arr.sort(key=functools.cmp_to_key(bson_cmp), reverse=spec < 0)
    if "$slice" in value:
        n = int(value["$slice"])
        if n >= 0:
            del arr[n:]
        else:
            del arr[:max(0, len(arr) + n)]


def _pull_matches(cond, elem):
    if isinstance(cond, dict) and cond:
        if all(k.startswith("$") for k in cond):
            return mm_filtering.filter_applies({"v": cond}, {"v": elem})
        return isinstance(elem, dict) and mm_filtering.filter_applies(cond, elem)
    return bson_cmp(cond, elem) == 0


def upsert_seed(col, q):
    """The document an upsert starts from: the equality parts of the query."""
    try:
        seed = col._expand_dots(q)
        seed, _ = col._discard_operators(seed)
    except Exception as e:  # noqa: BLE001
        raise map_engine_error(e) from None
    seed = fast_copy(dict(seed)) if seed else {}
    if "_id" in seed:
        seed = dict([("_id", seed.pop("_id"))] + list(seed.items()))
    return seed


def check_id_unchanged(old_id, had_id, doc):
    if not had_id:
        return
    if "_id" not in doc or not same_bson(old_id, doc["_id"]):
        raise StatementError(
            66, "Performing an update on the path '_id' would modify the immutable field '_id'")


def ensure_id_first(doc):
    if "_id" not in doc:
        return dict([("_id", ObjectId())] + list(doc.items()))
    if next(iter(doc)) != "_id":
        return dict([("_id", doc["_id"])] + [(k, v) for k, v in doc.items() if k != "_id"])
    return doc


# ---------------------------------------------------------------------------
# Garbage collection
# ---------------------------------------------------------------------------
#
# The stand-in keeps every stored document as nested Python dicts, and
# CPython's cyclic GC tracks each of them (and each Int64 in them): a
# decoded day document is ~3,000 tracked objects, so a few thousand of them
# are millions (shared subdocuments, above, spare pre-allocated documents
# most of that, but updated slots, upserted and other documents still add
# up). With the default thresholds the collector keeps re-scanning all of
# that as the store grows: decoding and storing an 86 KB day document took
# ~10 ms with GC on against ~3 ms with it off.
#
# None of that needs the cyclic collector: stored documents are trees (BSON
# cannot express a cycle) and are freed by reference counting when they are
# replaced, deleted or dropped, as are replies, cursors and statements. So:
#
# * `tune_gc()` (at startup) freezes the interpreter's and modules' objects
#   and switches automatic collection off.
# * `gc_checkpoint()` runs after every command the engine thread executes:
#   one collection of the youngest generation (what was allocated since the
#   previous checkpoint, i.e. about one command's worth: the cost is
#   proportional to the command, never to the store), which frees the odd
#   cycle a command made (an exception and its traceback), then `gc.freeze()`
#   (O(1)), which moves the survivors -- mostly the documents just stored --
#   out of every future collection. After a command that allocated a lot
#   (more than GC_YOUNG_COLLECT_LIMIT objects: a batch of inserted documents,
#   ~0.5 ms of scanning per day document) the collection is skipped: such a
#   command stores trees, it does not make cycles.
#
# The trade-off: a cycle that becomes garbage only after it was frozen (an
# asyncio transport/protocol pair of a connection that lived across a
# command, say) is never collected. That is a few KB per connection, which a
# test process can afford; stored data is never affected, as reference
# counting alone frees it.


GC_YOUNG_COLLECT_LIMIT = 100_000


def tune_gc():
    gc.collect()
    gc.freeze()
    gc.disable()


def gc_checkpoint():
    if gc.get_count()[0] <= GC_YOUNG_COLLECT_LIMIT:
        gc.collect(0)
    gc.freeze()


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


class Cursor:
    def __init__(self, cursor_id, ns, docs, pos=0):
        self.id = cursor_id
        self.ns = ns
        self.docs = docs
        self.pos = pos
        self.touched = time.monotonic()

    def take(self, batch_size):
        """Up to batch_size documents (None: no count limit), at most 16 MiB."""
        batch = []
        size = 0
        while self.pos < len(self.docs):
            if batch_size is not None and len(batch) >= batch_size:
                break
            d = self.docs[self.pos]
            n = len(d.raw)
            if batch and size + n > MAX_BSON_OBJECT_SIZE:
                break
            batch.append(d)
            size += n
            self.pos += 1
        self.touched = time.monotonic()
        return batch

    @property
    def exhausted(self):
        return self.pos >= len(self.docs)


class Faults:
    def __init__(self):
        self.reset()

    def reset(self):
        self.down = False
        self.drop_after_apply = 0
        self.fail_next = 0
        self.fail_code = 91
        self.fail_msg = "The server is in quiesce mode and will shut down"
        self.fail_inserts = False
        self.fail_inserts_code = 91
        self.probe_code = 0
        # Statement refusals (write errors, code 2), as a server that cannot
        # apply some updates gives them: "off", "match" (`$inc` updates
        # of documents whose _id contains refuse_arg), "all" (every update
        # statement) or "random" (each update statement with probability
        # refuse_arg percent).
        self.refuse_mode = "off"
        self.refuse_arg = ""
        self.refused = 0

    def describe(self):
        return ("down=%s dropAfterApply=%d failNext=%d failCode=%d failInserts=%s probeCode=%d "
                "refuseUpdates=%s:%s refused=%d") % (
            self.down, self.drop_after_apply, self.fail_next, self.fail_code,
            self.fail_inserts, self.probe_code, self.refuse_mode, self.refuse_arg, self.refused)

    def refuses(self, stmt):
        """Whether this update statement is to be refused."""
        mode = self.refuse_mode
        if mode == "off":
            return False
        if mode == "all":
            return True
        if mode == "random":
            return random.random() * 100.0 < float(self.refuse_arg)
        if mode == "match":
            q = stmt.get("q") if isinstance(stmt, dict) else None
            u = stmt.get("u") if isinstance(stmt, dict) else None
            doc_id = q.get("_id") if isinstance(q, dict) else None
            return (isinstance(doc_id, str) and self.refuse_arg in doc_id
                    and isinstance(u, dict) and "$inc" in u)
        return False

    def probe_fault(self, name, cmd):
        """The code to fail the command with, if it is one of Tally's feature
        probes and `probeCode` is set."""
        if not self.probe_code:
            return None
        target = cmd.get(name)
        if target != "tally_writers":
            return None
        if name == "collMod":
            return self.probe_code
        if name == "createIndexes":
            names = [i.get("name") for i in cmd.get("indexes", []) if isinstance(i, dict)]
            return self.probe_code if "ttl_probe_1" in names else None
        if name == "update":
            for u in cmd.get("updates", []):
                q = u.get("q", {}) if isinstance(u, dict) else {}
                if isinstance(q, dict) and q.get("_id") == "~features":
                    return self.probe_code
        return None


class Standin:
    def __init__(self, ttl_monitor_secs):
        self.client = mongomock.MongoClient()
        self.cursors = {}
        self.indexes = {}  # (db, coll) -> {name: spec dict (v, key, name, options...)}
        self.next_conn_id = 1
        self.faults = Faults()
        self.conns = set()
        self.ttl_monitor_secs = ttl_monitor_secs
        self.started = time.time()
        self.loop = None
        self.engine = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        # While the engine runs a command that came in an OP_MSG: an upper
        # bound of the BSON size of every document in it (None: unknown).
        # Only the engine thread reads or sets it.
        self.wire_doc_bound = None
        self.commands = {
            "hello": self.cmd_hello,
            "isMaster": self.cmd_hello,
            "ismaster": self.cmd_hello,
            "ping": self.cmd_ping,
            "buildInfo": self.cmd_build_info,
            "buildinfo": self.cmd_build_info,
            "startSession": self.cmd_start_session,
            "endSessions": self.cmd_ok,
            "killSessions": self.cmd_ok,
            "killAllSessions": self.cmd_ok,
            "refreshSessions": self.cmd_ok,
            "serverStatus": self.cmd_server_status,
            "connectionStatus": self.cmd_connection_status,
            "listDatabases": self.cmd_list_databases,
            "listCollections": self.cmd_list_collections,
            "create": self.cmd_create,
            "drop": self.cmd_drop,
            "dropDatabase": self.cmd_drop_database,
            "insert": self.cmd_insert,
            "update": self.cmd_update,
            "delete": self.cmd_delete,
            "findAndModify": self.cmd_find_and_modify,
            "findandmodify": self.cmd_find_and_modify,
            "find": self.cmd_find,
            "getMore": self.cmd_get_more,
            "killCursors": self.cmd_kill_cursors,
            "aggregate": self.cmd_aggregate,
            "count": self.cmd_count,
            "distinct": self.cmd_distinct,
            "createIndexes": self.cmd_create_indexes,
            "listIndexes": self.cmd_list_indexes,
            "dropIndexes": self.cmd_drop_indexes,
            "deleteIndexes": self.cmd_drop_indexes,
            "collMod": self.cmd_coll_mod,
            "standinFault": self.cmd_standin_fault,
            "standinTtlPass": self.cmd_standin_ttl_pass,
        }

    # -- plumbing -----------------------------------------------------------

    def coll(self, db, name):
        validate_namespace(db, name)
        return self.client[db][name]

    def coll_exists(self, db, name):
        return name in self.client[db].list_collection_names()

    def dispatch(self, cmd, conn_id):
        if not cmd:
            raise CommandError(59, "no such command: ''")
        name = next(iter(cmd))
        db = cmd.get("$db")
        if db is None:
            raise CommandError(40414, "BSON field 'OpMsg.$db' is missing but a required field")
        handler = self.commands.get(name)
        if handler is None:
            raise CommandError(59, "no such command: '%s'" % name)
        if "txnNumber" in cmd or "startTransaction" in cmd or "autocommit" in cmd:
            raise CommandError(
                20, "Transaction numbers are only allowed on a replica set member or mongos")
        probe_code = self.faults.probe_fault(name, cmd)
        if probe_code is not None:
            LOG.info("fault: failing the feature probe %s with code %d", name, probe_code)
            raise CommandError(probe_code, "stand-in: an unexpected answer to a probe")
        if name == "insert" and self.faults.fail_inserts:
            LOG.info("fault: failing insert with code %d", self.faults.fail_inserts_code)
            raise CommandError(self.faults.fail_inserts_code, "stand-in: inserts are failing")
        if name in WRITE_COMMANDS and self.faults.fail_next > 0:
            self.faults.fail_next -= 1
            LOG.info("fault: failing %s with code %d", name, self.faults.fail_code)
            raise CommandError(self.faults.fail_code, self.faults.fail_msg)
        validate_namespace(db)
        reply = handler(db, cmd, conn_id)
        if name in WRITE_COMMANDS and self.faults.drop_after_apply > 0:
            self.faults.drop_after_apply -= 1
            LOG.info("fault: applied %s, dropping the connection", name)
            raise DropConnection()
        return reply

    # -- handshake and server commands -----------------------------------------

    def cmd_hello(self, db, cmd, conn_id):
        name = next(iter(cmd))
        reply = {}
        if cmd.get("helloOk"):
            reply["helloOk"] = True
        if name == "hello":
            reply["isWritablePrimary"] = True
        else:
            reply["ismaster"] = True
        reply.update({
            "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE,
            "maxMessageSizeBytes": MAX_MESSAGE_SIZE,
            "maxWriteBatchSize": MAX_WRITE_BATCH_SIZE,
            "localTime": datetime.datetime.now(datetime.timezone.utc),
            "logicalSessionTimeoutMinutes": SESSION_TIMEOUT_MINUTES,
            "connectionId": conn_id,
            "minWireVersion": 0,
            "maxWireVersion": MAX_WIRE_VERSION,
            "readOnly": False,
            "ok": 1.0,
        })
        return reply

    def cmd_start_session(self, db, cmd, conn_id):
        # As mongod: a fresh server-side session id; sessions carry no state
        # here (no transactions, no retryable-write bookkeeping).
        return {"id": {"id": bson.Binary.from_uuid(uuid.uuid4())},
                "timeoutMinutes": SESSION_TIMEOUT_MINUTES, "ok": 1.0}

    def cmd_ping(self, db, cmd, conn_id):
        return {"ok": 1.0}

    def cmd_ok(self, db, cmd, conn_id):
        return {"ok": 1.0}

    def cmd_build_info(self, db, cmd, conn_id):
        return {
            "version": SERVER_VERSION,
            "gitVersion": "standin",
            "versionArray": [7, 0, 0, 0],
            "bits": 64,
            "debug": False,
            "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE,
            "storageEngines": ["mongomock"],
            "modules": [],
            "ok": 1.0,
        }

    def cmd_server_status(self, db, cmd, conn_id):
        return {
            "host": "127.0.0.1",
            "version": SERVER_VERSION,
            "process": "mongod",
            "pid": Int64(os.getpid()),
            "uptime": float(time.time() - self.started),
            "localTime": datetime.datetime.now(datetime.timezone.utc),
            "connections": {"current": len(self.conns)},
            "ok": 1.0,
        }

    def cmd_connection_status(self, db, cmd, conn_id):
        return {"authInfo": {"authenticatedUsers": [], "authenticatedUserRoles": []}, "ok": 1.0}

    def cmd_list_databases(self, db, cmd, conn_id):
        names = self.client.list_database_names()
        dbs = []
        for n in names:
            dbs.append({"name": n, "sizeOnDisk": 8192, "empty": False})
        if cmd.get("nameOnly"):
            dbs = [{"name": d["name"]} for d in dbs]
        return {"databases": dbs, "totalSize": 8192 * len(dbs), "totalSizeMb": 0, "ok": 1.0}

    def cmd_list_collections(self, db, cmd, conn_id):
        names = self.client[db].list_collection_names()
        infos = []
        for n in sorted(names):
            info = {"name": n, "type": "collection", "options": {},
                    "info": {"readOnly": False},
                    "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
            if cmd.get("nameOnly"):
                info = {"name": n, "type": "collection"}
            infos.append(info)
        flt = cmd.get("filter")
        if flt:
            infos = [i for i in infos if mm_filtering.filter_applies(flt, i)]
        return self.cursor_reply(db + ".$cmd.listCollections", infos,
                                 (cmd.get("cursor") or {}).get("batchSize"))

    # -- collections ----------------------------------------------------------

    def cmd_create(self, db, cmd, conn_id):
        name = cmd["create"]
        validate_namespace(db, name)
        if self.coll_exists(db, name):
            raise CommandError(48, "Collection %s.%s already exists." % (db, name))
        self.client[db].create_collection(name)
        return {"ok": 1.0}

    def cmd_drop(self, db, cmd, conn_id):
        name = cmd["drop"]
        validate_namespace(db, name)
        if not self.coll_exists(db, name):
            return {"ok": 1.0}
        n = 1 + len(self.indexes.get((db, name), {}))
        self.client[db].drop_collection(name)
        self.indexes.pop((db, name), None)
        self.kill_ns_cursors(db + "." + name)
        return {"nIndexesWas": n, "ns": db + "." + name, "ok": 1.0}

    def cmd_drop_database(self, db, cmd, conn_id):
        self.client.drop_database(db)
        for key in [k for k in self.indexes if k[0] == db]:
            del self.indexes[key]
        for cid in [c for c, cur in self.cursors.items() if cur.ns.startswith(db + ".")]:
            del self.cursors[cid]
        return {"dropped": db, "ok": 1.0}

    def kill_ns_cursors(self, ns):
        for cid in [c for c, cur in self.cursors.items() if cur.ns == ns]:
            del self.cursors[cid]

    # -- writes -----------------------------------------------------------------

    @staticmethod
    def _statements(cmd, field):
        stmts = cmd.get(field)
        if not isinstance(stmts, list):
            raise CommandError(40414, "BSON field '%s.%s' is missing but a required field"
                               % (next(iter(cmd)), field))
        if not 1 <= len(stmts) <= MAX_WRITE_BATCH_SIZE:
            raise CommandError(
                16,
                "Write batch sizes must be between 1 and %d. Got %d operations."
                % (MAX_WRITE_BATCH_SIZE, len(stmts)))
        return stmts

    def _dup_key_error(self, db, name, col, doc):
        """Build a real-looking E11000 error for `doc`, which clashed with a
        stored document in a unique index."""
        ns = "%s.%s" % (db, name)
        my_key = store_key(doc.get("_id"))
        if "_id" in doc and col._store._documents.get(my_key) is not None \
                and col._store._documents.get(my_key) is not doc:
            values = {"_id": doc["_id"]}
            return StatementError(
                11000, "E11000 duplicate key error collection: %s index: _id_ dup key: %s"
                % (ns, fmt(values)), keyPattern={"_id": 1}, keyValue=values)
        for idx_name, spec in self.indexes.get((db, name), {}).items():
            if not spec.get("unique"):
                continue
            fields = list(spec["key"])
            values = {f: _get_path(doc, f) for f in fields}
            for other in col._store.documents:
                if store_key(other.get("_id")) == my_key:
                    continue
                if all(bson_cmp(_get_path(other, f), values[f]) == 0 for f in fields):
                    return StatementError(
                        11000, "E11000 duplicate key error collection: %s index: %s dup key: %s"
                        % (ns, idx_name, fmt(values)),
                        keyPattern=dict(spec["key"]), keyValue=values)
        return StatementError(11000, "E11000 duplicate key error collection: %s" % ns)

    def has_unique_indexes(self, col):
        return any(ix.get("unique") for ix in col._store.indexes.values())

    def store_insert(self, db, name, col, doc):
        """Insert a new document into mongomock's store (unique indexes checked)."""
        key = store_key(doc["_id"])
        if key in col._store._documents:
            raise self._dup_key_error(db, name, col, doc)
        col._store[key] = doc
        if self.has_unique_indexes(col):
            try:
                col._ensure_uniques(doc)
            except mongomock.DuplicateKeyError:
                del col._store[key]
                raise self._dup_key_error(db, name, col, doc) from None

    def cmd_insert(self, db, cmd, conn_id):
        name = cmd["insert"]
        col = self.coll(db, name)
        docs = self._statements(cmd, "documents")
        ordered = cmd.get("ordered", True)
        n = 0
        write_errors = []
        for i, doc in enumerate(docs):
            try:
                if not isinstance(doc, dict):
                    raise StatementError(14, "document to insert must be an object")
                # Re-encoding an 86 KB document only to measure it costs
                # ~0.8 ms; a message whose every document is well below the
                # limit (see `wire_doc_bound`) cannot hold one above it.
                if (self.wire_doc_bound is None
                        or self.wire_doc_bound > MAX_BSON_OBJECT_SIZE - WIRE_SIZE_MARGIN) \
                        and len(bson.encode(doc, codec_options=CODEC)) > MAX_BSON_OBJECT_SIZE:
                    raise StatementError(10334, "object to insert too large")
                if isinstance(doc.get("_id"), (list, Regex, re.Pattern)):
                    raise StatementError(
                        53, "can't use a%s for _id" % (
                            "n array" if isinstance(doc["_id"], list) else " regex"))
                for k in doc:
                    if k.startswith("$"):
                        raise StatementError(
                            2, "Document can't have $ prefixed field names: %s" % k)
                self.store_insert(db, name, col, ensure_id_first(doc))
                n += 1
            except CommandError as e:
                write_errors.append(as_statement_error(e).write_error(i))
                if ordered:
                    break
            except Exception as e:  # noqa: BLE001
                write_errors.append(map_engine_error(e).write_error(i))
                if ordered:
                    break
        reply = {"n": n}
        if write_errors:
            reply["writeErrors"] = write_errors
        reply["ok"] = 1.0
        return reply

    def matching(self, col, q):
        try:
            return list(col._iter_documents(q))
        except Exception as e:  # noqa: BLE001
            raise map_engine_error(e) from None

    def update_one_statement(self, db, name, col, stmt):
        """Apply one update statement; returns (n, nModified, upserted_id or None)."""
        if not isinstance(stmt, dict):
            raise StatementError(14, "update statement must be an object")
        q = stmt.get("q")
        u = stmt.get("u")
        upsert = bool(stmt.get("upsert", False))
        multi = bool(stmt.get("multi", False))
        if not isinstance(q, dict):
            raise StatementError(
                14, "BSON field 'update.updates.q' is the wrong type '%s', expected type 'object'"
                % type_name(q))
        if isinstance(u, list):
            raise StatementError(238, "stand-in: pipeline-style updates are not supported")
        if not isinstance(u, dict):
            raise StatementError(
                14, "BSON field 'update.updates.u' is the wrong type '%s', expected type 'object'"
                % type_name(u))
        if stmt.get("arrayFilters"):
            raise StatementError(238, "stand-in: arrayFilters are not supported")
        if stmt.get("collation"):
            raise StatementError(238, "stand-in: collation is not supported")
        operator_style = validate_update(u)
        if not operator_style and multi:
            raise StatementError(9, "multi update is not supported for replacement-style update")
        if operator_style and not uses_field_engine(u):
            return self.update_via_mongomock(db, name, col, q, u, upsert, multi)
        targets = self.matching(col, q)
        if not multi:
            targets = targets[:1]
        if not targets:
            if not upsert:
                return 0, 0, None
            if operator_style:
                doc = upsert_seed(col, q)
                had_id = "_id" in doc
                old_id = doc.get("_id")
                apply_field_ops(doc, u, True, Journal())
                check_id_unchanged(old_id, had_id, doc)
            else:
                seed = upsert_seed(col, q)
                doc = copy_value(u)
                if "_id" in seed:
                    if "_id" in doc and not same_bson(doc["_id"], seed["_id"]):
                        raise StatementError(
                            66, "Performing an update on the path '_id' would modify the "
                            "immutable field '_id'")
                    doc = dict([("_id", seed["_id"])] + [(k, v) for k, v in doc.items() if k != "_id"])
            doc = ensure_id_first(doc)
            self.store_insert(db, name, col, doc)
            return 1, 0, doc["_id"]
        n_modified = 0
        for target in targets:
            if operator_style:
                journal = Journal()
                try:
                    had_id = "_id" in target
                    old_id = target.get("_id")
                    apply_field_ops(target, u, False, journal)
                    check_id_unchanged(old_id, had_id, target)
                    if journal.modified and self.has_unique_indexes(col):
                        try:
                            col._ensure_uniques(target)
                        except mongomock.DuplicateKeyError:
                            raise self._dup_key_error(db, name, col, target) from None
                except BaseException:
                    journal.rollback()
                    raise
                if journal.modified:
                    n_modified += 1
            else:
                new = copy_value(u)
                if "_id" in new and not same_bson(new["_id"], target["_id"]):
                    raise StatementError(
                        66, "After applying the update, the (immutable) field '_id' was found "
                        "to have been altered to _id: %s" % fmt(new["_id"]))
                new = dict([("_id", target["_id"])] + [(k, v) for k, v in new.items() if k != "_id"])
                key = store_key(target["_id"])
                col._store[key] = new
                if self.has_unique_indexes(col):
                    try:
                        col._ensure_uniques(new)
                    except mongomock.DuplicateKeyError:
                        col._store[key] = target
                        raise self._dup_key_error(db, name, col, new) from None
                if not same_bson(target, new):
                    n_modified += 1
        return len(targets), n_modified, None

    def update_via_mongomock(self, db, name, col, q, u, upsert, multi):
        """Array operators, $rename and positional paths: delegate to mongomock,
        restoring the touched documents if it fails half-way."""
        targets = self.matching(col, q)
        if not multi:
            targets = targets[:1]
        snapshots = [(store_key(d["_id"]), fast_copy(d)) for d in targets]
        # mongomock changes documents in place: no shared parts in them.
        for key, d in [(store_key(d["_id"]), d) for d in targets]:
            private = unshare_deep(d)
            if private is not d:
                col._store[key] = private
        try:
            if multi:
                res = col.update_many(q, u, upsert=upsert)
            else:
                res = col.update_one(q, u, upsert=upsert)
        except BaseException as e:
            for key, snap in snapshots:
                col._store[key] = snap
            if isinstance(e, mongomock.DuplicateKeyError):
                raise self._dup_key_error(db, name, col, targets[0] if targets else {}) from None
            if isinstance(e, CommandError):
                raise
            raise map_engine_error(e) from None
        finally:
            _CURRENT["id"] = None
        if res.upserted_id is not None:
            return 1, 0, res.upserted_id
        return res.matched_count, res.modified_count, None

    def cmd_update(self, db, cmd, conn_id):
        name = cmd["update"]
        col = self.coll(db, name)
        stmts = self._statements(cmd, "updates")
        ordered = cmd.get("ordered", True)
        n = 0
        n_modified = 0
        upserted = []
        write_errors = []
        for i, stmt in enumerate(stmts):
            try:
                if self.faults.refuses(stmt):
                    self.faults.refused += 1
                    raise CommandError(2, "stand-in: this server refuses the statement")
                matched, modified, upserted_id = self.update_one_statement(db, name, col, stmt)
                n += matched
                n_modified += modified
                if upserted_id is not None:
                    upserted.append({"index": i, "_id": upserted_id})
            except CommandError as e:
                write_errors.append(as_statement_error(e).write_error(i))
                if ordered:
                    break
            except Exception as e:  # noqa: BLE001
                LOG.exception("update statement %d failed", i)
                write_errors.append(map_engine_error(e).write_error(i))
                if ordered:
                    break
        reply = {"n": n, "nModified": n_modified}
        if upserted:
            reply["upserted"] = upserted
        if write_errors:
            reply["writeErrors"] = write_errors
        reply["ok"] = 1.0
        return reply

    def cmd_delete(self, db, cmd, conn_id):
        name = cmd["delete"]
        col = self.coll(db, name)
        stmts = self._statements(cmd, "deletes")
        ordered = cmd.get("ordered", True)
        n = 0
        write_errors = []
        for i, stmt in enumerate(stmts):
            try:
                if not isinstance(stmt, dict) or not isinstance(stmt.get("q"), dict):
                    raise StatementError(14, "delete statement needs an object 'q'")
                limit = stmt.get("limit", 0)
                if limit not in (0, 1):
                    raise StatementError(
                        9, "The limit field in delete objects must be 0 or 1. Got %s" % fmt(limit))
                if stmt.get("collation"):
                    raise StatementError(238, "stand-in: collation is not supported")
                targets = self.matching(col, stmt["q"])
                if limit == 1:
                    targets = targets[:1]
                for doc in targets:
                    del col._store[store_key(doc["_id"])]
                n += len(targets)
            except CommandError as e:
                write_errors.append(as_statement_error(e).write_error(i))
                if ordered:
                    break
        reply = {"n": n}
        if write_errors:
            reply["writeErrors"] = write_errors
        reply["ok"] = 1.0
        return reply

    def cmd_find_and_modify(self, db, cmd, conn_id):
        name = cmd[next(iter(cmd))]
        col = self.coll(db, name)
        query = cmd.get("query") or {}
        sort = validate_sort(cmd.get("sort"))
        remove = bool(cmd.get("remove", False))
        update = cmd.get("update")
        new = bool(cmd.get("new", False))
        fields = cmd.get("fields")
        upsert = bool(cmd.get("upsert", False))
        validate_projection(fields)
        if remove and (update is not None or upsert or new):
            raise CommandError(9, "Cannot specify 'remove' together with 'update', 'upsert' or 'new'")
        if not remove and update is None:
            raise CommandError(9, "Either an update or remove=true must be specified")
        try:
            found = self.query(col, query, sort, 0, 1)
        except StatementError as e:
            raise as_command_error(e) from None
        before = fast_copy(found[0]) if found else None
        last_error = {"n": 0}
        value = None
        if remove:
            if before is not None:
                del col._store[store_key(before["_id"])]
                last_error["n"] = 1
                value = before
        else:
            stmt_q = {"_id": before["_id"]} if before is not None else query
            try:
                matched, _, upserted_id = self.update_one_statement(
                    db, name, col, {"q": stmt_q, "u": update, "upsert": upsert})
            except CommandError as e:
                raise as_command_error(e) from None
            if upserted_id is not None:
                last_error = {"n": 1, "updatedExisting": False, "upserted": upserted_id}
                if new:
                    value = fast_copy(col._store[store_key(upserted_id)])
            elif matched:
                last_error = {"n": 1, "updatedExisting": True}
                value = fast_copy(col._store[store_key(before["_id"])]) if new else before
            else:
                last_error = {"n": 0, "updatedExisting": False}
        if value is not None and fields:
            value = project(col, value, fields)
        return {"lastErrorObject": last_error, "value": value, "ok": 1.0}

    # -- reads ------------------------------------------------------------------

    def query(self, col, flt, sort, skip, limit):
        """Stored documents matching flt, sorted, skipped and limited (not copies)."""
        docs = self.matching(col, flt)
        for key, direction in reversed(sort or []):
            if key == "$natural":
                if direction < 0:
                    docs.reverse()
                continue
            docs.sort(key=functools.cmp_to_key(_sort_cmp(key, direction)), reverse=direction < 0)
        if skip:
            docs = docs[skip:]
        if limit:
            docs = docs[:limit]
        return docs

    def new_cursor_id(self):
        while True:
            cid = random.randint(1, 2**62)
            if cid not in self.cursors:
                return cid

    def expire_cursors(self):
        now = time.monotonic()
        for cid in [c for c, cur in self.cursors.items()
                    if now - cur.touched > CURSOR_IDLE_TIMEOUT_SECS]:
            del self.cursors[cid]

    def cursor_reply(self, ns, docs, batch_size, single_batch=False):
        self.expire_cursors()
        if batch_size is not None and (not is_number(batch_size) or batch_size < 0):
            raise CommandError(
                2, "BatchSize value must be non-negative, but received: %s" % fmt(batch_size))
        raw = [d if isinstance(d, RawBSONDocument)
               else RawBSONDocument(bson.encode(d, codec_options=CODEC)) for d in docs]
        cur = Cursor(0, ns, raw)
        batch = cur.take(int(batch_size) if batch_size is not None else DEFAULT_FIRST_BATCH)
        cid = 0
        if not cur.exhausted and not single_batch:
            cid = self.new_cursor_id()
            cur.id = cid
            self.cursors[cid] = cur
        return {"cursor": {"firstBatch": batch, "id": Int64(cid), "ns": ns}, "ok": 1.0}

    def cmd_find(self, db, cmd, conn_id):
        name = cmd["find"]
        col = self.coll(db, name)
        flt = cmd.get("filter") or {}
        if not isinstance(flt, dict):
            raise CommandError(
                14, "BSON field 'find.filter' is the wrong type '%s', expected type 'object'"
                % type_name(flt))
        projection = cmd.get("projection")
        validate_projection(projection)
        sort = validate_sort(cmd.get("sort"))
        skip = int(cmd.get("skip") or 0)
        limit = int(cmd.get("limit") or 0)
        if skip < 0:
            raise CommandError(51024, "BSON field 'skip' value must be >= 0, actual value '%d'" % skip)
        if limit < 0:
            raise CommandError(51024, "BSON field 'limit' value must be >= 0, actual value '%d'" % limit)
        if cmd.get("collation"):
            raise CommandError(238, "stand-in: collation is not supported")
        batch_size = cmd.get("batchSize")
        single_batch = bool(cmd.get("singleBatch", False))
        try:
            docs = self.query(col, flt, sort, skip, limit)
            if projection:
                # cursor_reply encodes them at once, on this thread.
                docs = [project_shared(col, d, projection) for d in docs]
        except CommandError as e:
            raise as_command_error(e) from None
        except Exception as e:  # noqa: BLE001
            raise as_command_error(map_engine_error(e)) from None
        if batch_size is None and limit:
            batch_size = min(limit, DEFAULT_FIRST_BATCH)
        return self.cursor_reply("%s.%s" % (db, name), docs, batch_size,
                                 single_batch=single_batch)

    def cmd_get_more(self, db, cmd, conn_id):
        cid = cmd["getMore"]
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise CommandError(14, "BSON field 'getMore.getMore' is the wrong type '%s', expected type 'long'" % type_name(cid))
        name = cmd.get("collection")
        ns = "%s.%s" % (db, name)
        self.expire_cursors()
        cur = self.cursors.get(int(cid))
        if cur is None:
            raise CommandError(43, "cursor id %d not found" % int(cid))
        if cur.ns != ns:
            raise CommandError(13, "Requested getMore on namespace '%s', but cursor belongs to a different namespace %s" % (ns, cur.ns))
        batch_size = cmd.get("batchSize")
        if batch_size is not None and (not is_number(batch_size) or batch_size < 0):
            raise CommandError(2, "Batch size for getMore must be positive, but received: %s" % fmt(batch_size))
        batch = cur.take(int(batch_size) if batch_size else None)
        out_id = cur.id
        if cur.exhausted:
            del self.cursors[cur.id]
            out_id = 0
        return {"cursor": {"nextBatch": batch, "id": Int64(out_id), "ns": ns}, "ok": 1.0}

    def cmd_kill_cursors(self, db, cmd, conn_id):
        ns = "%s.%s" % (db, cmd["killCursors"])
        killed, not_found = [], []
        for cid in cmd.get("cursors") or []:
            cur = self.cursors.get(int(cid))
            if cur is not None and cur.ns == ns:
                del self.cursors[int(cid)]
                killed.append(Int64(cid))
            else:
                not_found.append(Int64(cid))
        return {"cursorsKilled": killed, "cursorsNotFound": not_found,
                "cursorsAlive": [], "cursorsUnknown": [], "ok": 1.0}

    def cmd_aggregate(self, db, cmd, conn_id):
        name = cmd["aggregate"]
        pipeline = cmd.get("pipeline")
        if not isinstance(pipeline, list):
            raise CommandError(14, "'pipeline' option must be specified as an array")
        if "cursor" not in cmd and not cmd.get("explain"):
            raise CommandError(9, "The 'cursor' option is required, except for aggregate with the explain argument")
        if not isinstance(name, str):
            raise CommandError(238, "stand-in: collection-less aggregate is not supported")
        col = self.coll(db, name)
        try:
            docs = list(col.aggregate(pipeline))
        except Exception as e:  # noqa: BLE001
            raise as_command_error(map_engine_error(e)) from None
        return self.cursor_reply("%s.%s" % (db, name), docs,
                                 (cmd.get("cursor") or {}).get("batchSize"))

    def cmd_count(self, db, cmd, conn_id):
        col = self.coll(db, cmd["count"])
        query = cmd.get("query") or {}
        try:
            docs = self.query(col, query, None, int(cmd.get("skip") or 0),
                              abs(int(cmd.get("limit") or 0)))
        except CommandError as e:
            raise as_command_error(e) from None
        return {"n": len(docs), "ok": 1.0}

    def cmd_distinct(self, db, cmd, conn_id):
        col = self.coll(db, cmd["distinct"])
        key = cmd.get("key")
        if not isinstance(key, str):
            raise CommandError(40414, "BSON field 'distinct.key' is missing but a required field")
        try:
            values = col.distinct(key, cmd.get("query") or {})
        except Exception as e:  # noqa: BLE001
            raise as_command_error(map_engine_error(e)) from None
        return {"values": list(values), "ok": 1.0}

    # -- indexes ----------------------------------------------------------------

    def cmd_create_indexes(self, db, cmd, conn_id):
        name = cmd["createIndexes"]
        col = self.coll(db, name)
        specs = cmd.get("indexes")
        if not isinstance(specs, list) or not specs:
            raise CommandError(2, "Must specify at least one index to create")
        existed = self.coll_exists(db, name)
        catalog = self.indexes.setdefault((db, name), {})
        before = 1 + len(catalog)
        allowed = {"key", "name", "unique", "sparse", "expireAfterSeconds",
                   "partialFilterExpression", "background", "hidden", "v", "ns"}
        to_create = []
        for spec in specs:
            if not isinstance(spec, dict):
                raise CommandError(14, "index specification must be an object")
            key = spec.get("key")
            iname = spec.get("name")
            if not isinstance(key, dict) or not key:
                raise CommandError(9, "Error in specification %s :: caused by :: The 'key' field is a required property of an index specification" % fmt(spec))
            if not isinstance(iname, str) or not iname:
                raise CommandError(9, "Error in specification %s :: caused by :: The 'name' field is a required property of an index specification" % fmt(spec))
            for k in spec:
                if k not in allowed:
                    if k in ("collation", "weights", "default_language", "2dsphereIndexVersion", "textIndexVersion", "wildcardProjection", "bits", "min", "max"):
                        raise CommandError(238, "stand-in: index option '%s' is not supported" % k)
                    raise CommandError(197, "Error in specification %s :: caused by :: The field '%s' is not valid for an index specification" % (fmt(spec), k))
            for field, direction in key.items():
                if not is_number(direction) or to_float(direction) == 0:
                    raise CommandError(238, "stand-in: index key %s: %s is not supported (only 1 / -1)" % (field, fmt(direction)))
            ttl = spec.get("expireAfterSeconds")
            if ttl is not None:
                if list(key.keys()) == ["_id"]:
                    raise CommandError(67, "The field 'expireAfterSeconds' is not valid for an _id index specification. Specification: %s" % fmt(spec))
                if len(key) > 1:
                    raise CommandError(67, "Error in specification %s: TTL indexes are single-field indexes, compound indexes do not support TTL" % fmt(spec))
                if not is_number(ttl) or isinstance(ttl, Decimal128) or not (0 <= ttl <= 2**31 - 1):
                    raise CommandError(67, "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number. Index spec: %s" % fmt(spec))
            norm = {"v": 2, "key": dict(key), "name": iname}
            for k in ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression", "hidden"):
                if k in spec and spec[k] is not None and spec[k] is not False:
                    norm[k] = spec[k]
            is_id_key = list(norm["key"].items()) == [("_id", 1)]
            if iname == "_id_" and is_id_key:
                continue
            if iname == "_id_":
                raise CommandError(86, "An existing index has the same name as the requested index. Requested index: %s, existing index: { v: 2, key: { _id: 1 }, name: \"_id_\" }" % fmt(norm))
            if is_id_key:
                raise CommandError(85, "Index already exists with a different name: _id_")
            conflict = None
            for ename, espec in catalog.items():
                same_key = list(espec["key"].items()) == list(norm["key"].items())
                if ename == iname and not same_key:
                    raise CommandError(86, "An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: %s, existing index: %s" % (fmt(norm), fmt(espec)))
                if same_key and ename != iname:
                    raise CommandError(85, "Index already exists with a different name: %s" % ename)
                if same_key and ename == iname:
                    if _index_options(espec) != _index_options(norm):
                        raise CommandError(85, "An equivalent index already exists with the same name but different options. Requested index: %s, existing index: %s" % (fmt(norm), fmt(espec)))
                    conflict = ename
            if conflict is None and all(n["name"] != iname for n in to_create):
                to_create.append(norm)
        for norm in to_create:
            kwargs = {"name": norm["name"]}
            if norm.get("unique"):
                kwargs["unique"] = True
            if norm.get("sparse"):
                kwargs["sparse"] = True
            if norm.get("partialFilterExpression") is not None:
                kwargs["partialFilterExpression"] = norm["partialFilterExpression"]
            try:
                # expireAfterSeconds is deliberately not passed: mongomock would
                # expire documents on every access; the stand-in runs its own
                # TTL monitor instead.
                col.create_index(list((k, 1 if to_float(v) > 0 else -1) for k, v in norm["key"].items()), **kwargs)
            except mongomock.DuplicateKeyError:
                raise CommandError(11000, "Index build failed: E11000 duplicate key error collection: %s.%s index: %s" % (db, name, norm["name"])) from None
            except Exception as e:  # noqa: BLE001
                raise as_command_error(map_engine_error(e)) from None
            catalog[norm["name"]] = norm
        if not self.coll_exists(db, name):
            self.client[db].create_collection(name)
        reply = {"numIndexesBefore": before, "numIndexesAfter": 1 + len(catalog),
                 "createdCollectionAutomatically": not existed}
        if not to_create:
            reply["note"] = "all indexes already exist"
        reply["ok"] = 1.0
        return reply

    def cmd_list_indexes(self, db, cmd, conn_id):
        name = cmd["listIndexes"]
        validate_namespace(db, name)
        if not self.coll_exists(db, name):
            raise CommandError(26, "ns does not exist: %s.%s" % (db, name))
        specs = [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]
        specs += [dict(s) for s in self.indexes.get((db, name), {}).values()]
        return self.cursor_reply("%s.%s" % (db, name), specs,
                                 (cmd.get("cursor") or {}).get("batchSize"))

    def _find_index(self, db, name, which):
        catalog = self.indexes.get((db, name), {})
        if isinstance(which, str):
            if which == "_id_":
                raise CommandError(72, "cannot drop _id index")
            if which not in catalog:
                raise CommandError(27, "index not found with name [%s]" % which)
            return which
        if isinstance(which, dict):
            if dict(which) == {"_id": 1}:
                raise CommandError(72, "cannot drop _id index")
            for ename, espec in catalog.items():
                if list(espec["key"].items()) == list(which.items()):
                    return ename
            raise CommandError(27, "can't find index with key: %s" % fmt(which))
        raise CommandError(14, "invalid index specification")

    def cmd_drop_indexes(self, db, cmd, conn_id):
        name = cmd[next(iter(cmd))]
        col = self.coll(db, name)
        if not self.coll_exists(db, name):
            raise CommandError(26, "ns not found %s.%s" % (db, name))
        which = cmd.get("index")
        catalog = self.indexes.setdefault((db, name), {})
        before = 1 + len(catalog)
        if which == "*":
            names = list(catalog)
        elif isinstance(which, list):
            names = [self._find_index(db, name, w) for w in which]
        else:
            names = [self._find_index(db, name, which)]
        for iname in names:
            try:
                col.drop_index(iname)
            except Exception:  # noqa: BLE001 - catalog is authoritative
                pass
            catalog.pop(iname, None)
        return {"nIndexesWas": before, "ok": 1.0}

    def cmd_coll_mod(self, db, cmd, conn_id):
        name = cmd["collMod"]
        validate_namespace(db, name)
        if not self.coll_exists(db, name):
            raise CommandError(26, "ns does not exist: %s.%s" % (db, name))
        reply = {}
        index = cmd.get("index")
        if index is not None:
            if not isinstance(index, dict):
                raise CommandError(14, "collMod 'index' must be an object")
            catalog = self.indexes.get((db, name), {})
            if "name" in index:
                iname = index["name"]
                if iname not in catalog:
                    raise CommandError(27, "cannot find index %s for ns %s.%s" % (iname, db, name))
            elif "keyPattern" in index:
                iname = None
                for ename, espec in catalog.items():
                    if list(espec["key"].items()) == list(index["keyPattern"].items()):
                        iname = ename
                if iname is None:
                    raise CommandError(27, "cannot find index %s for ns %s.%s" % (fmt(index["keyPattern"]), db, name))
            else:
                raise CommandError(72, "must specify either index name or key pattern for collMod")
            spec = catalog[iname]
            if "expireAfterSeconds" in index:
                ttl = index["expireAfterSeconds"]
                if not is_number(ttl) or not (0 <= ttl <= 2**31 - 1):
                    raise CommandError(67, "TTL index 'expireAfterSeconds' option must be within an acceptable range")
                if len(spec["key"]) > 1:
                    raise CommandError(72, "TTL indexes are single-field indexes, compound indexes do not support TTL")
                old = spec.get("expireAfterSeconds")
                if old is not None:
                    reply["expireAfterSeconds_old"] = old
                spec["expireAfterSeconds"] = ttl
                reply["expireAfterSeconds_new"] = ttl
            if "hidden" in index:
                reply["hidden_old"] = bool(spec.get("hidden", False))
                if index["hidden"]:
                    spec["hidden"] = True
                else:
                    spec.pop("hidden", None)
                reply["hidden_new"] = bool(index["hidden"])
        reply["ok"] = 1.0
        return reply

    # -- TTL ------------------------------------------------------------------

    def ttl_pass(self):
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        deleted = 0
        for (db, name), catalog in list(self.indexes.items()):
            for spec in list(catalog.values()):
                ttl = spec.get("expireAfterSeconds")
                if ttl is None:
                    continue
                field = next(iter(spec["key"]))
                col = self.client[db][name]
                expired = []
                for doc in col._store.documents:
                    try:
                        v = mm_helpers.get_value_by_dot(doc, field)
                    except KeyError:
                        continue
                    dates = [x for x in (v if isinstance(v, list) else [v])
                             if isinstance(x, datetime.datetime)]
                    if not dates:
                        continue
                    oldest = min(d.replace(tzinfo=None) for d in dates)
                    if (now - oldest).total_seconds() >= float(ttl):
                        expired.append(store_key(doc["_id"]))
                for key in expired:
                    del col._store[key]
                deleted += len(expired)
        if deleted:
            LOG.info("TTL monitor deleted %d documents", deleted)
        return deleted

    async def ttl_monitor(self):
        while True:
            await asyncio.sleep(self.ttl_monitor_secs)
            try:
                await self.loop.run_in_executor(self.engine, self.ttl_pass)
            except Exception:  # noqa: BLE001
                LOG.exception("TTL pass failed")

    # -- fault injection ------------------------------------------------------

    def cmd_standin_fault(self, db, cmd, conn_id):
        if db != "admin":
            raise CommandError(13, "standinFault may only be run against the admin database")
        f = self.faults
        if cmd.get("reset"):
            f.reset()
        if "dropAfterApply" in cmd:
            f.drop_after_apply = int(cmd["dropAfterApply"])
        if "failNext" in cmd:
            f.fail_next = int(cmd["failNext"])
            f.fail_code = int(cmd.get("code", 91))
            f.fail_msg = str(cmd.get("errmsg", "stand-in injected failure"))
        if "refuse" in cmd and "down" not in cmd:
            cmd = dict(cmd, down=cmd["refuse"])
        if "down" in cmd:
            down = bool(cmd["down"])
            f.down = down
            self.loop.call_soon_threadsafe(self.set_down, down)
            if down and cmd.get("forMS"):
                delay = float(cmd["forMS"]) / 1000.0
                self.loop.call_soon_threadsafe(self.loop.call_later, delay, self.set_down, False)
        return {"state": f.describe(), "ok": 1.0}

    def cmd_standin_ttl_pass(self, db, cmd, conn_id):
        return {"deleted": self.ttl_pass(), "ok": 1.0}

    def set_down(self, down):
        self.faults.down = down
        if down:
            for writer in list(self.conns):
                writer.transport.abort()
            self.conns.clear()
        LOG.info("down=%s", down)

    async def control(self, line):
        """Handle one control line from stdin (runs on the event loop)."""
        parts = line.split()
        if not parts:
            return "ERR empty"
        op, args = parts[0], parts[1:]
        f = self.faults
        if op == "down":
            self.set_down(True)
        elif op == "up":
            self.set_down(False)
        elif op == "dropAfterApply":
            f.drop_after_apply = int(args[0])
        elif op == "failNext":
            f.fail_next = int(args[0])
            f.fail_code = int(args[1]) if len(args) > 1 else 91
            f.fail_msg = " ".join(args[2:]) if len(args) > 2 else "stand-in injected failure"
        elif op == "failInserts":
            f.fail_inserts = args[0] == "on"
            f.fail_inserts_code = int(args[1]) if len(args) > 1 else 91
        elif op == "probeCode":
            f.probe_code = 0 if args[0] == "off" else int(args[0])
        elif op == "refuseUpdates":
            if args[0] not in ("off", "match", "all", "random"):
                return "ERR refuseUpdates off|match SUBSTRING|all|random PERCENT"
            f.refuse_mode = args[0]
            f.refuse_arg = args[1] if len(args) > 1 else ""
        elif op == "reset":
            self.set_down(False)
            f.reset()
        elif op == "ttlPass":
            n = await self.loop.run_in_executor(self.engine, self.ttl_pass)
            return "OK ttlPass %d" % n
        elif op == "status":
            return "OK status " + f.describe()
        else:
            return "ERR unknown control command %s" % op
        return "OK " + op

    # -- wire protocol ------------------------------------------------------------

    async def handle(self, reader, writer):
        if self.faults.down:
            writer.transport.abort()
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                import socket as _socket
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            except OSError:
                pass
        conn_id = self.next_conn_id
        self.next_conn_id += 1
        self.conns.add(writer)
        try:
            while True:
                header = await reader.readexactly(16)
                length, request_id, _response_to, opcode = struct.unpack("<iiii", header)
                if length < 16 or length > MAX_MESSAGE_SIZE:
                    LOG.warning("conn %d: bad message length %d", conn_id, length)
                    break
                body = await reader.readexactly(length - 16)
                if self.faults.down:
                    break
                if opcode == OP_MSG:
                    out = await self.handle_op_msg(body, request_id, conn_id)
                elif opcode == OP_QUERY:
                    out = await self.handle_op_query(body, request_id, conn_id)
                else:
                    LOG.warning("conn %d: unsupported opcode %d", conn_id, opcode)
                    break
                if out is DropConnection:
                    break
                if out is not None:
                    writer.write(out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:  # noqa: BLE001
            LOG.exception("conn %d failed", conn_id)
        finally:
            self.conns.discard(writer)
            writer.transport.abort()

    def run_command(self, cmd, conn_id):
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("conn %d <- %s", conn_id, _summary(cmd))
        try:
            reply = self.dispatch(cmd, conn_id)
        except DropConnection:
            return DropConnection
        except CommandError as e:
            reply = e.reply()
        except Exception as e:  # noqa: BLE001
            LOG.exception("command failed")
            reply = CommandError(1, "stand-in internal error: %s: %s" % (type(e).__name__, e)).reply()
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("conn %d -> %s", conn_id, _summary(reply))
        return reply

    async def execute(self, cmd, conn_id, wire_doc_bound=None):
        name = next(iter(cmd), "")
        if name in INLINE_COMMANDS:
            return self.run_command(cmd, conn_id)
        return await self.loop.run_in_executor(
            self.engine, self.run_engine_command, cmd, conn_id, wire_doc_bound)

    def run_engine_command(self, cmd, conn_id, wire_doc_bound=None):
        """run_command on the engine thread, then a GC checkpoint (see
        `gc_checkpoint`)."""
        self.wire_doc_bound = wire_doc_bound
        try:
            return self.run_command(cmd, conn_id)
        finally:
            self.wire_doc_bound = None
            gc_checkpoint()

    async def handle_op_msg(self, body, request_id, conn_id):
        flags = struct.unpack_from("<I", body, 0)[0]
        end = len(body) - (4 if flags & MSG_CHECKSUM_PRESENT else 0)
        pos = 4
        cmd = None
        sequences = []
        # No document of the command is larger than the section it came in.
        doc_bound = 0
        while pos < end:
            kind = body[pos]
            pos += 1
            if kind == 0:
                size = struct.unpack_from("<i", body, pos)[0]
                cmd = decode_command(body[pos:pos + size])
                doc_bound = max(doc_bound, size)
                pos += size
            elif kind == 1:
                size = struct.unpack_from("<i", body, pos)[0]
                sec_end = pos + size
                p = pos + 4
                nul = body.index(b"\0", p)
                ident = body[p:nul].decode("utf-8")
                p = nul + 1
                docs = []
                while p < sec_end:
                    dsize = struct.unpack_from("<i", body, p)[0]
                    if ident == "documents":
                        docs.append(decode_document(body[p:p + dsize], False))
                    else:
                        docs.append(bson.decode(body[p:p + dsize], codec_options=CODEC))
                    doc_bound = max(doc_bound, dsize)
                    p += dsize
                sequences.append((ident, docs))
                pos = sec_end
            else:
                LOG.warning("conn %d: unknown OP_MSG section kind %d", conn_id, kind)
                return DropConnection
        if cmd is None:
            reply = CommandError(40414, "OP_MSG has no body section").reply()
        else:
            reply = None
            for ident, docs in sequences:
                if ident in cmd:
                    reply = CommandError(40414, "duplicate field '%s' in OP_MSG body and document sequence" % ident).reply()
                cmd[ident] = docs
            if reply is None:
                reply = await self.execute(cmd, conn_id, doc_bound)
        if reply is DropConnection:
            return DropConnection
        if flags & MSG_MORE_TO_COME:
            return None
        payload = b"\0" + bson.encode(reply, codec_options=CODEC)
        msg = struct.pack("<I", 0) + payload
        return struct.pack("<iiii", 16 + len(msg), self.next_request_id(), request_id, OP_MSG) + msg

    async def handle_op_query(self, body, request_id, conn_id):
        # flags, fullCollectionName, numberToSkip, numberToReturn, query
        pos = 4
        nul = body.index(b"\0", pos)
        full_name = body[pos:nul].decode("utf-8")
        pos = nul + 1 + 8
        size = struct.unpack_from("<i", body, pos)[0]
        query = bson.decode(body[pos:pos + size], codec_options=CODEC)
        if "$query" in query:
            query = query["$query"]
        db, _, coll = full_name.partition(".")
        if coll != "$cmd":
            reply = {"$err": "OP_QUERY is only supported for commands", "code": 5739101, "ok": 0.0}
        else:
            name = next(iter(query), "")
            if name not in ("isMaster", "ismaster", "hello", "ping", "buildInfo", "buildinfo"):
                reply = CommandError(352, "Unsupported OP_QUERY command: %s. The client driver may require an upgrade." % name).reply()
            else:
                query = dict(query)
                query["$db"] = db
                reply = await self.execute(query, conn_id)
                if reply is DropConnection:
                    return DropConnection
        docs = bson.encode(reply, codec_options=CODEC)
        msg = struct.pack("<iqii", 0, 0, 0, 1) + docs
        return struct.pack("<iiii", 16 + len(msg), self.next_request_id(), request_id, OP_REPLY) + msg

    _request_id = 0

    def next_request_id(self):
        Standin._request_id = (Standin._request_id + 1) & 0x7FFFFFFF
        return Standin._request_id


def _sort_cmp(key, direction):
    """Comparator of documents on one sort key, as a server sorts: a missing
    field is null; an array sorts by its smallest element ascending, its
    largest descending."""

    def sort_value(doc):
        values = []
        for v in mm_filtering.iter_key_candidates(key, doc):
            if isinstance(v, list):
                values.extend(v if v else [None])
            elif v is not mm_filtering.NOTHING:
                values.append(v)
        if not values:
            return None
        best = values[0]
        for v in values[1:]:
            c = bson_cmp(v, best)
            if (direction > 0 and c < 0) or (direction < 0 and c > 0):
                best = v
        return best

    def cmp(a, b):
        return bson_cmp(sort_value(a), sort_value(b))

    return cmp


def _project_shared(doc, spec, is_include):
    """mongomock's `_project_by_spec`, sharing the projected values with the
    stored document instead of deep-copying them."""
    out = {}
    for key, val in doc.items():
        sub = spec.get(key, mm_filtering.NOTHING)
        if isinstance(sub, dict):
            if isinstance(val, (list, tuple)):
                out[key] = [_project_shared(d, sub, is_include) for d in val]
            elif isinstance(val, dict):
                out[key] = _project_shared(val, sub, is_include)
        elif (is_include and sub is not mm_filtering.NOTHING) or \
                (not is_include and sub is mm_filtering.NOTHING):
            out[key] = val
    return out


def project_shared(col, doc, projection):
    """`project` for results that are encoded to BSON at once (find's
    cursors), so they may share values with the stored document: no deep
    copy of an 86 KB day document per read. Plain include/exclude
    projections take this path and give what mongomock's
    `_copy_only_fields` gives; anything else (projection operators, mixed
    or empty specs) goes to `project`."""
    fields = dict(projection)
    id_value = fields.pop("_id", 1)
    values = list(fields.values())
    if not values or any(isinstance(v, dict) for v in values) or len(set(values)) > 1:
        return project(col, doc, projection)
    spec = mm_collection._combine_projection_spec(fields)
    if "$" in spec:
        return project(col, doc, projection)
    out = _project_shared(doc, spec, values[0])
    if id_value == 0:
        out.pop("_id", None)
    elif "_id" in doc:
        out["_id"] = doc["_id"]
    if "_id" in out and next(iter(out)) != "_id":
        out = dict([("_id", out["_id"])] + [(k, v) for k, v in out.items() if k != "_id"])
    return out


def project(col, doc, projection):
    """Apply a find projection (via mongomock) keeping _id first, as a server does."""
    out = col._copy_only_fields(doc, dict(projection), dict)
    if "_id" in out and next(iter(out)) != "_id":
        out = dict([("_id", out["_id"])] + [(k, v) for k, v in out.items() if k != "_id"])
    return out


def _get_path(doc, path):
    try:
        return mm_helpers.get_value_by_dot(doc, path)
    except (KeyError, TypeError):
        return None


def to_float(v):
    if isinstance(v, Decimal128):
        return float(v.to_decimal())
    return float(v)


def _index_options(spec):
    return {k: v for k, v in spec.items() if k not in ("v", "key", "name", "background", "ns")}


def _summary(doc, limit=400):
    try:
        text = str(doc)
    except Exception:  # noqa: BLE001
        text = repr(type(doc))
    return text if len(text) <= limit else text[:limit] + "..."


def as_statement_error(e):
    if isinstance(e, StatementError):
        return e
    return StatementError(e.code, e.errmsg, **e.extra)


def as_command_error(e):
    if isinstance(e, StatementError):
        return CommandError(e.code, e.errmsg, **e.extra)
    return e


def map_engine_error(e):
    """Turn an exception raised inside mongomock into a StatementError."""
    if isinstance(e, CommandError):
        return as_statement_error(e)
    msg = str(e)
    if isinstance(e, mongomock.DuplicateKeyError):
        return StatementError(11000, "E11000 duplicate key error: %s" % msg)
    if isinstance(e, NotImplementedError) or type(e).__name__ == "NotImplementedError":
        return StatementError(238, "stand-in (mongomock) does not support this: %s" % msg)
    low = msg.lower()
    if "_id" in low and ("immutable" in low or "cannot be changed" in low or "altered" in low):
        return StatementError(
            66, "Performing an update on the path '_id' would modify the immutable field '_id'")
    if isinstance(e, (mongomock.WriteError, mongomock.OperationFailure)):
        code = getattr(e, "code", None) or 2
        return StatementError(code, msg)
    if isinstance(e, (ValueError, KeyError, TypeError, IndexError)):
        LOG.debug("engine error: %s", traceback.format_exc())
        return StatementError(2, "stand-in: operation rejected by the engine: %s: %s" % (type(e).__name__, msg))
    LOG.error("unexpected engine error: %s", traceback.format_exc())
    return StatementError(1, "stand-in internal error: %s: %s" % (type(e).__name__, msg))


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------


_STDOUT_LOCK = threading.Lock()


def say(line):
    with _STDOUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def stdin_watcher(loop, standin):
    """Reads control lines; exits the process when stdin closes."""
    try:
        while True:
            raw = sys.stdin.readline()
            if not raw:
                break
            line = raw.strip()
            if not line:
                continue

            try:
                fut = asyncio.run_coroutine_threadsafe(standin.control(line), loop)
                say(fut.result(timeout=30))
            except Exception as e:  # noqa: BLE001
                say("ERR %s" % e)
    except Exception:  # noqa: BLE001
        pass
    LOG.info("stdin closed; exiting")
    os._exit(0)


async def amain(args):
    standin = Standin(args.ttl_monitor_secs)
    tune_gc()
    standin.loop = asyncio.get_running_loop()
    server = await asyncio.start_server(standin.handle, args.host, args.port,
                                        limit=MAX_MESSAGE_SIZE)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGUSR1, standin.set_down, True)
        loop.add_signal_handler(signal.SIGUSR2, standin.set_down, False)
    except (NotImplementedError, AttributeError):
        pass
    if not args.no_stdin:
        threading.Thread(target=stdin_watcher, args=(loop, standin), daemon=True).start()
    if args.ttl_monitor_secs > 0:
        loop.create_task(standin.ttl_monitor())
    say("LISTENING %d" % port)
    LOG.info("listening on %s:%d", args.host, port)
    async with server:
        await server.serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--verbose", "-v", action="count", default=0)
    p.add_argument("--ttl-monitor-secs", type=float, default=60.0,
                   help="TTL monitor period (a real server uses 60 s); 0 disables it")
    p.add_argument("--no-stdin", action="store_true",
                   help="do not watch stdin (for running the stand-in by hand)")
    args = p.parse_args()
    level = logging.WARNING
    if args.verbose == 1:
        level = logging.INFO
    elif args.verbose > 1:
        level = logging.DEBUG
    logging.basicConfig(stream=sys.stderr, level=level,
                        format="standin %(asctime)s %(levelname)s %(message)s")
    try:
        asyncio.run(amain(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
