/* The events of one serialized XLine, decoded into the columns of the reader contract.

   ``contract.ColumnReader`` calls ``head`` for a line's name and timestamp, then ``events`` for
   its events: names, starts and durations (ns, as floats) and the stats asked for, as
   jaxlib's ``ProfileData`` gives them (see contract.py). Anything this decoder does not expect
   (a group, a known field written with another wire type, a varint past ten bytes, a start
   that overflows int64, a name or timestamp written after an event) raises ``Unexpected``: the caller then parses the line whole with
   protobuf's own parser, which also says what is wrong with a damaged one. Field numbers are
   those of ``schema.py`` (XLine, XEvent, XStat), checked against it when the module is used.

   Beside the decoder, three loops over a whole trace's events that Python would take a hundred
   nanoseconds an event for, each with a Python twin it is tested against: ``split`` (a plane's
   fields, twin ``contract._split``), ``codes`` (strings numbered, twin in ``columns.Coded``) and
   ``nest`` (a thread's categories, twin ``nesting._nest``).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *Unexpected;

typedef struct {
    const uint8_t *at;
    const uint8_t *end;
} Cursor;

/* One varint; 0 on success, -1 past the end or longer than ten bytes. */
static inline int varint(Cursor *c, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->at >= c->end) return -1;
        uint8_t byte = *c->at++;
        value |= (uint64_t)(byte & 0x7F) << (shift < 64 ? shift : 63);
        if (byte < 0x80) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type, a varint's value or a length-delimited field's payload.
   0 on success, -1 on a malformed or unexpected field. */
typedef struct {
    uint64_t number;
    int wire;
    uint64_t value;
    const uint8_t *data; /* a length-delimited field's payload, or a fixed field's bytes */
    Py_ssize_t size;
} Field;

static inline int next_field(Cursor *c, Field *f) {
    uint64_t tag;
    const uint8_t *start = c->at;
    if (varint(c, &tag) < 0) return -1;
    f->number = tag >> 3;
    f->wire = (int)(tag & 7);
    /* protobuf's field numbers end at 2^29 - 1, in a tag of at most five bytes; upb rejects any other */
    if (f->number == 0 || f->number > 0x1FFFFFFF || c->at - start > 5) return -1;
    switch (f->wire) {
        case 0:
            return varint(c, &f->value);
        case 1:
        case 5: {
            Py_ssize_t width = f->wire == 1 ? 8 : 4;
            if (c->end - c->at < width) return -1;
            f->data = c->at;
            f->size = width;
            c->at += width;
            return 0;
        }
        case 2: {
            uint64_t length;
            if (varint(c, &length) < 0 || length > (uint64_t)(c->end - c->at)) return -1;
            f->data = c->at;
            f->size = (Py_ssize_t)length;
            f->value = length;
            c->at += length;
            return 0;
        }
        default: /* groups */
            return -1;
    }
}

static PyObject *unexpected(void) {
    PyErr_SetNone(Unexpected);
    return NULL;
}

/* XLine fields, as schema.XLine */
enum { LINE_NAME = 2, LINE_TIMESTAMP_NS = 3, LINE_EVENTS = 4 };
/* XEvent fields, as schema.XEvent */
enum { EVENT_METADATA_ID = 1, EVENT_OFFSET_PS = 2, EVENT_DURATION_PS = 3, EVENT_STATS = 4, EVENT_NUM_OCCURRENCES = 5 };
/* XStat fields, as schema.XStat */
enum { STAT_METADATA_ID = 1, STAT_DOUBLE = 2, STAT_UINT64 = 3, STAT_INT64 = 4, STAT_STR = 5, STAT_BYTES = 6, STAT_REF = 7 };

static const int LINE_WIRE[] = {-1, 0, 2, 0, 2, -1, -1, -1, -1, 0, 0, 2}; /* fields 1-4, 9-11; -1: unknown */
static const int STAT_WIRE[] = {-1, 0, 1, 0, 0, 2, 2, 0};

/* head(payload) -> (name as bytes, timestamp_ns): the line's fields before its first event. A name or
   timestamp written after an event is left to ``events``, which raises ``Unexpected`` on it. */
