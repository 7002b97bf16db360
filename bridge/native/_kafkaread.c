/* Kafka offset ranges read into Arrow buffers, without a Python object per record.
 *
 * The apply job's task lane reads the topic-partitions of a micro-batch itself
 * (bridge.spark.kafka_ranges). Through confluent-kafka that cost a Message object and three
 * method calls per record: about half of a lane task (docs/measurements.md). Here librdkafka's
 * simple consumer (rd_kafka_consume_start / rd_kafka_consume_batch: one partition at a given
 * offset, no group) fetches a range, and each batch is copied into the buffers of Arrow
 * columns: the records' offsets (int64), their values and their keys (binary: validity
 * bitmap, int32 offsets, data).
 *
 * The rd_kafka_t is this module's own (rd_kafka_new with the caller's configuration, no
 * callback set): confluent-kafka's Consumer serves error and log events through Python
 * callbacks that need its per-call state, which a C call of its handle does not set up.
 * The functions are looked up with dlopen(RTLD_NOLOAD) in the librdkafka confluent-kafka's
 * wheel loaded, as bridge/native/_kafka.c does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;

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

#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0
#define RD_KAFKA_RESP_ERR__PARTITION_EOF (-191)
#define RD_KAFKA_RESP_ERR__TIMED_OUT (-185)

static rd_kafka_conf_t *(*p_rd_kafka_conf_new)(void);
static int (*p_rd_kafka_conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
static void (*p_rd_kafka_conf_destroy)(rd_kafka_conf_t *);
static rd_kafka_t *(*p_rd_kafka_new)(int, rd_kafka_conf_t *, char *, size_t);
static void (*p_rd_kafka_destroy)(rd_kafka_t *);
static rd_kafka_topic_t *(*p_rd_kafka_topic_new)(rd_kafka_t *, const char *, rd_kafka_topic_conf_t *);
static void (*p_rd_kafka_topic_destroy)(rd_kafka_topic_t *);
static int (*p_rd_kafka_consume_start)(rd_kafka_topic_t *, int32_t, int64_t);
static int (*p_rd_kafka_consume_stop)(rd_kafka_topic_t *, int32_t);
static rd_kafka_message_t *(*p_rd_kafka_consume)(rd_kafka_topic_t *, int32_t, int);
static ssize_t (*p_rd_kafka_consume_batch)(rd_kafka_topic_t *, int32_t, int, rd_kafka_message_t **,
                                           size_t);
static void (*p_rd_kafka_message_destroy)(rd_kafka_message_t *);
static int (*p_rd_kafka_last_error)(void);
static const char *(*p_rd_kafka_err2str)(int);

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
    BIND(rd_kafka_conf_new)
    BIND(rd_kafka_conf_set)
    BIND(rd_kafka_conf_destroy)
    BIND(rd_kafka_new)
    BIND(rd_kafka_destroy)
    BIND(rd_kafka_topic_new)
    BIND(rd_kafka_topic_destroy)
    BIND(rd_kafka_consume_start)
    BIND(rd_kafka_consume_stop)
    BIND(rd_kafka_consume)
    BIND(rd_kafka_consume_batch)
    BIND(rd_kafka_message_destroy)
    BIND(rd_kafka_last_error)
    BIND(rd_kafka_err2str)
#undef BIND
    bound = 1;
    Py_RETURN_NONE;
}

/* A Reader: one consumer handle, and at most one partition being read. */
typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt; /* the partition being read, or NULL */
    int32_t partition;
} Reader;

static void reader_stop(Reader *self) {
    if (self->rkt != NULL) {
        Py_BEGIN_ALLOW_THREADS
        p_rd_kafka_consume_stop(self->rkt, self->partition);
        p_rd_kafka_topic_destroy(self->rkt);
        Py_END_ALLOW_THREADS
        self->rkt = NULL;
    }
}

static void reader_close_handle(Reader *self) {
    reader_stop(self);
    if (self->rk != NULL) {
        rd_kafka_t *rk = self->rk;
        self->rk = NULL;
        Py_BEGIN_ALLOW_THREADS
        p_rd_kafka_destroy(rk);
        Py_END_ALLOW_THREADS
    }
}

