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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "models/models.h"
#include "offload_harness.h"
#include "tests/unit/test_util.h"

#define STEPS OFF_STEPS
#define MORE OFF_MORE
#define GLOBAL_BATCH OFF_GLOBAL_BATCH

typedef struct setup {
    int stage;
    const char *precision, *optimizer, *dir;
    bool bert_mini;
} setup;

/* offload: 0 none, 1 cpu pinned, 2 cpu not pinned. */
static engine_t *make_engine(const setup *s, const ds_dataset *data, int offload) {
    ds_bert_desc bd = off_small_bert(data->seq_len);
    if (s->bert_mini)
        bd = (ds_bert_desc){.vocab_size = 30522, .hidden_size = 256, .num_hidden_layers = 4,
                            .num_attention_heads = 4, .intermediate_size = 1024,
                            .max_position_embeddings = 512, .n_classes = 3,
                            .max_seq_len = data->seq_len};
    char off[160] = "";
    if (offload)
        snprintf(off, sizeof off,
                 ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": %s}",
                 offload == 1 ? "true" : "false");
    engine_t *e;
    REQUIRE_OK(off_engine(s->stage, s->precision, s->optimizer, off, "", &bd, data, &e));
    return e;
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
    /* staging, on the cpu backend: none for the gradients (read in place);
     * mixed, one piece of the low-precision working parameters the host
     * update writes (a piece: 4 Mi elements, or the partition if smaller) */
    uint64_t esz = mixed ? 2 : 4, piece = part < ((uint64_t)1 << 22) ? part : (uint64_t)1 << 22;
    CHECK_EQ_I((long long)(B(*off, DS_MEM_BUFFERS, DS_PLACE_HOST) -
                           B(*plain, DS_MEM_BUFFERS, DS_PLACE_HOST)),
               (long long)(mixed ? piece * esz : 0));
    /* everything else stays where it was */
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        if (p != DS_MEM_MASTER && p != DS_MEM_OPTIM)
            CHECK(B(*off, p, DS_PLACE_DEVICE) == B(*plain, p, DS_PLACE_DEVICE),
                  "%s on the device: %llu offloaded vs %llu", ds_mem_purpose_name((ds_mem_purpose)p),
                  (unsigned long long)B(*off, p, DS_PLACE_DEVICE),
                  (unsigned long long)B(*plain, p, DS_PLACE_DEVICE));
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
    off_train(off, 1, info);
    ds_memory_report(off, &ro2);
    int world = ds_world_size(off);
    ds_finalize(off);
    check_split(s, &rp, &ro);
    off_check_no_growth("bert-mini offloaded", &ro, &ro2);
    if (rank == 0) {
        printf("BERT-mini, stage 2, fp16, AdamW, %d ranks\n", world);
        print_split("without offload", &rp);
        print_split("offload_optimizer cpu, pin_memory true", &ro);
    }
    ds_dataset_destroy(data);
    return off_finish("test_offload --bert-mini");
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
    ds_step_info ia[STEPS + MORE], ib[STEPS], ic[STEPS];
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
    off_train(a, STEPS, ia);
    off_train(b, STEPS, ib);
    off_train(c, STEPS, ic);
    ds_memory_report(b, &rb2);
    off_check_no_growth("offloaded steps", &rb, &rb2);
    off_same_steps("offload vs none", ia, ib, STEPS);
    off_check_moved(ia, STEPS);
    off_same_steps("offload unpinned vs none", ia, ic, STEPS);
    off_same_params("offload vs none", a, b);
    off_same_params("offload unpinned vs none", a, c);
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
    off_cross_load(a, oa, pb, da, db, ia + STEPS, "offload");

    /* 4: ds_set_param reaches the host master (the next update starts from it) */
    off_set_param_step(a, oa, 0, "offload");
    int rank = ds_rank(a);
    ds_finalize(pb);
    ds_finalize(oa);
    ds_finalize(a);
    ds_dataset_destroy(data);
    if (rank == 0 && test_fails() == 0)
        printf("stage %d %s %s: %d steps bit-identical with and without offload, "
               "checkpoints cross both ways\n", s.stage, s.precision, s.optimizer, STEPS + MORE);
    return off_finish("test_offload");
}
