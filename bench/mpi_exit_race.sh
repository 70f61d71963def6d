#!/usr/bin/env bash
# bench/mpi_exit_race.sh [RUNS]: how often Open MPI's mpirun crashes or
# hangs when a job is aborted while ranks stand in different places, the
# reason a rank that exits well waits in a barrier before MPI_Finalize
# (engine/comm/mpi_boot.c, finalize_at_exit). Four ranks, one letter each:
#   F  MPI_Finalize         A  MPI_Abort(0) after 0.1 s
#   S  sleep 30 s           B  wait in an MPI_Ibarrier (what the library does)
# For each pattern, RUNS runs (default 100), each killed after 8 s: counts of
# mpirun hung (killed) and crashed (SIGSEGV). Stop 54, Open MPI 4.1.4, the
# 2-vCPU VM: F A A A 10 hung + 9 crashed of 100; F S S A 3 + 5 of 60;
# B A A A, S A A A, F F F A none of 100 (bench/RESULTS.md).
set -u
runs=${1:-100}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/race.c" <<'C'
#include <mpi.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char m = argv[1][rank];
    MPI_Barrier(MPI_COMM_WORLD);
    if (m == 'S') sleep(30);
    if (m == 'B') {
        MPI_Request q;
        int done = 0;
        MPI_Ibarrier(MPI_COMM_WORLD, &q);
        while (!done) {
            MPI_Test(&q, &done, MPI_STATUS_IGNORE);
            usleep(1000);
        }
    }
    if (m == 'A') {
        usleep(100000);
        MPI_Abort(MPI_COMM_WORLD, 0);
    }
    MPI_Finalize();
    return 0;
}
C
mpicc -O1 "$dir/race.c" -o "$dir/race" || exit 1
flags="--oversubscribe --bind-to none --mca btl self,vader,tcp"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
for pattern in FAAA FSSA SAAA BAAA FFFA; do
    hung=0 crashed=0
    for _ in $(seq 1 "$runs"); do
        # shellcheck disable=SC2086 # flags is a list of words
        timeout -s KILL 8 mpirun $flags -np 4 "$dir/race" "$pattern" >/dev/null 2>&1
        case $? in 137) hung=$((hung + 1)) ;; 139) crashed=$((crashed + 1)) ;; esac
    done
    echo "$pattern: mpirun hung $hung, crashed $crashed of $runs"
done
