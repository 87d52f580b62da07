/* An OSU-style client for one MPI collective, for proving a selection file from C.
 *
 * The timing method of OSU Micro-Benchmarks' osu_allreduce and osu_bcast
 * (c/mpi/collective/blocking/): per message size, warm-up calls, then per iteration an
 * untimed MPI_Barrier and the timed call; each rank averages its own iteration times and
 * rank 0 prints the mean of those averages over the ranks, one "BYTES MICROSECONDS" line
 * per size. Elements are MPI_FLOAT, the reduction MPI_SUM, the root 0.
 *
 * usage: osu_collective allreduce|bcast MIN_BYTES MAX_BYTES ITERS_SMALL ITERS_LARGE
 * (ITERS_SMALL up to 8 KiB, ITERS_LARGE above, as OSU's -i and its large-message default;
 * a tenth of each more as warm-up).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(int rank, const char *message)
{
    if (rank == 0)
        fprintf(stderr, "osu_collective: %s\n", message);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void timed_call(int allreduce, float *send, float *recv, int count)
{
    if (allreduce)
        MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else
        MPI_Bcast(send, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
}

static double mean_latency_us(int allreduce, float *send, float *recv, int count, int iters)
{
    int skip = iters / 10, i;
    double total = 0.0;
    for (i = 0; i < iters + skip; i++) {
        double start;
        MPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        timed_call(allreduce, send, recv, count);
        if (i >= skip)
            total += MPI_Wtime() - start;
    }
    return total / iters * 1e6;
}

int main(int argc, char **argv)
{
    int rank, ranks, allreduce, small, large;
    long min_bytes, max_bytes, bytes;
    float *send, *recv;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc != 6)
        fail(rank, "usage: osu_collective allreduce|bcast MIN MAX ITERS_SMALL ITERS_LARGE");
    if (strcmp(argv[1], "allreduce") && strcmp(argv[1], "bcast"))
        fail(rank, "the collective must be allreduce or bcast");
    allreduce = strcmp(argv[1], "allreduce") == 0;
    min_bytes = atol(argv[2]);
    max_bytes = atol(argv[3]);
    small = atoi(argv[4]);
    large = atoi(argv[5]);
    if (min_bytes < 1 || max_bytes < min_bytes || max_bytes > (1L << 30) || small < 1 ||
        large < 1)
        fail(rank, "expected 1 <= MIN <= MAX <= 1 GiB and positive iteration counts");
    send = calloc((size_t)max_bytes / sizeof(float) + 1, sizeof(float));
    recv = calloc((size_t)max_bytes / sizeof(float) + 1, sizeof(float));
    if (send == NULL || recv == NULL)
        fail(rank, "out of memory for the buffers");
    for (bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        int count = (int)(bytes / (long)sizeof(float));
        double mine, sum = 0.0;
        if (count < 1)
            continue;
        mine = mean_latency_us(allreduce, send, recv, count, bytes <= 8192 ? small : large);
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("%ld %.4f\n", bytes, sum / ranks);
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
