/* offload_optimizer {"device": "cpu"}: the same training as without it,
 * with master weights and moments in host memory.
 *
 *   test_offload --stage S --precision fp32|fp16|bf16 --dir D [--optimizer AdamW|SGD]
 *       on a small BERT with the global batch split over the ranks:
 *       1. equivalence: an engine without offload (A) and one with it (B,
 *          pin_memory true; a third, C, with pin_memory false) train STEPS
 *          steps; every step's loss, lr, loss scale and the final parameters
 *          must be identical bit for bit (the host update runs the cpu
 *          backend's adam/sgd slot, the arithmetic of the device update);
 *       2. accounting (ds_memory_report): offloaded, nothing is left under
 *          master/optim on the device; the host holds the master (4 bytes per
 *          partition element, fp32 training included) and the moments (what A
 *          holds on the device); the staging buffers are the partition's
 *          gradients plus, under mixed precision, its working parameters; no
 *          byte is allocated by a step (counters and peaks unchanged);
 *       3. checkpoints: A and B save at step STEPS; a fresh offloaded engine
 *          loads A's, a fresh plain one loads B's: the loaded parameters equal
 *          the saved ones bit for bit and the next two steps give the losses
 *          A gives when it continues;
 *       4. ds_set_param on the plain and the offloaded engine, then one step:
 *          the same loss and parameters (the host master took the values).
 *   test_offload --bert-mini
 *       BERT-mini (4 layers, hidden 256, vocab 30522) at stage 2, fp16, with
 *       and without offload: prints the memory split per purpose and place
 *       and checks the same accounting rules as 2. */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

#define STEPS 4
#define MORE 2
#define GLOBAL_BATCH 16

typedef struct setup {
    int stage;
    const char *precision, *optimizer, *dir;
    bool bert_mini;
} setup;

/* offload: 0 none, 1 cpu pinned, 2 cpu not pinned. */
static engine_t *make_engine(const setup *s, const ds_dataset *data, int offload) {
    ds_bert_desc bd = {.vocab_size = 50, .hidden_size = 32, .num_hidden_layers = 2,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = data->seq_len};
    if (s->bert_mini)
        bd = (ds_bert_desc){.vocab_size = 30522, .hidden_size = 256, .num_hidden_layers = 4,
                            .num_attention_heads = 4, .intermediate_size = 1024,
                            .max_position_embeddings = 512, .n_classes = 3,
                            .max_seq_len = data->seq_len};
    ds_model *model;
    REQUIRE_OK(ds_bert_create(&bd, &model));
    bool fp16 = !strcmp(s->precision, "fp16"), bf16 = !strcmp(s->precision, "bf16");
    bool sgd = !strcmp(s->optimizer, "SGD");
    char off[160] = "";
    if (offload)
        snprintf(off, sizeof off,
                 ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": %s}",
                 offload == 1 ? "true" : "false");
    char cfg[2048];
    /* fp16: from 2^18 the scale doubles after 3 clean steps and the 4th
     * overflows (a skipped step, scale halved): the skip path runs with the
     * optimizer state on the host. warmup_min_lr > 0: every update moves the
     * weights, so a stale working copy shows in the next loss. */
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"gradient_accumulation_steps\": 2,"
             " \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.003, "
             "\"weight_decay\": 0.01%s}},"
             " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.001,"
             " \"warmup_max_lr\": 0.003, \"warmup_num_steps\": 3}},"
             " \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 1000%s},"
             " \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 18, \"loss_scale_window\": 3,"
             " \"hysteresis\": 1}, \"bf16\": {\"enabled\": %s}}",
             GLOBAL_BATCH, s->optimizer, sgd ? ", \"momentum\": 0.9" : "", s->stage, off,
             fp16 ? "true" : "false", bf16 ? "true" : "false");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    REQUIRE_OK(ds_initialize(&d, &e));
    return e;
}

