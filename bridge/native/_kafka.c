/* Batches of records handed to librdkafka without a Python object or callback per record.
 *
 * confluent-kafka's produce_batch() parses a dict per record and creates a per-record state
 * whose delivery report re-enters Python for every record: about 1 us of the pipeline
 * thread's ~5 us per change. This module calls librdkafka's rd_kafka_produce_batch() on the
 * producer confluent-kafka created (the same librdkafka instance, already loaded: symbols
 * are looked up with dlopen(RTLD_NOLOAD) on the library confluent-kafka's wheel ships),
 * and asks for a delivery report of a few records per batch only: the first and the last
 * record of each partition the batch writes to ("markers").
 *
 * Why two markers per partition prove every record of the batch delivered, with the
 * producer's enable.idempotence and enable.gapless.guarantee (bridge.sink.native_batches):
 * - records of one partition are delivered in order, so the last one delivered means none
 *   before it is still pending;
 * - an error that would leave a gap (a failed request followed by a successful one) is a
 *   fatal producer error under the gapless guarantee, which fails every queued record,
 *   markers included;
 * - the one exception to that guarantee, records timing out (delivery.timeout.ms), always
 *   takes a prefix of a partition's queue (librdkafka scans its queues oldest first and
 *   stops at the first record not yet due), so a timed-out record of the batch means its
 *   first marker timed out too.
 * A marker's per-record state is confluent-kafka's own (struct Producer_msgstate: the
 * producer and a Python callable), so its delivery report reaches the given callable
 * through confluent-kafka's callback path inside Producer.poll()/flush(); records without
 * a marker carry no state and confluent-kafka's callback returns at once for them.
 *
 * Coupling: the layout of confluent-kafka's Handle (rd_kafka_t * right after the object
 * header) and Producer_msgstate (two pointers) for the pinned confluent-kafka version;
 * producer_handle() checks the pointer it reads (rd_kafka_opaque() is the Producer object
 * itself) and the Python side falls back to produce_batch() whenever anything is off.
 *
 * Partitions are chosen here, as the Java client's default partitioner (and librdkafka's
 * murmur2_random) does: murmur2(key) & 0x7fffffff modulo the partition count; null keys go
 * to the partition the caller gives (0: a keyless table keeps its commit order).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "packed.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;

#define RD_KAFKA_MSG_F_COPY 0x2

static void *(*p_rd_kafka_opaque)(const rd_kafka_t *);
static rd_kafka_topic_t *(*p_rd_kafka_topic_new)(rd_kafka_t *, const char *, rd_kafka_topic_conf_t *);
static void (*p_rd_kafka_topic_destroy)(rd_kafka_topic_t *);
/* librdkafka's public message struct (rdkafka.h; unchanged since 0.9). */
typedef struct {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

#define RD_KAFKA_MSG_F_PARTITION 0x8
#define RD_KAFKA_RESP_ERR__FAIL (-196)

static int (*p_rd_kafka_produce_batch)(rd_kafka_topic_t *, int32_t, int, rd_kafka_message_t *,
                                       int);
static int (*p_rd_kafka_last_error)(void);
static const char *(*p_rd_kafka_err2name)(int);

/* confluent-kafka 2.15: src/confluent_kafka/src/confluent_kafka.h, Producer.c */
typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
} ConfluentHandle;

typedef struct {
    void *self;        /* the Producer (Handle *) */
    PyObject *dr_cb;   /* owned reference; released by confluent-kafka after the report */
} ConfluentMsgstate;

static int bound = 0;

static PyObject *bind_library(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL) return NULL;
    /* RTLD_NOLOAD: only the copy confluent-kafka has loaded, never a second instance. */
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "librdkafka not loaded from %s: %s", path, dlerror());
        return NULL;
    }