static PyObject *head(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buffer;
    if (!PyArg_ParseTuple(args, "y*", &buffer)) return NULL;
    Cursor c = {buffer.buf, (const uint8_t *)buffer.buf + buffer.len};
    const uint8_t *name = (const uint8_t *)"";
    Py_ssize_t name_size = 0;
    uint64_t stamp = 0;
    Field f = {0};
    while (c.at < c.end) {
        if (next_field(&c, &f) < 0 || (f.number <= 11 && LINE_WIRE[f.number] >= 0 && LINE_WIRE[f.number] != f.wire)) {
            PyBuffer_Release(&buffer);
            return unexpected();
        }
        if (f.number == LINE_EVENTS) break; /* protobuf writes a line's fields in order: the events last */
        if (f.number == LINE_NAME) {
            name = f.data;
            name_size = f.size;
        } else if (f.number == LINE_TIMESTAMP_NS) {
            stamp = f.value;
        }
    }
    PyObject *out = Py_BuildValue("(y#L)", (const char *)name, name_size, (long long)(int64_t)stamp);
    PyBuffer_Release(&buffer);
    return out;
}

/* A growing array of doubles: a line's starts or durations, handed to Python as the bytes of an ``array('d')``. */
typedef struct {
    double *data;
    Py_ssize_t size, capacity;
} Doubles;

static int push(Doubles *d, double value) {
    if (d->size == d->capacity) {
        Py_ssize_t capacity = d->capacity ? 2 * d->capacity : 256;
        double *data = PyMem_Realloc(d->data, (size_t)capacity * sizeof(double));
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        d->data = data;
        d->capacity = capacity;
    }
    d->data[d->size++] = value;
    return 0;
}

static PyObject *as_bytes(const Doubles *d) {
    return PyBytes_FromStringAndSize((const char *)d->data, d->size * (Py_ssize_t)sizeof(double));
}

/* ``value / 1000`` truncated toward zero, as C++ divides integers (C does too). */
static inline int64_t div1000(int64_t value) { return value / 1000; }

/* A wanted stat whose metadata id is below ``SLOT_IDS``: found by the id in a table, not a dict. It keeps the
   last value it made, which the next event's equal value reuses (consecutive ops share a module, a program, a
   run), so that equal values are one object. */
#define SLOT_IDS 65536
typedef struct {
    PyObject *name;   /* borrowed from ``wanted`` */
    PyObject *column; /* borrowed from ``columns`` once made */
    PyObject *value;  /* the last value made (a reference the slot holds), or NULL */
    int kind;
    uint64_t number;
    const uint8_t *data; /* into the line's bytes, which outlive the call */
    Py_ssize_t size;
} Slot;

/* Recent event names by metadata id (borrowed from ``names``): a direct-mapped cache in front of the dict. */
#define NAME_CACHE 1024
typedef struct {
    int64_t id;
    PyObject *name;
} CachedName;

typedef struct {
    PyObject *names;      /* dict: event metadata id -> name */
    PyObject *stat_names; /* dict: stat metadata id -> name (references) */
    PyObject *wanted;     /* dict: stat metadata id -> name, of the stats to read (may be empty) */
    PyObject *columns;    /* dict: stat name -> list of each event's value (None: the event has none) */
    PyObject *empty;      /* "" */
    const uint8_t *frame_bits; /* frame_bits[id]: the id names a Python-tracer frame (NULL: look at names) */
    Py_ssize_t frame_count;
    int32_t *slot_of; /* slot_of[id]: the id's place in ``slots`` (-1: not wanted), for ids below slot_ids */
    Py_ssize_t slot_ids;
    Slot *slots;
    Py_ssize_t slot_count;
    CachedName *cached; /* NAME_CACHE entries */
} Context;

/* The name of an event metadata id (a borrowed reference; "" when missing), or NULL on error. */
static PyObject *lookup(PyObject *dict, int64_t id, PyObject *missing) {
    PyObject *key = PyLong_FromLongLong(id);
    if (key == NULL) return NULL;
    PyObject *got = PyDict_GetItemWithError(dict, key);
    Py_DECREF(key);
    if (got == NULL && !PyErr_Occurred()) return missing;
    return got;
}

/* An event metadata id's name, through the cache (a borrowed reference; "" when missing), or NULL on error. */
static PyObject *event_name(const Context *cx, int64_t id) {
    CachedName *entry = &cx->cached[(uint64_t)id % NAME_CACHE];
    if (entry->name != NULL && entry->id == id) return entry->name;
    PyObject *name = lookup(cx->names, id, cx->empty);
    if (name != NULL) {
        entry->id = id;
        entry->name = name;
    }
    return name;
}

static int is_frame(const Context *cx, int64_t id, PyObject **name) {
    *name = NULL;
    if (cx->frame_bits != NULL) return id >= 0 && id < cx->frame_count && cx->frame_bits[id];
    *name = event_name(cx, id);
    if (*name == NULL) return -1;
    return PyUnicode_GET_LENGTH(*name) > 0 && PyUnicode_READ_CHAR(*name, 0) == '$';
}

