/* Avro payloads straight to Arrow column buffers, for the apply job's executor lane.
 *
 * Spark's from_avro plus the columnar cache cost the apply job about 7 us of CPU per record on
 * 2 cores (docs/measurements.md, "The floor under a snapshot's rate"); fastavro in Python
 * about 16 us. decode_columns() walks a batch of Confluent-framed payloads once, by a plan the
 * Python side compiles from the writer schema (bridge.spark.native_lane), and writes only the
 * fields the plan captures into column buffers pyarrow wraps without a copy: a validity bitmap
 * and fixed-width values, or int32 offsets and bytes. Everything else is skipped by its
 * encoding. It decides nothing: a payload that does not decode, or a decimal that does not fit
 * its precision, raises ValueError naming the record, and the caller refuses the whole batch.
 *
 * A plan is int32 quadruples in pre-order: (kind, arg, column, subtree length in entries).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "civil.h"

enum { K_NULL, K_BOOL, K_INT, K_FLOAT, K_DOUBLE, K_BYTES, K_FIXED, K_RECORD, K_UNION, K_ARRAY,
       K_MAP, K_ENUM };
/* Column kinds: how a captured value is stored. */
enum { C_BOOL, C_INT32, C_INT64, C_FLOAT32, C_FLOAT64, C_VAR, C_DECIMAL, C_COUNT, C_ZONED };

typedef struct {
    int32_t kind, arg, column, length;
} Node;

typedef struct {
    int kind;
    int precision;      /* C_DECIMAL */
    uint8_t *validity;  /* bitmap */
    uint8_t *values;    /* fixed width; C_VAR: int32 offsets (count + 1) */
    char *data;         /* C_VAR bytes */
    Py_ssize_t size, capacity;
    PyObject *validity_obj, *values_obj;
} Column;

typedef struct {
    const Node *plan;
    Py_ssize_t nodes;
    Column *columns;
    Py_ssize_t row;
    const char *error;
} Walk;

static const uint8_t *read_long(const uint8_t *p, const uint8_t *end, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    while (p < end) {
        uint8_t b = *p++;
        value |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return p;
        }
        shift += 7;
        if (shift > 63) return NULL;
    }
    return NULL;
}

static void set_valid(Column *c, Py_ssize_t row) { c->validity[row >> 3] |= (uint8_t)(1u << (row & 7)); }

static int append_bytes(Column *c, const uint8_t *p, int64_t n) {
    if (c->size + n > INT32_MAX) return -1;
    if (c->size + n > c->capacity) {
        Py_ssize_t grown = c->capacity * 2 > c->size + n ? c->capacity * 2 : c->size + n + 4096;
        char *data = PyMem_Realloc(c->data, (size_t)grown);
        if (data == NULL) return -1;
        c->data = data;
        c->capacity = grown;
    }
    memcpy(c->data + c->size, p, (size_t)n);
    c->size += n;
    return 0;
}

/* Big-endian two's complement of at most 16 bytes -> int128 little-endian; its digits checked
 * against the precision (Spark's from_avro reads a value that does not fit as null). */
static int store_decimal(Column *c, Py_ssize_t row, const uint8_t *p, int64_t n) {
    if (n < 1 || n > 16) return -1;
    __int128 value = (p[0] & 0x80) ? -1 : 0;
    for (int64_t i = 0; i < n; i++) value = (__int128)(((unsigned __int128)value << 8) | p[i]);
    unsigned __int128 magnitude = value < 0 ? (unsigned __int128)(-(value + 1)) + 1 : (unsigned __int128)value;
    unsigned __int128 limit = 1;
    for (int i = 0; i < c->precision; i++) limit *= 10;
    if (magnitude >= limit) return -1;
    memcpy(c->values + 16 * row, &value, 16);
    set_valid(c, row);
    return 0;
}

static int digits(const uint8_t *p, int n, int64_t *out) {
    int64_t value = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        value = value * 10 + (p[i] - '0');
    }
    *out = value;
    return 0;
}

/* A ZonedTimestamp's text -> microseconds since the epoch, exactly where
 * bridge.spark.driver_decode.zoned_timestamp reads it: "infinity" and "-infinity" as
 * int64's extremes, YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z with a real date and time; any other form
 * (years past 9999, BC, offsets other than Z) is -1: Spark's path reads it. */
