/* Running a test's checks under every cpu variant this CPU runs
 * (engine/backend/cpu/cpu_isa.h): DS_CPU_ISA is set to each in turn, so a
 * cpu backend created inside `fn` uses that variant's kernels.
 *
 *   test_each_cpu_variant("test_name", run_variant);   // fn(const char *isa)
 *
 * Prints "test_name: ISA checked" per variant, fails the test when none ran,
 * and leaves DS_CPU_ISA unset. */
#ifndef DS_TESTS_TEST_VARIANTS_H
#define DS_TESTS_TEST_VARIANTS_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/backend/cpu/cpu_isa.h"
#include "tests/unit/test_util.h"

static inline void test_each_cpu_variant(const char *test, void (*fn)(const char *isa)) {
    int nv = 0;
    for (int i = 0; ds_cpu_isa_names[i]; i++) {
        if (!ds_cpu_variant_find(ds_cpu_isa_names[i])) continue;
        if (setenv("DS_CPU_ISA", ds_cpu_isa_names[i], 1) != 0) TEST_DIE("setenv");
        fn(ds_cpu_isa_names[i]);
        printf("%s: %s checked\n", test, ds_cpu_isa_names[i]);
        nv++;
    }
    CHECK(nv > 0, "no cpu variant ran");
    unsetenv("DS_CPU_ISA");
}

#endif /* DS_TESTS_TEST_VARIANTS_H */