/* Every parameter, fp32, in table order (collective). */
static float *params(engine_t *e, size_t *n) {
    const ds_model *m = ds_get_model(e);
    size_t total = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++)
            total += (size_t)ds_param_numel(&m->modules[i]->params[p]);
    float *v = malloc(total * sizeof *v);
    if (!v) TEST_DIE("out of memory");
    size_t at = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            const ds_param_desc *d = &m->modules[i]->params[p];
            REQUIRE_OK(ds_get_param(e, d->name, v + at, (size_t)ds_param_numel(d)));
            at += (size_t)ds_param_numel(d);
        }
    *n = total;
    return v;
}

static void train(engine_t *e, int steps, ds_step_info *out) {
    for (int i = 0; i < steps; i++) REQUIRE_OK(ds_train_batch(e, &out[i]));
}

static void same_steps(const char *what, const ds_step_info *a, const ds_step_info *b, int n) {
    for (int i = 0; i < n; i++) /* bit for bit: exact comparisons on purpose */
        CHECK(a[i].loss == b[i].loss && a[i].lr == b[i].lr &&
                  a[i].loss_scale == b[i].loss_scale && a[i].skipped == b[i].skipped,
              "%s: step %d: loss %a vs %a, lr %a vs %a, scale %g vs %g", what, i, a[i].loss,
              b[i].loss, a[i].lr, b[i].lr, a[i].loss_scale, b[i].loss_scale);
}

static void same_params(const char *what, engine_t *a, engine_t *b) {
    size_t na, nb;
    float *pa = params(a, &na), *pb = params(b, &nb);
    CHECK(na == nb && memcmp(pa, pb, na * sizeof *pa) == 0, "%s: parameters differ", what);
    for (size_t i = 0, shown = 0; na == nb && i < na && shown < 3; i++)
        if (memcmp(&pa[i], &pb[i], sizeof *pa) != 0) {
            TEST_FAIL("%s: parameter element %zu: %a vs %a", what, i, pa[i], pb[i]);
            shown++;
        }
    free(pa);
    free(pb);
}

#define B(r, p, pl) ((r).bytes[p][pl])

static double mib(uint64_t b) { return (double)b / 1048576.0; }

static void print_split(const char *what, const ds_mem_report *r) {
    printf("%s (MiB per rank)\n  %-12s %10s %10s\n", what, "purpose", "device", "host");
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        printf("  %-12s %10.3f %10.3f\n", ds_mem_purpose_name((ds_mem_purpose)p),
               mib(B(*r, p, DS_PLACE_DEVICE)), mib(B(*r, p, DS_PLACE_HOST)));
    printf("  %-12s %10.3f %10.3f\n", "total", mib(r->total[DS_PLACE_DEVICE]),
           mib(r->total[DS_PLACE_HOST]));
}

/* The accounting rules of an offloaded engine (off) against the same
 * engine without offload (plain), both right after initialisation. */
