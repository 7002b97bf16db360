/*
 * bridge.native._speedups: the C accelerators of the row hot path.
 *
 * scan_tuple: the column layout of one pgoutput TupleData (bridge.pgoutput.rows.read_tuple's
 * fast stages), or None for anything unusual, which the checked Python reader then reports.
 *
 * decode_insert: a whole Insert message as the decoder's own Insert and TupleData objects
 * (Decoder._insert's result), built here with their slots set directly.
 *
 * encode_row: pgoutput TupleData -> Avro binary of the row (and key) record, in one pass, for
 * the column types whose wire forms are simple (see bridge/native/ops.py).
 *
 * encode_insert: as encode_row, but straight to the Kafka record of an insert: the framed key
 * and the framed envelope value, its constant parts (source block around the change's
 * sequence and lsn, tail) given by the caller (bridge.sink.serializer.InsertLane).
 *
 * scan_copy_row: one binary COPY row (bridge.snapshot.copy_binary) -> its kinds and spans.
 *
 * This file holds the records and the module; one value's writers (numbers, dates and times,
 * intervals, numeric without typmod, arrays, ...) are in values.c, declared in values.h.
 *
 * It is an accelerator, never the authority: whenever a value is anything but the plain,
 * well-formed spelling the server prints (a NULL in a non-null field, an unchanged TOAST column,
 * 'NaN', BC dates, a number too long for int64, invalid UTF-8 ...), encode_row returns None and
 * the caller takes the Python converters, which produce the value or the precise typed error.
 * Every byte it writes must equal what bridge.sink.avro_writer writes for the value the Python
 * converter returns; tests/native checks that value by value.
 *
 * Plan layout (bytes, PLAN_STRIDE per field, in the record's field order):
 *   [0..1] column index, big-endian   [2] op for text values   [3] op for binary values
 *   [4] 0: not a union, 1: the union ["null", T], 2: [T, "null"]   [5] decimal scale
 *   [6] decimal precision
 *   [7] an array's item op for text values   [8] its item op for binary values   [9] unused
 * (an array of decimals keeps its items' scale and precision in [5] and [6]).
 */
#include "values.h"
#include "packed.h"
#include <structmember.h> /* T_OBJECT_EX: the slot kind decode_insert writes */

/* ---- a record ------------------------------------------------------------------------------ */

typedef struct {
    const char *buf;
    Py_ssize_t buf_len;
    const char *kinds;
    Py_ssize_t ncols;
    PyObject *spans;          /* (start, end) per column as Python ints, or NULL: */
    const Py_ssize_t *cspans; /* the same as a C array (a COPY row scanned in C) */
} Tuple;

/* 1 = written, 0 = fall back, -1 = Python error. */
static int write_record(Out *o, const Tuple *t, const unsigned char *plan, Py_ssize_t plan_len) {
    for (Py_ssize_t f = 0; f + PLAN_STRIDE <= plan_len; f += PLAN_STRIDE) {
        const unsigned char *e = plan + f;
        Py_ssize_t col = (e[0] << 8) | e[1];
        int nullable = e[4];
        /* The union branch bytes (zigzag varints): null and the value, by the union's order. */
        unsigned char null_branch = nullable == 2 ? 2 : 0, value_branch = nullable == 2 ? 0 : 2;
        if (col >= t->ncols) return 0;
        char kind = t->kinds[col];
        if (kind == 'n') {
            if (!nullable) return 0;
            if (!out_byte(o, null_branch)) return -1;
            continue;
        }
        if (kind != 't' && kind != 'b') return 0; /* 'u': unchanged TOAST, the Python path */
        int binary = kind == 'b';
        int op = binary ? e[3] : e[2];
        if (op == OP_NONE) return 0;
        Py_ssize_t start, end;
        if (t->cspans) {
            start = t->cspans[2 * col];
            end = t->cspans[2 * col + 1];
        } else {
            start = PyLong_AsSsize_t(PyTuple_GET_ITEM(t->spans, 2 * col));
            end = PyLong_AsSsize_t(PyTuple_GET_ITEM(t->spans, 2 * col + 1));
            if ((start == -1 || end == -1) && PyErr_Occurred()) return -1;
        }
        if (start < 0 || end < start || end > t->buf_len) return 0;
        if (nullable && !out_byte(o, value_branch)) return -1;
        int r = write_value(o, op, binary ? e[8] : e[7], binary, t->buf + start, end - start,
                            e[5], e[6]);
        if (r != 1) return r;
    }
    return 1;
}

static PyObject *finish(Out *o) {
    PyObject *b = PyBytes_FromStringAndSize(o->data, o->len);
    out_free(o);
    return b;
}

PyDoc_STRVAR(encode_row_doc,
"encode_row(buffer, kinds, spans, row_plan, key_plan) -> (row, key) | None\n\n"
"The Avro binary of the row record (and of the key record, or None without key_plan) of one\n"
"TupleData, or None when a value needs the Python converters.");

