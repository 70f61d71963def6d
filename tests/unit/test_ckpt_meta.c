/* meta.json (engine/io/ckpt_meta.h) and the folder helpers
 * (engine/io/ckpt_dir.h):
 *   - every field survives a write and a read exactly (reals to the bit, a
 *     NaN loss as null, a seed above 2^63, nested client state);
 *   - meta.json and latest carry a checksum (ckpt_seal.h): the sealed
 *     meta.json is still JSON; an edit is refused naming the file and both
 *     checksums, a file without one (format 1) saying so;
 *   - a damaged meta.json whose checksum was made to match is still refused
 *     naming the file and the key: invalid JSON (with line and column), a
 *     missing section, a wrong type, another format version, a shard table
 *     that does not match the world size, a parameter whose shape and numel
 *     disagree, a seed that is not hex;
 *   - tag rules, `latest` written and read back, the commit of TAG.tmp to
 *     TAG (a rename, then an atomic exchange when TAG exists). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/ckpt_seal.h"
#include "tests/unit/test_util.h"

static char dir[256];

static void sample(ds_ckpt_meta *m) {
    memset(m, 0, sizeof *m);
    m->format_version = DS_CKPT_FORMAT_VERSION;
    snprintf(m->tag, sizeof m->tag, "global_step7");
    snprintf(m->engine_version, sizeof m->engine_version, "0.1.0");
    m->config_json = strdup("{\"train_batch_size\": 16, \"zero_optimization\": {\"stage\": 3}}");
    m->world = 2;
    m->stage = 3;
    snprintf(m->precision, sizeof m->precision, "fp16");
    snprintf(m->optimizer, sizeof m->optimizer, "AdamW");
    m->moments = 2;
    m->numel = 3 * 4 + 5 + 1;
    m->used = 64;
    m->padded = 64;
    m->part = 32;
    m->align = 16;
    m->frame_elems = 1u << 20;
    m->n_params = 3;
    m->params = calloc(3, sizeof *m->params);
    m->params[0] = (ds_ckpt_param_entry){.name = "a.weight", .ndim = 2, .shape = {3, 4},
                                         .offset = 0, .numel = 12};
    m->params[1] = (ds_ckpt_param_entry){.name = "a.bias", .ndim = 1, .shape = {5}, .offset = 16,
                                         .numel = 5};
    m->params[2] = (ds_ckpt_param_entry){.name = "scalar", .ndim = 0, .offset = 32, .numel = 1};
    m->shards = calloc(2, sizeof *m->shards);
    for (int r = 0; r < 2; r++) {
        ds_ckpt_shard_name(r, 2, m->shards[r].file, sizeof m->shards[r].file);
        m->shards[r].rank = r;
        m->shards[r].lo = 32 * r;
        m->shards[r].hi = 32 * (r + 1);
        m->shards[r].bytes = 1000 + (uint64_t)r;
        m->shards[r].index_hash = 0xfedcba9876543210ull + (uint64_t)r;
    }
    m->global_step = 7;
    m->applied_steps = 5;
    m->skipped_steps = 2;
    m->micro_steps = 14;
    m->samples = 112;
    m->gradient_accumulation_steps = 2;
    m->micro_batch = 4;
    snprintf(m->scheduler, sizeof m->scheduler, "WarmupDecayLR");
    m->sched_iteration = 4;
    m->scaler_enabled = true;
    m->loss_scale = 131072.0;
    m->cur_hysteresis = 1;
    m->scaler_cur_iter = 7;
    m->scaler_last_overflow_iter = 2;
    m->seed = 0xffffffffffffffffull;
    m->has_loader = true;
    m->epoch = 2;
    m->epoch_samples = 32;
    m->dataset_size = 40;
    m->last_loss = NAN;
    m->last_lr = 0.1 + 0.2; /* not a short decimal: must round-trip to the bit */
    m->last_grad_norm = 1.0 / 3.0;
    m->last_skipped = true;
    m->client_state_json =
        strdup("{\"epoch\": 3, \"note\": \"\\u00e9t\\u00e9\", \"list\": [1, 2.5, null]}");
}

