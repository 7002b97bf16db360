/*
 * Packed records: the snapshot's (key, value) records back to back in one buffer (a bytearray),
 * instead of two bytes objects and a tuple per row. Each record is
 *     int32 big-endian key length (-1: no key), the key, int32 big-endian value length, the value.
 * Written by _speedups.encode_copy_rows (into a bytearray), read by _speedups.unpack_records
 * and by _kafka.produce_packed, which hands them to librdkafka without a Python object each.
 */
#ifndef PGBRIDGE_PACKED_H
#define PGBRIDGE_PACKED_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static inline int32_t packed_int32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
}

static inline void packed_put_int32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24), p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8), p[3] = (unsigned char)u;
}

/* The record at *pos (moved past it): 1, or 0 when the buffer ends or is malformed there.
 * A missing key has *key NULL. */
static inline int packed_next(const unsigned char *buf, Py_ssize_t len, Py_ssize_t *pos,
                              const unsigned char **key, Py_ssize_t *key_len,
                              const unsigned char **value, Py_ssize_t *value_len) {
    Py_ssize_t p = *pos;
    if (len - p < 4) return 0;
    int32_t k = packed_int32(buf + p);
    p += 4;
    if (k < -1 || (k > 0 && (Py_ssize_t)k > len - p)) return 0;
    *key = k < 0 ? NULL : buf + p;
    *key_len = k < 0 ? 0 : k;
    p += *key_len;
    if (len - p < 4) return 0;
    int32_t v = packed_int32(buf + p);
    p += 4;
    if (v < 0 || (Py_ssize_t)v > len - p) return 0;
    *value = buf + p;
    *value_len = v;
    *pos = p + v;
    return 1;
}

#endif
