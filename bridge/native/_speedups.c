/*
 * bridge.native._speedups: the C accelerators of the row hot path.
 *
 * scan_tuple: the column layout of one pgoutput TupleData (bridge.pgoutput.rows.read_tuple's
 * fast stages), or None for anything unusual, which the checked Python reader then reports.
 *
 * encode_row: pgoutput TupleData -> Avro binary of the row (and key) record, in one pass, for
 * the column types whose wire forms are simple (see bridge/native/ops.py).
 *
 * encode_insert: as encode_row, but straight to the Kafka record of an insert: the framed key
 * and the framed envelope value, its constant parts (source block, tail) given by the caller
 * (bridge.sink.lane).
 *
 * scan_copy_row: one binary COPY row (bridge.snapshot.copy_binary) -> its kinds and spans.
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
 *   [4] 1 if the field is the union ["null", T]   [5] decimal scale   [6] decimal precision
 *   [7] an array's item op for text values   [8] its item op for binary values   [9] unused
 * (an array of decimals keeps its items' scale and precision in [5] and [6]).
 */
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
    OP_VARIABLE_DECIMAL = 14, /* numeric without typmod, text -> VariableScaleDecimal record */
    OP_ARRAY = 15,    /* one-dimensional array -> Avro array of ["null", item], item op in plan */
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

static void out_init(Out *o) {
    o->data = o->local;
    o->len = 0;
    o->cap = sizeof(o->local);
}

static void out_free(Out *o) {
    if (o->data != o->local) PyMem_Free(o->data);
}

/* Room for n more bytes; 0 on memory error (with the exception set). */
static int out_reserve(Out *o, Py_ssize_t n) {
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

static int out_long(Out *o, int64_t n) {
    if (!out_reserve(o, 10)) return 0;
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z >= 0x80) {
        o->data[o->len++] = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    o->data[o->len++] = (char)z;
    return 1;
}

static int out_byte(Out *o, char b) {
    if (!out_reserve(o, 1)) return 0;
    o->data[o->len++] = b;
    return 1;
}

static int out_bytes(Out *o, const char *p, Py_ssize_t n) {
    if (!out_long(o, n) || !out_reserve(o, n)) return 0;
    memcpy(o->data + o->len, p, n);
    o->len += n;
    return 1;
}

static int out_raw(Out *o, const char *p, Py_ssize_t n) {
    if (!out_reserve(o, n)) return 0;
    memcpy(o->data + o->len, p, n);
    o->len += n;
    return 1;
}

/* ---- value parsers: 1 = parsed, 0 = not the plain form (the caller falls back) ------------- */

static int digits(const char *p, int n, int64_t *v) {
    int64_t acc = 0;
    for (int i = 0; i < n; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9) return 0;
        acc = acc * 10 + d;
    }
    *v = acc;
    return 1;
}

static int parse_int_text(const char *p, Py_ssize_t n, int64_t *out) {
    int neg = n > 0 && p[0] == '-';
    p += neg;
    n -= neg;
    if (n < 1 || n > 19) return 0;
    uint64_t acc = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9) return 0;
        if (acc > (UINT64_MAX - d) / 10) return 0;
        acc = acc * 10 + d;
    }
    if (neg) {
        if (acc > (uint64_t)INT64_MAX + 1) return 0;
        *out = (int64_t)(0 - acc);
    } else {
        if (acc > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)acc;
    }
    return 1;
}

