/* A checkpoint's small text files: meta.json (engine/io/ckpt_meta.c) and
 * `latest` (engine/io/ckpt_dir.c's ds_ckpt_read_latest), both verified by
 * their checksum first (engine/io/ckpt_seal.c).
 *
 * A fuzzer cannot forge an XXH64, so most inputs would only ever meet the
 * checksum check; the harness therefore seals half of them itself (the
 * checksum a save would write), which lets the bytes reach the parsers.
 *
 * Input: one flags byte, then the file (mutated with fz_mutate_json, which
 * also puts the int and int64 limits where the file has numbers).
 *   bits 0-1  0: meta.json as given (the checksum check and its messages)
 *             1: meta.json sealed by the harness (ds_ckpt_seal); one that
 *                reads is written back with ds_ckpt_meta_write and read
 *                again, which must give the same checkpoint description
 *             2: latest as given
 *             3: latest sealed by the harness; a tag that reads must be a
 *                valid tag (ds_ckpt_check_tag) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/ckpt_seal.h"
#include "tests/fuzz/fuzz_util.h"

static int same_real(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

static int same_str(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* The description field by field (not memcmp: strings and arrays are
 * pointers, the doubles may be NaN). */
static const char *differs(const ds_ckpt_meta *a, const ds_ckpt_meta *b) {
#define F(x) if (a->x != b->x) return #x
    F(format_version); F(world); F(stage); F(moments); F(numel); F(used); F(padded); F(part);
    F(align); F(frame_elems); F(n_params); F(global_step); F(applied_steps); F(skipped_steps);
    F(micro_steps); F(samples); F(gradient_accumulation_steps); F(micro_batch);
    F(sched_iteration); F(scaler_enabled); F(cur_hysteresis); F(scaler_cur_iter);
    F(scaler_last_overflow_iter); F(seed); F(has_loader); F(epoch); F(epoch_samples);
    F(dataset_size); F(last_skipped);
#undef F
    if (strcmp(a->tag, b->tag) || strcmp(a->engine_version, b->engine_version) ||
        strcmp(a->precision, b->precision) || strcmp(a->optimizer, b->optimizer) ||
        strcmp(a->scheduler, b->scheduler))
        return "a string field";
    if (!same_real(a->loss_scale, b->loss_scale) || !same_real(a->last_loss, b->last_loss) ||
        !same_real(a->last_lr, b->last_lr) || !same_real(a->last_grad_norm, b->last_grad_norm))
        return "a real field";
    if (!same_str(a->config_json, b->config_json)) return "config";
    if (!same_str(a->client_state_json, b->client_state_json)) return "client_state";
    for (int i = 0; i < a->n_params; i++) {
        const ds_ckpt_param_entry *p = &a->params[i], *q = &b->params[i];
        if (strcmp(p->name, q->name) || p->ndim != q->ndim || p->offset != q->offset ||
            p->numel != q->numel)
            return "params";
        for (int d = 0; d < p->ndim; d++)
            if (p->shape[d] != q->shape[d]) return "params[].shape";
    }
    for (int r = 0; r < a->world; r++) {
        const ds_ckpt_shard_entry *s = &a->shards[r], *t = &b->shards[r];
        if (strcmp(s->file, t->file) || s->rank != t->rank || s->lo != t->lo || s->hi != t->hi ||
            s->bytes != t->bytes || s->index_hash != t->index_hash)
            return "shards";
    }
    return NULL;
}

static void meta(const uint8_t *body, size_t n, int seal) {
    char *sealed = NULL;
    size_t sn = 0;
    if (seal) {
        /* a body that is not an object is refused: nothing a save would write */
        if (ds_ckpt_seal(DS_SEAL_JSON, (const char *)body, n, &sealed, &sn) != DS_OK) return;
        body = (const uint8_t *)sealed;
        n = sn;
    }
    const char *path = fz_write("meta.json", body, n);
    ds_ckpt_meta m, back;
    fz_begin();
    ds_status st = fz_check(ds_ckpt_meta_read(path, &m), "ds_ckpt_meta_read");
    free(sealed);
    if (st != DS_OK) {
        ds_ckpt_meta_free(&m);
        return;
    }
    char again[512];
    fz_write_to(again, sizeof again, "meta_again.json", "", 0);
    fz_begin();
    if (fz_check(ds_ckpt_meta_write(again, &m), "ds_ckpt_meta_write") != DS_OK)
        fz_fail("a meta.json that reads could not be written back: %s", ds_last_error());
    fz_begin();
    if (fz_check(ds_ckpt_meta_read(again, &back), "ds_ckpt_meta_read(written)") != DS_OK)
        fz_fail("the meta.json written back does not read: %s", ds_last_error());
    const char *what = differs(&m, &back);
    if (what) fz_fail("meta.json written back and read again: %s differs", what);
    ds_ckpt_meta_free(&back);
    ds_ckpt_meta_free(&m);
}

static void latest(const uint8_t *body, size_t n, int seal) {
    char *sealed = NULL;
    size_t sn = 0;
    if (seal) {
        if (ds_ckpt_seal(DS_SEAL_LINE, (const char *)body, n, &sealed, &sn) != DS_OK) return;
        body = (const uint8_t *)sealed;
        n = sn;
    }
    fz_write(DS_CKPT_LATEST_FILE, body, n);
    free(sealed);
    char tag[DS_CKPT_TAG_MAX + 1];
    fz_begin();
    if (fz_check(ds_ckpt_read_latest(fz_dir(), tag, sizeof tag), "ds_ckpt_read_latest") != DS_OK)
        return;
    fz_begin();
    if (ds_ckpt_check_tag(tag) != DS_OK) fz_fail("latest gave '%s', not a valid tag", tag);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0] & 3;
    if (mode <= 1) meta(data + 1, size - 1, mode == 1);
    else latest(data + 1, size - 1, mode == 3);
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    return fz_mutate_json(data, size, max_size, seed, 1);
}