#define BIND(name)                                                                    \
    *(void **)(&p_##name) = dlsym(lib, #name);                                        \
    if (p_##name == NULL) {                                                           \
        PyErr_Format(PyExc_OSError, "%s not found in %s", #name, path);               \
        return NULL;                                                                  \
    }
    BIND(rd_kafka_opaque)
    BIND(rd_kafka_topic_new)
    BIND(rd_kafka_topic_destroy)
    BIND(rd_kafka_produce_batch)
    BIND(rd_kafka_last_error)
    BIND(rd_kafka_err2name)
#undef BIND
    bound = 1;
    Py_RETURN_NONE;
}

/* The producer's rd_kafka_t, checked: confluent-kafka sets the handle's opaque to itself. */
static rd_kafka_t *producer_handle(PyObject *producer) {
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "bind_library() was not called");
        return NULL;
    }
    rd_kafka_t *rk = ((ConfluentHandle *)producer)->rk;
    if (rk == NULL || p_rd_kafka_opaque(rk) != (void *)producer) {
        PyErr_SetString(PyExc_RuntimeError, "not a live confluent_kafka.Producer of the bound library");
        return NULL;
    }
    return rk;
}

static const char *TOPIC_CAPSULE = "bridge.native._kafka.topic";

static void topic_capsule_free(PyObject *capsule) {
    rd_kafka_topic_t *rkt = PyCapsule_GetPointer(capsule, TOPIC_CAPSULE);
    if (rkt != NULL) p_rd_kafka_topic_destroy(rkt);
}

static PyObject *topic_handle(PyObject *self, PyObject *args) {
    PyObject *producer;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os", &producer, &name)) return NULL;
    rd_kafka_t *rk = producer_handle(producer);
    if (rk == NULL) return NULL;
    rd_kafka_topic_t *rkt = p_rd_kafka_topic_new(rk, name, NULL);
    if (rkt == NULL) {
        PyErr_Format(PyExc_RuntimeError, "rd_kafka_topic_new(%s) failed: %s", name,
                     p_rd_kafka_err2name(p_rd_kafka_last_error()));
        return NULL;
    }
    return PyCapsule_New(rkt, TOPIC_CAPSULE, topic_capsule_free);
}

static PyObject *release_topic(PyObject *self, PyObject *capsule) {
    rd_kafka_topic_t *rkt = PyCapsule_GetPointer(capsule, TOPIC_CAPSULE);
    if (rkt == NULL) return NULL;
    p_rd_kafka_topic_destroy(rkt);
    /* The capsule's destructor must not destroy it a second time. */
    if (PyCapsule_SetDestructor(capsule, NULL) != 0) return NULL;
    Py_RETURN_NONE;
}

/* Kafka's Utils.murmur2 (and librdkafka's rd_murmur2): seed 0x9747b28c, 4-byte little-endian
 * words, the tail mixed in reverse order. */
