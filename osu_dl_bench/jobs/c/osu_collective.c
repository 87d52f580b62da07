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
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES (1L << 30)
#define MAX_ITERATIONS 1000000L

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

/* A whole number in [least, most] from text, or -1 (strtol with its end checked: "1e3",
 * "12abc" and out-of-range values are refused, not read as something else). */
static long parse_whole(const char *text, long least, long most)
{
    char *end = NULL;
    long value;
    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < least || value > most)
        return -1;
    return value;
}

int main(int argc, char **argv)
{
    int rank, ranks, allreduce;
    long min_bytes, max_bytes, bytes, small, large;
    float *send, *recv;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc != 6)
        fail(rank, "usage: osu_collective allreduce|bcast MIN MAX ITERS_SMALL ITERS_LARGE");
    if (strcmp(argv[1], "allreduce") && strcmp(argv[1], "bcast"))
        fail(rank, "the collective must be allreduce or bcast");
    allreduce = strcmp(argv[1], "allreduce") == 0;
    min_bytes = parse_whole(argv[2], 1, MAX_BYTES);
    max_bytes = parse_whole(argv[3], 1, MAX_BYTES);
    small = parse_whole(argv[4], 1, MAX_ITERATIONS);
    large = parse_whole(argv[5], 1, MAX_ITERATIONS);
    if (min_bytes < 0 || max_bytes < min_bytes || small < 0 || large < 0)
        fail(rank, "expected 1 <= MIN <= MAX <= 1 GiB and iteration counts from 1 to 10^6");
    send = calloc((size_t)max_bytes / sizeof(float) + 1, sizeof(float));
    recv = calloc((size_t)max_bytes / sizeof(float) + 1, sizeof(float));
    if (send == NULL || recv == NULL)
        fail(rank, "out of memory for the buffers");
    /* MAX_BYTES keeps bytes * 2 far from overflowing a long. */
    for (bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        int count = (int)(bytes / (long)sizeof(float));
        double mine, sum = 0.0;
        if (count < 1)
            continue;
        mine = mean_latency_us(allreduce, send, recv, count,
                               (int)(bytes <= 8192 ? small : large));
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            /* The bytes moved: whole elements of the size asked for. */
            printf("%ld %.4f\n", (long)count * (long)sizeof(float), sum / ranks);
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