static PyObject *encode_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_row takes 5 arguments");
        return NULL;
    }
    PyObject *buffer = args[0], *kinds = args[1], *spans = args[2];
    PyObject *row_plan = args[3], *key_plan = args[4];
    if (!PyBytes_Check(row_plan) || (key_plan != Py_None && !PyBytes_Check(key_plan))) {
        PyErr_SetString(PyExc_TypeError, "encode_row: plans must be bytes (key_plan or None)");
        return NULL;
    }
    /* A TupleData over another buffer type (a test's bytearray, say): the Python path. */
    if (!PyBytes_Check(buffer) || !PyBytes_Check(kinds) || !PyTuple_Check(spans)) Py_RETURN_NONE;
    Tuple t = {
        PyBytes_AS_STRING(buffer), PyBytes_GET_SIZE(buffer), PyBytes_AS_STRING(kinds),
        PyBytes_GET_SIZE(kinds), spans, NULL,
    };
    if (PyTuple_GET_SIZE(spans) != 2 * t.ncols) Py_RETURN_NONE;
    Out row;
    out_init(&row);
    int r = write_record(&row, &t, (const unsigned char *)PyBytes_AS_STRING(row_plan),
                         PyBytes_GET_SIZE(row_plan));
    if (r != 1) {
        out_free(&row);
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *key_bytes = NULL;
    if (key_plan != Py_None) {
        Out key;
        out_init(&key);
        r = write_record(&key, &t, (const unsigned char *)PyBytes_AS_STRING(key_plan),
                         PyBytes_GET_SIZE(key_plan));
        if (r != 1) {
            out_free(&key);
            out_free(&row);
            if (r < 0) return NULL;
            Py_RETURN_NONE;
        }
        key_bytes = finish(&key);
        if (!key_bytes) {
            out_free(&row);
            return NULL;
        }
    } else {
        key_bytes = Py_NewRef(Py_None);
    }
    PyObject *row_bytes = finish(&row);
    if (!row_bytes) {
        Py_DECREF(key_bytes);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (!result) {
        Py_DECREF(row_bytes);
        Py_DECREF(key_bytes);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, row_bytes);
    PyTuple_SET_ITEM(result, 1, key_bytes);
    return result;
}

/* The Confluent-framed key and envelope value of an insert (or an update without old row):
 * one pass over the TupleData, the constant parts copied around the row. */
PyDoc_STRVAR(encode_insert_doc,
"encode_insert(buffer, kinds, spans, row_plan, key_plan, key_header, value_head, source, lsn,\n"
"              seq, tail) -> (key, value) | None\n\n"
"key = key_header + Key record (None when key_plan is None); value = value_head (framing,\n"
"before = null, the branch of after) + Value record + the source block up to seq + seq (Avro\n"
"long) + tail (transaction, op, timestamps, unchanged TOAST). source is SourceParts' tuple\n"
"(head, sequence_head, mid, end): head + the string sequence_head + decimal(lsn) + '\"]' +\n"
"mid + lsn (Avro long) + end. None when a value needs the Python path.");

static inline int out_str(Out *o, PyObject *b) {
    return out_raw(o, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
}

/* A SourceParts tuple: 0 = fine, -1 = TypeError. */
static int check_source(const char *name, PyObject *source) {
    if (!PyTuple_Check(source) || PyTuple_GET_SIZE(source) != 4 ||
        !PyBytes_Check(PyTuple_GET_ITEM(source, 0)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(source, 1)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(source, 2)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(source, 3))) {
        PyErr_Format(PyExc_TypeError, "%s: source must be a tuple of 4 bytes", name);
        return -1;
    }
    return 0;
}

/* SourceParts.through_lsn: the source block up to seq for the change at lsn. */
static int write_source(Out *o, PyObject *source, int64_t lsn) {
    PyObject *head = PyTuple_GET_ITEM(source, 0), *sequence_head = PyTuple_GET_ITEM(source, 1);
    char digits[24];
    int ndigits = snprintf(digits, sizeof digits, "%lld", (long long)lsn);
    Py_ssize_t n = PyBytes_GET_SIZE(sequence_head) + ndigits + 2;
    return out_str(o, head) && out_long(o, n) && out_str(o, sequence_head) &&
           out_raw(o, digits, ndigits) && out_raw(o, "\"]", 2) &&
           out_str(o, PyTuple_GET_ITEM(source, 2)) && out_long(o, lsn) &&
           out_str(o, PyTuple_GET_ITEM(source, 3));
}

/* The framed key and value of an insert of the row t (encode_insert's contract) into two
 * buffers: 1 = written, 0 = the Python path, -1 = Python error. Parts are row_plan, key_plan
 * (Py_None: no key, `key` untouched), key_header, value_head, then the source block up to seq:
 * source_prefix whole (bytes), or source (a SourceParts tuple) at lsn; then seq and tail. */
static int write_insert(Out *key, Out *value, const Tuple *t, PyObject *row_plan,
                        PyObject *key_plan, PyObject *key_header, PyObject *value_head,
                        PyObject *source_prefix, PyObject *source, int64_t lsn, int64_t seq,
                        PyObject *tail) {
    int r = out_str(value, value_head) ? 1 : -1;
    if (r == 1)
        r = write_record(value, t, (const unsigned char *)PyBytes_AS_STRING(row_plan),
                         PyBytes_GET_SIZE(row_plan));
    if (r == 1 &&
        !((source_prefix ? out_str(value, source_prefix) : write_source(value, source, lsn)) &&
          out_long(value, seq) && out_str(value, tail)))
        r = -1;
    if (r != 1 || key_plan == Py_None) return r;
    r = out_str(key, key_header) ? 1 : -1;
    if (r == 1)
        r = write_record(key, t, (const unsigned char *)PyBytes_AS_STRING(key_plan),
                         PyBytes_GET_SIZE(key_plan));
    return r;
}

/* write_insert's outcome as encode_insert's answer: (key or None, value), None, or NULL. The
 * buffers are freed. */
static PyObject *record_tuple(int r, Out *key, int has_key, Out *value) {
    if (r != 1) {
        out_free(key);
        out_free(value);
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *key_bytes = has_key ? finish(key) : (out_free(key), Py_NewRef(Py_None));
    if (!key_bytes) {
        out_free(value);
        return NULL;
    }
    PyObject *value_bytes = finish(value);
    if (!value_bytes) {
        Py_DECREF(key_bytes);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (!result) {
        Py_DECREF(key_bytes);
        Py_DECREF(value_bytes);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, key_bytes);
    PyTuple_SET_ITEM(result, 1, value_bytes);
    return result;
}

static PyObject *insert_record(const Tuple *t, PyObject *row_plan, PyObject *key_plan,
                               PyObject *key_header, PyObject *value_head,
                               PyObject *source_prefix, PyObject *source, int64_t lsn,
                               int64_t seq, PyObject *tail) {
    Out key, value;
    out_init(&key);
    out_init(&value);
    int r = write_insert(&key, &value, t, row_plan, key_plan, key_header, value_head,
                         source_prefix, source, lsn, seq, tail);
    return record_tuple(r, &key, key_plan != Py_None, &value);
}

/* The parts' types, shared by encode_insert and encode_copy_row: 0 = fine, -1 = TypeError.
 * source_prefix: bytes, or NULL where the caller checked its source parts. */
static int check_parts(const char *name, PyObject *row_plan, PyObject *key_plan,
                       PyObject *key_header, PyObject *value_head, PyObject *source_prefix,
                       PyObject *tail) {
    if (!PyBytes_Check(row_plan) || !PyBytes_Check(value_head) ||
        (source_prefix && !PyBytes_Check(source_prefix)) || !PyBytes_Check(tail) ||
        (key_plan != Py_None && !PyBytes_Check(key_plan)) ||
        (key_plan != Py_None && !PyBytes_Check(key_header))) {
        PyErr_Format(PyExc_TypeError,
                     "%s: plans and parts must be bytes (key_plan None: no key)", name);
        return -1;
    }
    return 0;
}

static PyObject *encode_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "encode_insert takes 11 arguments");
        return NULL;
    }
    PyObject *buffer = args[0], *kinds = args[1], *spans = args[2], *source = args[7];
    if (check_parts("encode_insert", args[3], args[4], args[5], args[6], NULL, args[10]) < 0)
        return NULL;
    if (check_source("encode_insert", source) < 0) return NULL;
    int64_t lsn = PyLong_AsLongLong(args[8]);
    if (lsn == -1 && PyErr_Occurred()) return NULL;
    int64_t seq = PyLong_AsLongLong(args[9]);
    if (seq == -1 && PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(buffer) || !PyBytes_Check(kinds) || !PyTuple_Check(spans)) Py_RETURN_NONE;
    Tuple t = {
        PyBytes_AS_STRING(buffer), PyBytes_GET_SIZE(buffer), PyBytes_AS_STRING(kinds),
        PyBytes_GET_SIZE(kinds), spans, NULL,
    };
    if (PyTuple_GET_SIZE(spans) != 2 * t.ncols) Py_RETURN_NONE;
    return insert_record(&t, args[3], args[4], args[5], args[6], NULL, source, lsn, seq,
                         args[10]);
}

/* PostgreSQL's limit on a table's columns (MaxHeapAttributeNumber is 1600). */
#define MAX_COPY_COLUMNS 1664

/* One binary COPY row's layout into C arrays: 1 = a whole row of ncols fields, 0 = anything
 * else (short, long or malformed, the trailer) for the Python parser to judge. */
static int scan_copy_into(const unsigned char *buf, Py_ssize_t end, Py_ssize_t ncols,
                          char *kinds, Py_ssize_t *spans) {
    if (end < 2 || (int16_t)((buf[0] << 8) | buf[1]) != ncols) return 0;
    Py_ssize_t pos = 2;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (end - pos < 4) return 0;
        int32_t len = (int32_t)(((uint32_t)buf[pos] << 24) | ((uint32_t)buf[pos + 1] << 16) |
                                ((uint32_t)buf[pos + 2] << 8) | buf[pos + 3]);
        pos += 4;
        if (len >= 0) {
            if ((Py_ssize_t)len > end - pos) return 0;
            spans[2 * i] = pos;
            spans[2 * i + 1] = pos + len;
            pos += len;
        } else if (len == -1) {
            kinds[i] = 'n';
            spans[2 * i] = spans[2 * i + 1] = 0;
        } else {
            return 0;
        }
    }
    return pos == end;
}

