/* zero_to_fp32 and ds_checkpoint_verify on a real checkpoint (2 ranks, stage
 * 3, a small BERT trained 2 steps, frames of 64 values):
 *   - the converted tensors equal ds_get_param's values bit for bit, in fp32
 *     (one file and a folder sharded by a small budget, read back through the
 *     index), and equal their fp16 / bf16 roundings (round to nearest even);
 *   - ds_checkpoint_verify passes, and then fails naming the file for a
 *     missing shard, an extra file, a truncated shard, a shard of another
 *     world size and a corrupted frame; a corrupted moment frame fails verify
 *     but not the conversion, which never reads the moments;
 *   - the zero_to_fp32 program exits 0 on success and 1 with one line naming
 *     the file on each of those, 2 on a usage error.
 * It also writes, for the independent Python reader (tests/ckpt.cmake),
 * OUT/ref.safetensors (ds_save_weights) and the converter's outputs
 * OUT/z2f.safetensors, OUT/z2f_sharded/, OUT/z2f_bf16/. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "engine/io/ckpt_file.h"
#include "engine/io/safetensors.h"
#include "tests/unit/test_util.h"

static char out[512], ckpt[600], tool[600];

static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_ckpt_z2f: `%s` failed\n", cmd);
        exit(1);
    }
}

/* Compare the tensors of safetensors file(s) with the expected values. The
 * model's tensors, in order, are `names[i]` of numel[i] at want + off[i]. */
typedef struct expected {
    int n;
    char (*names)[DS_MAX_NAME];
    size_t *numel, *off;
    const float *want;
} expected;

static void check_file(const char *path, const expected *x, int *next, ds_st_dtype dt) {
    ds_st_file *f;
    if (ds_st_open(path, &f) != DS_OK) {
        CHECK(0, "%s: %s", path, ds_last_error());
        return;
    }
    for (int i = 0; i < ds_st_count(f); i++, (*next)++) {
        const ds_st_tensor *t = ds_st_tensor_at(f, i);
        int k = *next;
        if (k >= x->n || strcmp(t->name, x->names[k]) || t->numel != x->numel[k] ||
            t->dtype != dt) {
            CHECK(0, "%s: tensor %d is %s (%llu, %s), want %s", path, k, t->name,
                  (unsigned long long)t->numel, ds_st_dtype_name(t->dtype),
                  k < x->n ? x->names[k] : "(none)");
            break;
        }
        size_t es = ds_st_dtype_size(dt);
        unsigned char *got = malloc(t->numel * es);
        ds_st_read_raw(f, t, 0, t->numel * es, got);
        const float *w = x->want + x->off[k];
        size_t bad = 0;
        for (size_t e = 0; e < t->numel; e++) {
            uint32_t g32;
            uint16_t g16;
            bool ok;
            if (dt == DS_ST_F32) {
                memcpy(&g32, got + 4 * e, 4);
                ok = g32 == ds_f32_bits(w[e]);
            } else {
                memcpy(&g16, got + 2 * e, 2);
                ok = g16 == (dt == DS_ST_F16 ? ds_f32_to_f16(w[e]) : ds_f32_to_bf16(w[e]));
            }
            bad += !ok;
        }
        CHECK(bad == 0, "%s: %s: %zu of %llu values differ from ds_get_param's", path, t->name,
              bad, (unsigned long long)t->numel);
        free(got);
    }
    ds_st_close(f);
}

static void check_folder(const char *dir, const expected *x, ds_st_dtype dt, int want_files) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int next = 0;
    if (want_files == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        check_file(path, x, &next, dt);
    } else {
        ds_st_index ix;
        if (ds_st_index_read(path, &ix) != DS_OK) {
            CHECK(0, "%s", ds_last_error());
            return;
        }
        CHECK(ix.n_files == want_files, "%s: %d files, want %d", path, ix.n_files, want_files);
        for (int k = 0; k < ix.n_files; k++) {
            char p2[1600];
            snprintf(p2, sizeof p2, "%s/%s", dir, ix.file_list[k]);
            check_file(p2, x, &next, dt);
        }
        ds_st_index_free(&ix);
    }
    CHECK(next == x->n, "%s: %d tensors, want %d", dir, next, x->n);
}