static int64_t be_signed(const unsigned char *p, Py_ssize_t n) {
    uint64_t v = (p[0] & 0x80) ? UINT64_MAX : 0;
    for (Py_ssize_t i = 0; i < n; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

/* Hinnant's days_from_civil, as bridge.types.temporal.days_from_civil. */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD" at p (exactly 10 bytes available). */
static int parse_date_part(const char *p, int64_t *days) {
    int64_t y, m, d;
    if (p[4] != '-' || p[7] != '-') return 0;
    if (!digits(p, 4, &y) || !digits(p + 5, 2, &m) || !digits(p + 8, 2, &d)) return 0;
    if (m < 1 || m > 12 || d < 1 || d > 31) return 0;
    *days = days_from_civil(y, m, d);
    return 1;
}

/* An optional ".f{1,6}" at *i -> microseconds in *frac, *i moved past it; 0 if malformed. */
static int parse_fraction(const char *p, Py_ssize_t n, Py_ssize_t *i, int64_t *frac) {
    Py_ssize_t j = *i;
    int64_t f = 0;
    if (j < n && p[j] == '.') {
        int k = 0;
        j++;
        while (j < n && k < 6 && (unsigned)(p[j] - '0') <= 9) {
            f = f * 10 + (p[j] - '0');
            j++;
            k++;
        }
        if (k == 0) return 0;
        for (; k < 6; k++) f *= 10;
    }
    *i = j;
    *frac = f;
    return 1;
}

/* PostgreSQL's ISO output "YYYY-MM-DD HH:MM:SS[.f{1,6}]" then, with a zone, "+HH[:MM[:SS]]". */
static int parse_timestamp_text(const char *p, Py_ssize_t n, int with_zone, int64_t *micros) {
    int64_t days, h, mi, s, frac = 0;
    if (n < 19 || p[10] != ' ' || p[13] != ':' || p[16] != ':') return 0;
    if (!parse_date_part(p, &days)) return 0;
    if (!digits(p + 11, 2, &h) || !digits(p + 14, 2, &mi) || !digits(p + 17, 2, &s)) return 0;
    if (h > 23 || mi > 59 || s > 59) return 0;
    Py_ssize_t i = 19;
    if (!parse_fraction(p, n, &i, &frac)) return 0;
    int64_t offset = 0;
    if (with_zone) {
        if (i >= n || (p[i] != '+' && p[i] != '-')) return 0;
        int sign = p[i] == '-' ? -1 : 1;
        int64_t part;
        i++;
        if (i + 2 > n || !digits(p + i, 2, &part)) return 0;
        offset = part * 3600;
        i += 2;
        /* optional ":MM", then optional ":SS" */
        static const int units[2] = {60, 1};
        for (int u = 0; u < 2 && i < n; u++) {
            if (p[i] != ':' || i + 3 > n || !digits(p + i + 1, 2, &part)) return 0;
            offset += part * units[u];
            i += 3;
        }
        offset *= sign;
    }
    if (i != n) return 0;
    *micros = days * US_PER_DAY + ((h * 60 + mi) * 60 + s - offset) * 1000000LL + frac;
    return 1;
}

/* [-]digits[.digits] with at most `scale` fraction digits -> the unscaled integer. */
static int parse_decimal_text(const char *p, Py_ssize_t n, int scale, int precision,
                              int64_t *unscaled) {
    int neg = n > 0 && p[0] == '-';
    Py_ssize_t i = neg;
    int64_t acc = 0;
    int total = 0, frac_digits = 0, int_digits = 0;
    /* total counts significant digits, checked before each step: acc stays below 10**18. */
    for (; i < n && p[i] != '.'; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9) return 0;
        if ((acc || d) && ++total > 18) return 0;
        acc = acc * 10 + d;
        int_digits++;
    }
    if (int_digits == 0) return 0;
    if (i < n) {
        i++; /* '.' */
        if (i == n) return 0;
        for (; i < n; i++) {
            unsigned d = (unsigned)(p[i] - '0');
            if (d > 9) return 0;
            if ((acc || d) && ++total > 18) return 0;
            acc = acc * 10 + d;
            frac_digits++;
        }
    }
    if (frac_digits > scale) return 0;
    for (; frac_digits < scale; frac_digits++) {
        if (acc && ++total > 18) return 0;
        acc *= 10;
    }
    /* The writer refuses values beyond the precision: let the Python path say so. */
    if (total > precision) return 0;
    *unscaled = neg ? -acc : acc;
    return 1;
}

/* Avro decimal bytes as bridge.sink.avro_writer writes them: big-endian two's complement,
 * (bit length of |v| + 8) // 8 bytes (fastavro's width). */
static int out_decimal(Out *o, int64_t v) {
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int bits = 0;
    while (mag) {
        bits++;
        mag >>= 1;
    }
    int size = (bits + 8) / 8; /* |v| < 10**18 < 2**60: at most 8 bytes */
    unsigned char tmp[8];
    uint64_t u = (uint64_t)v;
    for (int k = size - 1; k >= 0; k--) {
        tmp[k] = (unsigned char)(u & 0xFF);
        u >>= 8;
    }
    return out_bytes(o, (const char *)tmp, size);
}

static int is_ascii(const unsigned char *p, Py_ssize_t n) {
    unsigned char acc = 0;
    for (Py_ssize_t i = 0; i < n; i++) acc |= p[i];
    return acc < 0x80;
}

/* Strict UTF-8, as bytes.decode("utf-8"); -1 on a Python error other than a decode error. */
static int valid_utf8(const char *p, Py_ssize_t n) {
    if (is_ascii((const unsigned char *)p, n)) return 1;
    PyObject *s = PyUnicode_DecodeUTF8(p, n, "strict");
    if (s) {
        Py_DECREF(s);
        return 1;
    }
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* bytea_out's hex format "\\x" + two hex digits per byte, as Avro bytes. */
static int out_bytea_hex(Out *o, const char *p, Py_ssize_t n) {
    if (n < 2 || p[0] != '\\' || p[1] != 'x' || (n & 1)) return 0;
    Py_ssize_t len = (n - 2) / 2;
    if (!out_long(o, len) || !out_reserve(o, len)) return -1;
    char *dst = o->data + o->len;
    for (Py_ssize_t i = 0; i < len; i++) {
        int hi = hex_value((unsigned char)p[2 + 2 * i]), lo = hex_value((unsigned char)p[3 + 2 * i]);
        if (hi < 0 || lo < 0) return 0; /* the caller drops the whole record */
        dst[i] = (char)((hi << 4) | lo);
    }
    o->len += len;
    return 1;
}

/* uuid_send's 16 bytes as str(uuid.UUID(bytes=...)): lowercase 8-4-4-4-12. */
static int out_uuid_binary(Out *o, const unsigned char *p) {
    static const char digits[] = "0123456789abcdef";
    char text[36];
    int k = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) text[k++] = '-';
        text[k++] = digits[p[i] >> 4];
        text[k++] = digits[p[i] & 15];
    }
    return out_bytes(o, text, 36);
}