static uint32_t murmur2(const unsigned char *data, size_t len) {
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    uint32_t h = 0x9747b28c ^ (uint32_t)len;
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (len - i) {
    case 3: h ^= (uint32_t)data[i + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[i + 1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)data[i]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *murmur2_partition(PyObject *self, PyObject *args) {
    Py_buffer key;
    int partitions;
    if (!PyArg_ParseTuple(args, "y*i", &key, &partitions)) return NULL;
    if (partitions <= 0) {
        PyBuffer_Release(&key);
        PyErr_SetString(PyExc_ValueError, "partitions must be positive");
        return NULL;
    }
    uint32_t h = murmur2(key.buf, (size_t)key.len);
    PyBuffer_Release(&key);
    return PyLong_FromLong((long)((h & 0x7fffffff) % (uint32_t)partitions));
}

/* One record's key and value (NULL: none), pointing into memory the caller keeps alive. */
typedef struct {
    const void *key;
    size_t key_len;
    const void *value;
    size_t len;
} Rec;

/* Queue recs[start:n] of a batch of n records with copies of their bytes; markers (first and
 * last record of each partition of the whole batch) carry a delivery report to `marker`.
 * Returns (next, error_code or None, markers) as produce() does (`offset` added to next). */
static PyObject *produce_recs(PyObject *producer, rd_kafka_topic_t *rkt, const Rec *recs,
                              Py_ssize_t n, Py_ssize_t start, Py_ssize_t offset, int partitions,
                              int null_key_partition, PyObject *marker) {
    int32_t *where = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    Py_ssize_t *last = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)partitions);
    Py_ssize_t *first = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)partitions);
    rd_kafka_message_t *batch = NULL;
    if (where == NULL || last == NULL || first == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int p = 0; p < partitions; p++) first[p] = last[p] = -1;
    /* Pass 1 over the whole batch: partitions and the marker positions (so that a call
     * resuming at `start` marks the same records as the first call). */
    Py_ssize_t markers = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t p = recs[i].key == NULL
                        ? null_key_partition
                        : (int32_t)((murmur2(recs[i].key, recs[i].key_len) & 0x7fffffff) %
                                    (uint32_t)partitions);
        where[i] = p;
        if (first[p] < 0) first[p] = i;
        last[p] = i;
    }
    for (int p = 0; p < partitions; p++)
        if (first[p] >= 0) markers += first[p] == last[p] ? 1 : 2;
    /* Pass 2: one produce_batch call (one queue lock and one wake-up of the broker thread
     * per partition, where a call per record would pay them per record). */
    Py_ssize_t count = n - start;
    if (count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "batch too large");
        goto fail;
    }
    batch = PyMem_Calloc((size_t)(count ? count : 1), sizeof(*batch));
    if (batch == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        Py_ssize_t i = start + j;
        int32_t p = where[i];
        rd_kafka_message_t *m = &batch[j];
        m->partition = p;
        m->payload = (void *)recs[i].value;
        m->len = recs[i].value != NULL ? recs[i].len : 0;
        m->key = (void *)recs[i].key;
        m->key_len = recs[i].key != NULL ? recs[i].key_len : 0;
        if (first[p] == i || last[p] == i) {
            ConfluentMsgstate *state = calloc(1, sizeof(*state)); /* confluent-kafka free()s it */
            if (state == NULL) {
                for (Py_ssize_t k = 0; k < j; k++) {
                    ConfluentMsgstate *made = batch[k]._private;
                    if (made != NULL) Py_DECREF(made->dr_cb), free(made);
                }
                PyErr_NoMemory();
                goto fail;
            }
            state->self = producer;
            state->dr_cb = marker;
            Py_INCREF(marker);
            m->_private = state;
        }
    }
    /* librdkafka copies the records (F_COPY) with the GIL released: the other Python threads
     * (the snapshot's workers, the WAL reader) run meanwhile. The caller's objects keep every
     * key and value alive and are not changed during the call (one thread owns a publisher). */
    Py_BEGIN_ALLOW_THREADS
    p_rd_kafka_produce_batch(rkt, 0, RD_KAFKA_MSG_F_COPY | RD_KAFKA_MSG_F_PARTITION, batch,
                             (int)count);
    Py_END_ALLOW_THREADS
    /* Refused records have err set; librdkafka owns the rest (and their marker states). A
     * refusal must be a tail of the batch, or records queued after a refused one would
     * overtake it once it is sent again. */
    Py_ssize_t queued = count;
    int refused = 0, reordered = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        if (batch[j].err != 0) {
            if (queued == count) {
                queued = j;
                refused = batch[j].err;
            }
            ConfluentMsgstate *state = batch[j]._private;
            if (state != NULL) Py_DECREF(state->dr_cb), free(state); /* no report will come */
        } else if (queued != count) {
            reordered = 1;
        }
    }
    PyMem_Free(batch);
    PyMem_Free(where), PyMem_Free(last), PyMem_Free(first);
    if (reordered) refused = RD_KAFKA_RESP_ERR__FAIL;
    if (refused != 0) return Py_BuildValue("(nin)", offset + start + queued, refused, markers);
    return Py_BuildValue("(nOn)", offset + n, Py_None, markers);
fail:
    PyMem_Free(batch);
    PyMem_Free(where), PyMem_Free(last), PyMem_Free(first);
    return NULL;
}