static void reader_dealloc(Reader *self) {
    reader_close_handle(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Reader(config): config is a dict of librdkafka property names to string values. */
static int reader_init(Reader *self, PyObject *args, PyObject *kwargs) {
    PyObject *config;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Reader takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!:Reader", &PyDict_Type, &config)) return -1;
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "bind_library() was not called");
        return -1;
    }
    reader_close_handle(self);
    char errstr[512];
    rd_kafka_conf_t *conf = p_rd_kafka_conf_new();
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &name, &value)) {
        const char *name_text = PyUnicode_AsUTF8(name);
        const char *value_text = PyUnicode_AsUTF8(value);
        if (name_text == NULL || value_text == NULL) {
            p_rd_kafka_conf_destroy(conf);
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "configuration names and values must be str");
            }
            return -1;
        }
        if (p_rd_kafka_conf_set(conf, name_text, value_text, errstr, sizeof errstr) !=
            RD_KAFKA_CONF_OK) {
            p_rd_kafka_conf_destroy(conf);
            PyErr_Format(PyExc_ValueError, "%s=%s: %s", name_text, value_text, errstr);
            return -1;
        }
    }
    rd_kafka_t *rk = p_rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) { /* conf is still ours when rd_kafka_new fails */
        p_rd_kafka_conf_destroy(conf);
        PyErr_Format(PyExc_RuntimeError, "rd_kafka_new failed: %s", errstr);
        return -1;
    }
    self->rk = rk;
    return 0;
}

/* start(topic, partition, offset): read the partition from offset on (ends a read before). */
static PyObject *reader_start(Reader *self, PyObject *args) {
    const char *topic;
    int partition;
    long long offset;
    if (!PyArg_ParseTuple(args, "siL", &topic, &partition, &offset)) return NULL;
    if (self->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the reader is closed");
        return NULL;
    }
    reader_stop(self);
    rd_kafka_topic_t *rkt = p_rd_kafka_topic_new(self->rk, topic, NULL);
    if (rkt == NULL) {
        PyErr_Format(PyExc_RuntimeError, "rd_kafka_topic_new(%s) failed: %s", topic,
                     p_rd_kafka_err2str(p_rd_kafka_last_error()));
        return NULL;
    }
    if (p_rd_kafka_consume_start(rkt, (int32_t)partition, (int64_t)offset) == -1) {
        int err = p_rd_kafka_last_error();
        p_rd_kafka_topic_destroy(rkt);
        PyErr_Format(PyExc_RuntimeError, "%s [%d]: cannot start reading at offset %lld: %s", topic,
                     partition, offset, p_rd_kafka_err2str(err));
        return NULL;
    }
    self->rkt = rkt;
    self->partition = (int32_t)partition;
    Py_RETURN_NONE;
}

/* One binary column's buffers: validity bitmap (NULL when every value is present), int32
 * offsets, data. */
typedef struct {
    PyObject *validity, *offsets, *data;
} BinaryBuffers;

static void binary_clear(BinaryBuffers *b) {
    Py_CLEAR(b->validity);
    Py_CLEAR(b->offsets);
    Py_CLEAR(b->data);
}

/* Copies the keys (keys != 0) or values of msgs[0 .. n - 1] into Arrow binary buffers. */
static int binary_fill(BinaryBuffers *b, rd_kafka_message_t **msgs, Py_ssize_t n, int keys) {
    size_t total = 0;
    Py_ssize_t nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const void *data = keys ? msgs[i]->key : msgs[i]->payload;
        if (data == NULL)
            nulls++;
        else
            total += keys ? msgs[i]->key_len : msgs[i]->len;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a batch of more than 2 GiB of keys or values");
        return -1;
    }
    b->offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    b->data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (nulls) b->validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (b->offsets == NULL || b->data == NULL || (nulls && b->validity == NULL)) {
        binary_clear(b);
        return -1;
    }
    int32_t *offsets = (int32_t *)PyBytes_AS_STRING(b->offsets);
    char *out = PyBytes_AS_STRING(b->data);
    uint8_t *validity = nulls ? (uint8_t *)PyBytes_AS_STRING(b->validity) : NULL;
    if (validity) memset(validity, 0, (size_t)((n + 7) / 8));
    int32_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        offsets[i] = at;
        const void *data = keys ? msgs[i]->key : msgs[i]->payload;
        if (data == NULL) continue;
        size_t len = keys ? msgs[i]->key_len : msgs[i]->len;
        memcpy(out + at, data, len);
        at += (int32_t)len;
        if (validity) validity[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    offsets[n] = at;
    return 0;
}

/* read(end, max_records, timeout_ms) -> (count, done, offsets, values, keys)
 *
 * The partition's next records below offset `end`, at most max_records of them: it waits up
 * to timeout_ms for the first, then takes what librdkafka has already fetched. (One call of
 * rd_kafka_consume_batch() waits until it has max_records or the timeout passed: at the end
 * of a range holding transaction markers or aborted records, or where records were deleted,
 * it waited out the whole timeout.) `done` is true once the partition's visible records before
 * `end` are all read (a record at or past `end`, or the end of the partition). `offsets` is
 * the records' int64 offsets; `values` and `keys` are (validity or None, int32 offsets, data).
 * count == 0 and not done: nothing came within the timeout. */