PyDoc_STRVAR(encode_copy_row_doc,
"encode_copy_row(data, kinds, row_plan, key_plan, key_header, value_head, source_prefix, seq,\n"
"                tail) -> (key, value) | None\n\n"
"encode_insert of one binary COPY row (data: one CopyData message; kinds: b or t per column,\n"
"as selected), scanned without Python objects in between. None when the row is not exactly one\n"
"row of len(kinds) fields or a value needs the Python path.");

/* One COPY message (bytes) into the key and value buffers: 1 = written, 0 = the Python path
 * must judge it, -1 = Python error. parts: row_plan, key_plan, key_header, value_head,
 * source_prefix (checked by check_parts); kinds: b or t per column, at most MAX_COPY_COLUMNS. */
static int copy_row(PyObject *frame, PyObject *kinds_bytes, PyObject *const *parts, int64_t seq,
                    PyObject *tail, Out *key, Out *value) {
    Py_ssize_t ncols = PyBytes_GET_SIZE(kinds_bytes);
    char kinds[MAX_COPY_COLUMNS];
    Py_ssize_t spans[2 * MAX_COPY_COLUMNS];
    memcpy(kinds, PyBytes_AS_STRING(kinds_bytes), ncols);
    const char *buf = PyBytes_AS_STRING(frame);
    Py_ssize_t len = PyBytes_GET_SIZE(frame);
    if (!scan_copy_into((const unsigned char *)buf, len, ncols, kinds, spans)) return 0;
    Tuple t = {buf, len, kinds, ncols, NULL, spans};
    return write_insert(key, value, &t, parts[0], parts[1], parts[2], parts[3], parts[4], NULL, 0,
                        seq, tail);
}