/* Which of the 8 bytes of ``word`` (in memory order) end a varint, their high bit clear, as the bits of a byte. */
static inline uint32_t varint_ends(uint64_t word) {
    return (uint32_t)(((~word & 0x8080808080808080ull) >> 7) * 0x0102040810204080ull >> 56);
}

/* Whether the XEvent ``data[0:size]`` (with at least 16 bytes readable from ``data``) is a Python-tracer frame in
   the plain layout the tracer writes, found without a branch per byte: its metadata id first (a frame's, by
   ``frame_bits``, in at most four bytes), then only varints of fields 2, 3 and 5 (offset, duration,
   occurrences), each well formed. ``events`` would skip such an event after walking it; any other (a second
   id, stats, another field, a bad varint, a big-endian machine) is left to that walk. */
static inline int plain_frame(const Context *cx, const uint8_t *data, Py_ssize_t size) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (cx->frame_bits == NULL || size < 2 || size > 16 || data[0] != EVENT_METADATA_ID << 3) return 0;
    uint64_t low, high;
    memcpy(&low, data, 8);
    memcpy(&high, data + 8, 8);
    uint32_t ends = (varint_ends(low) | varint_ends(high) << 8) & ((1u << size) - 1); /* bit i: byte i ends one */
    if ((ends >> 1) == 0) return 0;
    int length = __builtin_ctz(ends >> 1) + 1; /* the id's bytes, from byte 1 */
    if (length > 4) return 0;
    uint64_t bytes = (low >> 8) & ((1ull << (8 * length)) - 1);
    uint64_t id = (bytes & 0x7F) | (bytes >> 8 & 0x7F) << 7 | (bytes >> 16 & 0x7F) << 14 | (bytes >> 24 & 0x7F) << 21;
    if (id >= (uint64_t)cx->frame_count || !cx->frame_bits[id]) return 0;
    for (int at = length + 1; at < size;) {
        uint8_t tag = at < 8 ? (uint8_t)(low >> (8 * at)) : (uint8_t)(high >> (8 * (at - 8)));
        int known = tag == EVENT_OFFSET_PS << 3 || tag == EVENT_DURATION_PS << 3 || tag == EVENT_NUM_OCCURRENCES << 3;
        if (!known || (ends >> (at + 1)) == 0) return 0; /* a varint field of those three, not cut short */
        int more = __builtin_ctz(ends >> (at + 1)); /* the varint's bytes but its last */
        if (more >= 10) return 0;
        at += more + 2; /* past the tag and the varint */
    }
    return 1;
#else
    (void)cx, (void)data, (void)size;
    return 0;
#endif
}

/* One stat's value as ProfileData gives it, or NULL with no error set when it holds none. */
static PyObject *stat_value(const Context *cx, int kind, uint64_t number, const uint8_t *data, Py_ssize_t size) {
    switch (kind) {
        case STAT_DOUBLE: {
            double d;
            memcpy(&d, data, 8);
            return PyFloat_FromDouble(d);
        }
        case STAT_UINT64:
            return PyLong_FromUnsignedLongLong(number);
        case STAT_INT64:
            return PyLong_FromLongLong((long long)(int64_t)number);
        case STAT_STR:
        case STAT_BYTES:
            return PyUnicode_DecodeUTF8((const char *)data, size, "strict");
        case STAT_REF: {
            PyObject *got = lookup(cx->stat_names, (int64_t)number, cx->empty);
            Py_XINCREF(got);
            return got;
        }
    }
    return NULL;
}

/* Put value (a new reference, stolen) at ``index`` of ``column``, padding with None up to it: an event's stat
   given twice keeps the last, as a dict would. -1 on error. */
static int put(PyObject *column, Py_ssize_t index, PyObject *value) {
    Py_ssize_t size = PyList_GET_SIZE(column);
    if (size > index) return PyList_SetItem(column, index, value); /* steals value, drops the earlier one */
    for (; size < index; size++) {
        if (PyList_Append(column, Py_None) < 0) {
            Py_DECREF(value);
            return -1;
        }
    }
    int failed = PyList_Append(column, value);
    Py_DECREF(value);
    return failed;
}

/* The column of stat ``name`` (borrowed from ``columns``), made when first met; NULL on error. */
static PyObject *column_of(const Context *cx, PyObject *name) {
    PyObject *column = PyDict_GetItemWithError(cx->columns, name);
    if (column != NULL || PyErr_Occurred()) return column;
    if ((column = PyList_New(0)) == NULL) return NULL;
    int failed = PyDict_SetItem(cx->columns, name, column);
    Py_DECREF(column); /* the dict holds it */
    return failed ? NULL : column;
}