/* The producer's topic handle and partition arguments, checked: the handle, or NULL. */
static rd_kafka_topic_t *produce_target(PyObject *producer, PyObject *capsule, int partitions,
                                        int null_key_partition) {
    if (producer_handle(producer) == NULL) return NULL;
    rd_kafka_topic_t *rkt = PyCapsule_GetPointer(capsule, TOPIC_CAPSULE);
    if (rkt == NULL) return NULL;
    if (partitions <= 0 || null_key_partition < 0 || null_key_partition >= partitions) {
        PyErr_SetString(PyExc_ValueError, "bad partition count or null-key partition");
        return NULL;
    }
    return rkt;
}

/* produce(producer, topic, records, start, partitions, null_key_partition, marker)
 *   -> (next, error_code or None, markers)
 *
 * Queues records[start:] (a list of (key, value) tuples of bytes or None) with copies of
 * their bytes. Markers (first and last record of each partition of the whole list) carry a
 * delivery report to `marker`; `markers` is how many the whole list has, the same on every
 * call for one list. Stops at the first record librdkafka refuses: `next` is its index and
 * `error_code` librdkafka's reason (e.g. _QUEUE_FULL: call again from `next` after a poll), or
 * `next == len(records)` and None when all were queued. */
static PyObject *produce(PyObject *self, PyObject *args) {
    PyObject *producer, *capsule, *records, *marker;
    Py_ssize_t start;
    int partitions, null_key_partition;
    if (!PyArg_ParseTuple(args, "OOO!niiO", &producer, &capsule, &PyList_Type, &records, &start,
                          &partitions, &null_key_partition, &marker))
        return NULL;
    rd_kafka_topic_t *rkt = produce_target(producer, capsule, partitions, null_key_partition);
    if (rkt == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "start out of range");
        return NULL;
    }
    Rec *recs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*recs));
    if (recs == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd is not a (key, value) tuple", i);
            PyMem_Free(recs);
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(record, 0), *value = PyTuple_GET_ITEM(record, 1);
        if ((key != Py_None && !PyBytes_Check(key)) || (value != Py_None && !PyBytes_Check(value))) {
            PyErr_Format(PyExc_TypeError, "record %zd: key and value must be bytes or None", i);
            PyMem_Free(recs);
            return NULL;
        }
        if (key != Py_None) {
            recs[i].key = PyBytes_AS_STRING(key);
            recs[i].key_len = (size_t)PyBytes_GET_SIZE(key);
        }
        if (value != Py_None) {
            recs[i].value = PyBytes_AS_STRING(value);
            recs[i].len = (size_t)PyBytes_GET_SIZE(value);
        }
    }
    PyObject *result =
        produce_recs(producer, rkt, recs, n, start, 0, partitions, null_key_partition, marker);
    PyMem_Free(recs);
    return result;
}

/* produce_packed(producer, topic, pack, first, stop, start, partitions, null_key_partition,
 *                marker) -> (next, error_code or None, markers)
 *
 * produce() of records first .. stop - 1 of packed records (packed.h; a bytearray the caller
 * does not change during the call), resuming at record `start` (first <= start <= stop);
 * `next` is a record number of the pack. */
