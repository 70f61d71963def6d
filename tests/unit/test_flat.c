/* The flat parameter space: exact partitions (BERT-mini splits 50/50 over two
 * ranks, where PyTorch 1.13's ZeroRedundancyOptimizer, assigning whole
 * tensors, splits it 62/38), aligned offsets that do not depend on the world
 * size, recorded padding, and the partition clipping every stage uses. */
#include <stdio.h>

#include "engine/engine.h"
#include "models/models.h"
#include "zero/flat.h"

#include <string.h>

#include "models/modules.h"

static int fails;
#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                     \
            fails++;                                                               \
        }                                                                          \
    } while (0)

/* Two linear modules, the second tying to the first's weight (or to
 * `target` with shape d0 x d1); owner_first false puts them the other way. */
static ds_status tie_model(const char *target, int64_t d0, int64_t d1, bool owner_first,
                           ds_model **out) {
    ds_model *m;
    DS_TRY(ds_model_create("ties", &m));
    ds_module *a, *b;
    ds_status st = ds_mod_linear_create("a", "a", 4, 3, DS_ACT_NONE, DS_LINEAR_INIT_HF, 0.02f, &a);
    if (st == DS_OK)
        st = ds_mod_linear_create("b", "b", 4, 3, DS_ACT_NONE, DS_LINEAR_INIT_HF, 0.02f, &b);
    if (st == DS_OK) st = ds_module_tie(b, "b.alias", target, d0, d1);
    if (st == DS_OK) st = ds_model_add_module(m, owner_first ? a : b);
    if (st == DS_OK) st = ds_model_add_module(m, owner_first ? b : a);
    *out = m;
    return st;
}

/* Ties: one table entry per use, the target once; the alias finds the
 * owner's parameter; misdeclared ties are refused naming the module. */
static void test_ties(void) {
    ds_model *m;
    ds_flat *f = NULL;
    CHECK(tie_model("a.weight", 3, 4, true, &m) == DS_OK);
    CHECK(ds_flat_create(m, 2, &f) == DS_OK);
    if (f) {
        CHECK(f->n_params == 4 && f->n_ties == 1 && f->n_tied_params == 1);
        CHECK(f->ties[0].module == 1 && f->ties[0].param == 0 && f->tied_params[0] == 0);
        CHECK(f->modules[1].first_tie == 0 && f->modules[1].n_ties == 1);
        CHECK(ds_flat_find(f, "b.alias") == 0 && ds_flat_tied_index(f, 0) == 0);
        CHECK(ds_flat_tied_index(f, 1) == -1);
        CHECK(ds_model_num_params(m) == 2 * (12 + 3)); /* the tie adds nothing */
        ds_flat_destroy(f);
    }
    ds_model_destroy(m);
    struct {
        const char *target;
        int64_t d0, d1;
        bool owner_first;
        const char *msg;
    } bad[] = {
        {"a.nothing", 3, 4, true, "which no module declares"},
        {"a.weight", 4, 3, true, "with shape [4, 3], the parameter's is [3, 4]"},
        {"a.weight", 3, 4, false, "does not come before it"},
        {"b.weight", 3, 4, true, "which does not come before it"}, /* its own */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK(tie_model(bad[k].target, bad[k].d0, bad[k].d1, bad[k].owner_first, &m) == DS_OK);
        f = NULL;
        ds_status st = ds_flat_create(m, 1, &f);
        if (st != DS_ERR_INVALID_ARG || f || !strstr(ds_last_error(), bad[k].msg)) {
            printf("FAIL: tie case %zu: status %d, \"%s\"\n", k, (int)st, ds_last_error());
            fails++;
        }
        ds_flat_destroy(f);
        ds_model_destroy(m);
    }
}

int main(void) {
    test_ties();
    ds_bert_desc bd = {.vocab_size = 21128, .hidden_size = 256, .num_hidden_layers = 4,
                       .num_attention_heads = 4, .intermediate_size = 1024,
                       .max_position_embeddings = 512, .n_classes = 6, .max_seq_len = 128};
    ds_model *m;
    if (ds_bert_create(&bd, &m) != DS_OK) {
        printf("FAIL: %s\n", ds_last_error());
        return 1;
    }
    CHECK(ds_model_num_params(m) == 8767238);
    ds_flat *f1, *f2, *f3;
    if (ds_flat_create(m, 1, &f1) || ds_flat_create(m, 2, &f2) || ds_flat_create(m, 3, &f3)) {
        printf("FAIL: %s\n", ds_last_error());
        return 1;
    }
    CHECK(f2->numel == 8767238);
    /* parameter offsets are the same for every world size: only the tail differs */
    for (int i = 0; i < f1->n_params; i++) {
        CHECK(f1->params[i].offset == f2->params[i].offset);
        CHECK(f2->params[i].offset == f3->params[i].offset);
        CHECK(f2->params[i].offset % DS_FLAT_ALIGN == 0);
    }
    CHECK(f2->part * 2 == f2->padded && f3->part * 3 == f3->padded);
    CHECK(f2->padded >= f2->used && f2->padded - f2->used < 2 * DS_FLAT_ALIGN);
    /* alignment padding is tiny: < 0.01% of Psi */
    CHECK((double)(f2->used - f2->numel) < 1e-4 * (double)f2->numel);
    /* real parameter elements per partition: a 50/50 split to within the padding */
    int64_t real[2] = {0, 0};
    for (int i = 0; i < f2->n_params; i++)
        for (int r = 0; r < 2; r++) {
            int64_t b, e;
            const ds_flat_param *p = &f2->params[i];
            if (ds_flat_clip(f2, r, p->offset, p->offset + p->numel, &b, &e)) real[r] += e - b;
        }
    CHECK(real[0] + real[1] == f2->numel);
    double share = (double)real[0] / (double)f2->numel;
    printf("BERT-mini over 2 ranks: %lld / %lld parameters (%.4f / %.4f)\n", (long long)real[0],
           (long long)real[1], share, 1 - share);
    CHECK(share > 0.4999 && share < 0.5001);
    /* lookups and clipping */
    CHECK(ds_flat_find(f2, "bert.embeddings.word_embeddings.weight") == 0);
    CHECK(ds_flat_find(f2, "classifier.bias") == f2->n_params - 1);
    CHECK(ds_flat_find(f2, "no.such.weight") == -1);
    int64_t b, e;
    CHECK(!ds_flat_clip(f2, 1, 0, 10, &b, &e));
    CHECK(ds_flat_clip(f2, 0, f2->part - 5, f2->part + 5, &b, &e) && b == f2->part - 5 &&
          e == f2->part);
    /* one module's span is contiguous and modules are adjacent (the gradient
     * buckets rely on it) */
    for (int k = 1; k < f2->n_modules; k++) CHECK(f2->modules[k].begin == f2->modules[k - 1].end);
    ds_flat_destroy(f1);
    ds_flat_destroy(f2);
    ds_flat_destroy(f3);
    ds_model_destroy(m);
    printf("%s\n", fails ? "test_flat: FAILED" : "test_flat: ok");
    return fails != 0;
}