/* Whether a stat's value is the one its slot made last. */
static int same_value(const Slot *slot, int kind, uint64_t number, const uint8_t *data, Py_ssize_t size) {
    if (slot->value == NULL || slot->kind != kind) return 0;
    switch (kind) {
        case STAT_DOUBLE:
            return memcmp(slot->data, data, 8) == 0;
        case STAT_STR:
        case STAT_BYTES:
            return slot->size == size && memcmp(slot->data, data, (size_t)size) == 0;
        default:
            return slot->number == number;
    }
}

/* A wanted stat's value (a new reference): its slot's last one when equal, else made (NULL on error). */
static PyObject *slot_value(const Context *cx, Slot *slot, int kind, uint64_t number, const uint8_t *data,
                            Py_ssize_t size) {
    if (same_value(slot, kind, number, data, size)) {
        Py_INCREF(slot->value);
        return slot->value;
    }
    PyObject *value = stat_value(cx, kind, number, data, size);
    if (value == NULL) return NULL;
    PyObject *old = slot->value;
    Py_INCREF(value);
    slot->value = value;
    Py_XDECREF(old);
    slot->kind = kind;
    slot->number = number;
    slot->data = data;
    slot->size = size;
    return value;
}

/* Put the wanted stats of one event's stat records, the line's ``index``-th kept event, in their columns
   (a column is made when its stat is first met). -1 on error, -2 on an unexpected record. */
static int read_stats(const Context *cx, const uint8_t *event, Py_ssize_t size, Py_ssize_t index) {
    Cursor c = {event, event + size};
    Field f = {0};
    while (c.at < c.end) {
        if (next_field(&c, &f) < 0) return -2;
        if (f.number != EVENT_STATS) continue;
        Cursor s = {f.data, f.data + f.size};
        uint64_t id = 0, number = 0;
        int kind = 0;
        const uint8_t *data = NULL;
        Py_ssize_t data_size = 0;
        Field g = {0};
        while (s.at < s.end) {
            if (next_field(&s, &g) < 0) return -2;
            if (g.number > STAT_REF) continue;
            if (STAT_WIRE[g.number] != g.wire) return -2;
            if (g.number == STAT_METADATA_ID) {
                id = g.value;
            } else { /* the value oneof: the last one written counts */
                kind = (int)g.number;
                number = g.value;
                data = g.data;
                data_size = g.size;
            }
        }
        if (kind == 0) continue;
        PyObject *value, *column;
        if (id < SLOT_IDS) { /* every wanted id below it has a slot */
            if (id >= (uint64_t)cx->slot_ids || cx->slot_of[id] < 0) continue;
            Slot *slot = &cx->slots[cx->slot_of[id]];
            if (slot->column == NULL && (slot->column = column_of(cx, slot->name)) == NULL) return -1;
            column = slot->column;
            if ((value = slot_value(cx, slot, kind, number, data, data_size)) == NULL) return -1;
        } else {
            PyObject *key = PyLong_FromLongLong((long long)(int64_t)id);
            if (key == NULL) return -1;
            PyObject *name = PyDict_GetItemWithError(cx->wanted, key);
            Py_DECREF(key);
            if (name == NULL) {
                if (PyErr_Occurred()) return -1;
                continue;
            }
            if ((column = column_of(cx, name)) == NULL) return -1;
            if ((value = stat_value(cx, kind, number, data, data_size)) == NULL) return -1;
        }
        if (put(column, index, value) < 0) return -1;
    }
    return 0;
}

/* The slots of the wanted stats whose ids are below ``SLOT_IDS`` (the others are looked up in ``wanted``).
   -1 on error. */
