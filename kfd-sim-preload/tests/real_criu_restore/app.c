/*
 * The process real CRIU dumps and restores in real_criu_restore.rs: AMD's
 * thunk (libhsakmt) builds GPU state on the served simulated machine (the
 * interposer in its KFD_SIM_REMOTE mode), then the program runs on.
 *
 *   real_criu_gpu_app DIR GPUS VRAM_MIB
 *
 * State, on each of the first GPUS GPU nodes: a CPU-visible VRAM BO of
 * VRAM_MIB MiB and a 1 MiB GTT BO, both filled with a dense pseudo-random
 * pattern (xorshift64, seeded per BO); on the first GPU also a 1 MiB user
 * pointer BO with its own pattern, a compute (AQL) queue and an SDMA queue
 * on GTT rings, two signal events and a 4 KiB GTT mailbox.
 *
 * DIR/ready lists the state once it is built: "pid=N", then one
 * "bo kind=K node=N va=A size=S seed=X" line per filled BO and
 * "mailbox va=A"; a failed call writes "fail CALL status=N" there and the
 * program exits 1.
 *
 * Then, every 20 ms, the program stores its beat count in mailbox word 0
 * (through its CPU mapping: the simulator sees it when the mapping is the
 * BO's memory), and appends "N seen=X verify=V" to DIR/heartbeat, where X
 * is mailbox word 1 (written by the test through the simulator) and V is
 * what the program found when it last compared every filled BO, through
 * its own CPU mappings, with its pattern: "none" before the first change of
 * word 1, then "ok" or "bad:KIND:OFFSET".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <hsakmt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define MAX_BOS 64

static const char *dir;

static void say(const char *name, const char *text)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s", dir, name);
    FILE *f = fopen(tmp, "w");
    if (!f)
        exit(2);
    fputs(text, f);
    fclose(f);
    rename(tmp, path);
}

#define CHECK(call)                                                          \
    do {                                                                     \
        HSAKMT_STATUS s_ = (call);                                           \
        if (s_ != HSAKMT_STATUS_SUCCESS) {                                   \
            char m_[256];                                                    \
            snprintf(m_, sizeof(m_), "fail %s status=%d\n", #call, (int)s_); \
            say("ready", m_);                                                \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* The pattern: 64-bit words of xorshift64 from the seed, little endian. */
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
    HSAuint32 node;
    void *addr;
    HSAuint64 size;
    uint64_t seed;
};

static struct bo bos[MAX_BOS];
static int nbos;
static char listing[16384];
static size_t listed;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(listing + listed, sizeof(listing) - listed, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(listing) - listed)
        exit(2);
    listed += (size_t)n;
}

static void *alloc(HSAuint32 node, HSAuint32 gpu, HSAuint64 size, int vram, int exec)
{
    HsaMemFlags f;
    void *p;
    memset(&f, 0, sizeof(f));
    f.ui32.NonPaged = 1;
    f.ui32.HostAccess = 1;
    f.ui32.ExecuteAccess = exec;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(vram ? node : 0, size, f, &p));
    CHECK(hsaKmtMapMemoryToGPUNodes(p, size, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    return p;
}

static void filled(const char *kind, HSAuint32 node, void *addr, HSAuint64 size)
{
    struct bo *b = &bos[nbos];
    if (nbos == MAX_BOS)
        exit(2);
    b->kind = kind;
    b->node = node;
    b->addr = addr;
    b->size = size;
    b->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(nbos + 1) ^ 0x5bd1e995ull;
    fill(addr, size, b->seed);
    note("bo kind=%s node=%u va=%#llx size=%llu seed=%#llx\n", kind, node,
         (unsigned long long)(uintptr_t)addr, (unsigned long long)size,
         (unsigned long long)b->seed);
    nbos++;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR GPUS VRAM_MIB\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    unsigned want = (unsigned)atoi(argv[2]);
    HSAuint64 vram_size = (HSAuint64)atoll(argv[3]) * MiB;
    /* Files the test harness left open (the host's, which CRIU cannot
     * name from the private mount namespace) are none of this process's. */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);

    HsaSystemProperties sys;
    HSAuint32 gpus[16];
    unsigned ngpus = 0;
    CHECK(hsaKmtOpenKFD());
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    for (HSAuint32 n = 0; n < sys.NumNodes && ngpus < want && ngpus < 16; n++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(n, &p));
        if (p.NumFComputeCores)
            gpus[ngpus++] = n;
    }
    if (ngpus < want) {
        say("ready", "fail not enough GPU nodes status=0\n");
        return 1;
    }
    note("pid=%d\n", (int)getpid());
    for (unsigned g = 0; g < ngpus; g++) {
        filled("vram", gpus[g], alloc(gpus[g], gpus[g], vram_size, 1, 0), vram_size);
        filled("gtt", gpus[g], alloc(gpus[g], gpus[g], 1 * MiB, 0, 0), 1 * MiB);
    }
    HSAuint32 gpu = gpus[0];

    void *user;
    if (posix_memalign(&user, 4096, 1 * MiB) != 0)
        return 2;
    CHECK(hsaKmtRegisterMemoryToNodes(user, 1 * MiB, 1, &gpu));
    CHECK(hsaKmtMapMemoryToGPUNodes(user, 1 * MiB, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    filled("userptr", gpu, user, 1 * MiB);

    void *ring = alloc(gpu, gpu, 64 << 10, 0, 1);
    void *sdma_ring = alloc(gpu, gpu, 64 << 10, 0, 1);
    HsaQueueResource compute, sdma;
    memset(&compute, 0, sizeof(compute));
    memset(&sdma, 0, sizeof(sdma));
    CHECK(hsaKmtCreateQueue(gpu, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL, ring,
                            64 << 10, NULL, &compute));
    CHECK(hsaKmtCreateQueue(gpu, HSA_QUEUE_SDMA, 100, HSA_QUEUE_PRIORITY_NORMAL, sdma_ring,
                            64 << 10, NULL, &sdma));

    HsaEventDescriptor d;
    HsaEvent *event, *event2;
    memset(&d, 0, sizeof(d));
    d.EventType = HSA_EVENTTYPE_SIGNAL;
    d.NodeId = gpu;
    CHECK(hsaKmtCreateEvent(&d, true, false, &event));
    CHECK(hsaKmtCreateEvent(&d, false, false, &event2));

    volatile uint64_t *mailbox = alloc(gpu, gpu, 4096, 0, 0);
    memset((void *)mailbox, 0, 4096);
    note("mailbox va=%#llx\n", (unsigned long long)(uintptr_t)mailbox);
    say("ready", listing);

    char path[4096];
    snprintf(path, sizeof(path), "%s/heartbeat", dir);
    int beat = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (beat < 0)
        return 2;
    uint64_t seen = 0;
    char verdict[128] = "none";
    for (uint64_t n = 1;; n++) {
        mailbox[0] = n;
        uint64_t now = mailbox[1];
        if (now != seen) {
            seen = now;
            snprintf(verdict, sizeof(verdict), "ok");
            for (int i = 0; i < nbos; i++) {
                long long at = mismatch(bos[i].addr, bos[i].size, bos[i].seed);
                if (at >= 0) {
                    snprintf(verdict, sizeof(verdict), "bad:%s@%#llx:%lld", bos[i].kind,
                             (unsigned long long)(uintptr_t)bos[i].addr, at);
                    break;
                }
            }
        }
        char line[256];
        int len = snprintf(line, sizeof(line), "%llu seen=%#llx verify=%s\n",
                           (unsigned long long)n, (unsigned long long)seen, verdict);
        if (write(beat, line, (size_t)len) != len)
            return 2;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
