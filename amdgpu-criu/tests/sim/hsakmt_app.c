/*
 * A ROCm program on AMD's thunk (libhsakmt) for the `amdgpu-criu sim`
 * tests, run unmodified on a simulated machine and checkpointed and
 * restored there by real CRIU.
 *
 *   hsakmt_app GPUS MIB [PROCESSES]
 *
 * With PROCESSES > 1 the program first forks PROCESSES - 1 children (before
 * any process opens a device), and every process, the parent included,
 * does the same on its own: on GPUS of the machine's GPU nodes (starting
 * at its own index, wrapping), a CPU-visible VRAM BO of MIB MiB and a
 * 1 MiB GTT BO, filled with a pseudo-random pattern seeded per BO; on its
 * first GPU also a 1 MiB user pointer BO, an SDMA queue and two events.
 *
 * Each process then prints one line, "ready pid=P gpus=G bos=B queues=Q
 * events=E", and runs on. On SIGUSR1 it checks its state and prints
 * "check pid=P n=N bos=V sdma=S", where V is "ok" when every BO still holds
 * its pattern as the process reads it through its own mappings ("bad:" and
 * where otherwise), and S is what an SDMA copy it submits now on its queue
 * did: "ok" (the GTT BO's pattern arrived in a second GTT BO), "stuck" (the
 * queue did not consume the packet while the process watched) or
 * "bad:OFFSET". On SIGTERM it exits 0.
 *
 * Every line goes to standard output, which `sim run --output` makes a
 * file; a failed call prints "fail CALL status=N" and exits 1.
 */
#define _GNU_SOURCE
#include <hsakmt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define MAX_BOS 64

