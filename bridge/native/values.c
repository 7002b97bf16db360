/*
 * bridge.native._speedups' value writers: one PostgreSQL value (text or binary wire form) to
 * its Avro binary, or 0 when it is not the plain form (the caller falls back to Python).
 * See _speedups.c for the rules every writer keeps.
 */
#include "values.h"
#include "civil.h"

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

/* Hinnant's civil_from_days, as bridge.types.temporal.civil_from_days. */
static void civil_from_days(int64_t z, int64_t *y, int64_t *m, int64_t *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = yoe + era * 400 + (*m <= 2);
}

static char *put_digits(char *at, int64_t value, int width) {
    for (int k = width - 1; k >= 0; k--) {
        at[k] = (char)('0' + value % 10);
        value /= 10;
    }
    return at + width;
}

/* Debezium's ZonedTimestamp text of `micros` since 1970 UTC, as
 * bridge.types.temporal.format_timestamp_utc: "YYYY-MM-DDTHH:MM:SS[.fraction]Z", the fraction
 * without trailing zeros, or with `pad` (1..6) digits always (Debezium's array items: Java's
 * appendFraction(p, p), which cuts the digits beyond p). 0 for a year outside 0..9999 (Python
 * spells expanded years). */
static int write_zoned(Out *o, int64_t micros, int pad) {
    int64_t days = micros / US_PER_DAY, us = micros % US_PER_DAY;
    if (us < 0) {
        us += US_PER_DAY;
        days -= 1;
    }
    int64_t y, m, d;
    civil_from_days(days, &y, &m, &d);
    if (y < 0 || y > 9999) return 0;
    int64_t seconds = us / 1000000, frac = us % 1000000;
    char text[32], *at = text;
    at = put_digits(at, y, 4);
    *at++ = '-';
    at = put_digits(at, m, 2);
    *at++ = '-';
    at = put_digits(at, d, 2);
    *at++ = 'T';
    at = put_digits(at, seconds / 3600, 2);
    *at++ = ':';
    at = put_digits(at, seconds / 60 % 60, 2);
    *at++ = ':';
    at = put_digits(at, seconds % 60, 2);
    if (pad > 0 && pad <= 6) {
        int64_t cut = 1;
        for (int i = pad; i < 6; i++) cut *= 10;
        *at++ = '.';
        at = put_digits(at, frac / cut, pad);
    } else if (frac) {
        int width = 6;
        while (frac % 10 == 0) {
            frac /= 10;
            width--;
        }
        *at++ = '.';
        at = put_digits(at, frac, width);
    }
    *at++ = 'Z';
    return out_bytes(o, text, at - text) ? 1 : -1;
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


/* ---- numeric's binary form ----------------------------------------------------------------- */

/* numeric_send's form as numeric_out would print the same value (get_str_from_var: an optional
 * '-', the integer part without leading zeros, then exactly dscale fraction digits), so that
 * a binary numeric takes the text parsers above and comes out as its text form does: int16
 * ndigits, int16 weight (of the first base-10000 digit), uint16 sign, int16 dscale, ndigits x
 * int16 base-10000 digits. NaN and the infinities print as numeric_out prints them. Returns the
 * text's length, or 0: malformed, or longer than cap (the Python path's, which also raises the
 * typed errors). */
#define NUMERIC_TEXT_MAX (VSD_MAX_DIGITS + 8)

/* The four decimal digits of base-10000 digit d (0 past either end); 0 if not 0..9999. */
static int numeric_group(const unsigned char *digits, int ndigits, int d, char group[4]) {
    int digit = d >= 0 && d < ndigits ? (int16_t)((digits[2 * d] << 8) | digits[2 * d + 1]) : 0;
    if (digit < 0 || digit > 9999) return 0;
    group[0] = (char)('0' + digit / 1000);
    group[1] = (char)('0' + digit / 100 % 10);
    group[2] = (char)('0' + digit / 10 % 10);
    group[3] = (char)('0' + digit % 10);
    return 1;
}
static Py_ssize_t numeric_binary_text(const unsigned char *p, Py_ssize_t n, char *text,
                                      Py_ssize_t cap) {
    if (n < 8) return 0;
    int ndigits = (int16_t)((p[0] << 8) | p[1]);
    int weight = (int16_t)((p[2] << 8) | p[3]);
    unsigned sign = (unsigned)((p[4] << 8) | p[5]);
    int dscale = (int16_t)((p[6] << 8) | p[7]);
    if (ndigits < 0 || n != 8 + 2 * (Py_ssize_t)ndigits || dscale < 0 || dscale > 0x3FFF)
        return 0;
    const char *special = sign == 0xC000 ? "NaN" : sign == 0xD000 ? "Infinity"
                        : sign == 0xF000 ? "-Infinity" : NULL;
    if (special) {
        if (ndigits != 0) return 0;
        Py_ssize_t len = (Py_ssize_t)strlen(special);
        memcpy(text, special, len);
        return len;
    }
    if (sign != 0x0000 && sign != 0x4000) return 0;
    const unsigned char *digits = p + 8;
    /* Only numeric_send's normal form, which the text shows whole: zero is no digits at
     * weight 0 and positive; otherwise no leading or trailing zero digit, and no digit past
     * the display scale (the server rounds to it). Anything else is the loader's to judge. */
    if (ndigits == 0) {
        if (weight != 0 || sign != 0x0000) return 0;
    } else {
        int first = (int16_t)((digits[0] << 8) | digits[1]);
        int last = (int16_t)((digits[2 * ndigits - 2] << 8) | digits[2 * ndigits - 1]);
        if (first == 0 || last == 0) return 0;
        int last_weight = weight - (ndigits - 1);
        if (last_weight < 0) {
            int groups = (dscale + 3) / 4; /* fraction groups the text shows */
            if (-last_weight > groups) return 0;
            static const int cut[4] = {1, 1000, 100, 10}; /* by dscale % 4 */
            if (-last_weight == groups && last % cut[dscale % 4] != 0) return 0;
        }
    }
    Py_ssize_t len = 0;
    char group[4];
    /* The integer part's digits, the fraction's and a sign, point and slack: within cap? */
    if ((weight >= 0 ? 4 * ((Py_ssize_t)weight + 1) : 1) + dscale + 4 > cap) return 0;
    if (sign == 0x4000) text[len++] = '-';
    if (weight < 0) {
        text[len++] = '0';
    } else {
        for (int d = 0; d <= weight; d++) {
            if (!numeric_group(digits, ndigits, d, group)) return 0;
            int skip = 0;
            if (d == 0) /* no leading zeros, but at least one digit */
                while (skip < 3 && group[skip] == '0') skip++;
            memcpy(text + len, group + skip, 4 - skip);
            len += 4 - skip;
        }
    }
    if (dscale > 0) {
        text[len++] = '.';
        for (int written = 0, d = weight + 1; written < dscale; d++) {
            if (!numeric_group(digits, ndigits, d, group)) return 0;
            for (int k = 0; k < 4 && written < dscale; k++, written++) text[len++] = group[k];
        }
    }
    return len;
}


/* ---- arrays -------------------------------------------------------------------------------- */


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
int write_value(Out *o, int op, int item_op, int binary, const char *p, Py_ssize_t n,
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
    case OP_JSONB: /* the binary form: a version byte (1) before the same text */
        if (binary) {
            if (n < 1 || p[0] != 1) return 0;
            p++;
            n--;
        }
        /* fall through */
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
    case OP_DECIMAL: {
        char text[NUMERIC_TEXT_MAX];
        if (binary) {
            n = numeric_binary_text((const unsigned char *)p, n, text, sizeof text);
            p = text;
        }
        if (!n || !parse_decimal_text(p, n, scale, precision, &v)) return 0;
        return out_decimal(o, v) ? 1 : -1;
    }
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
    case OP_ZONED:
    case OP_ZONED_PADDED:
        if (binary) {
            if (n != 8) return 0;
            v = be_signed((const unsigned char *)p, 8);
            if (v == INT64_MAX) return out_bytes(o, "infinity", 8) ? 1 : -1;
            if (v == INT64_MIN) return out_bytes(o, "-infinity", 9) ? 1 : -1;
            if (v >= INT64_MAX - PG_EPOCH_US) return 0;
            v += PG_EPOCH_US;
        } else if ((n == 8 && memcmp(p, "infinity", 8) == 0) ||
                   (n == 9 && memcmp(p, "-infinity", 9) == 0)) {
            return out_bytes(o, p, n) ? 1 : -1;
        } else if (!parse_timestamp_text(p, n, 1, &v)) {
            return 0;
        }
        return write_zoned(o, v, op == OP_ZONED_PADDED ? scale : 0);
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
    case OP_VARIABLE_DECIMAL: {
        char text[NUMERIC_TEXT_MAX];
        if (binary) {
            n = numeric_binary_text((const unsigned char *)p, n, text, sizeof text);
            if (!n) return 0;
            p = text;
        }
        return write_variable_decimal(o, p, n);
    }
    case OP_ARRAY:
        if (binary) return write_array_binary(o, (const unsigned char *)p, n, item_op, scale,
                                              precision);
        return write_array_text(o, p, n, item_op, scale, precision);
    default:
        return 0;
    }
}