/* time_out "HH:MM:SS[.f{1,6}]" (hours up to 24) -> micros, as bridge.types.temporal. */
static int parse_time_text(const char *p, Py_ssize_t n, int64_t *micros) {
    int64_t h, mi, s, frac = 0;
    if (n < 8 || p[2] != ':' || p[5] != ':') return 0;
    if (!digits(p, 2, &h) || !digits(p + 3, 2, &mi) || !digits(p + 6, 2, &s)) return 0;
    Py_ssize_t i = 8;
    if (!parse_fraction(p, n, &i, &frac)) return 0;
    if (i != n) return 0;
    *micros = ((h * 60 + mi) * 60 + s) * 1000000LL + frac;
    return 1;
}

static int parse_double_text(const char *p, Py_ssize_t n, double *out) {
    char tmp[64];
    if (n < 1 || n >= (Py_ssize_t)sizeof(tmp)) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' ||
              c == 'E'))
            return 0;
    }
    memcpy(tmp, p, n);
    tmp[n] = 0;
    char *end = NULL;
    double v = PyOS_string_to_double(tmp, &end, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != tmp + n) return 0;
    *out = v;
    return 1;
}


/* ---- interval ------------------------------------------------------------------------------ */

/* Debezium's average month (365.25 / 12 days), as bridge.types.temporal.US_PER_AVG_MONTH. */
#define US_PER_AVG_MONTH 2629800000000LL

/* *acc += a * b without leaving int64 (b > 0); 0 when it would. */
static int mul_add_checked(int64_t *acc, int64_t a, int64_t b) {
    if (a > 0 ? a > INT64_MAX / b : a < INT64_MIN / b) return 0;
    int64_t t = a * b;
    if (t > 0 ? *acc > INT64_MAX - t : *acc < INT64_MIN - t) return 0;
    *acc += t;
    return 1;
}

/* bridge.types.temporal.micro_duration of (months, days, micros): 1 with *out set, 0 where the
 * Python converter clamps (past a long, or onto the infinity sentinels, counted as lossy there)
 * or where the sum would leave int64 on the way (the Python integers would not). */
static int micro_duration(int64_t months, int64_t days, int64_t micros, int64_t *out) {
    int64_t total = micros;
    if (!mul_add_checked(&total, months, US_PER_AVG_MONTH)) return 0;
    if (!mul_add_checked(&total, days, US_PER_DAY)) return 0;
    if (total == INT64_MAX || total == INT64_MIN) return 0;
    *out = total;
    return 1;
}

/* A decimal count of at most 18 digits at p[*i] (after an optional sign when `sign`): 1 with
 * *i past it, 0 when there is none or it is longer. */
static int parse_count(const char *p, Py_ssize_t n, Py_ssize_t *i, int sign, int64_t *v) {
    Py_ssize_t j = *i;
    int neg = 0;
    if (sign && j < n && (p[j] == '+' || p[j] == '-')) {
        neg = p[j] == '-';
        j++;
    }
    Py_ssize_t start = j;
    int64_t acc = 0;
    while (j < n && (unsigned)(p[j] - '0') <= 9) {
        if (j - start == 18) return 0;
        acc = acc * 10 + (p[j] - '0');
        j++;
    }
    if (j == start) return 0;
    *i = j;
    *v = neg ? -acc : acc;
    return 1;
}