/* A written record appended to a bytearray of packed records (packed.h) whose first *used
 * bytes are records: 1, or -1 on error. The bytearray grows by doubling (its size is cut back
 * to *used by the caller at the end), not by a reallocation per record. */
static int append_packed(PyObject *pack, Py_ssize_t *used, const Out *key, int has_key,
                         const Out *value) {
    if (key->len > INT32_MAX || value->len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a record over 2 GiB");
        return -1;
    }
    Py_ssize_t at = *used;
    Py_ssize_t n = 8 + (has_key ? key->len : 0) + value->len;
    Py_ssize_t size = PyByteArray_GET_SIZE(pack);
    if (at + n > size && PyByteArray_Resize(pack, Py_MAX(at + n, 2 * size + 4096)) < 0)
        return -1;
    *used = at + n;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(pack) + at;
    packed_put_int32(p, has_key ? (int32_t)key->len : -1);
    p += 4;
    if (has_key) memcpy(p, key->data, key->len), p += key->len;
    packed_put_int32(p, (int32_t)value->len);
    memcpy(p + 4, value->data, value->len);
    return 1;
}

static PyObject *encode_copy_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode_copy_row(bytes, bytes, ...) takes 9 arguments");
        return NULL;
    }
    if (check_parts("encode_copy_row", args[2], args[3], args[4], args[5], args[6], args[8]) < 0)
        return NULL;
    int64_t seq = PyLong_AsLongLong(args[7]);
    if (seq == -1 && PyErr_Occurred()) return NULL;
    if (PyBytes_GET_SIZE(args[1]) > MAX_COPY_COLUMNS) Py_RETURN_NONE;
    Out key, value;
    out_init(&key);
    out_init(&value);
    int r = copy_row(args[0], args[1], args + 2, seq, args[8], &key, &value);
    return record_tuple(r, &key, args[3] != Py_None, &value);
}

PyDoc_STRVAR(encode_copy_rows_doc,
"encode_copy_rows(frames, start, items, max_rows, max_bytes, kinds, row_plan, key_plan,\n"
"                 key_header, value_head, source_prefix, seq, tail) -> (rows, nbytes)\n\n"
"encode_copy_row of frames[start], frames[start + 1], ... (row i at seq + i), each (key, value)\n"
"appended to items: a list (as a tuple), or a bytearray (packed, see packed.h), until a frame encode_copy_row would answer None for (left for\n"
"the Python path), the end of frames, max_rows rows or max_bytes bytes of frames: the rows\n"
"taken and their frames' bytes. One call per batch of COPY messages instead of one per row.");

static PyObject *encode_copy_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 13 || !PyList_Check(args[0]) ||
        !(PyList_Check(args[2]) || PyByteArray_Check(args[2])) || !PyBytes_Check(args[5])) {
        PyErr_SetString(
            PyExc_TypeError,
            "encode_copy_rows(list, int, list | bytearray, int, int, bytes, ...) takes 13 arguments");
        return NULL;
    }
    PyObject *frames = args[0], *items = args[2];
    if (check_parts("encode_copy_rows", args[6], args[7], args[8], args[9], args[10], args[12]) < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_rows = PyLong_AsSsize_t(args[3]);
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[4]);
    int64_t seq = PyLong_AsLongLong(args[11]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t rows = 0, nbytes = 0;
    int packed = PyByteArray_Check(items), has_key = args[7] != Py_None, failed = 0;
    Py_ssize_t used = packed ? PyByteArray_GET_SIZE(items) : 0;
    if (PyBytes_GET_SIZE(args[5]) <= MAX_COPY_COLUMNS && start >= 0) {
        for (Py_ssize_t i = start; i < PyList_GET_SIZE(frames) && rows < max_rows &&
                                   nbytes < max_bytes;
             i++) {
            PyObject *frame = PyList_GET_ITEM(frames, i);
            if (!PyBytes_Check(frame)) break;
            Out key, value;
            out_init(&key);
            out_init(&value);
            int r = copy_row(frame, args[5], args + 6, seq + rows, args[12], &key, &value);
            if (r == 1 && packed) {
                r = append_packed(items, &used, &key, has_key, &value);
                out_free(&key);
                out_free(&value);
            } else if (r == 1) {
                PyObject *record = record_tuple(r, &key, has_key, &value);
                r = record == NULL ? -1 : PyList_Append(items, record) < 0 ? -1 : 1;
                Py_XDECREF(record);
            } else {
                out_free(&key);
                out_free(&value);
            }
            if (r < 0) {
                failed = 1;
                break;
            }
            if (r == 0) break;
            rows++;
            nbytes += PyBytes_GET_SIZE(frame);
        }
    }
    if (packed && PyByteArray_GET_SIZE(items) != used) {
        /* Back to the records' size (a shrink by at most half keeps the buffer). */
        if (failed) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            if (PyByteArray_Resize(items, used) < 0) PyErr_Clear();
            PyErr_Restore(type, value, traceback);
        } else if (PyByteArray_Resize(items, used) < 0) {
            return NULL;
        }
    }
    if (failed) return NULL;
    return Py_BuildValue("(nn)", rows, nbytes);
}

