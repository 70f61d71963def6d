/* ds_config.json: the JSON reader and its rules (engine/core/config*.c).
 *
 * The input is a config file (mutated with fz_mutate_json, which also puts
 * the int and int64 limits, 1e308 and such where the file has numbers). It
 * is parsed from the file (the trainers' path); when it holds no
 * NUL byte it is also parsed as a string, which must give the same
 * settings. A config that parses is resolved twice, with no
 * hints and with a trainer's hints (world 2, hidden 64, lr, micro batch,
 * epochs over 100 rows), and every resolved config is written back with
 * ds_config_to_json, which config.h promises parses and resolves to the same
 * settings (what a checkpoint's meta.json relies on): the harness checks that
 * round trip, resolving the text with the world size alone, as nothing else
 * of the first run is known to a reader of meta.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config.h"
#include "tests/fuzz/fuzz_util.h"

/* The settings of two configs, compared without their provenance (the file
 * name, and the world source resolve writes). */
static int same_settings(const ds_config *a, const ds_config *b) {
    ds_config x = *a, y = *b;
    memset(x.path, 0, sizeof x.path);
    memset(y.path, 0, sizeof y.path);
    return memcmp(&x, &y, sizeof x) == 0;
}

static void round_trip(const ds_config *resolved, const char *which) {
    ds_config_hints h;
    ds_config_hints_init(&h);
    h.world_size = resolved->world_size;
    char *text = ds_config_to_json(resolved);
    if (!text) return; /* out of memory: reported as a status elsewhere, nothing to check */
    ds_config again;
    fz_begin();
    ds_status st = fz_check(ds_config_parse_string(text, &again, fz_quiet_warn, NULL),
                            "ds_config_parse_string(ds_config_to_json)");
    if (st != DS_OK)
        fz_fail("%s: ds_config_to_json wrote a config that does not parse: %s\n%s", which,
                ds_last_error(), text);
    st = fz_check(ds_config_resolve(&again, &h), "ds_config_resolve(ds_config_to_json)");
    if (st != DS_OK)
        fz_fail("%s: ds_config_to_json wrote a config that does not resolve: %s\n%s", which,
                ds_last_error(), text);
    char *text2 = ds_config_to_json(&again);
    if (text2 && strcmp(text, text2) != 0)
        fz_fail("%s: ds_config_to_json is not stable over a parse and resolve:\n%s\n---\n%s",
                which, text, text2);
    free(text2);
    free(text);
}

static void run(const uint8_t *data, size_t size) {
    const char *path = fz_write("ds_config.json", data, size);
    ds_config parsed;
    fz_begin();
    ds_status st = fz_check(ds_config_parse_file(path, &parsed, fz_quiet_warn, NULL),
                            "ds_config_parse_file");
    if (!memchr(data, '\0', size)) {
        char *s = fz_strdup(data, size);
        ds_config from_string;
        fz_begin();
        ds_status st2 = fz_check(ds_config_parse_string(s, &from_string, fz_quiet_warn, NULL),
                                 "ds_config_parse_string");
        free(s);
        if ((st == DS_OK) != (st2 == DS_OK))
            fz_fail("the file and the string parse disagree: %s vs %s", ds_status_to_string(st),
                    ds_status_to_string(st2));
        if (st == DS_OK && !same_settings(&parsed, &from_string))
            fz_fail("the file and the string parse to different settings");
    }
    if (st != DS_OK) return;

    ds_config_hints none;
    ds_config_hints_init(&none);
    ds_config c = parsed;
    fz_begin();
    if (fz_check(ds_config_resolve(&c, &none), "ds_config_resolve") == DS_OK)
        round_trip(&c, "no hints");

    ds_config_hints trainer;
    ds_config_hints_init(&trainer);
    trainer.world_size = 2;
    trainer.world_source = "the fuzz harness";
    trainer.hidden_size = 64;
    trainer.lr = 5e-5;
    trainer.micro_batch = 4;
    trainer.epochs = 2.0;
    trainer.train_rows = 100;
    c = parsed;
    fz_begin();
    if (fz_check(ds_config_resolve(&c, &trainer), "ds_config_resolve") == DS_OK)
        round_trip(&c, "trainer hints");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run(data, size);
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    return fz_mutate_json(data, size, max_size, seed, 0);
}