static void check_split(const setup *s, const ds_mem_report *plain, const ds_mem_report *off) {
    bool sgd = !strcmp(s->optimizer, "SGD"), mixed = strcmp(s->precision, "fp32") != 0;
    int moments = sgd ? 1 : 2; /* SGD runs with momentum 0.9 */
    uint64_t optim = B(*plain, DS_MEM_OPTIM, DS_PLACE_DEVICE);
    uint64_t part = optim / (uint64_t)(4 * moments); /* partition elements */
    CHECK(part > 0 && optim == part * 4u * (uint64_t)moments, "plain optim bytes %llu",
          (unsigned long long)optim);
    CHECK_EQ_I((long long)B(*off, DS_MEM_MASTER, DS_PLACE_DEVICE), 0);
    CHECK_EQ_I((long long)B(*off, DS_MEM_OPTIM, DS_PLACE_DEVICE), 0);
    CHECK_EQ_I((long long)B(*off, DS_MEM_OPTIM, DS_PLACE_HOST), (long long)optim);
    /* master on the host always; the plain run keeps one (on the device) only when mixed */
    CHECK_EQ_I((long long)B(*off, DS_MEM_MASTER, DS_PLACE_HOST), (long long)(part * 4));
    CHECK_EQ_I((long long)B(*plain, DS_MEM_MASTER, DS_PLACE_DEVICE),
               (long long)(mixed ? part * 4 : 0));
    /* staging: the gradients (grad dtype = param dtype here) and, mixed, the
     * low-precision working parameters the host update writes */
    uint64_t esz = mixed ? 2 : 4;
    CHECK_EQ_I((long long)(B(*off, DS_MEM_BUFFERS, DS_PLACE_HOST) -
                           B(*plain, DS_MEM_BUFFERS, DS_PLACE_HOST)),
               (long long)(part * esz + (mixed ? part * esz : 0)));
    /* everything else stays where it was */
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        if (p != DS_MEM_MASTER && p != DS_MEM_OPTIM)
            CHECK(B(*off, p, DS_PLACE_DEVICE) == B(*plain, p, DS_PLACE_DEVICE),
                  "%s on the device: %llu offloaded vs %llu", ds_mem_purpose_name((ds_mem_purpose)p),
                  (unsigned long long)B(*off, p, DS_PLACE_DEVICE),
                  (unsigned long long)B(*plain, p, DS_PLACE_DEVICE));
}

static void check_no_growth(const char *what, const ds_mem_report *before,
                            const ds_mem_report *after) {
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        for (int pl = 0; pl < DS_PLACE_COUNT; pl++)
            CHECK(after->bytes[p][pl] == before->bytes[p][pl] &&
                      after->peak[p][pl] == before->peak[p][pl],
                  "%s: %s on %s: %llu (peak %llu) after the steps, %llu (peak %llu) before", what,
                  ds_mem_purpose_name((ds_mem_purpose)p), ds_mem_place_name((ds_mem_place)pl),
                  (unsigned long long)after->bytes[p][pl], (unsigned long long)after->peak[p][pl],
                  (unsigned long long)before->bytes[p][pl],
                  (unsigned long long)before->peak[p][pl]);
}

static int run_bert_mini(setup *s) {
    s->stage = 2;
    s->precision = "fp16";
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * 2, 16, 30522);
    if (!data) TEST_DIE("dataset");
    ds_mem_report rp, ro, ro2;
    ds_step_info info[1];
    engine_t *plain = make_engine(s, data, 0);
    ds_memory_report(plain, &rp);
    int rank = ds_rank(plain);
    test_set_rank(rank);
    ds_finalize(plain);
    engine_t *off = make_engine(s, data, 1);
    ds_memory_report(off, &ro);
    train(off, 1, info);
    ds_memory_report(off, &ro2);
    int world = ds_world_size(off);
    ds_finalize(off);
    check_split(s, &rp, &ro);
    check_no_growth("bert-mini offloaded", &ro, &ro2);
    if (rank == 0) {
        printf("BERT-mini, stage 2, fp16, AdamW, %d ranks\n", world);
        print_split("without offload", &rp);
        print_split("offload_optimizer cpu, pin_memory true", &ro);
    }
    ds_dataset_destroy(data);
    return test_finish("test_offload --bert-mini");
}