/* IntervalStyle=postgres output, as interval_out prints it: "[N year[s]] [N mon[s]] [N day[s]]
 * [[+-]H:MM:SS[.f{1,6}]]" (each part optional, in this order, one space apart; counts may be
 * signed), or infinity / -infinity (PostgreSQL 17). The MicroDuration of it in *out; 0 for
 * any other spelling, which bridge.types.temporal.interval_parts_from_text judges. */
static int parse_interval_text(const char *p, Py_ssize_t n, int64_t *out) {
    if (n == 8 && memcmp(p, "infinity", 8) == 0) {
        *out = INT64_MAX;
        return 1;
    }
    if (n == 9 && memcmp(p, "-infinity", 9) == 0) {
        *out = INT64_MIN;
        return 1;
    }
    static const struct {
        const char *unit;
        Py_ssize_t len;
    } units[3] = {{"year", 4}, {"mon", 3}, {"day", 3}};
    int64_t months = 0, days = 0, micros = 0;
    int stage = 0; /* parts seen so far: 1 years, 2 months, 3 days, 4 the time */
    Py_ssize_t i = 0;
    if (n == 0) return 0;
    while (i < n) {
        if (i > 0) {
            if (p[i] != ' ' || ++i == n) return 0;
        }
        if (stage == 4) return 0;
        int64_t count;
        Py_ssize_t j = i;
        if (!parse_count(p, n, &j, 1, &count)) return 0;
        if (j < n && p[j] == ' ') {
            /* "N unit": the unit, plural or not, then a space or the end */
            j++;
            int u;
            for (u = 0; u < 3; u++) {
                Py_ssize_t len = units[u].len;
                if (n - j >= len && memcmp(p + j, units[u].unit, len) == 0) break;
            }
            if (u == 3 || u < stage) return 0;
            j += units[u].len;
            if (j < n && p[j] == 's') j++;
            if (j < n && p[j] != ' ') return 0;
            if (u == 0) {
                if (count > INT64_MAX / 12 || count < INT64_MIN / 12) return 0;
                months = count * 12;
            } else if (u == 1) {
                /* months may hold years' months already: |both| < 12e18 + 1e18 */
                if (count > 0 ? months > INT64_MAX - count : months < INT64_MIN - count) return 0;
                months += count;
            } else {
                days = count;
            }
            stage = u + 1;
            i = j;
            continue;
        }
        /* "[+-]H:MM:SS[.f]": count is the signed hours */
        if (j >= n || p[j] != ':') return 0;
        int neg = p[i] == '-';
        int64_t hours = neg ? -count : count, mi, s, frac;
        if (n - j < 6 || p[j + 3] != ':' || !digits(p + j + 1, 2, &mi) ||
            !digits(p + j + 4, 2, &s))
            return 0;
        j += 6;
        if (!parse_fraction(p, n, &j, &frac)) return 0;
        if (j != n) return 0;
        int64_t t = (mi * 60 + s) * 1000000LL + frac; /* minutes, seconds up to 99 */
        if (!mul_add_checked(&t, hours, 3600LL * 1000000LL)) return 0;
        micros = neg ? -t : t;
        stage = 4;
        i = j;
    }
    return micro_duration(months, days, micros, out);
}

/* interval_send: int64 microseconds, int32 days, int32 months. */
static int parse_interval_binary(const unsigned char *p, Py_ssize_t n, int64_t *out) {
    if (n != 16) return 0;
    int64_t micros = be_signed(p, 8), days = be_signed(p + 8, 4), months = be_signed(p + 12, 4);
    if (months == INT32_MAX && days == INT32_MAX && micros == INT64_MAX) {
        *out = INT64_MAX;
        return 1;
    }
    if (months == INT32_MIN && days == INT32_MIN && micros == INT64_MIN) {
        *out = INT64_MIN;
        return 1;
    }
    return micro_duration(months, days, micros, out);
}

/* ---- numeric without typmod: Debezium's VariableScaleDecimal ------------------------------- */

/* The longest numeric the C path takes (digits before and after the point); longer values
 * (numeric holds up to 131,072 + 16,383 digits) are the Python path's. */
#define VSD_MAX_DIGITS 120
#define VSD_LIMBS 13 /* 13 x 32 bits > log2(10**120) = 398.6 */

/* numeric_out of a finite numeric, "[-]digits[.digits]", as
 * bridge.types.numeric.variable_scale makes it: the record {scale: int, value: bytes} with
 * trailing fraction zeros stripped (never a negative scale), value the unscaled integer as
 * minimal big-endian two's complement of (bit_length + 8) // 8 bytes. 0 for NaN, infinities,
 * exponents, more than VSD_MAX_DIGITS digits, or anything else. */