static void test_roundtrip(void) {
    ds_ckpt_meta m, r;
    sample(&m);
    char path[512];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    CHECK(ds_ckpt_meta_write(path, &m) == DS_OK, "write: %s", ds_last_error());
    CHECK(ds_ckpt_meta_read(path, &r) == DS_OK, "read: %s", ds_last_error());
    CHECK(r.world == 2 && r.stage == 3 && !strcmp(r.precision, "fp16") &&
              !strcmp(r.optimizer, "AdamW") && r.moments == 2 && !strcmp(r.tag, "global_step7"),
          "identity fields");
    CHECK(r.numel == m.numel && r.used == 64 && r.padded == 64 && r.part == 32 && r.align == 16 &&
              r.frame_elems == m.frame_elems, "flat layout");
    CHECK(r.n_params == 3 && !strcmp(r.params[1].name, "a.bias") && r.params[0].ndim == 2 &&
              r.params[0].shape[1] == 4 && r.params[2].ndim == 0 && r.params[2].offset == 32,
          "parameter table");
    CHECK(r.shards[1].index_hash == m.shards[1].index_hash && r.shards[1].bytes == 1001 &&
              !strcmp(r.shards[1].file, "shard-00001-of-00002.dsck"), "shard table");
    CHECK(r.global_step == 7 && r.applied_steps == 5 && r.skipped_steps == 2 &&
              r.micro_steps == 14 && r.samples == 112 && r.gradient_accumulation_steps == 2 &&
              r.micro_batch == 4 && r.sched_iteration == 4, "counters");
    CHECK(r.scaler_enabled && r.loss_scale == 131072.0 && r.cur_hysteresis == 1 &&
              r.scaler_cur_iter == 7 && r.scaler_last_overflow_iter == 2, "loss scaler");
    CHECK(r.seed == m.seed, "seed %llx", (unsigned long long)r.seed);
    CHECK(r.has_loader && r.epoch == 2 && r.epoch_samples == 32 && r.dataset_size == 40, "data");
    CHECK(isnan(r.last_loss) && r.last_lr == m.last_lr && r.last_grad_norm == m.last_grad_norm &&
              r.last_skipped, "last step: lr %.17g grad_norm %.17g", r.last_lr, r.last_grad_norm);
    CHECK(r.client_state_json && strstr(r.client_state_json, "\"epoch\":3") &&
              strstr(r.client_state_json, "[1,2.5,null]"), "client state %s",
          r.client_state_json ? r.client_state_json : "(null)");
    CHECK(r.config_json && strstr(r.config_json, "\"stage\":3"), "config %s",
          r.config_json ? r.config_json : "(null)");
    ds_ckpt_meta_free(&r);

    free(m.client_state_json);
    m.client_state_json = strdup("{\"a\": }");
    CHECK(ds_ckpt_meta_write(path, &m) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "client_state"), "bad client state: %s", ds_last_error());
    ds_ckpt_meta_free(&m);
    CHECK(ds_ckpt_json_check("[1, 2", "x") == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "line"), "json_check: %s", ds_last_error());
    CHECK(ds_ckpt_json_check("\"just a string\"", "x") == DS_OK, "a JSON string is a value");
}

/* The checksum member and what follows it, cut off text[0..*n) and sealed
 * again over the edited text: what a writer of a wrong meta.json produces. */
static void reseal(const char *path, char *text) {
    char *cut = strstr(text, ",\n \"checksum\": ");
    if (!cut) TEST_DIE("no checksum member in the written meta.json");
    memcpy(cut, "\n}", 3);
    char *sealed;
    size_t n;
    if (ds_ckpt_seal(DS_SEAL_JSON, text, (size_t)(cut + 2 - text), &sealed, &n) != DS_OK)
        TEST_DIE("reseal");
    FILE *f = fopen(path, "wb");
    fwrite(sealed, 1, n, f);
    fclose(f);
    free(sealed);
}

/* Write the sample, replace `from` by `to` in its text, seal it again, read:
 * expect `st` and `needle` in the message (which must also name the file). */
