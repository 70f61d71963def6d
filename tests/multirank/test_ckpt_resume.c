/* Exact and elastic resume, one phase per invocation (each a new process
 * group; tests/multirank/test_ckpt_resume.sh runs the three in turn):
 *
 *   --mode straight --steps 2K --out P   train 2K steps, log them to P.log,
 *                                        the final parameters to P.params
 *   --mode first --steps K --dir D --out P
 *                                        train K steps, ds_save_checkpoint(D),
 *                                        log to P.log, parameters at the save
 *                                        to P.params
 *   --mode second --steps K --dir D --out P --ref S --saved F [--tol X]
 *                                        a fresh engine, ds_load_checkpoint(D)
 *                                        (latest), then K more steps; checks:
 *       - the loaded parameters equal F.params bit for bit (whatever the world
 *         size and stage of the saving run: re-cutting the flat space loses
 *         nothing);
 *       - the step counter continues from the save, the client state reads
 *         back;
 *       - every continued step's lr and loss scale equal the straight run's
 *         (schedule and scaler restored);
 *       - tol 0 (same world and stage): each loss and the final parameters
 *         equal the straight run's bit for bit; tol > 0 (elastic): each loss
 *         within tol relative (the reason is in the cmake fragment where the
 *         tolerance is set);
 *       - at stages 1-3 this rank decompressed at most its partition plus one
 *         frame at each end per section (it read only what it owns).
 * Common: --model mlp|bert --stage S --precision fp32|fp16|bf16 --dropout P
 * [--nvme DIR: optimizer state swapped to DIR, offload_optimizer "nvme"]
 * [--optimizer TYPE] [--optim-params ', "key": value, ...': more optimizer
 * params, for OneBitAdam / ZeroOneAdam's schedules]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_harness.h"
#include "engine/io/ckpt_file.h"
#include "zero/flat.h"

typedef struct args {
    const char *mode, *dir, *out, *ref, *saved;
    int steps;
    double tol;
    ck_setup s;
} args;

static int fail_msg(const char *what) {
    fprintf(stderr, "test_ckpt_resume: %s: %s\n", what, ds_last_error());
    return 1;
}

static int parse(int argc, char **argv, args *a) {
    memset(a, 0, sizeof *a);
    ck_setup_defaults(&a->s);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--mode")) a->mode = v;
        else if (!strcmp(k, "--dir")) a->dir = v;
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--ref")) a->ref = v;
        else if (!strcmp(k, "--saved")) a->saved = v;
        else if (!strcmp(k, "--steps")) a->steps = atoi(v);
        else if (!strcmp(k, "--tol")) a->tol = atof(v);
        else if (!strcmp(k, "--model")) a->s.model = v;
        else if (!strcmp(k, "--stage")) a->s.stage = atoi(v);
        else if (!strcmp(k, "--precision")) a->s.precision = v;
        else if (!strcmp(k, "--dropout")) a->s.dropout = (float)atof(v);
        else if (!strcmp(k, "--optimizer")) a->s.optimizer = v;
        else if (!strcmp(k, "--optim-params")) a->s.optim_params = v;
        else if (!strcmp(k, "--nvme")) {
            a->s.nvme = v;
            mkdir(v, 0755); /* every phase: an existing folder is fine */
        }
        else {
            fprintf(stderr, "test_ckpt_resume: unknown argument %s\n", k);
            return 2;
        }
    }
    if (!a->mode || !a->out || a->steps <= 0) {
        fprintf(stderr, "test_ckpt_resume: --mode, --out and --steps are required\n");
        return 2;
    }
    return 0;
}

static char *cat2(const char *a, const char *b) {
    static char buf[2][1024];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s%s", a, b);
    return buf[k];
}

/* Compare float arrays: exact (tol 0) or report the largest relative gap. */
static int compare_params(const char *what, const float *got, const float *want, size_t n,
                          bool exact) {
    size_t diff = 0, first = n;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], 4) != 0) {
            if (first == n) first = i;
            diff++;
        }
        double gap = fabs((double)got[i] - want[i]);
        if (gap > worst) worst = gap;
        if (fabs((double)want[i]) > scale) scale = fabs((double)want[i]);
    }
    if (exact && diff) {
        printf("FAIL: %s: %zu of %zu values differ (first at %zu: %.9g vs %.9g)\n", what, diff, n,
               first, got[first], want[first]);
        return 1;
    }
    printf("%s: %zu values, %zu differ in bits, largest gap %.3e (largest value %.3e)\n", what,
           n, diff, worst, scale);
    return 0;
}

/* Bytes this rank may decompress when it reads only what it owns: per
 * section its range plus a frame at each end (a frame straddling the edge). */
static int check_reads(engine_t *e, int stage, int sections) {
    ds_ckpt_io_stats io;
    ds_ckpt_io_stats_get(&io);
    ds_flat *f;
    if (ds_flat_create(ds_get_model(e), ds_world_size(e), &f) != DS_OK) return fail_msg("flat");
    const char *fe = getenv("DS_CKPT_FRAME_ELEMS");
    uint64_t frame = 4ull * (fe ? strtoull(fe, NULL, 10) : DS_CKPT_FRAME_ELEMS_DEFAULT);
    uint64_t owned = 4ull * (uint64_t)(stage == 0 ? f->padded : f->part);
    uint64_t bound = (uint64_t)sections * (owned + 2 * frame);
    uint64_t total = (uint64_t)sections * 4ull * (uint64_t)f->padded;
    ds_flat_destroy(f);
    printf("rank %d: decompressed %llu bytes in %llu frames (owns %llu per section, bound %llu, "
           "checkpoint %llu)\n", ds_rank(e), (unsigned long long)io.raw_decoded,
           (unsigned long long)io.frames_decoded, (unsigned long long)owned,
           (unsigned long long)bound, (unsigned long long)total);
    if (io.raw_decoded > bound) {
        printf("FAIL: rank %d decompressed more than its partition\n", ds_rank(e));
        return 1;
    }
    return 0;
}