static int write_variable_decimal(Out *o, const char *p, Py_ssize_t n) {
    int neg = n > 0 && p[0] == '-';
    Py_ssize_t i = neg, int_start = i;
    while (i < n && (unsigned)(p[i] - '0') <= 9) i++;
    Py_ssize_t int_len = i - int_start, frac_start = i, frac_len = 0;
    if (int_len == 0) return 0;
    if (i < n) {
        if (p[i] != '.') return 0;
        frac_start = ++i;
        while (i < n && (unsigned)(p[i] - '0') <= 9) i++;
        frac_len = i - frac_start;
        if (frac_len == 0 || i != n) return 0;
    }
    if (int_len + frac_len > VSD_MAX_DIGITS) return 0;
    while (frac_len > 0 && p[frac_start + frac_len - 1] == '0') frac_len--;
    /* The magnitude in 32-bit limbs, least significant first. */
    uint32_t limbs[VSD_LIMBS] = {0};
    int used = 0; /* limbs in use */
    for (Py_ssize_t k = 0; k < int_len + frac_len; k++) {
        char c = k < int_len ? p[int_start + k] : p[frac_start + k - int_len];
        uint64_t carry = (uint64_t)(c - '0');
        for (int l = 0; l < used; l++) {
            uint64_t x = (uint64_t)limbs[l] * 10 + carry;
            limbs[l] = (uint32_t)x;
            carry = x >> 32;
        }
        if (carry) limbs[used++] = (uint32_t)carry; /* used < VSD_LIMBS: 10**120 < 2**416 */
    }
    int scale = used ? (int)frac_len : 0;
    int bits = used ? 32 * (used - 1) : 0;
    if (used) {
        uint32_t top = limbs[used - 1];
        while (top) {
            bits++;
            top >>= 1;
        }
    }
    int size = (bits + 8) / 8;
    unsigned char tmp[4 * VSD_LIMBS + 1];
    for (int k = 0; k < size; k++) { /* big-endian: tmp[size - 1] is the least significant */
        int l = k / 4;
        tmp[size - 1 - k] = l < used ? (unsigned char)(limbs[l] >> (8 * (k % 4))) : 0;
    }
    if (neg && used) { /* two's complement: invert and add one */
        int carry = 1;
        for (int k = size - 1; k >= 0; k--) {
            int x = (unsigned char)~tmp[k] + carry;
            tmp[k] = (unsigned char)x;
            carry = x >> 8;
        }
    }
    if (!out_long(o, scale)) return -1;
    return out_bytes(o, (const char *)tmp, size) ? 1 : -1;
}


/* ---- arrays -------------------------------------------------------------------------------- */

static int write_value(Out *o, int op, int item_op, int binary, const char *p, Py_ssize_t n,
                       int scale, int precision);

/* array_out of a one-dimensional array, "{1,NULL,"a \"b\""}", read as bridge.types.array's text
 * splitter reads it (psycopg's _load_text: an unquoted NULL is null, a quoted element loses its
 * quotes and backslashes), each element through the item op, written as an Avro array of
 * ["null", item]. 0 for anything but that plain form: the bounds prefix "[2:3]=", nested
 * braces (more dimensions), whitespace or a backslash outside quotes, an empty element, a
 * lower-case null, a backslash before a newline (the splitter's regular expression does not
 * take that), or an element the item op declines. */