int main(int argc, char **argv) {
    setup s = {.stage = 2, .precision = "fp32", .optimizer = "AdamW"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bert-mini")) s.bert_mini = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--stage")) s.stage = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--precision")) s.precision = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--optimizer")) s.optimizer = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--dir")) s.dir = argv[++i];
        else {
            fprintf(stderr, "test_offload: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (s.bert_mini) return run_bert_mini(&s);
    if (!s.dir) {
        fprintf(stderr, "test_offload: --dir is required\n");
        return 2;
    }
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * (STEPS + MORE), 12, 50);
    if (!data) TEST_DIE("dataset");

    /* 1 + 2: the same run with and without offload, and the memory split */
    ds_step_info ia[STEPS + MORE], ib[STEPS], ic[STEPS], tail[MORE];
    ds_mem_report ra, rb, rb2, rc;
    engine_t *a = make_engine(&s, data, 0);
    test_set_rank(ds_rank(a));
    engine_t *b = make_engine(&s, data, 1);
    engine_t *c = make_engine(&s, data, 2);
    ds_memory_report(a, &ra);
    ds_memory_report(b, &rb);
    ds_memory_report(c, &rc);
    check_split(&s, &ra, &rb);
    check_split(&s, &ra, &rc); /* pinned or not, the same places and sizes */
    train(a, STEPS, ia);
    train(b, STEPS, ib);
    train(c, STEPS, ic);
    ds_memory_report(b, &rb2);
    check_no_growth("offloaded steps", &rb, &rb2);
    same_steps("offload vs none", ia, ib, STEPS);
    int updates = 0;
    for (int i = 0; i < STEPS; i++) updates += !ia[i].skipped;
    /* the comparisons prove something only if the weights moved */
    CHECK(updates >= STEPS - 1 && ia[STEPS - 1].loss != ia[0].loss,
          "the reference run took %d updates of %d, loss %g -> %g", updates, STEPS, ia[0].loss,
          ia[STEPS - 1].loss);
    same_steps("offload unpinned vs none", ia, ic, STEPS);
    same_params("offload vs none", a, b);
    same_params("offload unpinned vs none", a, c);
    ds_finalize(c);

    /* 3: checkpoints cross the offload boundary both ways */
    char da[1024], db[1024];
    snprintf(da, sizeof da, "%s/plain", s.dir);
    snprintf(db, sizeof db, "%s/offload", s.dir);
    REQUIRE_OK(ds_save_checkpoint(a, da, NULL, NULL));
    REQUIRE_OK(ds_save_checkpoint(b, db, NULL, NULL));
    ds_finalize(b);
    engine_t *oa = make_engine(&s, data, 1); /* offloaded, loads the plain save */
    engine_t *pb = make_engine(&s, data, 0); /* plain, loads the offloaded save */
    REQUIRE_OK(ds_load_checkpoint(oa, da, NULL, DS_LOAD_ALL));
    REQUIRE_OK(ds_load_checkpoint(pb, db, NULL, DS_LOAD_ALL));
    same_params("offloaded engine loading a plain checkpoint", a, oa);
    same_params("plain engine loading an offloaded checkpoint", a, pb);
    train(a, MORE, ia + STEPS);
    train(oa, MORE, tail);
    same_steps("continued after loading into offload", ia + STEPS, tail, MORE);
    train(pb, MORE, tail);
    same_steps("continued after loading from offload", ia + STEPS, tail, MORE);
    same_params("after the continued steps", a, oa);

    /* 4: ds_set_param reaches the host master (the next update starts from it) */
    const ds_param_desc *p0 = &ds_get_model(a)->modules[0]->params[0];
    size_t n0 = (size_t)ds_param_numel(p0);
    float *v0 = malloc(n0 * sizeof *v0);
    if (!v0) TEST_DIE("out of memory");
    for (size_t i = 0; i < n0; i++) v0[i] = 0.001f * (float)(i % 97) - 0.05f;
    REQUIRE_OK(ds_set_param(a, p0->name, v0, n0));
    REQUIRE_OK(ds_set_param(oa, p0->name, v0, n0));
    free(v0);
    same_params("after ds_set_param", a, oa);
    train(a, 1, ia);
    train(oa, 1, tail);
    same_steps("the step after ds_set_param", ia, tail, 1);
    same_params("the step after ds_set_param", a, oa);
    int rank = ds_rank(a);
    ds_finalize(pb);
    ds_finalize(oa);
    ds_finalize(a);
    ds_dataset_destroy(data);
    if (rank == 0 && test_fails() == 0)
        printf("stage %d %s %s: %d steps bit-identical with and without offload, "
               "checkpoints cross both ways\n", s.stage, s.precision, s.optimizer, STEPS + MORE);
    return test_finish("test_offload");
}