/* The tool on `args`: exit status, and stderr must be one line holding needle. */
static void run_tool(const char *args, int want_rc, const char *needle) {
    char cmd[4096], err[700];
    snprintf(err, sizeof err, "%s/tool_stderr.txt", out);
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", tool, args, err);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    CHECK(rc == want_rc, "zero_to_fp32 %s: exit %d, want %d", args, rc, want_rc);
    FILE *f = fopen(err, "r");
    char line[4096] = "", extra[16];
    int lines = 0;
    while (f && fgets(lines ? extra : line, lines ? (int)sizeof extra : (int)sizeof line, f)) {
        if (strchr(lines ? extra : line, '\n')) lines++;
    }
    if (f) fclose(f);
    if (needle)
        CHECK(lines == 1 && strstr(line, needle), "zero_to_fp32 %s: stderr (%d lines) \"%s\" "
              "should be one line with \"%s\"", args, lines, line, needle);
    else
        CHECK(lines == 0, "zero_to_fp32 %s: unexpected stderr \"%s\"", args, line);
}

/* A broken copy of the checkpoint at DIR/broken/t; `how` breaks it. Checks
 * ds_checkpoint_verify, ds_zero_to_fp32 and the tool name `needle`. */
static void broken(const char *how, const char *needle, const char *needle2, bool converts) {
    char bdir[700], tdir[800], z2f_out[800];
    snprintf(bdir, sizeof bdir, "%s/broken", out);
    snprintf(tdir, sizeof tdir, "%s/t", bdir);
    snprintf(z2f_out, sizeof z2f_out, "%s/broken_out.safetensors", out);
    sh("rm -rf '%s' && mkdir -p '%s'", bdir, bdir);
    sh("cp -r '%s/t' '%s/'", ckpt, bdir);
    sh("cp '%s/latest' '%s/'", ckpt, bdir); /* names t, with its checksum */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s", tdir, how);
    if (system(cmd) != 0) TEST_DIE(cmd);
    ds_status st = ds_checkpoint_verify(bdir, NULL);
    CHECK(st != DS_OK && strstr(ds_last_error(), needle) && strstr(ds_last_error(), needle2),
          "verify after `%s`: %s \"%s\", want \"%s\" and \"%s\"", how, ds_status_to_string(st),
          ds_last_error(), needle, needle2);
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    st = ds_zero_to_fp32(bdir, z2f_out, &o, NULL);
    if (converts) {
        CHECK(st == DS_OK, "convert after `%s`: %s", how, ds_last_error());
    } else {
        CHECK(st != DS_OK && strstr(ds_last_error(), needle),
              "convert after `%s`: %s \"%s\", want \"%s\"", how, ds_status_to_string(st),
              ds_last_error(), needle);
        CHECK(access(z2f_out, F_OK) != 0, "a failed conversion left %s", z2f_out);
    }
    char args[1600];
    snprintf(args, sizeof args, "--verify '%s'", bdir);
    run_tool(args, 1, needle);
    snprintf(args, sizeof args, "'%s' '%s'", bdir, z2f_out);
    run_tool(args, converts ? 0 : 1, converts ? NULL : needle);
}

/* The shard file of rank 0 replaced by one a 4-rank world wrote (its range
 * is a quarter of the flat space instead of a half). */
static void write_world4_shard(const char *path) {
    ds_ckpt_header h = {.rank = 0, .world = 4, .lo = 0, .hi = 128};
    ds_ckpt_writer *w;
    float v[128] = {0};
    if (ds_ckpt_writer_open(path, &h, NULL, &w) != DS_OK) TEST_DIE("world-4 shard");
    for (uint32_t k = 0; k < 3; k++) {
        ds_ckpt_writer_begin(w, k, 0, 128);
        ds_ckpt_writer_append(w, v, 128);
        ds_ckpt_writer_end(w);
    }
    if (ds_ckpt_writer_finish(w, NULL) != DS_OK) TEST_DIE("world-4 shard");
}