static int write_array_text(Out *o, const char *p, Py_ssize_t n, int item_op, int scale,
                            int precision) {
    if (n < 2 || p[0] != '{' || p[n - 1] != '}' || item_op == OP_ARRAY) return 0;
    Py_ssize_t end = n - 1, i = 1;
    if (end == 1) return out_byte(o, 0) ? 1 : -1; /* {} */
    Out items, scratch;
    out_init(&items);
    out_init(&scratch);
    int64_t count = 0;
    int r = 1;
    while (r == 1) {
        const char *elem;
        Py_ssize_t len;
        int is_null = 0;
        if (p[i] == '"') {
            scratch.len = 0;
            i++;
            while (i < end && p[i] != '"') {
                char c = p[i];
                if (c == '\\') {
                    if (i + 1 >= end || p[i + 1] == '\n') {
                        r = 0;
                        break;
                    }
                    c = p[++i];
                }
                if (!out_byte(&scratch, c)) {
                    r = -1;
                    break;
                }
                i++;
            }
            if (r != 1) break;
            if (i >= end) { /* no closing quote before the final brace */
                r = 0;
                break;
            }
            i++; /* the closing quote */
            elem = scratch.data;
            len = scratch.len;
        } else {
            Py_ssize_t start = i;
            for (; i < end && p[i] != ','; i++) {
                char c = p[i];
                if (c == '"' || c == '{' || c == '}' || c == '\\' || c == ' ' || c == '\t' ||
                    c == '\n' || c == '\r' || c == '\v' || c == '\f') {
                    r = 0;
                    break;
                }
            }
            if (r != 1) break;
            elem = p + start;
            len = i - start;
            if (len == 0) {
                r = 0;
                break;
            }
            if (len == 4) {
                if (memcmp(elem, "NULL", 4) == 0) {
                    is_null = 1;
                } else if ((elem[0] | 0x20) == 'n' && (elem[1] | 0x20) == 'u' &&
                           (elem[2] | 0x20) == 'l' && (elem[3] | 0x20) == 'l') {
                    r = 0; /* PostgreSQL would quote it; the splitter keeps it as text */
                    break;
                }
            }
        }
        if (is_null) {
            if (!out_byte(&items, 0)) r = -1;
        } else if (!out_byte(&items, 2)) {
            r = -1;
        } else {
            r = write_value(&items, item_op, OP_NONE, 0, elem, len, scale, precision);
        }
        if (r != 1) break;
        count++;
        if (i == end) break;
        if (p[i] != ',' || ++i == end) r = 0; /* after a quoted element, or "{a,}" */
    }
    if (r == 1 && !(out_long(o, count) && out_raw(o, items.data, items.len) && out_byte(o, 0)))
        r = -1;
    out_free(&items);
    out_free(&scratch);
    return r;
}

static int32_t be_int32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
}

/* array_send of a one-dimensional array (ndim, flags, element type, then length and lower
 * bound, then each element as int32 length (-1: NULL) and bytes), or of an empty one (ndim 0),
 * read as bridge.types.array.split_binary does (flags, element type and lower bound unread).
 * 0 for more dimensions, a short or long value, or an element the item op declines. */
static int write_array_binary(Out *o, const unsigned char *p, Py_ssize_t n, int item_op,
                              int scale, int precision) {
    if (n < 12 || item_op == OP_ARRAY) return 0;
    int32_t ndim = be_int32(p);
    if (ndim == 0) {
        if (n != 12) return 0;
        return out_byte(o, 0) ? 1 : -1;
    }
    if (ndim != 1 || n < 20) return 0;
    int32_t count = be_int32(p + 12);
    if (count < 0 || count > (n - 20) / 4) return 0; /* each element has its length word */
    Py_ssize_t pos = 20;
    if (count && !out_long(o, count)) return -1;
    for (int32_t k = 0; k < count; k++) {
        if (n - pos < 4) return 0;
        int32_t size = be_int32(p + pos);
        pos += 4;
        if (size == -1) {
            if (!out_byte(o, 0)) return -1;
            continue;
        }
        if (size < 0 || size > n - pos) return 0;
        if (!out_byte(o, 2)) return -1;
        int r = write_value(o, item_op, OP_NONE, 1, (const char *)p + pos, size, scale, precision);
        if (r != 1) return r;
        pos += size;
    }
    if (pos != n) return 0;
    return out_byte(o, 0) ? 1 : -1;
}

/* ---- one value ----------------------------------------------------------------------------- */

