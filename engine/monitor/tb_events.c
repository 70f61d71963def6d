/* TensorBoard event records, hand-encoded (tb_events.h has the layout). */
#include "engine/monitor/tb_events.h"

#include <pthread.h>
#include <string.h>

/* Table-driven CRC-32C, built once on first use. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t ds_crc32c(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t ds_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf wire format: just what an Event with a scalar needs ---- */

typedef struct pb {
    uint8_t *p;
    size_t n, cap;
    int overflow;
} pb;

static void put(pb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->overflow = 1;
        return;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_varint(pb *b, uint64_t v) {
    uint8_t tmp[10];
    size_t k = 0;
    do {
        tmp[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) tmp[k] |= 0x80;
        k++;
    } while (v);
    put(b, tmp, k);
}

static void put_le(pb *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    put(b, tmp, (size_t)bytes);
}

/* field number and wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
static void put_key(pb *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static size_t varint_len(uint64_t v) {
    size_t k = 1;
    while (v >= 0x80) {
        v >>= 7;
        k++;
    }
    return k;
}

size_t ds_tb_event_encode(uint8_t *out, size_t cap, double wall_time, int64_t step,
                          const char *tag, float value) {
    pb b = {.p = out, .cap = cap};
    uint64_t wt;
    memcpy(&wt, &wall_time, sizeof wt);
    put_key(&b, 1, 1);
    put_le(&b, wt, 8);
    if (step != 0) { /* proto3: a zero is left out, as TensorFlow writes it */
        put_key(&b, 2, 0);
        put_varint(&b, (uint64_t)step);
    }
    if (!tag) {
        static const char version[] = "brain.Event:2";
        put_key(&b, 3, 2);
        put_varint(&b, sizeof version - 1);
        put(&b, version, sizeof version - 1);
    } else {
        size_t tl = strlen(tag);
        /* Value = tag (1) + simple_value (2, fixed32) */
        size_t value_len = 1 + varint_len(tl) + tl + 1 + 4;
        size_t summary_len = 1 + varint_len(value_len) + value_len;
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        put_key(&b, 5, 2);
        put_varint(&b, summary_len);
        put_key(&b, 1, 2);
        put_varint(&b, value_len);
        put_key(&b, 1, 2);
        put_varint(&b, tl);
        put(&b, tag, tl);
        put_key(&b, 2, 5);
        put_le(&b, bits, 4);
    }
    return b.overflow ? 0 : b.n;
}

size_t ds_tb_record_frame(uint8_t *out, const uint8_t *data, size_t n) {
    uint64_t len = n;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = ds_crc32c_mask(ds_crc32c(0, out, 8));
    for (int i = 0; i < 4; i++) out[8 + i] = (uint8_t)(c >> (8 * i));
    memmove(out + 12, data, n);
    c = ds_crc32c_mask(ds_crc32c(0, data, n));
    for (int i = 0; i < 4; i++) out[12 + n + i] = (uint8_t)(c >> (8 * i));
    return n + 16;
}
