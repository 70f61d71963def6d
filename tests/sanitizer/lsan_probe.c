/* The leak check of the sanitizer run still fails on a leak of ours
 * (tests/sanitizer.cmake, test_lsan_probe.sh): with `leak`, each rank
 * loses 77 bytes allocated by a function of this program between MPI_Init
 * and MPI_Finalize; without it, nothing of its own, and whatever Open MPI
 * keeps must be suppressed (lsan.supp, keep_modules.c). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static char *probe_alloc(size_t n) {
    char *p = malloc(n);
    if (p) memset(p, 1, n);
    return p;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "leak") == 0) {
        char *volatile lost = probe_alloc(77);
        lost = NULL; /* the only pointer is gone: a direct leak */
        (void)lost;
    }
    MPI_Finalize();
    return 0;
}