int main(void) {
    snprintf(out, sizeof out, "%s/tests/ckpt_z2f", DS_BINARY_DIR);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", out);
    snprintf(tool, sizeof tool, "%s/bin/zero_to_fp32", DS_BINARY_DIR);
    setenv("DS_CKPT_FRAME_ELEMS", "64", 1);
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    s.model = "bert";
    s.stage = 3;
    engine_t *e;
    if (!data || ck_engine(&s, data, &e) != DS_OK) TEST_DIE("engine");
    int rank = ds_rank(e);
    if (rank == 0) sh("rm -rf '%s' && mkdir -p '%s'", out, out);
    ds_all_reduce_host(e, &(int64_t){0}, 1, DS_I64);
    for (int i = 0; i < 2; i++)
        if (ds_train_batch(e, NULL) != DS_OK) TEST_DIE("train");
    if (ds_save_checkpoint(e, ckpt, "t", NULL) != DS_OK) TEST_DIE("save");
    char ref[700];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", out);
    if (ds_save_weights(e, ref) != DS_OK) TEST_DIE("save weights");
    size_t n;
    float *want = ck_params(e, &n);
    const ds_model *m = ds_get_model(e);
    expected x = {0};
    for (int i = 0; i < m->n_modules; i++) x.n += m->modules[i]->n_params;
    x.names = calloc((size_t)x.n, sizeof *x.names);
    x.numel = calloc((size_t)x.n, sizeof *x.numel);
    x.off = calloc((size_t)x.n, sizeof *x.off);
    x.want = want;
    size_t at = 0;
    int k = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++, k++) {
            snprintf(x.names[k], DS_MAX_NAME, "%s", m->modules[i]->params[p].name);
            x.numel[k] = (size_t)ds_param_numel(&m->modules[i]->params[p]);
            x.off[k] = at;
            at += x.numel[k];
        }
    /* a checkpoint with one weight past fp16's largest value (65504) */
    char big[700];
    snprintf(big, sizeof big, "%s/ckpt_big", out);
    float *w0 = malloc(x.numel[0] * sizeof *w0);
    if (!w0 || ds_get_param(e, x.names[0], w0, x.numel[0]) != DS_OK) TEST_DIE("get");
    w0[3] = 7e4f;
    if (ds_set_param(e, x.names[0], w0, x.numel[0]) != DS_OK) TEST_DIE("set");
    if (ds_save_checkpoint(e, big, "big", NULL) != DS_OK) TEST_DIE("save big");
    free(w0);
    ds_finalize(e); /* what follows needs no engine and no MPI: rank 0 alone */
    ds_dataset_destroy(data);
    if (rank != 0) {
        free(x.names);
        free(x.numel);
        free(x.off);
        free(want);
        return 0;
    }

    CHECK(ds_checkpoint_verify(ckpt, NULL) == DS_OK, "verify: %s", ds_last_error());
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    ds_z2f_report rep;
    char path[800];
    snprintf(path, sizeof path, "%s/z2f.safetensors", out);
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "convert: %s", ds_last_error());
    CHECK(rep.n_tensors == x.n && rep.n_files == 1 && rep.n_elements == (int64_t)n,
          "report: %d tensors, %d files, %lld elements", rep.n_tensors, rep.n_files,
          (long long)rep.n_elements);
    int next = 0;
    check_file(path, &x, &next, DS_ST_F32);
    CHECK(next == x.n, "one file: %d of %d tensors", next, x.n);

    /* sharded by a 20 kB budget: the embeddings (6.4 kB each) and the
     * layers' 4 kB matrices spread over several files */
    snprintf(path, sizeof path, "%s/z2f_sharded", out);
    o.max_shard_bytes = 20000;
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "sharded: %s", ds_last_error());
    CHECK(rep.n_files > 2, "sharded: %d files", rep.n_files);
    check_folder(path, &x, DS_ST_F32, rep.n_files);
    o.max_shard_bytes = 0;
    o.dtype = DS_F16;
    snprintf(path, sizeof path, "%s/z2f_fp16", out);
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "fp16: %s", ds_last_error());
    check_folder(path, &x, DS_ST_F16, 1);
    /* fp16 cannot hold 7e4 (it rounded to inf, unsaid): refused naming the
     * tensor and the value, no output; bf16 holds it */
    snprintf(path, sizeof path, "%s/z2f_big_fp16", out);
    ds_status bst = ds_zero_to_fp32(big, path, &o, &rep);
    CHECK(bst == DS_ERR_NONFINITE && strstr(ds_last_error(), x.names[0]) &&
              strstr(ds_last_error(), "70000") && strstr(ds_last_error(), "65504"),
          "fp16 of a 7e4 weight: %s: %s", ds_status_to_string(bst), ds_last_error());
    CHECK(access(path, F_OK) != 0, "%s written after the refusal", path);
    o.dtype = DS_BF16;
    snprintf(path, sizeof path, "%s/z2f_big_bf16", out);
    CHECK(ds_zero_to_fp32(big, path, &o, &rep) == DS_OK, "bf16 of a 7e4 weight: %s",
          ds_last_error());
    o.max_shard_bytes = 30000;
    snprintf(path, sizeof path, "%s/z2f_bf16", out);
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "bf16: %s", ds_last_error());
    check_folder(path, &x, DS_ST_BF16, rep.n_files);
    /* again into the sharded folder, unsharded: the earlier shards and their
     * index go (a reader would find two models); then sharded again: the
     * single file goes */
    snprintf(path, sizeof path, "%s/z2f_sharded", out);
    o.dtype = DS_F32;
    o.max_shard_bytes = 0;
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "over shards: %s", ds_last_error());
    check_folder(path, &x, DS_ST_F32, 1);
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/model.safetensors.index.json", path);
    CHECK(access(probe, F_OK) != 0, "a stale %s stayed", probe);
    o.max_shard_bytes = 30000;
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "over one file: %s", ds_last_error());
    check_folder(path, &x, DS_ST_F32, rep.n_files);
    snprintf(probe, sizeof probe, "%s/model.safetensors", path);
    CHECK(access(probe, F_OK) != 0, "a stale %s stayed", probe);
    int files = 0;
    DIR *dd = opendir(path);
    for (struct dirent *de; dd && (de = readdir(dd));)
        files += strstr(de->d_name, ".safetensors") != NULL;
    if (dd) closedir(dd);
    CHECK(files == rep.n_files + 1, "%s: %d safetensors files and index, want %d", path, files,
          rep.n_files + 1);
    /* one file into folders that do not exist yet: made, as for a folder */
    snprintf(path, sizeof path, "%s/new/sub/one.safetensors", out);
    o.max_shard_bytes = 0;
    CHECK(ds_zero_to_fp32(ckpt, path, &o, &rep) == DS_OK, "into new folders: %s",
          ds_last_error());
    next = 0;
    check_file(path, &x, &next, DS_ST_F32);

    /* the program */
    char args[2000];
    snprintf(args, sizeof args, "'%s' '%s/tool_out' --max-shard-size 20KB --dtype fp32", ckpt, out);
    run_tool(args, 0, NULL);
    snprintf(args, sizeof args, "--verify '%s' --tag t", ckpt);
    run_tool(args, 0, NULL);
    snprintf(args, sizeof args, "'%s' '%s/x.safetensors' --dtype fp8", ckpt, out);
    run_tool(args, 2, "--dtype");
    snprintf(args, sizeof args, "'%s' '%s/x.safetensors' --max-shard-size 1GB", ckpt, out);
    run_tool(args, 2, "folder");
    snprintf(args, sizeof args, "'%s/nowhere' '%s/x.safetensors'", out, out);
    run_tool(args, 1, "nowhere: No such file or directory");

    /* broken checkpoints: each names the file */
    const char *s1 = "shard-00001-of-00002.dsck";
    broken("rm shard-00001-of-00002.dsck", s1, "missing", false);
    broken("cp shard-00001-of-00002.dsck shard-00002-of-00003.dsck", "shard-00002-of-00003.dsck",
           "extra", false);
    broken("truncate -s -100 shard-00001-of-00002.dsck", s1, "truncated", false);
    char w4[900];
    snprintf(w4, sizeof w4, "%s/w4.dsck", out);
    write_world4_shard(w4);
    snprintf(args, sizeof args, "cp '%s' shard-00000-of-00002.dsck", w4);
    broken(args, "shard-00000-of-00002.dsck", "world of 4 ranks", false);
    /* the first weights frame of rank 1 (right after its 64-byte header) */
    broken("printf 'X' | dd of=shard-00001-of-00002.dsck bs=1 seek=70 conv=notrunc 2>/dev/null",
           s1, "checksum", false);
    /* the last frame before the index: moment1, which the converter never reads */
    broken("python3 -c \"import struct,sys; f=open('shard-00001-of-00002.dsck','r+b'); "
           "f.seek(-32,2); o=struct.unpack('<Q',f.read(8))[0]; f.seek(o-5); b=f.read(1); "
           "f.seek(o-5); f.write(bytes([b[0]^255]))\"",
           s1, "moment1", true);

    free(x.names);
    free(x.numel);
    free(x.off);
    free(want);
    printf("test_ckpt_z2f: %d tensors\n", x.n);
    return test_finish("test_ckpt_z2f");
}