/* ---- inserts straight from the replication stream's frames ---------------------------------- */

/* An XLogData frame: 'w', wal_start, wal_end, send time (8 bytes each), then the pgoutput
 * message; an Insert outside a streamed transaction is 'I', relation oid, 'N', TupleData. */
#define FRAME_HEADER 25
#define INSERT_TUPLE (FRAME_HEADER + 6)

static inline uint64_t frame_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

/* Whether frame is an XLogData frame holding an Insert (not streamed) of relation oid. */
static int is_insert_of(PyObject *frame, uint32_t oid) {
    if (!PyBytes_Check(frame) || PyBytes_GET_SIZE(frame) <= INSERT_TUPLE) return 0;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(frame);
    return b[0] == 'w' && b[FRAME_HEADER] == 'I' && b[INSERT_TUPLE - 1] == 'N' &&
           (uint32_t)packed_int32(b + FRAME_HEADER + 1) == oid;
}

/* The TupleData at pos of buf into C arrays (scan_tuple_at's checks, spans absolute): 1 when it
 * ends exactly at end with at most MAX_COPY_COLUMNS columns, else 0 (the decoder judges it). */
static int scan_tuple_into(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end,
                           char *kinds, Py_ssize_t *spans, Py_ssize_t *ncols_out) {
    if (pos + 2 > end) return 0;
    Py_ssize_t ncols = (buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    if (ncols > MAX_COPY_COLUMNS || ncols > end - pos) return 0;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (pos >= end) return 0;
        unsigned char kind = buf[pos];
        kinds[i] = (char)kind;
        spans[2 * i] = spans[2 * i + 1] = 0;
        if (kind == 't' || kind == 'b') {
            if (pos + 5 > end) return 0;
            uint32_t len = (uint32_t)packed_int32(buf + pos + 1);
            Py_ssize_t start = pos + 5;
            if (len > 0x7FFFFFFF || (Py_ssize_t)len > end - start) return 0;
            spans[2 * i] = start;
            spans[2 * i + 1] = pos = start + (Py_ssize_t)len;
        } else if (kind == 'n' || kind == 'u') {
            pos += 1;
        } else {
            return 0;
        }
    }
    *ncols_out = ncols;
    return pos == end;
}

PyDoc_STRVAR(encode_insert_frames_doc,
"encode_insert_frames(frames, start, min_rows, max_rows, pack, oid, row_plan, key_plan,\n"
"                     key_header, value_head, source, seq, tail) -> (rows, last_lsn)\n\n"
"encode_insert of the Inserts of relation oid in frames[start], frames[start + 1], ... (XLogData\n"
"frames of the replication stream, outside a streamed transaction; row i at seq + i, its lsn\n"
"the frame's WAL start), packed into the bytearray pack (packed.h), until a frame that is not\n"
"such an Insert, one the encoder hands back (for the decoder and the Python path), the end of\n"
"frames or max_rows rows. When fewer than min_rows such Inserts lead (told by their headers\n"
"alone), none is encoded: (0, 0). last_lsn: the WAL start of the last frame taken.");