/* Writes the value (without union branch); 1 = written, 0 = fall back, -1 = Python error. */
static int write_value(Out *o, int op, int item_op, int binary, const char *p, Py_ssize_t n,
                       int scale, int precision) {
    int64_t v;
    switch (op) {
    case OP_INT:
    case OP_INT32:
        if (binary) {
            if (n != 2 && n != 4 && n != 8) return 0;
            v = be_signed((const unsigned char *)p, n);
        } else if (!parse_int_text(p, n, &v)) {
            return 0;
        }
        /* An Avro int beyond int32 is the Python writer's error to report. */
        if (op == OP_INT32 && (v > INT32_MAX || v < INT32_MIN)) return 0;
        return out_long(o, v) ? 1 : -1;
    case OP_STRING: {
        int ok = valid_utf8(p, n);
        if (ok <= 0) return ok;
        return out_bytes(o, p, n) ? 1 : -1;
    }
    case OP_BOOL:
        if (n != 1) return 0;
        if (binary) return out_byte(o, p[0] ? 1 : 0) ? 1 : -1;
        if (p[0] != 't' && p[0] != 'f') return 0;
        return out_byte(o, p[0] == 't') ? 1 : -1;
    case OP_DECIMAL:
        if (binary || !parse_decimal_text(p, n, scale, precision, &v)) return 0;
        return out_decimal(o, v) ? 1 : -1;
    case OP_TIMESTAMPTZ:
    case OP_TIMESTAMP:
        if (binary) {
            if (n != 8) return 0;
            v = be_signed((const unsigned char *)p, 8);
            if (v != INT64_MAX && v != INT64_MIN) {
                /* Past Avro's long (or onto the infinity sentinel): the Python converter
                 * clamps it and records the loss. */
                if (v >= INT64_MAX - PG_EPOCH_US) return 0;
                v += PG_EPOCH_US;
            }
        } else if (!parse_timestamp_text(p, n, op == OP_TIMESTAMPTZ, &v)) {
            return 0;
        }
        return out_long(o, v) ? 1 : -1;
    case OP_DATE:
        if (binary) {
            if (n != 4) return 0;
            v = be_signed((const unsigned char *)p, 4);
            if (v != INT32_MAX && v != INT32_MIN) v += PG_EPOCH_DAYS;
        } else if (n != 10 || !parse_date_part(p, &v)) {
            return 0;
        }
        /* Avro int: a day count beyond int32 is the Python writer's error to report. */
        if (v > INT32_MAX || v < INT32_MIN) return 0;
        return out_long(o, v) ? 1 : -1;
    case OP_DOUBLE: {
        double d;
        if (binary) {
            if (n != 8) return 0;
            d = PyFloat_Unpack8(p, 0);
            if (d == -1.0 && PyErr_Occurred()) return -1;
        } else if (!parse_double_text(p, n, &d)) {
            return 0;
        }
        if (!out_reserve(o, 8)) return -1;
        if (PyFloat_Pack8(d, o->data + o->len, 1) < 0) return -1;
        o->len += 8;
        return 1;
    }
    case OP_UUID:
        if (binary) {
            if (n != 16) return 0;
            return out_uuid_binary(o, (const unsigned char *)p) ? 1 : -1;
        }
        if (!is_ascii((const unsigned char *)p, n)) return 0;
        return out_bytes(o, p, n) ? 1 : -1;
    case OP_BYTEA:
        if (binary) return out_bytes(o, p, n) ? 1 : -1;
        return out_bytea_hex(o, p, n);
    case OP_TIME:
        if (binary) {
            if (n != 8) return 0;
            v = be_signed((const unsigned char *)p, 8);
        } else if (!parse_time_text(p, n, &v)) {
            return 0;
        }
        return out_long(o, v) ? 1 : -1;
    case OP_INTERVAL:
        if (binary ? !parse_interval_binary((const unsigned char *)p, n, &v)
                   : !parse_interval_text(p, n, &v))
            return 0;
        return out_long(o, v) ? 1 : -1;
    case OP_VARIABLE_DECIMAL:
        if (binary) return 0;
        return write_variable_decimal(o, p, n);
    case OP_ARRAY:
        if (binary) return write_array_binary(o, (const unsigned char *)p, n, item_op, scale,
                                              precision);
        return write_array_text(o, p, n, item_op, scale, precision);
    default:
        return 0;
    }
}

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
        if (col >= t->ncols) return 0;
        char kind = t->kinds[col];
        if (kind == 'n') {
            if (!nullable) return 0;
            if (!out_byte(o, 0)) return -1;
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
        if (nullable && !out_byte(o, 2)) return -1;
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
"encode_insert(buffer, kinds, spans, row_plan, key_plan, key_header, value_head, source_prefix,\n"
"              seq, tail) -> (key, value) | None\n\n"
"key = key_header + Key record (None when key_plan is None); value = value_head (framing,\n"
"before = null, the branch of after) + Value record + source_prefix + seq (Avro long) + tail\n"
"(transaction, op, timestamps, unchanged TOAST). None when a value needs the Python path.");

/* The framed key and value of an insert of the row t (encode_insert's contract); parts are
 * row_plan, key_plan, key_header, value_head, source_prefix, then seq and tail. */