static void damaged(const char *from, const char *to, ds_status want, const char *needle) {
    ds_ckpt_meta m, r;
    sample(&m);
    char path[512];
    snprintf(path, sizeof path, "%s/damaged.json", dir);
    ds_ckpt_meta_write(path, &m);
    ds_ckpt_meta_free(&m);
    FILE *f = fopen(path, "rb");
    static char text[1 << 16], out[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *at = strstr(text, from);
    if (!at) {
        CHECK(0, "\"%s\" not in the written meta.json", from);
        return;
    }
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    reseal(path, out);
    ds_status st = ds_ckpt_meta_read(path, &r);
    CHECK(st == want && strstr(ds_last_error(), needle) && strstr(ds_last_error(), path),
          "replacing %s by %s: %s \"%s\", want %s \"%s\"", from, to, ds_status_to_string(st),
          ds_last_error(), ds_status_to_string(want), needle);
    ds_ckpt_meta_free(&r);
}

/* The checksum itself: the file is JSON, every edit is refused before
 * parsing, an unsealed (format 1) file is named as such. */
static void test_sealed(void) {
    ds_ckpt_meta m, r;
    sample(&m);
    char path[512];
    snprintf(path, sizeof path, "%s/sealed.json", dir);
    CHECK(ds_ckpt_meta_write(path, &m) == DS_OK, "write: %s", ds_last_error());
    ds_ckpt_meta_free(&m);
    json_error_t jerr;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    const char *sum = doc ? json_string_value(json_object_get(doc, "checksum")) : NULL;
    CHECK(sum && !strncmp(sum, "xxh64:", 6) && strlen(sum) == 22,
          "meta.json is JSON with a \"checksum\" member: %s", doc ? (sum ? sum : "none") : jerr.text);
    json_decref(doc);
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    /* a key renamed, a number changed, the checksum's own digits, the tail */
    const char *edits[][2] = {{"\"counters\"", "\"kounters\""}, {"\"global_step\": 7", "\"global_step\": 8"},
                              {"xxh64:", "xxh64:"}, {"\"\n}\n", "\"\n}"}};
    for (int k = 0; k < 4; k++) {
        static char edited[1 << 16];
        char *at = strstr(text, edits[k][0]);
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, edits[k][1],
                 at + strlen(edits[k][0]));
        if (k == 2) { /* the checksum's first digit, changed */
            char *d = strstr(edited, "xxh64:") + 6;
            *d = *d == '0' ? '1' : '0';
        }
        f = fopen(path, "wb");
        fputs(edited, f);
        fclose(f);
        ds_status st = ds_ckpt_meta_read(path, &r);
        const char *want = k < 3 ? "checksum mismatch" : "no checksum";
        CHECK(st == DS_ERR_CORRUPT && strstr(ds_last_error(), path) &&
                  strstr(ds_last_error(), want),
              "edit %d (%s -> %s): %s \"%s\", want \"%s\"", k, edits[k][0], edits[k][1],
              ds_status_to_string(st), ds_last_error(), want);
        ds_ckpt_meta_free(&r);
    }
    /* a format-1 meta.json: no checksum */
    f = fopen(path, "wb");
    fputs("{\"format\": \"zero-engine-checkpoint\", \"format_version\": 1}\n", f);
    fclose(f);
    CHECK(ds_ckpt_meta_read(path, &r) == DS_ERR_CORRUPT && strstr(ds_last_error(), "format 2"),
          "format 1: %s", ds_last_error());
    ds_ckpt_meta_free(&r);
}