static int make_slots(Context *cx) {
    Py_ssize_t at = 0, count = 0;
    PyObject *key, *name;
    long long top = -1;
    while (PyDict_Next(cx->wanted, &at, &key, &name)) {
        long long id = PyLong_AsLongLong(key);
        if (id == -1 && PyErr_Occurred()) {
            PyErr_Clear(); /* not an id that fits a table */
            continue;
        }
        if (id >= 0 && id < SLOT_IDS) {
            count++;
            if (id > top) top = id;
        }
    }
    if (count == 0) return 0;
    cx->slot_of = PyMem_Malloc((size_t)(top + 1) * sizeof(int32_t));
    cx->slots = PyMem_Calloc((size_t)count, sizeof(Slot));
    if (cx->slot_of == NULL || cx->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (long long id = 0; id <= top; id++) cx->slot_of[id] = -1;
    at = 0;
    while (PyDict_Next(cx->wanted, &at, &key, &name)) {
        long long id = PyLong_AsLongLong(key);
        if (id == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            continue;
        }
        if (id >= 0 && id < SLOT_IDS) {
            cx->slots[cx->slot_count].name = name;
            cx->slot_of[id] = (int32_t)cx->slot_count++;
        }
    }
    cx->slot_ids = (Py_ssize_t)(top + 1);
    return 0;
}

/* events(payload, timestamp_ns, names, stat_names, wanted, frame_bits, keep_frames)
   -> (names, starts, durations, stat columns, frames left out), starts and durations as the bytes of
   ``array('d')``s; ``Unexpected`` on a name or timestamp after an
   event. The stat columns: by name, each wanted stat that some kept event has, one value per kept event. */
static PyObject *events(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buffer, bits;
    long long stamp;
    int keep_frames;
    Context cx;
    PyObject *bits_object;
    if (!PyArg_ParseTuple(args, "y*LO!O!O!Op", &buffer, &stamp, &PyDict_Type, &cx.names, &PyDict_Type,
                          &cx.stat_names, &PyDict_Type, &cx.wanted, &bits_object, &keep_frames))
        return NULL;
    cx.frame_bits = NULL;
    cx.frame_count = 0;
    bits.obj = NULL;
    if (bits_object != Py_None) {
        if (PyObject_GetBuffer(bits_object, &bits, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&buffer);
            return NULL;
        }
        cx.frame_bits = bits.buf;
        cx.frame_count = bits.len;
    }
    cx.slot_of = NULL;
    cx.slots = NULL;
    cx.slot_ids = cx.slot_count = 0;
    cx.cached = PyMem_Calloc(NAME_CACHE, sizeof(CachedName));
    cx.empty = PyUnicode_FromStringAndSize("", 0);
    PyObject *names = PyList_New(0), *stats = PyDict_New(), *starts = NULL, *durs = NULL;
    Doubles start_values = {NULL, 0, 0}, dur_values = {NULL, 0, 0};
    cx.columns = stats;
    PyObject *out = NULL;
    Py_ssize_t skipped = 0;
    int read_any = PyDict_GET_SIZE(cx.wanted) > 0;
    int seen_event = 0;
    if (cx.cached == NULL) PyErr_NoMemory();
    if (cx.cached == NULL || cx.empty == NULL || names == NULL || stats == NULL || make_slots(&cx) < 0) goto done;
    Cursor c = {buffer.buf, (const uint8_t *)buffer.buf + buffer.len};
    Field f = {0};
    while (c.at < c.end) {
        if (c.end - c.at >= 2 && c.at[0] == (LINE_EVENTS << 3 | 2) && c.at[1] < 0x80 && c.at[1] <= c.end - c.at - 2) {
            f.data = c.at + 2; /* an event under 128 bytes, as nearly all are: a tag and a length of one byte each */
            f.size = c.at[1];
            c.at += 2 + f.size;
        } else {
            if (next_field(&c, &f) < 0) goto unexpected;
            if (f.number <= 11 && LINE_WIRE[f.number] >= 0 && LINE_WIRE[f.number] != f.wire) goto unexpected;
            if (f.number != LINE_EVENTS) {
                /* ``head`` read the name and timestamp written before the first event: a later one would count */
                if (seen_event && (f.number == LINE_NAME || f.number == LINE_TIMESTAMP_NS)) goto unexpected;
                continue;
            }
        }
        seen_event = 1;
        if (!keep_frames && c.end - f.data >= 16 && plain_frame(&cx, f.data, f.size)) {
            skipped++;
            continue;
        }
        Cursor e = {f.data, f.data + f.size};
        uint64_t id = 0, offset = 0, duration = 0;
        Field g = {0};
        while (e.at < e.end) {
            if (next_field(&e, &g) < 0) goto unexpected;
            if (g.number > EVENT_NUM_OCCURRENCES) continue;
            if (g.wire != (g.number == EVENT_STATS ? 2 : 0)) goto unexpected;
            if (g.number == EVENT_METADATA_ID) id = g.value;
            else if (g.number == EVENT_OFFSET_PS) offset = g.value;
            else if (g.number == EVENT_DURATION_PS) duration = g.value;
            else if (g.number == EVENT_NUM_OCCURRENCES) offset = 0; /* the other member of the oneof */
        }
        PyObject *name = NULL;
        if (!keep_frames) {
            int frame = is_frame(&cx, (int64_t)id, &name);
            if (frame < 0) goto done;
            if (frame) {
                skipped++;
                continue;
            }
        }
        if (name == NULL && (name = event_name(&cx, (int64_t)id)) == NULL) goto done;
        int64_t start;
        if (__builtin_add_overflow((int64_t)stamp, div1000((int64_t)offset), &start)) goto unexpected;
        int got = 0;
        if (read_any) got = read_stats(&cx, f.data, f.size, PyList_GET_SIZE(names));
        if (got == -2) goto unexpected;
        if (got < 0 || PyList_Append(names, name) || push(&start_values, (double)start) ||
            push(&dur_values, (double)div1000((int64_t)duration)))
            goto done;
    }
    {
        Py_ssize_t count = PyList_GET_SIZE(names), at = 0;
        PyObject *key, *column;
        while (PyDict_Next(stats, &at, &key, &column)) { /* pad each column to every kept event */
            for (Py_ssize_t size = PyList_GET_SIZE(column); size < count; size++) {
                if (PyList_Append(column, Py_None) < 0) goto done;
            }
        }
    }
    if ((starts = as_bytes(&start_values)) == NULL || (durs = as_bytes(&dur_values)) == NULL) goto done;
    out = Py_BuildValue("(OOOOn)", names, starts, durs, stats, skipped);
    goto done;
unexpected:
    if (!PyErr_Occurred()) PyErr_SetNone(Unexpected);
done:
    Py_XDECREF(names);
    Py_XDECREF(starts);
    Py_XDECREF(durs);
    PyMem_Free(start_values.data);
    PyMem_Free(dur_values.data);
    Py_XDECREF(stats);
    Py_XDECREF(cx.empty);
    for (Py_ssize_t k = 0; k < cx.slot_count; k++) Py_XDECREF(cx.slots[k].value);
    PyMem_Free(cx.slots);
    PyMem_Free(cx.slot_of);
    PyMem_Free(cx.cached);
    if (bits.obj != NULL) PyBuffer_Release(&bits);
    PyBuffer_Release(&buffer);
    return out;
}

/* Append (a, b) to ``list`` as a new tuple (lines) or widen its last [a, b] list when it ends at ``a`` (other
   fields, neighbours merged). -1 on error. */
static int add_span(PyObject *list, Py_ssize_t a, Py_ssize_t b, int merge) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (merge && n > 0) {
        PyObject *last = PyList_GET_ITEM(list, n - 1);
        if (PyLong_AsSsize_t(PyList_GET_ITEM(last, 1)) == a) {
            PyObject *end = PyLong_FromSsize_t(b);
            return end == NULL ? -1 : PyList_SetItem(last, 1, end);
        }
    }
    PyObject *span = merge ? Py_BuildValue("[nn]", a, b) : Py_BuildValue("(nn)", a, b);
    if (span == NULL) return -1;
    int failed = PyList_Append(list, span);
    Py_DECREF(span);
    return failed;
}

