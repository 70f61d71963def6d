/* safetensors (engine/io/safetensors.c): the file reader, the sharded
 * index reader, and the weight loader that maps a checkpoint's tensors onto
 * a model's parameters by name (hf/hf_weights.c).
 *
 * Input: one flags byte, then the file. The harness's mutator (below) also
 * puts 2^64 - 1, 2^63 and such where the JSON has numbers (fz_edge_number;
 * for a .safetensors file inside its header, whose length it rewrites), so
 * data_offsets and shapes meet the values that overflow.
 *   bits 0-1  0, 1: a .safetensors file: opened (every header check), then
 *                   every tensor found by name, read raw in two pieces and,
 *                   for float dtypes, converted to fp32; the metadata looked
 *                   up
 *             2:    model.safetensors.index.json (ds_st_index_read)
 *             3:    the file as model.safetensors in a folder, loaded onto
 *                   a tiny GPT-2 (vocab 8, 4 positions, 4 wide, 1 layer)
 * A file that opens must keep the promises of safetensors.h: tensors inside
 * the buffer, back to back, each shape * dtype size bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/safetensors.h"
#include "hf/hf.h"
#include "models/models.h"
#include "tests/fuzz/fuzz_util.h"

static void read_file(const char *path, size_t file_size) {
    ds_st_file *f = NULL;
    fz_begin();
    if (fz_check(ds_st_open(path, &f), "ds_st_open") != DS_OK) return;
    uint64_t buffer = file_size - ds_st_data_start(f), total = 0;
    for (int i = 0; i < ds_st_count(f); i++) {
        const ds_st_tensor *t = ds_st_tensor_at(f, i);
        if (ds_st_find(f, t->name) != t) fz_fail("ds_st_find(\"%s\") finds another tensor", t->name);
        uint64_t bytes = t->end - t->begin;
        if (t->end > buffer || t->begin > t->end || bytes != t->numel * ds_st_dtype_size(t->dtype))
            fz_fail("tensor '%s' [%llu, %llu) does not fit its shape or the buffer of %llu",
                    t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)buffer);
        total += bytes;
        unsigned char *raw = malloc(bytes ? bytes : 1);
        if (!raw) abort();
        fz_begin();
        if (fz_check(ds_st_read_raw(f, t, 0, bytes / 2, raw), "ds_st_read_raw") != DS_OK ||
            fz_check(ds_st_read_raw(f, t, bytes / 2, bytes - bytes / 2, raw + bytes / 2),
                     "ds_st_read_raw") != DS_OK)
            fz_fail("tensor '%s': reading its own bytes failed: %s", t->name, ds_last_error());
        free(raw);
        /* one element past the end: refused with a status */
        fz_begin();
        if (ds_st_read_raw(f, t, bytes, 1, &(char){0}) == DS_OK)
            fz_fail("tensor '%s': a read past its end succeeded", t->name);
        if (ds_st_dtype_is_float(t->dtype)) {
            float *v = malloc((t->numel ? t->numel : 1) * sizeof *v);
            if (!v) abort();
            fz_begin();
            if (fz_check(ds_st_read_f32(f, t, 0, t->numel, v), "ds_st_read_f32") != DS_OK)
                fz_fail("tensor '%s': converting it failed: %s", t->name, ds_last_error());
            free(v);
        }
    }
    if (total != buffer)
        fz_fail("the tensors hold %llu bytes, the buffer %llu", (unsigned long long)total,
                (unsigned long long)buffer);
    (void)ds_st_metadata(f, "format");
    (void)ds_st_find(f, "no such tensor");
    ds_st_close(f);
}

static void read_index(const char *path) {
    ds_st_index ix;
    fz_begin();
    if (fz_check(ds_st_index_read(path, &ix), "ds_st_index_read") != DS_OK) return;
    if (ix.n_files > ix.n || (ix.n > 0 && ix.n_files < 1))
        fz_fail("index: %d files for %d tensors", ix.n_files, ix.n);
    for (int i = 0; i < ix.n; i++)
        if (strchr(ix.files[i], '/') || !ix.files[i][0])
            fz_fail("index: tensor '%s' in file '%s', not beside the index", ix.names[i],
                    ix.files[i]);
    ds_st_index_free(&ix);
}

/* The weight loader's `set`: the values must be as many as the parameter
 * holds (the loader checked the shape). */
static ds_status set_param(void *user, const char *name, const float *data, size_t numel) {
    const ds_model *m = user;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            const ds_param_desc *d = &m->modules[i]->params[p];
            if (strcmp(d->name, name) != 0) continue;
            if ((size_t)ds_param_numel(d) != numel)
                fz_fail("set(%s): %zu values for a parameter of %lld", name, numel,
                        (long long)ds_param_numel(d));
            volatile float sink = 0;
            for (size_t k = 0; k < numel; k++) sink += data[k];
            (void)sink;
            return DS_OK;
        }
    fz_fail("set(%s): not a parameter of the model", name);
}

static void load_weights(const uint8_t *data, size_t size) {
    static ds_model *model;
    if (!model) {
        ds_gpt2_desc d = {.vocab_size = 8, .n_positions = 4, .n_embd = 4, .n_layer = 1,
                          .n_head = 1};
        if (ds_gpt2_create(&d, &model) != DS_OK)
            fz_fail("the harness's GPT-2: %s", ds_last_error());
    }
    fz_write("model.safetensors", data, size);
    ds_hf_load_report rep;
    fz_begin();
    ds_status st = fz_check(ds_hf_load_weights(model, fz_dir(), set_param, model, &rep),
                            "ds_hf_load_weights");
    if (st == DS_OK || st == DS_ERR_DATA) ds_hf_load_report_free(&rep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0] & 3;
    if (mode <= 1) read_file(fz_write("fuzz.safetensors", data + 1, size - 1), size - 1);
    else if (mode == 2) read_index(fz_write("model.safetensors.index.json", data + 1, size - 1));
    else load_weights(data + 1, size - 1);
    return 0;
}

/* Edge numbers inside a .safetensors header: the header's bytes are edited
 * in place and its length field rewritten, the tensor bytes after it kept. */
static size_t edge_in_header(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    uint64_t hl;
    if (size < 9) return 0;
    memcpy(&hl, data + 1, 8);
    if (hl > size - 9) return 0;
    size_t rest = size - 9 - (size_t)hl, room = max_size - 9 - rest;
    uint8_t *h = malloc(room + 1);
    if (!h) abort();
    memcpy(h, data + 9, (size_t)hl);
    size_t hn = fz_edge_number(h, (size_t)hl, room, seed, 0);
    if (hn) {
        memmove(data + 9 + hn, data + 9 + hl, rest);
        memcpy(data + 9, h, hn);
        uint64_t len = hn;
        memcpy(data + 1, &len, 8);
    }
    free(h);
    return hn ? 9 + hn + rest : 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    if (size >= 1 && (data[0] & 3) != 2 && seed % 3 == 0) {
        size_t n = edge_in_header(data, size, max_size, seed / 3);
        if (n) return n;
    }
    return fz_mutate_json(data, size, max_size, seed, 1);
}
