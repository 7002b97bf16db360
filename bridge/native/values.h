/*
 * The value writers of bridge.native._speedups (values.c): the wire ops, the plan layout's
 * constants and the output buffer, shared with the record and module code (_speedups.c).
 * The buffer's small writers are static inline: they run once per byte written.
 */
#ifndef PGBRIDGE_VALUES_H
#define PGBRIDGE_VALUES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PLAN_STRIDE 10

enum {
    OP_NONE = 0,
    OP_INT = 1,       /* int8 -> Avro long */
    OP_STRING = 2,    /* UTF-8 text -> Avro string */
    OP_BOOL = 3,      /* bool -> Avro boolean */
    OP_DECIMAL = 4,   /* numeric(p, s) -> Avro bytes decimal at scale s */
    OP_TIMESTAMPTZ = 5, /* timestamptz -> micros since 1970 UTC */
    OP_TIMESTAMP = 6, /* timestamp -> micros since 1970 (wall clock) */
    OP_DATE = 7,      /* date -> days since 1970 */
    OP_DOUBLE = 8,    /* float8 -> Avro double */
    OP_INT32 = 9,     /* int2/int4 -> Avro int: as OP_INT, refused outside int32 */
    OP_UUID = 10,     /* uuid -> Avro string (text: ASCII as sent; binary: 16 bytes) */
    OP_BYTEA = 11,    /* bytea -> Avro bytes (text: hex format only; binary: as sent) */
    OP_TIME = 12,     /* time -> Avro long micros since midnight */
    OP_INTERVAL = 13, /* interval -> Debezium's MicroDuration (Avro long micros) */
    OP_VARIABLE_DECIMAL = 14, /* numeric without typmod -> VariableScaleDecimal record */
    OP_ARRAY = 15,    /* one-dimensional array -> Avro array of ["null", item], item op in plan */
    OP_JSONB = 16,    /* jsonb -> Avro string (binary: after the version byte) */
    OP_ZONED = 17,    /* timestamptz -> Debezium's ZonedTimestamp string (ISO-8601 UTC, "Z") */
    OP_ZONED_PADDED = 18, /* the same, the fraction always `scale` digits (array items) */
};

#define PG_EPOCH_DAYS 10957LL
#define US_PER_DAY 86400000000LL
#define PG_EPOCH_US (PG_EPOCH_DAYS * US_PER_DAY)

/* ---- output buffer ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
    char local[1024];
} Out;

static inline void out_init(Out *o) {
    o->data = o->local;
    o->len = 0;
    o->cap = sizeof(o->local);
}

static inline void out_free(Out *o) {
    if (o->data != o->local) PyMem_Free(o->data);
}

/* Room for n more bytes; 0 on memory error (with the exception set). */
static inline int out_reserve(Out *o, Py_ssize_t n) {
    if (o->len + n <= o->cap) return 1;
    Py_ssize_t cap = o->cap * 2;
    while (cap < o->len + n) cap *= 2;
    char *data;
    if (o->data == o->local) {
        data = PyMem_Malloc(cap);
        if (data) memcpy(data, o->local, o->len);
    } else {
        data = PyMem_Realloc(o->data, cap);
    }
    if (!data) {
        PyErr_NoMemory();
        return 0;
    }
    o->data = data;
    o->cap = cap;
    return 1;
}

static inline int out_long(Out *o, int64_t n) {
    if (!out_reserve(o, 10)) return 0;
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z >= 0x80) {
        o->data[o->len++] = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    o->data[o->len++] = (char)z;
    return 1;
}

static inline int out_byte(Out *o, char b) {
    if (!out_reserve(o, 1)) return 0;
    o->data[o->len++] = b;
    return 1;
}

static inline int out_bytes(Out *o, const char *p, Py_ssize_t n) {
    if (!out_long(o, n) || !out_reserve(o, n)) return 0;
    memcpy(o->data + o->len, p, n);
    o->len += n;
    return 1;
}

static inline int out_raw(Out *o, const char *p, Py_ssize_t n) {
    if (!out_reserve(o, n)) return 0;
    memcpy(o->data + o->len, p, n);
    o->len += n;
    return 1;
}


/* Writes the value (without union branch); 1 = written, 0 = fall back, -1 = Python error. */
int write_value(Out *o, int op, int item_op, int binary, const char *p, Py_ssize_t n,
                int scale, int precision);

#endif