static PyObject *encode_insert_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 13 || !PyList_Check(args[0]) || !PyByteArray_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_insert_frames(list, int, int, int, bytearray, ...) takes 13 "
                        "arguments");
        return NULL;
    }
    PyObject *frames = args[0], *pack = args[4], *source = args[10];
    if (check_parts("encode_insert_frames", args[6], args[7], args[8], args[9], NULL,
                    args[12]) < 0 ||
        check_source("encode_insert_frames", source) < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t min_rows = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_rows = PyLong_AsSsize_t(args[3]);
    unsigned long oid = PyLong_AsUnsignedLong(args[5]);
    int64_t seq = PyLong_AsLongLong(args[11]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t nframes = PyList_GET_SIZE(frames);
    if (start < 0 || start > nframes) start = nframes;
    Py_ssize_t stop = max_rows < nframes - start ? start + max_rows : nframes;
    /* A run too short to be worth a batch of its own is left whole to the per-message path. */
    Py_ssize_t lead = start;
    while (lead < stop && lead - start < min_rows &&
           is_insert_of(PyList_GET_ITEM(frames, lead), (uint32_t)oid))
        lead++;
    if (lead - start < min_rows) return Py_BuildValue("(nL)", (Py_ssize_t)0, (long long)0);
    char kinds[MAX_COPY_COLUMNS];
    Py_ssize_t spans[2 * MAX_COPY_COLUMNS];
    Py_ssize_t rows = 0, used = PyByteArray_GET_SIZE(pack);
    int64_t last_lsn = 0;
    int has_key = args[7] != Py_None, failed = 0;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *frame = PyList_GET_ITEM(frames, i);
        if (!is_insert_of(frame, (uint32_t)oid)) break;
        const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(frame);
        Py_ssize_t len = PyBytes_GET_SIZE(frame), ncols;
        if (!scan_tuple_into(buf, INSERT_TUPLE, len, kinds, spans, &ncols)) break;
        Tuple t = {(const char *)buf, len, kinds, ncols, NULL, spans};
        int64_t lsn = (int64_t)frame_u64(buf + 1);
        Out key, value;
        out_init(&key);
        out_init(&value);
        int r = write_insert(&key, &value, &t, args[6], args[7], args[8], args[9], NULL, source,
                             lsn, seq + rows, args[12]);
        if (r == 1) r = append_packed(pack, &used, &key, has_key, &value);
        out_free(&key);
        out_free(&value);
        if (r < 0) {
            failed = 1;
            break;
        }
        if (r == 0) break;
        rows++;
        last_lsn = lsn;
    }
    if (PyByteArray_GET_SIZE(pack) != used) {
        /* Back to the records' size, keeping an exception that is on its way. */
        if (failed) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            if (PyByteArray_Resize(pack, used) < 0) PyErr_Clear();
            PyErr_Restore(type, value, traceback);
        } else if (PyByteArray_Resize(pack, used) < 0) {
            return NULL;
        }
    }
    if (failed) return NULL;
    return Py_BuildValue("(nL)", rows, (long long)last_lsn);
}

PyDoc_STRVAR(unpack_records_doc,
"unpack_records(pack, start, stop) -> [(key, value), ...]\n\n"
"Records start .. stop - 1 of packed records (a bytes-like object written by encode_copy_rows\n"
"into a bytearray, see packed.h) as (key or None, value) tuples of bytes.");

static PyObject *unpack_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "unpack_records(pack, start, stop) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), stop = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *records = PyList_New(0);
    const unsigned char *buf = view.buf, *key, *value;
    Py_ssize_t pos = 0, key_len, value_len;
    for (Py_ssize_t i = 0; records != NULL && i < stop; i++) {
        if (!packed_next(buf, view.len, &pos, &key, &key_len, &value, &value_len)) {
            PyErr_Format(PyExc_ValueError, "packed records end at record %zd, before %zd", i,
                         stop);
            Py_CLEAR(records);
            break;
        }
        if (i < start) continue;
        PyObject *record = Py_BuildValue("(y#y#)", (const char *)key, key_len,
                                         (const char *)value, value_len);
        if (record == NULL || PyList_Append(records, record) < 0) Py_CLEAR(records);
        Py_XDECREF(record);
    }
    PyBuffer_Release(&view);
    return records;
}

/* One binary COPY row (bridge.snapshot.copy_binary.CopyBinaryParser.row's checks). */
PyDoc_STRVAR(scan_copy_row_doc,
"scan_copy_row(data, ncols, kinds) -> (kinds, spans) | None\n\n"
"When data is exactly one binary COPY row of ncols fields: the row's kinds (kinds itself, or a\n"
"copy with 'n' for each NULL) and the absolute (start, end) of each value ((0, 0) for NULL);\n"
"else None (a short, long or malformed row, the trailer), for the Python parser to judge.");

static PyObject *scan_copy_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "scan_copy_row(bytes, int, bytes) expected");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t ncols = PyLong_AsSsize_t(args[1]);
    if (ncols == -1 && PyErr_Occurred()) return NULL;
    PyObject *default_kinds = args[2];
    if (ncols < 0 || ncols > 0x7FFF || PyBytes_GET_SIZE(default_kinds) != ncols) Py_RETURN_NONE;
    if (end < 2) Py_RETURN_NONE;
    int16_t count = (int16_t)((buf[0] << 8) | buf[1]);
    if (count != ncols) Py_RETURN_NONE;
    Py_ssize_t pos = 2;
    PyObject *kinds = NULL;
    PyObject *spans = PyTuple_New(2 * ncols);
    if (!spans) return NULL;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (end - pos < 4) goto malformed;
        int32_t len = (int32_t)(((uint32_t)buf[pos] << 24) | ((uint32_t)buf[pos + 1] << 16) |
                                ((uint32_t)buf[pos + 2] << 8) | buf[pos + 3]);
        pos += 4;
        Py_ssize_t start = 0, stop = 0;
        if (len >= 0) {
            if ((Py_ssize_t)len > end - pos) goto malformed;
            start = pos;
            stop = pos + len;
            pos = stop;
        } else if (len == -1) {
            if (!kinds) {
                /* A new object to write into: PyBytes_FromStringAndSize(str, 1) would hand
                 * out CPython's shared one-character bytes. */
                kinds = PyBytes_FromStringAndSize(NULL, ncols);
                if (!kinds) goto error;
                memcpy(PyBytes_AS_STRING(kinds), PyBytes_AS_STRING(default_kinds), ncols);
            }
            PyBytes_AS_STRING(kinds)[i] = 'n';
        } else {
            goto malformed;
        }
        PyObject *a = PyLong_FromSsize_t(start), *b = PyLong_FromSsize_t(stop);
        if (!a || !b) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto error;
        }
        PyTuple_SET_ITEM(spans, 2 * i, a);
        PyTuple_SET_ITEM(spans, 2 * i + 1, b);
    }
    if (pos != end) goto malformed;
    if (!kinds) kinds = Py_NewRef(default_kinds);
    PyObject *result = PyTuple_New(2);
    if (!result) goto error;
    PyTuple_SET_ITEM(result, 0, kinds);
    PyTuple_SET_ITEM(result, 1, spans);
    return result;