/* split(payload, offset, lines_field) -> (lines, other): where a plane's fields lie, ``offset`` added: each
   line record's (start, end), and the other fields' [start, end] ranges with neighbours merged. */
static PyObject *split(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buffer;
    Py_ssize_t offset;
    unsigned long long lines_field;
    if (!PyArg_ParseTuple(args, "y*nK", &buffer, &offset, &lines_field)) return NULL;
    PyObject *lines = PyList_New(0), *other = PyList_New(0), *out = NULL;
    const uint8_t *base = buffer.buf;
    Cursor c = {base, base + buffer.len};
    Field f = {0};
    if (lines == NULL || other == NULL) goto done;
    while (c.at < c.end) {
        Py_ssize_t header = c.at - base;
        if (next_field(&c, &f) < 0) {
            PyErr_SetNone(Unexpected);
            goto done;
        }
        int is_line = f.number == lines_field;
        if (add_span(is_line ? lines : other, offset + header, offset + (c.at - base), !is_line) < 0) goto done;
    }
    out = PyTuple_Pack(2, lines, other);
done:
    Py_XDECREF(lines);
    Py_XDECREF(other);
    PyBuffer_Release(&buffer);
    return out;
}

/* Where ``item`` is, or would go, in an open-addressed table of addresses (``mask``: its size less one). */
static inline size_t probe(PyObject *const *keys, size_t mask, PyObject *item) {
    size_t at = (size_t)(((uintptr_t)item >> 4) * 0x9E3779B97F4A7C15ull) & mask;
    while (keys[at] != NULL && keys[at] != item) at = (at + 1) & mask;
    return at;
}

/* codes(columns) -> (codes, values): lists of values (any hashable) numbered together, in order of first
   appearance, as a dict keyed by value would number them; each column's codes as the bytes of int32s. Traces
   repeat a few thousand names a million times, mostly as the same objects (the decoder shares them): an object
   seen before is found by its address, and only a new one is looked up by value. */
