/*
 * Forks while other threads are inside the simulated kernel, for
 * fork_safety.rs: a forked child of a process with the interposer's
 * in-process machine must never find a lock taken by a thread it does not
 * have.
 *
 *   fork_probe FORKS
 *
 * The process (AMD's thunk, libhsakmt, on the machine of KFD_SIM_MACHINE)
 * makes an SDMA queue whose engine runs in a simulator thread, and starts
 * two threads of its own: one keeps that queue busy (NOP packets, doorbell
 * rings: the simulator's engine and doorbell watcher threads at work), one
 * keeps calling into the simulated kernel (AMDKFD_IOC_GET_CLOCK_COUNTERS,
 * as ROCr's runtime threads call the thunk). Then it forks FORKS times;
 * each child opens the KFD anew (libhsakmt's fork handling), makes and
 * runs an SDMA queue of its own, and exits 0 once the queue consumed its
 * packets. A child still running 60 s after its fork is stuck (a child ends
 * within a second when nothing blocks it): the probe
 * prints "stuck fork=N pid=P", kills it and exits 1; "forks=N ok" when
 * every child ended well. A failed call prints "fail CALL status=N".
 */
#define _GNU_SOURCE
#include <hsakmt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                           \
    do {                                                                      \
        HSAKMT_STATUS s_ = (call);                                            \
        if (s_ != HSAKMT_STATUS_SUCCESS) {                                    \
            printf("fail %s status=%d\n", #call, (int)s_);                    \
            fflush(stdout);                                                   \
            _exit(1);                                                         \
        }                                                                     \
    } while (0)

#define RING_BYTES 4096u
/* An SDMA NOP packet: opcode 0, one dword. */
#define SDMA_NOP 0u

struct sdma_queue {
    uint32_t *ring;
    HsaQueueResource res;
    uint64_t wptr;
};

static atomic_int stop;
static HSAuint32 gpu;

static HSAuint32 first_gpu(void)
{
    HsaSystemProperties sys;
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    for (HSAuint32 n = 0; n < sys.NumNodes; n++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(n, &p));
        if (p.NumFComputeCores > 0)
            return n;
    }
    printf("fail no GPU node status=0\n");
    _exit(1);
}

static void *host_memory(HSAuint64 size)
{
    HsaMemFlags f;
    void *p;
    memset(&f, 0, sizeof(f));
    f.ui32.NonPaged = 1;
    f.ui32.HostAccess = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(0, size, f, &p));
    CHECK(hsaKmtMapMemoryToGPUNodes(p, size, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    return p;
}

static void queue_create(struct sdma_queue *q)
{
    q->ring = host_memory(RING_BYTES);
    memset(q->ring, 0, RING_BYTES);
    memset(&q->res, 0, sizeof(q->res));
    q->wptr = 0;
    CHECK(hsaKmtCreateQueue(gpu, HSA_QUEUE_SDMA, 100, HSA_QUEUE_PRIORITY_NORMAL, q->ring,
                            RING_BYTES, NULL, &q->res));
}

static uint64_t queue_rptr(struct sdma_queue *q)
{
    return __atomic_load_n((volatile uint64_t *)q->res.Queue_read_ptr, __ATOMIC_ACQUIRE);
}

/* Writes `n` NOPs (the ring never more than half full) and rings. */
static void queue_nops(struct sdma_queue *q, unsigned n)
{
    while (q->wptr - queue_rptr(q) > RING_BYTES / 2) {
        if (atomic_load(&stop))
            return;
        sched_yield();
    }
    for (unsigned i = 0; i < n; i++) {
        q->ring[(q->wptr % RING_BYTES) / 4] = SDMA_NOP;
        q->wptr += 4;
    }
    __atomic_store_n((volatile uint64_t *)q->res.Queue_write_ptr, q->wptr, __ATOMIC_RELEASE);
    __atomic_store_n((volatile uint64_t *)q->res.Queue_DoorBell, q->wptr, __ATOMIC_RELEASE);
}

static void *keep_busy(void *arg)
{
    struct sdma_queue *q = arg;
    while (!atomic_load(&stop))
        queue_nops(q, 64);
    return NULL;
}

static void *keep_calling(void *arg)
{
    (void)arg;
    HsaClockCounters c;
    while (!atomic_load(&stop))
        CHECK(hsaKmtGetClockCounters(gpu, &c));
    return NULL;
}

static int child(void)
{
    struct sdma_queue q;
    CHECK(hsaKmtOpenKFD());
    gpu = first_gpu();
    queue_create(&q);
    queue_nops(&q, 16);
    while (queue_rptr(&q) != q.wptr)
        usleep(100);
    CHECK(hsaKmtDestroyQueue(q.res.QueueId));
    CHECK(hsaKmtCloseKFD());
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FORKS\n", argv[0]);
        return 2;
    }
    int forks = atoi(argv[1]);
    struct sdma_queue q;
    pthread_t busy, calling;

    CHECK(hsaKmtOpenKFD());
    gpu = first_gpu();
    queue_create(&q);
    if (pthread_create(&busy, NULL, keep_busy, &q) != 0 ||
        pthread_create(&calling, NULL, keep_calling, NULL) != 0) {
        printf("fail pthread_create status=0\n");
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < forks && !failed; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            printf("fail fork status=0\n");
            failed = 1;
            break;
        }
        if (pid == 0)
            _exit(child());
        double started = now();
        int status;
        for (;;) {
            pid_t r = waitpid(pid, &status, WNOHANG);
            if (r == pid)
                break;
            if (now() - started > 60.0) {
                printf("stuck fork=%d pid=%d\n", i, (int)pid);
                fflush(stdout);
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                failed = 1;
                break;
            }
            usleep(1000);
        }
        if (!failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            printf("fail child fork=%d status=%d\n", i, status);
            failed = 1;
        }
    }
    atomic_store(&stop, 1);
    pthread_join(busy, NULL);
    pthread_join(calling, NULL);
    if (failed)
        return 1;
    printf("forks=%d ok\n", forks);
    CHECK(hsaKmtDestroyQueue(q.res.QueueId));
    CHECK(hsaKmtCloseKFD());
    return 0;
}