static int parse_zoned(const uint8_t *p, int64_t n, int64_t *out) {
    if (n == 8 && memcmp(p, "infinity", 8) == 0) { *out = INT64_MAX; return 0; }
    if (n == 9 && memcmp(p, "-infinity", 9) == 0) { *out = INT64_MIN; return 0; }
    if (n < 20 || n > 27 || p[n - 1] != 'Z') return -1;
    if (p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' || p[16] != ':') return -1;
    int64_t year, month, day, hour, minute, second, fraction = 0;
    if (digits(p, 4, &year) || digits(p + 5, 2, &month) || digits(p + 8, 2, &day) ||
        digits(p + 11, 2, &hour) || digits(p + 14, 2, &minute) || digits(p + 17, 2, &second))
        return -1;
    int64_t places = 0;
    if (n > 20) {
        places = n - 21;
        if (p[19] != '.' || places < 1 || places > 6 || digits(p + 20, (int)places, &fraction))
            return -1;
        for (int64_t i = places; i < 6; i++) fraction *= 10;
    }
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (year < 1 || month < 1 || month > 12 || day < 1) return -1;
    if (day > month_days[month - 1] + (month == 2 && leap)) return -1;
    if (hour > 23 || minute > 59 || second > 59) return -1;
    int64_t seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
    *out = seconds * 1000000 + fraction;
    return 0;
}

static const uint8_t *walk(Walk *w, Py_ssize_t at, const uint8_t *p, const uint8_t *end);

static const uint8_t *walk_items(Walk *w, Py_ssize_t item, int is_map, const uint8_t *p,
                                 const uint8_t *end, int64_t *total) {
    for (;;) {
        int64_t count;
        if ((p = read_long(p, end, &count)) == NULL) return NULL;
        if (count == 0) return p;
        if (count < 0) {
            int64_t bytes;
            if ((p = read_long(p, end, &bytes)) == NULL) return NULL;
            count = -count;
        }
        *total += count;
        for (int64_t i = 0; i < count; i++) {
            if (is_map) {
                int64_t n;
                if ((p = read_long(p, end, &n)) == NULL || n < 0 || n > end - p) return NULL;
                p += n;
            }
            if ((p = walk(w, item, p, end)) == NULL) return NULL;
        }
    }
}

static const uint8_t *walk(Walk *w, Py_ssize_t at, const uint8_t *p, const uint8_t *end) {
    const Node *node = &w->plan[at];
    Column *c = node->column >= 0 ? &w->columns[node->column] : NULL;
    int64_t v, n;
    switch (node->kind) {
    case K_NULL:
        return p;
    case K_BOOL:
        if (p >= end) return NULL;
        if (c != NULL) {
            if (*p) c->values[w->row >> 3] |= (uint8_t)(1u << (w->row & 7));
            set_valid(c, w->row);
        }
        return p + 1;
    case K_INT:
    case K_ENUM:
        if ((p = read_long(p, end, &v)) == NULL) return NULL;
        if (c != NULL) {
            if (c->kind == C_INT32) ((int32_t *)c->values)[w->row] = (int32_t)v;
            else ((int64_t *)c->values)[w->row] = v;
            set_valid(c, w->row);
        }
        return p;
    case K_FLOAT:
    case K_DOUBLE:
        n = node->kind == K_FLOAT ? 4 : 8;
        if (end - p < n) return NULL;
        if (c != NULL) {
            memcpy(c->values + n * w->row, p, (size_t)n);
            set_valid(c, w->row);
        }
        return p + n;
    case K_BYTES:
        if ((p = read_long(p, end, &n)) == NULL || n < 0 || n > end - p) return NULL;
        if (c != NULL) {
            if (c->kind == C_DECIMAL) {
                if (store_decimal(c, w->row, p, n) < 0) {
                    w->error = "a decimal that does not fit its precision";
                    return NULL;
                }
            } else if (c->kind == C_ZONED) {
                if (parse_zoned(p, n, &((int64_t *)c->values)[w->row]) < 0) {
                    w->error = "a ZonedTimestamp in a form Spark's path reads";
                    return NULL;
                }
                set_valid(c, w->row);
            } else {
                if (append_bytes(c, p, n) < 0) {
                    w->error = "more than 2 GiB of bytes in one column";
                    return NULL;
                }
                set_valid(c, w->row);
            }
        }
        return p + n;
    case K_FIXED:
        if (end - p < node->arg) return NULL;
        return p + node->arg;
    case K_RECORD: {
        Py_ssize_t child = at + 1;
        for (int32_t i = 0; i < node->arg; i++) {
            if ((p = walk(w, child, p, end)) == NULL) return NULL;
            child += w->plan[child].length;
        }
        return p;
    }
    case K_UNION: {
        if ((p = read_long(p, end, &v)) == NULL || v < 0 || v >= node->arg) return NULL;
        Py_ssize_t child = at + 1;
        for (int64_t i = 0; i < v; i++) child += w->plan[child].length;
        return walk(w, child, p, end);
    }
    case K_ARRAY:
    case K_MAP: {
        int64_t total = 0;
        if ((p = walk_items(w, at + 1, node->kind == K_MAP, p, end, &total)) == NULL) return NULL;
        if (c != NULL) { /* C_COUNT: how many items */
            ((int32_t *)c->values)[w->row] = (int32_t)total;
            set_valid(c, w->row);
        }
        return p;
    }
    }
    return NULL;
}

static int width(int kind) {
    switch (kind) {
    case C_INT32: case C_FLOAT32: case C_COUNT: return 4;
    case C_INT64: case C_FLOAT64: case C_ZONED: return 8;
    case C_DECIMAL: return 16;
    default: return 0;
    }
}

static PyObject *zeroed_bytes(Py_ssize_t size) {
    PyObject *obj = PyBytes_FromStringAndSize(NULL, size);
    if (obj != NULL) memset(PyBytes_AS_STRING(obj), 0, (size_t)size);
    return obj;
}

/* decode_columns(plan, column_kinds, precisions, offsets, data, start, count, skip)
 *   -> [(validity, values_or_offsets, data_or_None), ...] per column */
static PyObject *decode_columns(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer plan, kinds, offsets, data;
    PyObject *precisions;
    Py_ssize_t start, count, skip;
    if (!PyArg_ParseTuple(args, "y*y*Oy*y*nnn", &plan, &kinds, &precisions, &offsets, &data,
                          &start, &count, &skip))
        return NULL;
    PyObject *result = NULL;
    Column *columns = NULL;
    Py_ssize_t ncols = kinds.len;
    const int32_t *offs = (const int32_t *)offsets.buf;
    if (plan.len % (Py_ssize_t)sizeof(Node) != 0 || start < 0 || count < 0 ||
        (start + count + 1) * 4 > offsets.len || !PyTuple_Check(precisions) ||
        PyTuple_GET_SIZE(precisions) != ncols) {
        PyErr_SetString(PyExc_ValueError, "decode_columns: inconsistent arguments");
        goto done;
    }
    columns = PyMem_Calloc((size_t)(ncols ? ncols : 1), sizeof(Column));
    if (columns == NULL) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Column *c = &columns[i];
        c->kind = ((const uint8_t *)kinds.buf)[i];
        c->precision = (int)PyLong_AsLong(PyTuple_GET_ITEM(precisions, i));
        if (c->precision > 38) c->precision = 38;
        c->validity_obj = zeroed_bytes((count + 7) / 8);
        Py_ssize_t size = c->kind == C_VAR ? 4 * (count + 1)
                          : c->kind == C_BOOL ? (count + 7) / 8 : width(c->kind) * count;
        c->values_obj = zeroed_bytes(size);
        if (c->validity_obj == NULL || c->values_obj == NULL) goto done;
        c->validity = (uint8_t *)PyBytes_AS_STRING(c->validity_obj);
        c->values = (uint8_t *)PyBytes_AS_STRING(c->values_obj);
    }
    Walk w = {(const Node *)plan.buf, plan.len / (Py_ssize_t)sizeof(Node), columns, 0, NULL};
    if (w.nodes == 0) {
        PyErr_SetString(PyExc_ValueError, "decode_columns: an empty plan");
        goto done;
    }
    const uint8_t *base = (const uint8_t *)data.buf;
    for (Py_ssize_t r = 0; r < count; r++) {
        int32_t a = offs[start + r], b = offs[start + r + 1];
        if (a < 0 || b < a || b > data.len || b - a < skip) {
            PyErr_Format(PyExc_ValueError, "record %zd: shorter than its %zd-byte frame", r, skip);
            goto done;
        }
        w.row = r;
        const uint8_t *end = base + b;
        const uint8_t *p = walk(&w, 0, base + a + skip, end);
        if (p == NULL || p != end) {
            PyErr_Format(PyExc_ValueError, "record %zd: %s", r,
                         w.error ? w.error : (p == NULL ? "truncated or invalid Avro"
                                                        : "bytes left after the record"));
            goto done;
        }
        for (Py_ssize_t i = 0; i < ncols; i++)
            if (columns[i].kind == C_VAR) ((int32_t *)columns[i].values)[r + 1] = (int32_t)columns[i].size;
    }
    result = PyList_New(ncols);
    if (result == NULL) goto done;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Column *c = &columns[i];
        PyObject *bytes = Py_None;
        if (c->kind == C_VAR) {
            bytes = PyBytes_FromStringAndSize(c->data ? c->data : "", c->size);
            if (bytes == NULL) { Py_CLEAR(result); goto done; }
        } else {
            Py_INCREF(bytes);
        }
        PyObject *item = PyTuple_Pack(3, c->validity_obj, c->values_obj, bytes);
        Py_DECREF(bytes);
        if (item == NULL) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, i, item);
    }
done:
    if (columns != NULL) {
        for (Py_ssize_t i = 0; i < ncols; i++) {
            Py_XDECREF(columns[i].validity_obj);
            Py_XDECREF(columns[i].values_obj);
            PyMem_Free(columns[i].data);
        }
        PyMem_Free(columns);
    }
    PyBuffer_Release(&plan);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_columns", decode_columns, METH_VARARGS,
     "Confluent-framed Avro payloads (an Arrow binary array's buffers) -> column buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_avrocols", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__avrocols(void) { return PyModule_Create(&module); }
