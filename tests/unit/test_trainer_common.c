/* tools/common/trainer.c: the --metrics line is JSON whatever the numbers
 * (a strict parser, jansson, reads it back): NaN and infinities are null and
 * listed in "nonfinite"; a finite line has no such member; keys with quotes,
 * backslashes and control characters are escaped; nested objects work. And
 * tr_check_input_file names the flag and what the path is. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_util.h"
#include "tools/common/trainer.h"

static json_t *line_of(void (*write)(FILE *)) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    write(f);
    fclose(f);
    json_error_t err;
    json_t *v = json_loadb(buf, n, 0, &err);
    if (!v) TEST_FAIL("not JSON: %s (%s)", buf, err.text);
    free(buf);
    return v;
}

static void diverged(FILE *f) {
    tr_jline l;
    tr_jline_begin(&l, f);
    tr_jline_int(&l, "step", 7);
    tr_jline_num(&l, "loss", "%.6f", NAN);
    tr_jline_num(&l, "lr", "%.6e", 1e-3);
    tr_jline_num(&l, "grad_norm", "%.6f", INFINITY);
    tr_jline_num(&l, "loss_scale", "%g", -INFINITY);
    tr_jline_bool(&l, "skipped", true);
    tr_jline_end(&l);
    fputc('\n', f);
}

static void all_finite(FILE *f) {
    tr_jline l, in;
    tr_jline_begin(&l, f);
    tr_jline_num(&l, "loss", "%.6f", 0.5);
    tr_jline_key(&l, "a \"label\" \\ with\ttab");
    tr_jline_begin(&in, f);
    tr_jline_num(&in, "f1", "%.6f", NAN);
    tr_jline_end(&in);
    tr_jline_end(&l);
}

int main(void) {
    json_t *v = line_of(diverged);
    json_t *nf = json_object_get(v, "nonfinite");
    CHECK(json_is_null(json_object_get(v, "loss")) && json_is_null(json_object_get(v, "grad_norm")) &&
              json_is_null(json_object_get(v, "loss_scale")),
          "non-finite numbers are null");
    CHECK(json_integer_value(json_object_get(v, "step")) == 7 &&
              json_real_value(json_object_get(v, "lr")) == 1e-3 &&
              json_is_true(json_object_get(v, "skipped")),
          "the finite members are kept");
    CHECK(json_array_size(nf) == 3 && !strcmp(json_string_value(json_array_get(nf, 0)), "loss") &&
              !strcmp(json_string_value(json_array_get(nf, 1)), "grad_norm") &&
              !strcmp(json_string_value(json_array_get(nf, 2)), "loss_scale"),
          "\"nonfinite\" names loss, grad_norm, loss_scale in order");
    json_decref(v);

    v = line_of(all_finite);
    CHECK(!json_object_get(v, "nonfinite"), "a finite line has no \"nonfinite\"");
    json_t *in = json_object_get(v, "a \"label\" \\ with\ttab");
    CHECK(in && json_is_null(json_object_get(in, "f1")) &&
              json_array_size(json_object_get(in, "nonfinite")) == 1,
          "an escaped key holding a nested object with its own \"nonfinite\"");
    json_decref(v);

    CHECK(tr_check_input_file("--data", "/") == DS_ERR_DATA &&
              strstr(ds_last_error(), "--data /: is a folder"), "%s", ds_last_error());
    CHECK(tr_check_input_file("--eval-data", "/no/such") == DS_ERR_DATA &&
              strstr(ds_last_error(), "--eval-data /no/such: no such file"), "%s", ds_last_error());
    CHECK(tr_check_input_file("--data", "/proc/self/status") == DS_OK, "a readable file");
    return test_finish("test_trainer_common");
}
