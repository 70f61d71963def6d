/* Preloaded (LD_PRELOAD) into every process of the sanitizer test run
 * (tools/test_sanitize.sh): dlclose does nothing, so the modules a process
 * opened stay mapped until it exits.
 *
 * Why: Open MPI loads its components (mca_*.so) with dlopen and closes them
 * in MPI_Finalize, leaving some of their allocations behind. When
 * LeakSanitizer reports at exit, a frame in a closed module has no name
 * ("<unknown module>"), so no suppression can match it, and the test fails
 * on a leak that is not ours. Whole stacks through libmpi would match
 * instead, but the DWARF unwinder that finds them, run on every malloc,
 * made the multi-rank tests 3-4x slower than ASan alone. With the modules
 * kept, the fast frame-pointer unwinder's first frame names the component,
 * and lsan.supp matches it.
 *
 * Built without sanitizers: the shell, mpirun and every other program of a
 * test load it too. zero-engine itself never dlcloses in the cpu tests (the
 * cuda module is the only thing it opens, and only when a GPU is asked for). */
int dlclose(void *handle);

int dlclose(void *handle) {
    (void)handle;
    return 0;
}