static PyObject *produce_packed(PyObject *self, PyObject *args) {
    PyObject *producer, *capsule, *pack, *marker;
    Py_ssize_t first, stop, start;
    int partitions, null_key_partition;
    if (!PyArg_ParseTuple(args, "OOO!nnniiO", &producer, &capsule, &PyByteArray_Type, &pack,
                          &first, &stop, &start, &partitions, &null_key_partition, &marker))
        return NULL;
    rd_kafka_topic_t *rkt = produce_target(producer, capsule, partitions, null_key_partition);
    if (rkt == NULL) return NULL;
    if (first < 0 || stop < first || start < first || start > stop) {
        PyErr_SetString(PyExc_ValueError, "first, stop or start out of range");
        return NULL;
    }
    Py_ssize_t n = stop - first;
    Rec *recs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*recs));
    if (recs == NULL) return PyErr_NoMemory();
    const unsigned char *buf = (const unsigned char *)PyByteArray_AS_STRING(pack), *key, *value;
    Py_ssize_t len = PyByteArray_GET_SIZE(pack), pos = 0, key_len, value_len;
    for (Py_ssize_t i = 0; i < stop; i++) {
        if (!packed_next(buf, len, &pos, &key, &key_len, &value, &value_len)) {
            PyErr_Format(PyExc_ValueError, "packed records end at record %zd, before %zd", i,
                         stop);
            PyMem_Free(recs);
            return NULL;
        }
        if (i < first) continue;
        recs[i - first] = (Rec){key, (size_t)key_len, value, (size_t)value_len};
    }
    PyObject *result = produce_recs(producer, rkt, recs, n, start - first, first, partitions,
                                    null_key_partition, marker);
    PyMem_Free(recs);
    return result;
}

/* Marker(callable, cleared): the delivery-report callable given to produce().
 * confluent-kafka 2.15 raises a fatal producer error (enable.gapless.guarantee's) by
 * leaving it pending while it goes on serving the poll's other reports, so a Python
 * callback run then fails at its first C call with SystemError, and the poll ends with
 * "returned NULL without setting an exception" once the callback cleared nothing. The
 * marker takes the pending exception out first and appends it to `cleared` (a list the
 * publisher reads to raise the fatal error itself), then calls `callable`. */
typedef struct {
    PyObject_HEAD
    PyObject *callable;
    PyObject *cleared;
} Marker;

static void marker_dealloc(Marker *self) {
    Py_XDECREF(self->callable);
    Py_XDECREF(self->cleared);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *marker_call(Marker *self, PyObject *args, PyObject *kwargs) {
    if (PyErr_Occurred()) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (value != NULL && PyList_Append(self->cleared, value) < 0) PyErr_Clear();
        Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(traceback);
    }
    return PyObject_Call(self->callable, args, kwargs);
}

static int marker_init(Marker *self, PyObject *args, PyObject *kwargs) {
    PyObject *callable, *cleared;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Marker takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OO!:Marker", &callable, &PyList_Type, &cleared)) return -1;
    if (!PyCallable_Check(callable)) {
        PyErr_SetString(PyExc_TypeError, "Marker needs a callable");
        return -1;
    }
    Py_INCREF(callable);
    Py_XSETREF(self->callable, callable);
    Py_INCREF(cleared);
    Py_XSETREF(self->cleared, cleared);
    return 0;
}

static PyTypeObject MarkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bridge.native._kafka.Marker",
    .tp_basicsize = sizeof(Marker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)marker_init,
    .tp_dealloc = (destructor)marker_dealloc,
    .tp_call = (ternaryfunc)marker_call,
    .tp_doc = "Marker(callable, cleared): a delivery report callable safe in fatal-error polls",
};

static PyMethodDef methods[] = {
    {"bind_library", bind_library, METH_O,
     "bind_library(path): look up librdkafka's functions in the copy loaded from path"},
    {"topic_handle", topic_handle, METH_VARARGS,
     "topic_handle(producer, name): a capsule holding the producer's topic handle"},
    {"release_topic", release_topic, METH_O, "release_topic(capsule): drop the topic handle now"},
    {"murmur2_partition", murmur2_partition, METH_VARARGS,
     "murmur2_partition(key, partitions): the Java client's default partition of a key"},
    {"produce", produce, METH_VARARGS,
     "produce(producer, topic, records, start, partitions, null_key_partition, marker)"},
    {"produce_packed", produce_packed, METH_VARARGS,
     "produce_packed(producer, topic, pack, first, stop, start, partitions, null_key_partition, "
     "marker)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kafka", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kafka(void) {
    if (PyType_Ready(&MarkerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&MarkerType);
    if (PyModule_AddObject(m, "Marker", (PyObject *)&MarkerType) < 0) {
        Py_DECREF(&MarkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