static PyObject *reader_read(Reader *self, PyObject *args) {
    long long end;
    Py_ssize_t max_records;
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "Lni", &end, &max_records, &timeout_ms)) return NULL;
    if (self->rkt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "start() was not called");
        return NULL;
    }
    if (max_records <= 0) {
        PyErr_SetString(PyExc_ValueError, "max_records must be positive");
        return NULL;
    }
    rd_kafka_message_t **msgs = PyMem_Calloc((size_t)max_records, sizeof(*msgs));
    if (msgs == NULL) return PyErr_NoMemory();
    ssize_t got = 0;
    int read_error = 0;
    Py_BEGIN_ALLOW_THREADS
    rd_kafka_message_t *first = p_rd_kafka_consume(self->rkt, self->partition, timeout_ms);
    if (first != NULL) {
        msgs[0] = first;
        got = 1;
        if (max_records > 1) {
            ssize_t more = p_rd_kafka_consume_batch(self->rkt, self->partition, 0, msgs + 1,
                                                    (size_t)(max_records - 1));
            if (more < 0)
                read_error = p_rd_kafka_last_error();
            else
                got += more;
        }
    } else if (p_rd_kafka_last_error() != RD_KAFKA_RESP_ERR__TIMED_OUT) {
        read_error = p_rd_kafka_last_error();
    }
    Py_END_ALLOW_THREADS
    if (read_error) {
        for (ssize_t i = 0; i < got; i++) p_rd_kafka_message_destroy(msgs[i]);
        PyMem_Free(msgs);
        PyErr_Format(PyExc_RuntimeError, "[%d]: read failed: %s", self->partition,
                     p_rd_kafka_err2str(read_error));
        return NULL;
    }
    /* The records to hand over: up to the first event, or the first record past the range. */
    Py_ssize_t taken = 0;
    int done = 0, error = 0;
    int64_t error_offset = -1;
    char error_text[512] = "";
    for (; taken < got; taken++) {
        rd_kafka_message_t *m = msgs[taken];
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            done = 1;
            break;
        }
        if (m->err != 0) {
            error = m->err;
            error_offset = m->offset;
            if (m->payload != NULL && m->len > 0) {
                size_t len = m->len < sizeof error_text - 1 ? m->len : sizeof error_text - 1;
                memcpy(error_text, m->payload, len);
                error_text[len] = 0;
            }
            break;
        }
        if (m->offset >= end) {
            done = 1;
            break;
        }
    }
    if (!done && !error && taken > 0 && msgs[taken - 1]->offset == end - 1) done = 1;
    PyObject *result = NULL;
    PyObject *offsets = NULL;
    BinaryBuffers values = {0}, keys = {0};
    if (error) {
        PyErr_Format(PyExc_RuntimeError, "[%d] at offset %lld: %s%s%s", self->partition,
                     (long long)error_offset, p_rd_kafka_err2str(error), error_text[0] ? ": " : "",
                     error_text);
        goto out;
    }
    offsets = PyBytes_FromStringAndSize(NULL, taken * (Py_ssize_t)sizeof(int64_t));
    if (offsets == NULL) goto out;
    int64_t *offset_out = (int64_t *)PyBytes_AS_STRING(offsets);
    for (Py_ssize_t i = 0; i < taken; i++) offset_out[i] = msgs[i]->offset;
    if (binary_fill(&values, msgs, taken, 0) < 0 || binary_fill(&keys, msgs, taken, 1) < 0) goto out;
    result = Py_BuildValue("nON(OOO)(OOO)", taken, done ? Py_True : Py_False, offsets,
                           values.validity ? values.validity : Py_None, values.offsets, values.data,
                           keys.validity ? keys.validity : Py_None, keys.offsets, keys.data);
    offsets = NULL; /* the tuple holds it ("N") */
out:
    Py_XDECREF(offsets);
    binary_clear(&values);
    binary_clear(&keys);
    for (ssize_t i = 0; i < got; i++) p_rd_kafka_message_destroy(msgs[i]);
    PyMem_Free(msgs);
    /* A range read to its end stops fetching at once: at the partition's end librdkafka
     * would fetch again and again (the job's fetch.wait.max.ms is 0) while the caller works
     * on the records, which cost the broker about a core (measured, docs/measurements.md). */
    if (result != NULL && done) reader_stop(self);
    return result;
}

static PyObject *reader_close(Reader *self, PyObject *unused) {
    reader_close_handle(self);
    Py_RETURN_NONE;
}

static PyMethodDef reader_methods[] = {
    {"start", (PyCFunction)reader_start, METH_VARARGS,
     "start(topic, partition, offset): read the partition from offset on"},
    {"read", (PyCFunction)reader_read, METH_VARARGS,
     "read(end, max_records, timeout_ms) -> (count, done, offsets, values, keys)"},
    {"close", (PyCFunction)reader_close, METH_NOARGS, "close(): stop reading, free the handle"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bridge.native._kafkaread.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_doc = "Reader(config): reads offset ranges of Kafka partitions into Arrow buffers",
};

static PyMethodDef methods[] = {
    {"bind_library", bind_library, METH_O,
     "bind_library(path): look up librdkafka's functions in the copy loaded from path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kafkaread", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kafkaread(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