malformed:
    Py_XDECREF(kinds);
    Py_DECREF(spans);
    Py_RETURN_NONE;
error:
    Py_XDECREF(kinds);
    Py_DECREF(spans);
    return NULL;
}

PyDoc_STRVAR(scan_tuple_doc,
"scan_tuple(buffer, pos, end) -> (kinds, spans, next_pos) | None\n\n"
"The TupleData at pos: its kind bytes, the absolute (start, end) of each column's value ((0, 0)\n"
"for 'n' and 'u') and the offset just past it; None if it is malformed or runs past end.");

/* The TupleData at pos of buf (ending by end): its kinds (bytes), spans (tuple) and the offset
 * past it: 1; 0 for a malformed one; -1 with an exception set (memory). */
static int scan_tuple_at(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end,
                         PyObject **kinds_out, PyObject **spans_out, Py_ssize_t *next_out) {
    if (pos < 0 || pos + 2 > end) return 0;
    Py_ssize_t ncols = (buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    if (ncols > end - pos) return 0; /* every column takes at least its kind byte */
    PyObject *kinds = PyBytes_FromStringAndSize(NULL, ncols);
    PyObject *spans = PyTuple_New(2 * ncols);
    if (!kinds || !spans) goto error;
    char *k = PyBytes_AS_STRING(kinds);
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (pos >= end) goto malformed;
        unsigned char kind = buf[pos];
        k[i] = (char)kind;
        Py_ssize_t start = 0, stop = 0;
        if (kind == 't' || kind == 'b') {
            if (pos + 5 > end) goto malformed;
            uint32_t len = ((uint32_t)buf[pos + 1] << 24) | ((uint32_t)buf[pos + 2] << 16) |
                           ((uint32_t)buf[pos + 3] << 8) | buf[pos + 4];
            start = pos + 5;
            if (len > 0x7FFFFFFF || (Py_ssize_t)len > end - start) goto malformed;
            stop = start + (Py_ssize_t)len;
            pos = stop;
        } else if (kind == 'n' || kind == 'u') {
            pos += 1;
        } else {
            goto malformed;
        }
        PyObject *a = PyLong_FromSsize_t(start), *b = PyLong_FromSsize_t(stop);
        if (!a || !b) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto error;
        }
        PyTuple_SET_ITEM(spans, 2 * i, a);
        PyTuple_SET_ITEM(spans, 2 * i + 1, b);
    }
    *kinds_out = kinds;
    *spans_out = spans;
    *next_out = pos;
    return 1;
malformed:
    Py_DECREF(kinds);
    Py_DECREF(spans);
    return 0;
error:
    Py_XDECREF(kinds);
    Py_XDECREF(spans);
    return -1;
}

static PyObject *scan_tuple(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scan_tuple(bytes, int, int) expected");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if ((pos == -1 || end == -1) && PyErr_Occurred()) return NULL;
    if (end > PyBytes_GET_SIZE(args[0])) Py_RETURN_NONE;
    PyObject *kinds, *spans;
    Py_ssize_t next;
    int r = scan_tuple_at(buf, pos, end, &kinds, &spans, &next);
    if (r < 0) return NULL;
    if (r == 0) Py_RETURN_NONE;
    PyObject *next_obj = PyLong_FromSsize_t(next);
    if (!next_obj) {
        Py_DECREF(kinds);
        Py_DECREF(spans);
        return NULL;
    }
    PyObject *result = PyTuple_New(3);
    if (!result) {
        Py_DECREF(kinds);
        Py_DECREF(spans);
        Py_DECREF(next_obj);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, kinds);
    PyTuple_SET_ITEM(result, 1, spans);
    PyTuple_SET_ITEM(result, 2, next_obj);
    return result;
}

/* decode_insert builds bridge.pgoutput.messages' TupleData and Insert itself: their types and
 * the offsets of their slots (member descriptors), given once by configure_messages. */
static PyTypeObject *tuple_type, *insert_type;
static Py_ssize_t tuple_slots[3], insert_slots[3]; /* kinds, buffer, spans; xid, oid, tuple */

static int slot_offsets(PyTypeObject *type, const char *const names[3], Py_ssize_t out[3]) {
    for (int i = 0; i < 3; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, names[i]);
        if (!descr || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, names[i]);
            return -1;
        }
        out[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    return 0;
}

PyDoc_STRVAR(configure_messages_doc,
"configure_messages(TupleData, Insert) -> None\n\n"
"The slot classes decode_insert builds (their fields: kinds, buffer, spans; xid,\n"
"relation_oid, new_tuple).");

