/* A user's model with the mistakes a C programmer makes building it, each
 * refused with a message that names the module and what it lacks, and none
 * freeing memory the model still holds (run under the sanitizers too):
 *
 * - the same module added twice: refused, the module stays the model's
 *   (it used to be destroyed while still in the model: a use after free);
 * - a module whose ops have no destroy, refused by name: not called;
 * - a parameter slot never declared (it trained as a one-element parameter
 *   named "");
 * - no loss module last (the engine read the head's output as the loss and
 *   crashed in its backward); a NULL forward; no modules at all;
 * - and ds_initialize refuses such a model before anything else, with the
 *   same message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "models/modules.h"
#include "tests/unit/test_util.h"

/* model: linear (4 -> 3) -> xent (3 classes) unless told otherwise */
static ds_model *small_model(bool with_loss) {
    ds_model *m = NULL;
    REQUIRE_OK(ds_model_create("user", &m));
    ds_module *lin = NULL, *loss = NULL;
    REQUIRE_OK(ds_mod_linear_create("head", "head", 4, 3, DS_ACT_NONE, DS_LINEAR_INIT_TORCH, 0.0f,
                                    &lin));
    REQUIRE_OK(ds_model_add_module(m, lin));
    if (with_loss) {
        ds_xent_desc xd = {.n_classes = 3};
        REQUIRE_OK(ds_mod_xent_create("loss", &xd, &loss));
        REQUIRE_OK(ds_model_add_module(m, loss));
    }
    return m;
}

static void expect_refused(ds_status st, const char *what, const char *a, const char *b) {
    CHECK(st == DS_ERR_INVALID_ARG, "%s: %s, want DS_ERR_INVALID_ARG", what,
          ds_status_to_string(st));
    CHECK(strstr(ds_last_error(), a) && (!b || strstr(ds_last_error(), b)),
          "%s: message \"%s\" lacks \"%s\"%s%s", what, ds_last_error(), a, b ? " or " : "",
          b ? b : "");
}

static void added_twice(void) {
    ds_model *m = small_model(false);
    ds_module *head = m->modules[0];
    expect_refused(ds_model_add_module(m, head), "the same module twice", "head added twice",
                   "ds_module_tie");
    CHECK_EQ_I(m->n_modules, 1);
    /* still the model's, alive: its name reads, and the model frees it once */
    CHECK(strcmp(m->modules[0]->name, "head") == 0, "the module's name is \"%s\"",
          m->modules[0]->name);
    ds_model_destroy(m);
}

static ds_status nop(ds_module *m, ds_module_ctx *c) {
    (void)m;
    (void)c;
    return DS_OK;
}
static size_t two(const ds_module *m, int B, int T) {
    (void)m;
    (void)B;
    (void)T;
    return 2;
}

static void missing_callbacks(void) {
    /* a loss-shaped module without destroy: refused by name, not called */
    static const ds_module_ops no_destroy = {.type = "mine", .out_elems = two,
                                             .saved_bytes = two, .scratch_bytes = two,
                                             .forward = nop, .backward = nop};
    ds_model *m = small_model(false);
    ds_module *mine = NULL;
    REQUIRE_OK(ds_module_create(&no_destroy, "mine", 0, 0, &mine));
    REQUIRE_OK(ds_model_add_module(m, mine));
    expect_refused(ds_model_check(m), "no destroy", "module mine (mine): ops.destroy is NULL",
                   NULL);
    /* a duplicate name of a module without destroy: refused, not freed */
    ds_module *again = NULL;
    REQUIRE_OK(ds_module_create(&no_destroy, "mine", 0, 0, &again));
    expect_refused(ds_model_add_module(m, again), "a second module named mine",
                   "a module named mine is already in it", NULL);
    ds_module_free(again);
    m->n_modules--; /* ds_model_destroy would not free it: the test does */
    ds_module_free(mine);
    ds_model_destroy(m);

    static const ds_module_ops no_forward = {.type = "mine", .out_elems = two,
                                             .saved_bytes = two, .scratch_bytes = two,
                                             .backward = nop, .destroy = ds_module_free};
    m = small_model(false);
    REQUIRE_OK(ds_module_create(&no_forward, "loss", 0, 0, &mine));
    REQUIRE_OK(ds_model_add_module(m, mine));
    expect_refused(ds_model_check(m), "no forward", "module loss (mine): ops.forward is NULL",
                   NULL);
    ds_model_destroy(m);
}

static void undeclared_param(void) {
    static const ds_module_ops ops = {.type = "mine", .out_elems = two, .saved_bytes = two,
                                      .scratch_bytes = two, .forward = nop, .backward = nop,
                                      .destroy = ds_module_free};
    ds_model *m = small_model(false);
    ds_module *mine = NULL;
    REQUIRE_OK(ds_module_create(&ops, "loss", 3, 0, &mine));
    REQUIRE_OK(ds_module_param(mine, 0, NULL, "a", 4, 0, DS_INIT_ZEROS, 0, 0));
    REQUIRE_OK(ds_module_param(mine, 2, NULL, "c", 4, 0, DS_INIT_ZEROS, 0, 0));
    REQUIRE_OK(ds_model_add_module(m, mine));
    expect_refused(ds_model_check(m), "slot 1 undeclared",
                   "module loss: parameter 1 of its 3 was never declared", NULL);
    ds_model_destroy(m);
}

static void no_loss_last(void) {
    ds_model *m = small_model(false);
    expect_refused(ds_model_check(m), "a head last",
                   "the last module, head (linear), outputs 3 floats", "loss module comes last");
    /* ds_initialize refuses it first (and frees it) */
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.model = m;
    d.config_json = "{\"train_batch_size\": 4}";
    engine_t *e = NULL;
    expect_refused(ds_initialize(&d, &e), "ds_initialize of a model without a loss",
                   "the last module, head", NULL);
    CHECK(e == NULL, "ds_initialize failed yet gave an engine");

    ds_model *empty = NULL;
    REQUIRE_OK(ds_model_create("user", &empty));
    expect_refused(ds_model_check(empty), "no modules", "model user has no modules", NULL);
    ds_model_destroy(empty);

    ds_model *ok = small_model(true);
    CHECK_OK(ds_model_check(ok));
    ds_model_destroy(ok);
}

int main(void) {
    added_twice();
    missing_callbacks();
    undeclared_param();
    no_loss_last();
    return test_finish("test_model_check");
}