static PyObject *codes(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "codes() takes a list of lists");
        return NULL;
    }
    Py_ssize_t capacity = 1 << 12, used = 0;
    PyObject **keys = PyMem_Calloc((size_t)capacity, sizeof(PyObject *));
    int32_t *found = PyMem_Malloc((size_t)capacity * sizeof(int32_t));
    PyObject *values = PyList_New(0), *by_value = PyDict_New(), *out_codes = PyList_New(0), *out = NULL;
    if (keys == NULL || found == NULL) PyErr_NoMemory();
    if (keys == NULL || found == NULL || values == NULL || by_value == NULL || out_codes == NULL) goto done;
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(arg); c++) {
        PyObject *column = PyList_GET_ITEM(arg, c);
        if (!PyList_Check(column)) {
            PyErr_SetString(PyExc_TypeError, "codes() takes a list of lists");
            goto done;
        }
        Py_ssize_t n = PyList_GET_SIZE(column);
        PyObject *bytes = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t));
        if (bytes == NULL) goto done;
        int failed = PyList_Append(out_codes, bytes);
        Py_DECREF(bytes);
        if (failed) goto done;
        int32_t *into = (int32_t *)PyBytes_AS_STRING(bytes);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(column, i);
            size_t at = probe(keys, (size_t)capacity - 1, item);
            if (keys[at] == item) {
                into[i] = found[at];
                continue;
            }
            PyObject *known = PyDict_GetItemWithError(by_value, item); /* an equal value, another object */
            int32_t code;
            if (known != NULL) {
                code = (int32_t)PyLong_AsLong(known);
            } else {
                if (PyErr_Occurred()) goto done;
                if (PyList_GET_SIZE(values) >= INT32_MAX) {
                    PyErr_SetString(PyExc_OverflowError, "more distinct values than int32 codes");
                    goto done;
                }
                code = (int32_t)PyList_GET_SIZE(values);
                PyObject *number = PyLong_FromLong(code);
                if (number == NULL) goto done;
                failed = PyDict_SetItem(by_value, item, number);
                Py_DECREF(number);
                if (failed || PyList_Append(values, item) < 0) goto done;
            }
            into[i] = code;
            keys[at] = item; /* borrowed: ``arg`` holds it for this call */
            found[at] = code;
            if (2 * ++used > capacity) { /* grow: every address placed again */
                Py_ssize_t old_capacity = capacity;
                PyObject **old_keys = keys;
                int32_t *old_found = found;
                capacity *= 2;
                keys = PyMem_Calloc((size_t)capacity, sizeof(PyObject *));
                found = PyMem_Malloc((size_t)capacity * sizeof(int32_t));
                if (keys == NULL || found == NULL) {
                    PyMem_Free(old_keys);
                    PyMem_Free(old_found);
                    PyErr_NoMemory();
                    goto done;
                }
                for (Py_ssize_t k = 0; k < old_capacity; k++) {
                    if (old_keys[k] == NULL) continue;
                    size_t to = probe(keys, (size_t)capacity - 1, old_keys[k]);
                    keys[to] = old_keys[k];
                    found[to] = old_found[k];
                }
                PyMem_Free(old_keys);
                PyMem_Free(old_found);
            }
        }
    }
    out = PyTuple_Pack(2, out_codes, values);
done:
    PyMem_Free(keys);
    PyMem_Free(found);
    Py_XDECREF(values);
    Py_XDECREF(by_value);
    Py_XDECREF(out_codes);
    return out;
}

/* Whether any of ``columns`` (lists of one value per event, ``None`` where an event has none) has a value
   for event ``i``. */
static int given(PyObject *columns, Py_ssize_t i) {
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(columns); c++) {
        if (PyList_GET_ITEM(PyList_GET_ITEM(columns, c), i) != Py_None) return 1;
    }
    return 0;
}

/* Whether ``columns`` is a list of lists of ``n`` values each. */
static int columns_of(PyObject *columns, Py_ssize_t n) {
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(columns); c++) {
        PyObject *column = PyList_GET_ITEM(columns, c);
        if (!PyList_Check(column) || PyList_GET_SIZE(column) != n) return 0;
    }
    return 1;
}

/* nest(starts, durs, codes, kinds, ops, steps, sources, labels) -> (categories, marks): each event of a
   thread (by start, an enclosing event first) in category device, runtime or annotation (``labels``) by
   what encloses it, and which events mark steps. The rule, and its Python twin, are ``nesting.py``'s. */