static void test_damaged(void) {
    damaged("\"counters\"", "\"kounters\"", DS_ERR_CORRUPT, "counters");
    damaged("\"global_step\": 7", "\"global_step\": \"7\"", DS_ERR_CORRUPT, "counters.global_step");
    damaged("\"format_version\": 2", "\"format_version\": 3", DS_ERR_UNSUPPORTED, "version 3");
    damaged("\"world_size\": 2", "\"world_size\": 3", DS_ERR_CORRUPT, "world_size");
    damaged("\"shard-00001-of-00002.dsck\"", "7", DS_ERR_CORRUPT, "shards[1].file");
    damaged("\"numel\": 5", "\"numel\": 6", DS_ERR_CORRUPT, "a.bias");
    damaged("\"seed\": \"0x", "\"seed\": \"1x", DS_ERR_CORRUPT, "rng.seed");
    damaged("\"tag\": \"global_step7\",", "\"tag\": \"global_step7\"", DS_ERR_CORRUPT, ":");
    damaged("\"zero-engine-checkpoint\"", "\"other\"", DS_ERR_CORRUPT, "format");
    /* Issue 15 (tests/fuzz/fuzz_ckpt_meta, which seals what it mutates):
     * integer overflow in the checks themselves (undefined behaviour, which
     * the DS_SANITIZE build stops at), values narrowed to int that wrapped
     * into range, and a frame size a load would never advance by. */
    damaged("\"part\": 32", "\"part\": 4611686018427387904", DS_ERR_CORRUPT, "flat layout");
    damaged("\"offset\": 16", "\"offset\": 9223372036854775807", DS_ERR_CORRUPT, "a.bias");
    damaged("\"shape\": [\n    3,\n    4\n   ]",
            "\"shape\": [\n    4294967296,\n    4294967296\n   ]", DS_ERR_CORRUPT,
            "shape overflows");
    damaged("\"world_size\": 2", "\"world_size\": 4294967298", DS_ERR_CORRUPT,
            "world_size = 4294967298, outside");
    damaged("\"format_version\": 2", "\"format_version\": 4294967298", DS_ERR_CORRUPT,
            "format_version = 4294967298, outside");
    damaged("\"frame_elems\": 1048576", "\"frame_elems\": 0", DS_ERR_CORRUPT,
            "flat.frame_elems = 0, outside");
    damaged("\"bytes\": 1000", "\"bytes\": -1", DS_ERR_CORRUPT, "shards[0].bytes = -1");
    /* values the load would find only while restoring, after it had changed
     * the engine: refused here, in the first phase */
    damaged("\"samples\": 112", "\"samples\": -112", DS_ERR_CORRUPT, "counters out of range");
    damaged("\"epoch\": 2", "\"epoch\": -1", DS_ERR_CORRUPT, "data.epoch");
    damaged("\"samples_in_epoch\": 32", "\"samples_in_epoch\": -32", DS_ERR_CORRUPT,
            "samples_in_epoch");
    damaged("\"scale\": 131072", "\"scale\": -131072", DS_ERR_CORRUPT,
            "loss_scaler.scale must be a positive number");
    damaged("\"scale\": 131072.0", "\"scale\": null", DS_ERR_CORRUPT,
            "loss_scaler.scale must be a positive number");
}