#define CHECK(call)                                                                    \
    do {                                                                               \
        HSAKMT_STATUS s_ = (call);                                                     \
        if (s_ != HSAKMT_STATUS_SUCCESS) {                                             \
            printf("fail %s status=%d pid=%d\n", #call, (int)s_, (int)getpid());        \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static uint64_t next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void fill(void *p, HSAuint64 size, uint64_t seed)
{
    uint64_t *w = p, x = seed;
    for (HSAuint64 i = 0; i < size / 8; i++)
        w[i] = next(&x);
}

/* The first offset where `p` differs from its pattern, or -1. */
static long long mismatch(const void *p, HSAuint64 size, uint64_t seed)
{
    const uint64_t *w = p;
    uint64_t x = seed;
    for (HSAuint64 i = 0; i < size / 8; i++)
        if (w[i] != next(&x))
            return (long long)(i * 8);
    return -1;
}

struct bo {
    const char *kind;
    void *addr;
    HSAuint64 size;
    uint64_t seed;
};

static struct bo bos[MAX_BOS];
static int nbos;
static volatile sig_atomic_t check_asked, stop_asked;

static void on_usr1(int sig)
{
    (void)sig;
    check_asked = 1;
}

static void on_term(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static void *alloc(HSAuint32 node, HSAuint32 gpu, HSAuint64 size, int vram)
{
    HsaMemFlags f;
    void *p;
    memset(&f, 0, sizeof(f));
    f.ui32.NonPaged = 1;
    f.ui32.HostAccess = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(vram ? node : 0, size, f, &p));
    CHECK(hsaKmtMapMemoryToGPUNodes(p, size, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    return p;
}

static void filled(const char *kind, void *addr, HSAuint64 size)
{
    if (nbos == MAX_BOS)
        exit(2);
    struct bo *b = &bos[nbos];
    b->kind = kind;
    b->addr = addr;
    b->size = size;
    b->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(nbos + 1) ^ (uint64_t)getpid();
    fill(addr, size, b->seed);
    nbos++;
}

/* The SDMA queue and the two GTT BOs its copy goes between. */
static HsaQueueResource sdma;
static uint8_t *ring;
static uint64_t wptr;
static struct bo *copy_src;
static uint8_t *copy_dst;

/* One LINEAR COPY (SDMA v4 and later: op 1, sub-op 0, COUNT = bytes - 1)
 * of the first GTT BO into copy_dst; what it did. */
static const char *sdma_copy(char *out, size_t len)
{
    const uint32_t bytes = 64 * 1024;
    memset(copy_dst, 0, bytes);
    uint64_t src = (uint64_t)(uintptr_t)copy_src->addr, dst = (uint64_t)(uintptr_t)copy_dst;
    uint32_t packet[7] = {
        1, bytes - 1, 0, (uint32_t)src, (uint32_t)(src >> 32), (uint32_t)dst, (uint32_t)(dst >> 32),
    };
    uint64_t at = wptr % (64 << 10);
    if (at + sizeof(packet) > (64 << 10)) {
        /* Pad to the ring's end with NOPs (op 0). */
        memset(ring + at, 0, (64 << 10) - at);
        wptr += (64 << 10) - at;
        at = 0;
    }
    memcpy(ring + at, packet, sizeof(packet));
    wptr += sizeof(packet);
    __atomic_store_n(sdma.Queue_write_ptr_aql, wptr, __ATOMIC_RELEASE);
    __atomic_store_n(sdma.Queue_DoorBell_aql, wptr, __ATOMIC_RELEASE);
    for (int i = 0; i < 2000; i++) {
        if (__atomic_load_n(sdma.Queue_read_ptr_aql, __ATOMIC_ACQUIRE) == wptr) {
            long long at2 = mismatch(copy_dst, bytes, copy_src->seed);
            if (at2 < 0)
                return "ok";
            snprintf(out, len, "bad:%lld", at2);
            return out;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return "stuck";
}

static int work(unsigned index, unsigned want, HSAuint64 vram_size)
{
    HsaSystemProperties sys;
    CHECK(hsaKmtOpenKFD());
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    HSAuint32 nodes[64];
    unsigned all = 0;
    for (HSAuint32 node = 0; node < sys.NumNodes && all < 64; node++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(node, &p));
        if (p.NumFComputeCores)
            nodes[all++] = node;
    }
    if (all == 0 || want == 0) {
        printf("fail no GPU node status=0 pid=%d\n", (int)getpid());
        return 1;
    }
    if (want > all)
        want = all;
    HSAuint32 first = nodes[index % all];
    for (unsigned g = 0; g < want; g++) {
        HSAuint32 gpu = nodes[(index + g) % all];
        filled("vram", alloc(gpu, gpu, vram_size, 1), vram_size);
        filled("gtt", alloc(gpu, gpu, 1 * MiB, 0), 1 * MiB);
    }
    copy_src = &bos[1];

    void *user;
    if (posix_memalign(&user, 4096, 1 * MiB) != 0)
        return 2;
    CHECK(hsaKmtRegisterMemoryToNodes(user, 1 * MiB, 1, &first));
    CHECK(hsaKmtMapMemoryToGPUNodes(user, 1 * MiB, NULL, (HsaMemMapFlags){0}, 1, &first));
    filled("userptr", user, 1 * MiB);

    ring = alloc(first, first, 64 << 10, 0);
    memset(ring, 0, 64 << 10);
    copy_dst = alloc(first, first, 1 * MiB, 0);
    memset(&sdma, 0, sizeof(sdma));
    CHECK(hsaKmtCreateQueue(first, HSA_QUEUE_SDMA, 100, HSA_QUEUE_PRIORITY_NORMAL, ring, 64 << 10,
                            NULL, &sdma));
    HsaEventDescriptor d;
    HsaEvent *event, *event2;
    memset(&d, 0, sizeof(d));
    d.EventType = HSA_EVENTTYPE_SIGNAL;
    d.NodeId = first;
    CHECK(hsaKmtCreateEvent(&d, true, false, &event));
    CHECK(hsaKmtCreateEvent(&d, false, false, &event2));

    char what[64];
    const char *before = sdma_copy(what, sizeof(what));
    printf("ready pid=%d gpus=%u bos=%d queues=1 events=2 sdma=%s\n", (int)getpid(), want,
           nbos + 2, before);
    for (unsigned n = 1; !stop_asked; n++) {
        if (check_asked) {
            check_asked = 0;
            const char *verdict = "ok";
            char bad[128];
            for (int i = 0; i < nbos; i++) {
                long long at = mismatch(bos[i].addr, bos[i].size, bos[i].seed);
                if (at >= 0) {
                    snprintf(bad, sizeof(bad), "bad:%s@%lld", bos[i].kind, at);
                    verdict = bad;
                    break;
                }
            }
            printf("check pid=%d n=%u bos=%s sdma=%s\n", (int)getpid(), n, verdict,
                   sdma_copy(what, sizeof(what)));
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s GPUS MIB [PROCESSES]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned want = (unsigned)atoi(argv[1]);
    HSAuint64 vram_size = (HSAuint64)atoll(argv[2]) * MiB;
    unsigned processes = argc == 4 ? (unsigned)atoi(argv[3]) : 1;
    signal(SIGUSR1, on_usr1);
    signal(SIGTERM, on_term);
    unsigned index = 0;
    for (unsigned i = 1; i < processes; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            index = i;
            break;
        }
    }
    int status = work(index, want, vram_size);
    if (index == 0)
        while (wait(NULL) > 0)
            ;
    return status;
}
