/*
 * scb: "sluicegate C batch" -- design B of issue 18, a PROTOTYPE for measurement only.
 *
 * Reads offsets [start, end) of one Kafka partition with librdkafka's batch consume API
 * (rd_kafka_consume_batch_queue on the consumer queue, as confluent-kafka's
 * Consumer.consume does) and fills Arrow buffers by hand, exported through the Arrow C
 * Data Interface (a struct array of 5 children):
 *
 *   key binary (nullable), value binary (nullable), offset int64,
 *   timestamp timestamp[us, UTC] (int64 micros), timestampType int32
 *
 * Plain C, no Python C API: loaded with ctypes (scb.py), so one .so serves every CPython.
 * No Python object is made per record; Python sees one ArrowArray per batch.
 */
#include <librdkafka/rdkafka.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Arrow C Data Interface (https://arrow.apache.org/docs/format/CDataInterface.html) ---- */
#define ARROW_FLAG_NULLABLE 2

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* ---- schema (exported once per reader; pyarrow imports it into a pa.Schema) ---- */
#define NCOLS 5
static const char *COL_NAMES[NCOLS] = {"key", "value", "offset", "timestamp", "timestampType"};
static const char *COL_FORMATS[NCOLS] = {"z", "z", "l", "tsu:UTC", "i"};
static const int64_t COL_FLAGS[NCOLS] = {ARROW_FLAG_NULLABLE, ARROW_FLAG_NULLABLE, 0, 0, 0};

static void release_schema(struct ArrowSchema *s) {
    if (s->n_children > 0) {
        for (int64_t i = 0; i < s->n_children; i++) free(s->children[i]);
        free(s->children);
    }
    s->release = NULL;
}

static void release_child_schema(struct ArrowSchema *s) { s->release = NULL; }

int scb_export_schema(struct ArrowSchema *out) {
    struct ArrowSchema **children = calloc(NCOLS, sizeof(*children));
    if (!children) return -1;
    for (int i = 0; i < NCOLS; i++) {
        struct ArrowSchema *c = calloc(1, sizeof(*c));
        if (!c) return -1; /* prototype: leaks on OOM */
        c->format = COL_FORMATS[i];
        c->name = COL_NAMES[i];
        c->flags = COL_FLAGS[i];
        c->release = release_child_schema;
        children[i] = c;
    }
    memset(out, 0, sizeof(*out));
    out->format = "+s";
    out->name = "";
    out->n_children = NCOLS;
    out->children = children;
    out->release = release_schema;
    return 0;
}

/* ---- growable buffers ---- */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

/* One batch under construction; becomes the private_data of the exported ArrowArray. */
typedef struct {
    int64_t n, cap;
    /* key, value: validity bitmap, int32 offsets, data */
    uint8_t *valid[2];
    int32_t *offs[2];
    buf_t data[2];
    int64_t nulls[2];
    int64_t *offset, *ts_us;
    int32_t *ts_type;
    /* exported structure */
    struct ArrowArray children[NCOLS];
    struct ArrowArray *child_ptrs[NCOLS];
    const void *bufs[NCOLS][3];
    const void *struct_bufs[1];
} batch_t;

static void batch_free(batch_t *b) {
    if (!b) return;
    for (int k = 0; k < 2; k++) {
        free(b->valid[k]);
        free(b->offs[k]);
        free(b->data[k].data);
    }
    free(b->offset);
    free(b->ts_us);
    free(b->ts_type);
    free(b);
}

static batch_t *batch_new(int64_t cap, size_t data_hint) {
    batch_t *b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    b->cap = cap;
    size_t bitmap = (size_t)(cap + 7) / 8;
    for (int k = 0; k < 2; k++) {
        b->valid[k] = malloc(bitmap);
        b->offs[k] = malloc(sizeof(int32_t) * (size_t)(cap + 1));
        if (!b->valid[k] || !b->offs[k] || buf_reserve(&b->data[k], data_hint)) goto fail;
        b->offs[k][0] = 0;
    }
    b->offset = malloc(sizeof(int64_t) * (size_t)cap);
    b->ts_us = malloc(sizeof(int64_t) * (size_t)cap);
    b->ts_type = malloc(sizeof(int32_t) * (size_t)cap);
    if (!b->offset || !b->ts_us || !b->ts_type) goto fail;
    return b;
fail:
    batch_free(b);
    return NULL;
}

