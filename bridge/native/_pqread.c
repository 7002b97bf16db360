/* Reading a replication stream's CopyData frames with the GIL released.
 *
 * The pipeline thread spends about 0.7 us per change in libpq's PQgetCopyData and the loop
 * around it (a psycopg call, a buffer object and a copy per frame). read_frames() does that
 * work for many frames at once on another thread (bridge.source.frame_reader), holding the
 * GIL only to turn the frames it collected into bytes objects: the receiving overlaps the
 * decoding and encoding on the second core.
 *
 * libpq is the copy psycopg loaded (its path from /proc/self/maps, opened with RTLD_NOLOAD:
 * never a second instance), and the connection is psycopg's (PGconn.pgconn_ptr). libpq
 * allows one thread per connection at a time: while a reader runs, it is the only user of
 * the connection (status updates are sent by the reader too).
 */
#define _GNU_SOURCE /* ppoll */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>

typedef struct pg_conn PGconn;

static int (*p_PQgetCopyData)(PGconn *, char **, int);
static int (*p_PQconsumeInput)(PGconn *);
static int (*p_PQsocket)(const PGconn *);
static void (*p_PQfreemem)(void *);
static int bound = 0;

static PyObject *bind_library(PyObject *self, PyObject *arg) {
    (void)self;
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL) return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "libpq not loaded from %s: %s", path, dlerror());
        return NULL;
    }
#define BIND(name)                                                              \
    *(void **)(&p_##name) = dlsym(lib, #name);                                  \
    if (p_##name == NULL) {                                                     \
        PyErr_Format(PyExc_OSError, "%s not found in %s", #name, path);         \
        return NULL;                                                            \
    }
    BIND(PQgetCopyData)
    BIND(PQconsumeInput)
    BIND(PQsocket)
    BIND(PQfreemem)
#undef BIND
    bound = 1;
    Py_RETURN_NONE;
}

typedef struct {
    char *data;
    int size;
} Frame;

static int64_t monotonic_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
}

/* read_frames(pgconn_ptr, max_frames, max_bytes, timeout_ms[, linger_us]) -> (frames, status)
 *
 * The CopyData frames libpq has or receives within timeout_ms (returning once at least one
 * is there and nothing more arrives for linger_us, default 0: up to max_frames of them, or
 * max_bytes), as a list of bytes; status 0 while the stream goes on, -1 once the server ended
 * the COPY, -2 on a connection error (psycopg's PGconn then says what: get_error_message /
 * get_result). Lingering trades that much latency for batches of what arrives meanwhile
 * instead of a batch (and a hand-over to the pipeline's thread) per network read. */
static PyObject *read_frames(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long address;
    int max_frames, timeout_ms, linger_us = 0;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "Kini|i", &address, &max_frames, &max_bytes, &timeout_ms,
                          &linger_us))
        return NULL;
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "bind_library() was not called");
        return NULL;
    }
    if (address == 0 || max_frames <= 0) {
        PyErr_SetString(PyExc_ValueError, "no connection, or max_frames < 1");
        return NULL;
    }
    PGconn *conn = (PGconn *)(uintptr_t)address;
    Frame *frames = PyMem_Malloc(sizeof(Frame) * (size_t)max_frames);
    if (frames == NULL) return PyErr_NoMemory();
    int count = 0, status = 0;
    Py_ssize_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t deadline_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 + timeout_ms;
    int refilled = 0;
    int64_t linger_until = 0;
    int napped = linger_us <= 0;
    for (;;) {
        char *buffer = NULL;
        int n = p_PQgetCopyData(conn, &buffer, 1);
        if (n > 0) {
            if (count == 0) linger_until = monotonic_us() + linger_us;
            refilled = 0;
            frames[count].data = buffer;
            frames[count].size = n;
            count++;
            total += n;
            if (count == max_frames || total >= max_bytes) break;
            continue;
        }
        if (n < 0) { /* -1: the COPY ended; -2: an error */
            status = n;
            break;
        }
        /* No complete frame buffered. With frames in hand: read what the socket has now
         * (libpq's socket is non-blocking) and go on while that completes frames, so that
         * a batch is what arrived, not one input buffer's worth; else wait for the socket. */
        if (count > 0) {
            if (refilled) {
                if (napped) break;
                int64_t left_us = linger_until - monotonic_us();
                if (left_us <= 0) break;
                /* One nap, then whatever arrived meanwhile in one read: a wake-up per
                 * arrival would cost a poll and a read each. */
                struct timespec nap = {0, (long)(left_us * 1000)};
                nanosleep(&nap, NULL);
                napped = 1;
            }
            if (!p_PQconsumeInput(conn)) {
                status = -2;
                break;
            }
            refilled = 1;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t left = deadline_ms - ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
        if (left < 0) left = 0;
        struct pollfd fd = {.fd = p_PQsocket(conn), .events = POLLIN, .revents = 0};
        int ready = poll(&fd, 1, (int)left);
        if (ready < 0) {
            if (errno == EINTR) continue;
            status = -2;
            break;
        }
        if (ready == 0) break; /* timed out: an empty list */
        if (!p_PQconsumeInput(conn)) {
            status = -2;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *list = PyList_New(count);
    for (int i = 0; i < count; i++) {
        if (list != NULL) {
            PyObject *item = PyBytes_FromStringAndSize(frames[i].data, frames[i].size);
            if (item == NULL) {
                Py_CLEAR(list);
            } else {
                PyList_SET_ITEM(list, i, item);
            }
        }
        p_PQfreemem(frames[i].data);
    }
    PyMem_Free(frames);
    if (list == NULL) return NULL;
    return Py_BuildValue("(Ni)", list, status);
}

static PyMethodDef methods[] = {
    {"bind_library", bind_library, METH_O,
     "bind_library(path): look up libpq's functions in the copy loaded from path"},
    {"read_frames", read_frames, METH_VARARGS,
     "read_frames(pgconn_ptr, max_frames, max_bytes, timeout_ms[, linger_us]) -> (frames, "
     "status)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pqread", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pqread(void) { return PyModule_Create(&module); }
