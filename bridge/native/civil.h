/* Calendar arithmetic shared by the C parts (one copy: values.c, _avrocols.c). */
#ifndef PGBRIDGE_CIVIL_H
#define PGBRIDGE_CIVIL_H

#include <stdint.h>

/* Days from 1970-01-01 to a proleptic Gregorian date: H. Hinnant's days_from_civil, as
 * bridge.types.temporal.days_from_civil. */
static inline int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

#endif