static inline void bit_set(uint8_t *bm, int64_t i, int v) {
    if (v)
        bm[i >> 3] |= (uint8_t)(1u << (i & 7));
    else
        bm[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* Append one binary cell (NULL ptr: null). Returns -1 on OOM or > 2 GiB in one batch. */
static inline int put_binary(batch_t *b, int k, int64_t i, const void *p, size_t len) {
    buf_t *d = &b->data[k];
    if (p == NULL) {
        bit_set(b->valid[k], i, 0);
        b->nulls[k]++;
    } else {
        bit_set(b->valid[k], i, 1);
        if (d->len + len > INT32_MAX || buf_reserve(d, len)) return -1;
        memcpy(d->data + d->len, p, len);
        d->len += len;
    }
    b->offs[k][i + 1] = (int32_t)d->len;
    return 0;
}

static void release_child_array(struct ArrowArray *a) { a->release = NULL; }

static void release_array(struct ArrowArray *a) {
    batch_free((batch_t *)a->private_data);
    a->release = NULL;
}

static void batch_export(batch_t *b, struct ArrowArray *out) {
    int64_t n = b->n;
    for (int k = 0; k < 2; k++) {
        b->bufs[k][0] = b->nulls[k] ? b->valid[k] : NULL;
        b->bufs[k][1] = b->offs[k];
        b->bufs[k][2] = b->data[k].data;
    }
    b->bufs[2][0] = NULL;
    b->bufs[2][1] = b->offset;
    b->bufs[3][0] = NULL;
    b->bufs[3][1] = b->ts_us;
    b->bufs[4][0] = NULL;
    b->bufs[4][1] = b->ts_type;
    for (int c = 0; c < NCOLS; c++) {
        struct ArrowArray *ch = &b->children[c];
        memset(ch, 0, sizeof(*ch));
        ch->length = n;
        ch->null_count = c < 2 ? b->nulls[c] : 0;
        ch->n_buffers = c < 2 ? 3 : 2;
        ch->buffers = b->bufs[c];
        ch->release = release_child_array;
        b->child_ptrs[c] = ch;
    }
    b->struct_bufs[0] = NULL;
    memset(out, 0, sizeof(*out));
    out->length = n;
    out->n_buffers = 1;
    out->buffers = b->struct_bufs;
    out->n_children = NCOLS;
    out->children = b->child_ptrs;
    out->release = release_array;
    out->private_data = b;
}

/* ---- the reader ---- */
typedef struct {
    rd_kafka_t *rk;
    rd_kafka_queue_t *q;
    rd_kafka_message_t **msgs;
    int chunk;
    char topic[512];
    int32_t partition;
    int64_t position, end;
    int done;
} scb_reader;

typedef struct {
    int64_t consume_ns; /* inside rd_kafka_consume_batch_queue */
    int64_t build_ns;   /* copying messages into the Arrow buffers + rd_kafka_message_destroy */
    int64_t consume_calls;
    int64_t messages; /* messages handed out (records + EOF/error events) */
} scb_stats;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

const char *scb_librdkafka_version(void) { return rd_kafka_version_str(); }

/* keys/vals: n librdkafka settings (the caller puts the connector's fixed ones in). */
scb_reader *scb_new(const char **keys, const char **vals, int n, int chunk, char *err, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (int i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, keys[i], vals[i], err, errlen) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
    if (!rk) { /* conf is freed only on success */
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    scb_reader *r = calloc(1, sizeof(*r));
    r->rk = rk;
    r->q = rd_kafka_queue_get_consumer(rk);
    if (!r->q) {
        snprintf(err, errlen, "no consumer queue (group.id must be set)");
        rd_kafka_destroy(rk);
        free(r);
        return NULL;
    }
    r->chunk = chunk > 0 ? chunk : 1000;
    r->msgs = malloc(sizeof(*r->msgs) * (size_t)r->chunk);
    return r;
}

int scb_assign(scb_reader *r, const char *topic, int32_t partition, int64_t start, int64_t end, char *err,
               size_t errlen) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = start;
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        snprintf(err, errlen, "assign: %s", rd_kafka_err2str(e));
        return -1;
    }
    snprintf(r->topic, sizeof(r->topic), "%s", topic);
    r->partition = partition;
    r->position = start;
    r->end = end;
    r->done = end <= start;
    return 0;
}

int scb_unassign(scb_reader *r) { return rd_kafka_assign(r->rk, NULL) ? -1 : 0; }

/*
 * The next batch of at most max_rows records of the assigned range into *out.
 * Returns the number of rows (0: the range is done, *out untouched), -1 on error (err),
 * -2 on poll timeout (no message for timeout_ms). *position_out: the next offset to read.
 */
int64_t scb_next_batch(scb_reader *r, int64_t max_rows, int timeout_ms, struct ArrowArray *out,
                       int64_t *position_out, scb_stats *st, char *err, size_t errlen) {
    if (r->done || r->position >= r->end) {
        *position_out = r->position;
        return 0;
    }
    int64_t left = r->end - r->position;
    int64_t cap = max_rows < left ? max_rows : left;
    /* ~ bytes per record guess from nothing: start at 64 KiB and grow by doubling */
    batch_t *b = batch_new(cap, 1 << 16);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int64_t idle_since = now_ns();
    int64_t rc = 0;
    while (b->n < cap && r->position < r->end) {
        int64_t want = cap - b->n;
        if (want > r->chunk) want = r->chunk;
        if (want > r->end - r->position) want = r->end - r->position;
        int64_t t0 = now_ns();
        ssize_t got = rd_kafka_consume_batch_queue(r->q, 500, r->msgs, (size_t)want);
        int64_t t1 = now_ns();
        st->consume_ns += t1 - t0;
        st->consume_calls++;
        if (got < 0) {
            snprintf(err, errlen, "consume: %s", rd_kafka_err2str(rd_kafka_last_error()));
            rc = -1;
            break;
        }
        st->messages += got;
        for (ssize_t i = 0; i < got; i++) {
            rd_kafka_message_t *m = r->msgs[i];
            if (rc < 0 || r->position >= r->end) {
                rd_kafka_message_destroy(m);
                continue;
            }
            if (m->err) {
                if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                    /* the range ends at a last stable offset: what is left below end are
                     * transaction markers or aborted records, never readable records */
                    if (m->offset >= r->end) r->position = r->end;
                } else {
                    /* prototype: no data-loss handling (fail_on_data_loss=false) */
                    snprintf(err, errlen, "%s [%" PRId32 "] at %" PRId64 ": %s (%s)", r->topic, r->partition,
                             r->position, rd_kafka_err2str(m->err), rd_kafka_message_errstr(m));
                    rc = -1;
                }
                rd_kafka_message_destroy(m);
                continue;
            }
            if (m->offset >= r->end) {
                r->position = r->end;
                rd_kafka_message_destroy(m);
                continue;
            }
            int64_t j = b->n;
            if (put_binary(b, 0, j, m->key, m->key_len) || put_binary(b, 1, j, m->payload, m->len)) {
                snprintf(err, errlen, "out of memory or > 2 GiB in one batch");
                rc = -1;
                rd_kafka_message_destroy(m);
                continue;
            }
            rd_kafka_timestamp_type_t tt;
            int64_t ts = rd_kafka_message_timestamp(m, &tt);
            b->offset[j] = m->offset;
            b->ts_us[j] = ts * 1000;
            b->ts_type[j] = tt == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? 1 : 0;
            b->n = j + 1;
            r->position = m->offset + 1;
            rd_kafka_message_destroy(m);
        }
        int64_t t2 = now_ns();
        st->build_ns += t2 - t1;
        if (rc < 0) break;
        if (got > 0) {
            idle_since = t2;
        } else if (t2 - idle_since > (int64_t)timeout_ms * 1000000LL) {
            snprintf(err, errlen, "no records for %d ms while reading offsets %" PRId64 "..%" PRId64, timeout_ms,
                     r->position, r->end - 1);
            rc = -2;
            break;
        }
    }
    *position_out = r->position;
    if (rc < 0) {
        batch_free(b);
        return rc;
    }
    if (b->n == 0) {
        batch_free(b);
        r->done = 1;
        return 0;
    }
    batch_export(b, out);
    return b->n;
}

void scb_destroy(scb_reader *r) {
    if (!r) return;
    rd_kafka_assign(r->rk, NULL);
    rd_kafka_queue_destroy(r->q);
    rd_kafka_consumer_close(r->rk);
    rd_kafka_destroy(r->rk);
    free(r->msgs);
    free(r);
}