static PyObject *insert_record(const Tuple *t, PyObject *row_plan, PyObject *key_plan,
                               PyObject *key_header, PyObject *value_head,
                               PyObject *source_prefix, int64_t seq, PyObject *tail) {
    Out value;
    out_init(&value);
    int r = out_raw(&value, PyBytes_AS_STRING(value_head), PyBytes_GET_SIZE(value_head)) ? 1 : -1;
    if (r == 1)
        r = write_record(&value, t, (const unsigned char *)PyBytes_AS_STRING(row_plan),
                         PyBytes_GET_SIZE(row_plan));
    if (r == 1 &&
        !(out_raw(&value, PyBytes_AS_STRING(source_prefix), PyBytes_GET_SIZE(source_prefix)) &&
          out_long(&value, seq) &&
          out_raw(&value, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail))))
        r = -1;
    if (r != 1) {
        out_free(&value);
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *key_bytes;
    if (key_plan != Py_None) {
        Out key;
        out_init(&key);
        r = out_raw(&key, PyBytes_AS_STRING(key_header), PyBytes_GET_SIZE(key_header)) ? 1 : -1;
        if (r == 1)
            r = write_record(&key, t, (const unsigned char *)PyBytes_AS_STRING(key_plan),
                             PyBytes_GET_SIZE(key_plan));
        if (r != 1) {
            out_free(&key);
            out_free(&value);
            if (r < 0) return NULL;
            Py_RETURN_NONE;
        }
        key_bytes = finish(&key);
        if (!key_bytes) {
            out_free(&value);
            return NULL;
        }
    } else {
        key_bytes = Py_NewRef(Py_None);
    }
    PyObject *value_bytes = finish(&value);
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

/* The parts' types, shared by encode_insert and encode_copy_row: 0 = fine, -1 = TypeError. */
static int check_parts(const char *name, PyObject *row_plan, PyObject *key_plan,
                       PyObject *key_header, PyObject *value_head, PyObject *source_prefix,
                       PyObject *tail) {
    if (!PyBytes_Check(row_plan) || !PyBytes_Check(value_head) ||
        !PyBytes_Check(source_prefix) || !PyBytes_Check(tail) ||
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
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "encode_insert takes 10 arguments");
        return NULL;
    }
    PyObject *buffer = args[0], *kinds = args[1], *spans = args[2];
    if (check_parts("encode_insert", args[3], args[4], args[5], args[6], args[7], args[9]) < 0)
        return NULL;
    int64_t seq = PyLong_AsLongLong(args[8]);
    if (seq == -1 && PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(buffer) || !PyBytes_Check(kinds) || !PyTuple_Check(spans)) Py_RETURN_NONE;
    Tuple t = {
        PyBytes_AS_STRING(buffer), PyBytes_GET_SIZE(buffer), PyBytes_AS_STRING(kinds),
        PyBytes_GET_SIZE(kinds), spans, NULL,
    };
    if (PyTuple_GET_SIZE(spans) != 2 * t.ncols) Py_RETURN_NONE;
    return insert_record(&t, args[3], args[4], args[5], args[6], args[7], seq, args[9]);
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
    Py_ssize_t ncols = PyBytes_GET_SIZE(args[1]);
    if (ncols > MAX_COPY_COLUMNS) Py_RETURN_NONE;
    char kinds[MAX_COPY_COLUMNS];
    Py_ssize_t spans[2 * MAX_COPY_COLUMNS];
    memcpy(kinds, PyBytes_AS_STRING(args[1]), ncols);
    const char *buf = PyBytes_AS_STRING(args[0]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[0]);
    if (!scan_copy_into((const unsigned char *)buf, len, ncols, kinds, spans)) Py_RETURN_NONE;
    Tuple t = {buf, len, kinds, ncols, NULL, spans};
    return insert_record(&t, args[2], args[3], args[4], args[5], args[6], seq, args[8]);
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
    if (end > PyBytes_GET_SIZE(args[0]) || pos < 0 || pos + 2 > end) Py_RETURN_NONE;
    Py_ssize_t ncols = (buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    if (ncols > end - pos) Py_RETURN_NONE; /* every column takes at least its kind byte */
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
    PyObject *next = PyLong_FromSsize_t(pos);
    if (!next) goto error;
    PyObject *result = PyTuple_New(3);
    if (!result) {
        Py_DECREF(next);
        goto error;
    }
    PyTuple_SET_ITEM(result, 0, kinds);
    PyTuple_SET_ITEM(result, 1, spans);
    PyTuple_SET_ITEM(result, 2, next);
    return result;
malformed:
    Py_DECREF(kinds);
    Py_DECREF(spans);
    Py_RETURN_NONE;
error:
    Py_XDECREF(kinds);
    Py_XDECREF(spans);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan_tuple", (PyCFunction)(void (*)(void))scan_tuple, METH_FASTCALL, scan_tuple_doc},
    {"encode_row", (PyCFunction)(void (*)(void))encode_row, METH_FASTCALL, encode_row_doc},
    {"encode_insert", (PyCFunction)(void (*)(void))encode_insert, METH_FASTCALL,
     encode_insert_doc},
    {"scan_copy_row", (PyCFunction)(void (*)(void))scan_copy_row, METH_FASTCALL,
     scan_copy_row_doc},
    {"encode_copy_row", (PyCFunction)(void (*)(void))encode_copy_row, METH_FASTCALL,
     encode_copy_row_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "pgoutput TupleData -> Avro row bytes (accelerator)", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