static PyObject *nest(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer starts, durs, codes, kinds, ops = {0};
    PyObject *ops_given, *steps, *sources, *labels, *categories = NULL, *marks = NULL, *out = NULL;
    double *ends = NULL;
    char *flags = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*OO!O!O!", &starts, &durs, &codes, &kinds, &ops_given, &PyList_Type,
                          &steps, &PyList_Type, &sources, &PyTuple_Type, &labels)) {
        return NULL;
    }
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(double);
    int have_ops = ops_given != Py_None;
    if (have_ops && PyObject_GetBuffer(ops_given, &ops, PyBUF_SIMPLE) < 0) {
        have_ops = 0;
        goto done;
    }
    if (starts.len != n * (Py_ssize_t)sizeof(double) || durs.len != starts.len ||
        codes.len != n * (Py_ssize_t)sizeof(int32_t) || (have_ops && ops.len != n) ||
        PyTuple_GET_SIZE(labels) != 3 || !columns_of(steps, n) || !columns_of(sources, n)) {
        PyErr_SetString(PyExc_ValueError, "nest() takes columns of one length");
        goto done;
    }
    const double *start = starts.buf, *dur = durs.buf;
    const int32_t *code = codes.buf;
    const uint8_t *kind_of = kinds.buf, *op = have_ops ? ops.buf : NULL;
    ends = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    flags = PyMem_Malloc((size_t)(n ? n : 1));
    categories = PyList_New(n);
    marks = PyList_New(0);
    if (ends == NULL || flags == NULL) PyErr_NoMemory();
    if (ends == NULL || flags == NULL || categories == NULL || marks == NULL) goto done;
    Py_ssize_t top = 0; /* the open events: their ends, and whether they are the runtime's or a framework's */
    for (Py_ssize_t i = 0; i < n; i++) {
        while (top > 0 && ends[top - 1] <= start[i]) top--;
        int opaque = top > 0 && flags[top - 1];
        if (code[i] < 0 || code[i] >= kinds.len) {
            PyErr_SetString(PyExc_ValueError, "nest(): a code without a kind");
            goto done;
        }
        int kind = kind_of[code[i]], category; /* kind: 1 a runtime name, 2 a framework span, 0 neither */
        if (op != NULL && op[i]) {
            category = 0;
        } else if (opaque || kind == 1) {
            category = 1;
        } else {
            int step = given(steps, i);
            if (kind == 2 || step || !given(sources, i)) {
                category = 2;
                if (step && kind == 0) {
                    PyObject *at = PyLong_FromSsize_t(i);
                    if (at == NULL) goto done;
                    int failed = PyList_Append(marks, at);
                    Py_DECREF(at);
                    if (failed) goto done;
                }
            } else {
                category = 1; /* C++ source or flow stats: the runtime's own TraceMe */
            }
        }
        PyObject *label = PyTuple_GET_ITEM(labels, category);
        Py_INCREF(label);
        PyList_SET_ITEM(categories, i, label);
        ends[top] = start[i] + dur[i];
        flags[top++] = (char)(opaque || category != 2 || kind == 2);
    }
    out = PyTuple_Pack(2, categories, marks);
done:
    PyBuffer_Release(&starts);
    PyBuffer_Release(&durs);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&kinds);
    if (have_ops) PyBuffer_Release(&ops);
    PyMem_Free(ends);
    PyMem_Free(flags);
    Py_XDECREF(categories);
    Py_XDECREF(marks);
    return out;
}

static PyMethodDef methods[] = {
    {"codes", codes, METH_O, "Lists of values numbered together in order of first appearance, as int32 bytes."},
    {"split", split, METH_VARARGS, "Where a plane's line records and its other fields lie in its payload."},
    {"head", head, METH_VARARGS, "A serialized XLine's name (bytes) and timestamp_ns, read up to its first event."},
    {"events", events, METH_VARARGS, "A serialized XLine's events as the reader contract's columns."},
    {"nest", nest, METH_VARARGS, "A thread's events' categories by what encloses them, and its step marks."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
    Unexpected = PyErr_NewException("jaxdiag.trace._xline.Unexpected", NULL, NULL);
    if (Unexpected == NULL) return -1;
    if (PyModule_AddObjectRef(module, "Unexpected", Unexpected) < 0) return -1;
    PyObject *fields = Py_BuildValue("{s(iii)s(iiiii)s(iiiiiii)}", "XLine", LINE_NAME, LINE_TIMESTAMP_NS, LINE_EVENTS,
                                     "XEvent", EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS, EVENT_STATS,
                                     EVENT_NUM_OCCURRENCES, "XStat", STAT_METADATA_ID, STAT_DOUBLE, STAT_UINT64,
                                     STAT_INT64, STAT_STR, STAT_BYTES, STAT_REF);
    if (fields == NULL) return -1;
    int failed = PyModule_AddObjectRef(module, "FIELDS", fields);
    Py_DECREF(fields);
    return failed;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_xline",
    .m_doc = "XLine events decoded into the reader contract's columns.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__xline(void) { return PyModuleDef_Init(&module_def); }