static void test_tags_and_folders(void) {
    const char *good[] = {"global_step10", "run-1.a_b", "A"};
    for (size_t k = 0; k < 3; k++)
        CHECK(ds_ckpt_check_tag(good[k]) == DS_OK, "tag %s: %s", good[k], ds_last_error());
    char longtag[DS_CKPT_TAG_MAX + 2];
    memset(longtag, 'a', sizeof longtag - 1);
    longtag[sizeof longtag - 1] = 0;
    const char *bad[] = {"", ".hidden", "a/b", "x.tmp", "latest", "a b", "..", longtag};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        CHECK(ds_ckpt_check_tag(bad[k]) == DS_ERR_INVALID_ARG, "tag \"%.20s\" accepted", bad[k]);

    char tag[256], path[600];
    CHECK(ds_ckpt_read_latest(dir, tag, sizeof tag) == DS_ERR_IO, "no latest yet");
    CHECK(ds_ckpt_write_latest(dir, "global_step3") == DS_OK, "write latest: %s", ds_last_error());
    CHECK(ds_ckpt_read_latest(dir, tag, sizeof tag) == DS_OK && !strcmp(tag, "global_step3"),
          "latest read back: %s", tag);
    snprintf(path, sizeof path, "%s/latest.tmp", dir);
    CHECK(access(path, F_OK) != 0, "latest.tmp left behind");
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "rb");
    char text[256] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CHECK(n == 36 && !strncmp(text, "global_step3\nxxh64:", 19) && text[n - 1] == '\n',
          "latest is the tag's line and the checksum's: \"%s\"", text);
    /* the checksum guards the tag: one changed digit, an older tag */
    text[11] = '2';
    f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
    CHECK(ds_ckpt_read_latest(dir, tag, sizeof tag) == DS_ERR_CORRUPT &&
              strstr(ds_last_error(), "latest: checksum mismatch"), "latest edited: %s",
          ds_last_error());
    f = fopen(path, "w");
    fputs("../../etc\n", f); /* format 1: no checksum */
    fclose(f);
    CHECK(ds_ckpt_read_latest(dir, tag, sizeof tag) == DS_ERR_CORRUPT &&
              strstr(ds_last_error(), "no checksum"), "latest without a checksum: %s",
          ds_last_error());
    /* sealed, but not a tag, or two lines: refused saying so, once */
    const char *bodies[] = {"../../etc\n", "a\nb\n"};
    for (int k = 0; k < 2; k++) {
        char *sealed;
        size_t len;
        CHECK(ds_ckpt_seal(DS_SEAL_LINE, bodies[k], strlen(bodies[k]), &sealed, &len) == DS_OK,
              "seal");
        f = fopen(path, "wb");
        fwrite(sealed, 1, len, f);
        fclose(f);
        free(sealed);
        ds_status st = ds_ckpt_read_latest(dir, tag, sizeof tag);
        const char *m = ds_last_error(), *first = strstr(m, path);
        CHECK(st == DS_ERR_CORRUPT && first && !strstr(first + 1, path),
              "latest holding %s: %s \"%s\" (the path once)", k ? "two lines" : "a path",
              ds_status_to_string(st), m);
    }

    /* commit: first a rename, then an exchange over the existing tag */
    for (int round = 0; round < 2; round++) {
        snprintf(path, sizeof path, "%s/t.tmp", dir);
        CHECK(ds_ckpt_mkdirs(path) == DS_OK, "mkdir");
        snprintf(path, sizeof path, "%s/t.tmp/round%d", dir, round);
        f = fopen(path, "w");
        fclose(f);
        CHECK(ds_ckpt_commit_dir(dir, "t") == DS_OK, "commit round %d: %s", round,
              ds_last_error());
        snprintf(path, sizeof path, "%s/t/round%d", dir, round);
        CHECK(access(path, F_OK) == 0, "round %d: committed file missing", round);
        snprintf(path, sizeof path, "%s/t/round%d", dir, 1 - round);
        CHECK(access(path, F_OK) != 0, "round %d: the old tag's file is still there", round);
        snprintf(path, sizeof path, "%s/t.tmp", dir);
        CHECK(access(path, F_OK) != 0, "round %d: t.tmp left behind", round);
    }
    /* A file system without renameat2's exchange (NFS; here the fault
     * point): TAG aside as TAG.old, the new one in, the old removed (the
     * save used to fail, and a trainer with it) */
    snprintf(path, sizeof path, "%s/t.tmp", dir);
    CHECK(ds_ckpt_mkdirs(path) == DS_OK, "mkdir");
    snprintf(path, sizeof path, "%s/t.tmp/round2", dir);
    f = fopen(path, "w");
    fclose(f);
    setenv("DS_FAULT_INJECT", "error:ckpt:exchange", 1);
    CHECK(ds_ckpt_commit_dir(dir, "t") == DS_OK, "commit without the exchange: %s",
          ds_last_error());
    unsetenv("DS_FAULT_INJECT");
    snprintf(path, sizeof path, "%s/t/round2", dir);
    CHECK(access(path, F_OK) == 0, "without the exchange: the new tag's file missing");
    snprintf(path, sizeof path, "%s/t/round1", dir);
    CHECK(access(path, F_OK) != 0, "without the exchange: the old tag's file is still there");
    snprintf(path, sizeof path, "%s/t.old", dir);
    CHECK(access(path, F_OK) != 0, "without the exchange: t.old left behind");
    /* a crash between its renames leaves t.old (its meta.json names t) and
     * no t: the next start puts it back; a t.old beside a t is removed */
    ds_ckpt_meta tm;
    sample(&tm);
    snprintf(tm.tag, sizeof tm.tag, "t");
    snprintf(path, sizeof path, "%s/t/meta.json", dir);
    CHECK(ds_ckpt_meta_write(path, &tm) == DS_OK, "write t's meta: %s", ds_last_error());
    snprintf(path, sizeof path, "%s/t", dir);
    char aside[1100];
    snprintf(aside, sizeof aside, "%s/t.old", dir);
    CHECK(rename(path, aside) == 0, "rename t -> t.old");
    CHECK(ds_ckpt_remove_stale(dir, NULL, NULL) == DS_OK, "remove_stale: %s", ds_last_error());
    snprintf(path, sizeof path, "%s/t/round2", dir);
    CHECK(access(path, F_OK) == 0 && access(aside, F_OK) != 0, "t.old not put back as t");
    CHECK(ds_ckpt_mkdirs(aside) == DS_OK, "mkdir t.old");
    snprintf(path, sizeof path, "%s/t.old/meta.json", dir);
    CHECK(ds_ckpt_meta_write(path, &tm) == DS_OK, "write t.old's meta: %s", ds_last_error());
    CHECK(ds_ckpt_remove_stale(dir, NULL, NULL) == DS_OK, "remove_stale: %s", ds_last_error());
    snprintf(path, sizeof path, "%s/t/round2", dir);
    CHECK(access(aside, F_OK) != 0 && access(path, F_OK) == 0, "t.old beside t not removed");
    /* a user's tag "u.old", saved before the name was reserved (its meta
     * names u.old): neither removed nor renamed */
    char user_old[1100];
    snprintf(user_old, sizeof user_old, "%s/u.old", dir);
    CHECK(ds_ckpt_mkdirs(user_old) == DS_OK, "mkdir u.old");
    snprintf(tm.tag, sizeof tm.tag, "u.old");
    snprintf(path, sizeof path, "%s/u.old/meta.json", dir);
    CHECK(ds_ckpt_meta_write(path, &tm) == DS_OK, "write u.old's meta: %s", ds_last_error());
    CHECK(ds_ckpt_remove_stale(dir, NULL, NULL) == DS_OK, "remove_stale: %s", ds_last_error());
    CHECK(access(path, F_OK) == 0, "a user's tag u.old was touched");
    ds_ckpt_meta_free(&tm);
    /* a commit over a tag whose replacing commit a crash cut (t.old, no t):
     * t is put back first, then replaced as usual (save_best's folder has
     * no start-up to put it back) */
    snprintf(path, sizeof path, "%s/t", dir);
    CHECK(rename(path, aside) == 0, "rename t -> t.old");
    snprintf(path, sizeof path, "%s/t.tmp", dir);
    CHECK(ds_ckpt_mkdirs(path) == DS_OK, "mkdir");
    CHECK(ds_ckpt_commit_dir(dir, "t") == DS_OK, "commit over t.old: %s", ds_last_error());
    CHECK(access(aside, F_OK) != 0, "commit over t.old: t.old left");
    snprintf(path, sizeof path, "%s/t/round2", dir);
    CHECK(access(path, F_OK) != 0, "commit over t.old: the old t's file is still there");
    /* u.old: a flat folder of this test's own, gone with the rest below */
    snprintf(path, sizeof path, "%s/u.old", dir);
    CHECK(ds_ckpt_remove_flat_dir(path) == DS_OK, "remove u.old: %s", ds_last_error());
    CHECK(ds_ckpt_check_tag("x.old") == DS_ERR_INVALID_ARG, "a tag ending in .old accepted");
    CHECK(ds_ckpt_remove_flat_dir(dir) == DS_ERR_IO, "a folder holding a folder is not removed");
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tests/ckpt_meta", DS_BINARY_DIR);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) return 1;
    test_roundtrip();
    test_sealed();
    test_damaged();
    test_tags_and_folders();
    if (test_fails() == 0) { /* keep the files of a failed run */
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) return 1;
    }
    return test_finish("test_ckpt_meta");
}