static PyObject *configure_messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "configure_messages(TupleData, Insert) expected");
        return NULL;
    }
    static const char *const tuple_names[3] = {"kinds", "buffer", "spans"};
    static const char *const insert_names[3] = {"xid", "relation_oid", "new_tuple"};
    Py_ssize_t t[3], m[3];
    if (slot_offsets((PyTypeObject *)args[0], tuple_names, t) < 0 ||
        slot_offsets((PyTypeObject *)args[1], insert_names, m) < 0)
        return NULL;
    Py_XSETREF(tuple_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(insert_type, (PyTypeObject *)Py_NewRef(args[1]));
    memcpy(tuple_slots, t, sizeof t);
    memcpy(insert_slots, m, sizeof m);
    Py_RETURN_NONE;
}

/* A new instance of a configured slot class with its three fields (references stolen). */
static PyObject *new_slots(PyTypeObject *type, const Py_ssize_t offsets[3], PyObject *a,
                           PyObject *b, PyObject *c) {
    PyObject *obj = type->tp_alloc(type, 0);
    if (!obj) {
        Py_DECREF(a);
        Py_DECREF(b);
        Py_DECREF(c);
        return NULL;
    }
    *(PyObject **)((char *)obj + offsets[0]) = a;
    *(PyObject **)((char *)obj + offsets[1]) = b;
    *(PyObject **)((char *)obj + offsets[2]) = c;
    return obj;
}

PyDoc_STRVAR(decode_insert_doc,
"decode_insert(payload, in_stream) -> Insert | None\n\n"
"Decoder._insert's result for a well-formed Insert message ('I', [xid,] oid, 'N', TupleData\n"
"ending the payload); None for anything else, which the checked Python reader reports.");

static PyObject *decode_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_insert(bytes, bool) expected");
        return NULL;
    }
    if (!tuple_type || !insert_type) {
        PyErr_SetString(PyExc_RuntimeError, "configure_messages() first");
        return NULL;
    }
    int in_stream = PyObject_IsTrue(args[1]);
    if (in_stream < 0) return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t start = in_stream ? 10 : 6;
    if (end <= start || buf[0] != 'I' || buf[start - 1] != 'N') Py_RETURN_NONE;
    PyObject *kinds, *spans;
    Py_ssize_t next;
    int r = scan_tuple_at(buf, start, end, &kinds, &spans, &next);
    if (r < 0) return NULL;
    if (r == 0) Py_RETURN_NONE;
    if (next != end) {
        Py_DECREF(kinds);
        Py_DECREF(spans);
        Py_RETURN_NONE;
    }
    PyObject *tuple = new_slots(tuple_type, tuple_slots, kinds, Py_NewRef(args[0]), spans);
    if (!tuple) return NULL;
    const unsigned char *p = buf + 1;
    PyObject *xid;
    if (in_stream) {
        xid = PyLong_FromUnsignedLong(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                                      ((uint32_t)p[2] << 8) | p[3]);
        p += 4;
    } else {
        xid = Py_NewRef(Py_None);
    }
    PyObject *oid = PyLong_FromUnsignedLong(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                                            ((uint32_t)p[2] << 8) | p[3]);
    if (!xid || !oid) {
        Py_XDECREF(xid);
        Py_XDECREF(oid);
        Py_DECREF(tuple);
        return NULL;
    }
    return new_slots(insert_type, insert_slots, xid, oid, tuple);
}


PyDoc_STRVAR(encode_source_doc,
"encode_source(source, lsn) -> bytes\n\n"
"SourceParts.through_lsn: the source block up to seq of the change at lsn, from SourceParts'\n"
"tuple (head, sequence_head, mid, end), as encode_insert writes it.");

static PyObject *encode_source(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || check_source("encode_source", args[0]) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "encode_source takes 2 arguments");
        return NULL;
    }
    int64_t lsn = PyLong_AsLongLong(args[1]);
    if (lsn == -1 && PyErr_Occurred()) return NULL;
    Out o;
    out_init(&o);
    if (!write_source(&o, args[0], lsn)) {
        out_free(&o);
        return NULL;
    }
    return finish(&o);
}

static PyMethodDef methods[] = {
    {"scan_tuple", (PyCFunction)(void (*)(void))scan_tuple, METH_FASTCALL, scan_tuple_doc},
    {"configure_messages", (PyCFunction)(void (*)(void))configure_messages, METH_FASTCALL,
     configure_messages_doc},
    {"decode_insert", (PyCFunction)(void (*)(void))decode_insert, METH_FASTCALL,
     decode_insert_doc},
    {"encode_row", (PyCFunction)(void (*)(void))encode_row, METH_FASTCALL, encode_row_doc},
    {"encode_insert", (PyCFunction)(void (*)(void))encode_insert, METH_FASTCALL,
     encode_insert_doc},
    {"encode_source", (PyCFunction)(void (*)(void))encode_source, METH_FASTCALL,
     encode_source_doc},
    {"scan_copy_row", (PyCFunction)(void (*)(void))scan_copy_row, METH_FASTCALL,
     scan_copy_row_doc},
    {"encode_copy_row", (PyCFunction)(void (*)(void))encode_copy_row, METH_FASTCALL,
     encode_copy_row_doc},
    {"encode_copy_rows", (PyCFunction)(void (*)(void))encode_copy_rows, METH_FASTCALL,
     encode_copy_rows_doc},
    {"encode_insert_frames", (PyCFunction)(void (*)(void))encode_insert_frames, METH_FASTCALL,
     encode_insert_frames_doc},
    {"unpack_records", (PyCFunction)(void (*)(void))unpack_records, METH_FASTCALL,
     unpack_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "pgoutput TupleData -> Avro row bytes (accelerator)", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