static int second_checks(const args *a, engine_t *e, const ck_step *log, int n, float *p,
                         size_t np) {
    int fails = 0, rank = ds_rank(e);
    ck_step ref[256];
    int nr = ck_read_log(cat2(a->ref, ".log"), ref, 256);
    if (rank == 0) {
        if (nr < 0) {
            printf("FAIL: cannot read %s.log\n", a->ref);
            return 1;
        }
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const ck_step *r = NULL;
            for (int j = 0; j < nr; j++)
                if (ref[j].step == log[i].step) r = &ref[j];
            if (!r) {
                printf("FAIL: step %lld missing from the straight run\n", log[i].step);
                fails++;
                continue;
            }
            double rel = fabs(log[i].loss - r->loss) / fabs(r->loss);
            if (rel > worst) worst = rel;
            bool loss_ok = a->tol == 0 ? log[i].loss == r->loss : rel <= a->tol;
            if (!loss_ok || log[i].lr != r->lr || log[i].scale != r->scale) {
                printf("FAIL: step %lld: loss %.9g lr %.9g scale %g, straight run %.9g %.9g %g "
                       "(rel %.2e, tol %.0e)\n", log[i].step, log[i].loss, log[i].lr,
                       log[i].scale, r->loss, r->lr, r->scale, rel, a->tol);
                fails++;
            }
        }
        printf("resumed steps %lld..%lld: worst relative loss gap to the straight run %.3e "
               "(tolerance %s)\n", log[0].step, log[n - 1].step, worst,
               a->tol == 0 ? "0: bit for bit" : "see tests/ckpt.cmake");
        size_t nref;
        float *rp = ck_read_floats(cat2(a->ref, ".params"), &nref);
        if (!rp || nref != np) {
            printf("FAIL: %s.params unreadable or of another size\n", a->ref);
            fails++;
        } else {
            fails += compare_params("final parameters vs the straight run", p, rp, np,
                                    a->tol == 0);
        }
        free(rp);
    }
    return fails;
}

int main(int argc, char **argv) {
    args a;
    int prc = parse(argc, argv, &a);
    if (prc) return prc;
    ds_dataset *data = ck_data();
    engine_t *e;
    if (!data || ck_engine(&a.s, data, &e) != DS_OK) return fail_msg("setup");
    int rank = ds_rank(e), fails = 0;
    bool second = !strcmp(a.mode, "second");
    size_t np = 0;
    if (second) {
        ds_ckpt_io_stats_reset();
        if (ds_load_checkpoint(e, a.dir, NULL, DS_LOAD_ALL) != DS_OK) return fail_msg("load");
        if (a.s.stage > 0) fails += check_reads(e, a.s.stage, 3);
        float *p = ck_params(e, &np);
        size_t ns;
        float *sp = rank == 0 ? ck_read_floats(cat2(a.saved, ".params"), &ns) : NULL;
        if (rank == 0) {
            if (!sp || ns != np) {
                printf("FAIL: %s.params unreadable or of another size\n", a.saved);
                fails++;
            } else {
                fails += compare_params("loaded parameters vs the saving run's", p, sp, np, true);
            }
        }
        free(sp);
        free(p);
        char *client = NULL;
        if (ds_checkpoint_client_state(a.dir, NULL, &client) != DS_OK)
            return fail_msg("client state");
        if (!client || !strstr(client, "\"phase\":\"first\"")) {
            printf("FAIL: client state %s\n", client ? client : "(none)");
            fails++;
        }
        free(client);
    }
    int64_t step0 = ds_global_step(e);
    ck_step log[256];
    FILE *lf = rank == 0 ? fopen(cat2(a.out, ".log"), "w") : NULL;
    for (int i = 0; i < a.steps; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) return fail_msg("train");
        if (i == 0 && info.step != step0 + 1) {
            printf("FAIL: first step is %lld, want %lld\n", (long long)info.step,
                   (long long)step0 + 1);
            fails++;
        }
        log[i] = (ck_step){info.step, info.loss, info.lr, info.loss_scale};
        if (lf) ck_log_step(lf, &info);
    }
    if (lf) fclose(lf);
    if (!strcmp(a.mode, "first")) {
        char client[64];
        snprintf(client, sizeof client, "{\"phase\": \"first\", \"steps\": %d}", a.steps);
        if (ds_save_checkpoint(e, a.dir, NULL, client) != DS_OK) return fail_msg("save");
    }
    float *p = ck_params(e, &np);
    if (!p) return fail_msg("parameters");
    if (rank == 0 && !second && !ck_write_floats(cat2(a.out, ".params"), p, np)) {
        printf("FAIL: cannot write %s.params\n", a.out);
        fails++;
    }
    if (second) fails += second_checks(&a, e, log, a.steps, p, np);
    if (rank == 0)
        printf("%s %s: world %d stage %d %s %s, steps %lld..%lld\n", fails ? "FAIL" : "ok", a.mode,
               ds_world_size(e), a.s.stage, a.s.precision, a.s.model, (long long)step0 + 1,
               (long long)ds_global_step(e));
    free(p);
    ds_finalize(e);
    ds_dataset_destroy(data);
    return fails != 0;
}
