/*
 * The process real CRIU dumps and restores in real_criu_restore.rs: AMD's
 * thunk (libhsakmt) builds GPU state on the served simulated machine (the
 * interposer in its KFD_SIM_REMOTE mode), then the program runs on.
 *
 *   real_criu_gpu_app DIR GPUS VRAM_MIB [share|gpu-only]
 *
 * State, on each of the first GPUS GPU nodes: a CPU-visible VRAM BO of
 * VRAM_MIB MiB and a 1 MiB GTT BO, both filled with a dense pseudo-random
 * pattern (xorshift64, seeded per BO); on the first GPU also a 1 MiB user
 * pointer BO with its own pattern, a compute (AQL) queue and an SDMA queue
 * on GTT rings, two signal events and a 4 KiB GTT mailbox.
 *
 * With "share", the program first forks a child, which builds GPU state of
 * its own in DIR/child; the parent then allocates a 2 MiB VRAM buffer on
 * its first GPU's render node with libdrm (filled through libdrm's CPU
 * mapping), exports it as a dma-buf and passes it to the child over a
 * socket pair, which imports it on its own render node (libdrm's
 * amdgpu_bo_import, as a graphics or media stack shares a buffer) and maps
 * it; both close the dma-buf then. (The KFD's CRIU restore cannot
 * re-create a BO as an import, so a buffer shared through KFD imports
 * comes back as one copy per process: sharing that survives a restore is
 * on the render nodes.)
 *
 * With "gpu-only", the VRAM BOs are unmapped from the CPU once filled, as
 * a compute job's device memory is (their address ranges stay reserved,
 * PROT_NONE): their bytes stay the simulator's (the
 * process no longer checks them), and CRIU does not dump them as process
 * memory (the benches' setting: only the plugin moves GPU memory, as on a
 * GPU).
 *
 * DIR/ready lists the state once it is built: "pid=N", "state queues=Q
 * events=E", one "bo kind=K node=N va=A size=S seed=X" line per filled BO
 * (kind shared-cpu: libdrm's CPU mapping of the shared buffer, checked by
 * the child too), "mailbox va=A" and, with sharing, "shared minor=M
 * handle=H size=S" (its GEM handle on renderD<M>); a failed call writes
 * "fail CALL status=N" there and the program exits 1.
 *
 * Work in flight (process with queues only): before it is ready, the
 * program queues work on both queues that the GPU starts and that then
 * waits at a gate only the test opens, after a restore:
 *
 *   SDMA: POLL_REGMEM(phase == 0), ATOMIC(counter += 1), FENCE(stage = 1),
 *         POLL_REGMEM(gate == 1) -- held here --, COPY LINEAR (64 KiB),
 *         FENCE(stage = 2), FENCE(slot of event 1 = its id), TRAP(its id)
 *   AQL:  BARRIER_AND (completion signal A1), BARRIER_AND on signal G
 *         -- held here -- (completion A2, whose mailbox is event 2's slot),
 *         PM4-IB of a WRITE_DATA (completion A3)
 *
 * It waits until both engines stand at their gates, then sets phase to 1:
 * an SDMA engine that started over from the ring's start instead of the
 * saved read pointer stops at the first poll for good, and an AQL packet
 * processor finds the INVALID header of a packet it completed, so the work
 * behind the gates then never ends. DIR/ready lists "work va=A size=S",
 * the two gates, "gate va=A size=N value=V" (the test writes V there to
 * open it), and "held sdma=R aql=R" (the read pointers at the gates).
 *
 * Then, every 20 ms, the program stores its beat count in mailbox word 0
 * (through its CPU mapping: the simulator sees it when the mapping is the
 * BO's memory), and appends "N seen=X verify=V" to DIR/heartbeat, where X
 * is mailbox word 1 (written by the test through the simulator) and V is
 * what the program found when it last compared every filled BO, through
 * its own CPU mappings, with its pattern: "none" before the first change of
 * word 1, then "ok" or "bad:KIND:OFFSET".
 *
 * Once mailbox word 2 is non-zero (the test writes it after a restore),
 * the program, once, writes "waiting" to DIR/queues and waits (WAIT_EVENTS,
 * bounded) for event 1, which only the held SDMA work signals: the wait
 * ends only if the restored queue resumes from its saved read pointer and
 * the event is delivered (the shape of CRIU issue 2663). It checks what the
 * held work did (bytes copied, counters run once, read pointers at the
 * end), waits for the held AQL work (event 2), then submits new work and
 * waits for it: SDMA copies GTT -> VRAM -> GTT with a fence and a TRAP,
 * and on the AQL queue a PM4-IB of WRITE_DATA and RELEASE_MEM and a
 * barrier whose completion signal fires event 2; it checks the bytes.
 * DIR/queues then says "done ok", or "done fail WHAT" naming what did not
 * happen.
 */
#define _GNU_SOURCE
#include <amdgpu.h>
#include <amdgpu_drm.h>
#include <fcntl.h>
#include <hsakmt.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/socket.h>
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

#define CHECK_DRM(call)                                                      \
    do {                                                                     \
        int r_ = (call);                                                     \
        if (r_ != 0) {                                                       \
            char m_[256];                                                    \
            snprintf(m_, sizeof(m_), "fail %s status=%d\n", #call, r_);       \
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
static int queue_work_held;
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

/* ---- Work in flight on the queues (see the header comment) ---- */

#define WORK_SIZE (1 * MiB)
#define COPY_BYTES (64u << 10)
/* Bounds of every wait for the GPU: a queue that does not resume fails
 * the program within them, never hangs it. */
#define WAIT_MS 15000
#define READY_MS 10000

/* Offsets in the work BO (GTT, CPU-visible, mapped on the GPU). */
enum {
    W_SDMA_PHASE = 0x000,   /* u32: the first poll's value (0, then 1) */
    W_SDMA_GATE = 0x008,    /* u32: the held poll waits for 1 */
    W_SDMA_STAGE = 0x010,   /* u32: SDMA fences */
    W_SDMA_COUNTER = 0x018, /* u64: SDMA atomic add */
    W_AQL_STAGE = 0x020,    /* u32: RELEASE_MEM's data */
    W_AQL_RPTR = 0x040,     /* u64: read_dispatch_id */
    W_AQL_WPTR = 0x048,     /* u64: write_dispatch_id */
    W_SIGNALS = 0x100,      /* amd_signal_t, 64 bytes each */
    W_IB_PRE = 0x800,       /* PM4 indirect buffers, 256 bytes each */
    W_IB_NEW = 0x900,
    W_AQL_DST_PRE = 0xA00,  /* WRITE_DATA targets, 64 bytes each */
    W_AQL_DST_NEW = 0xA40,
    W_SRC_PRE = 0x10000,    /* SDMA copies, COPY_BYTES each */
    W_DST_PRE = 0x20000,
    W_SRC_NEW = 0x30000,
    W_DST_NEW = 0x40000,
};
/* Signals: the gate and the completion signals. */
enum { SIG_GATE, SIG_A1, SIG_A2, SIG_A3, SIG_A4, SIG_A5 };

/* hsa_packet_type_t, the header's fence scopes, AMD_AQL_FORMAT_PM4_IB. */
#define AQL_VENDOR 0
#define AQL_INVALID 1
#define AQL_BARRIER_AND 3
#define AQL_SYSTEM_FENCES ((2u << 9) | (2u << 11))
#define AQL_PM4_IB 1

struct ring {
    uint8_t *base;
    uint64_t size;
    uint64_t wptr; /* SDMA: bytes; AQL: packets */
    HsaQueueResource *res;
};

static struct {
    uint8_t *mem; /* the work BO */
    uint64_t vram; /* a VRAM BO for the copies' round trip */
    struct ring sdma, aql;
    HsaQueueResource sdma_res, aql_res;
    HsaEvent *sdma_event, *aql_event;
    uint64_t held_sdma, held_aql;
} w;

static volatile uint32_t *w32(uint64_t off) { return (volatile uint32_t *)(w.mem + off); }
static volatile uint64_t *w64(uint64_t off) { return (volatile uint64_t *)(w.mem + off); }
static uint64_t wva(uint64_t off) { return (uint64_t)(uintptr_t)(w.mem + off); }
static uint64_t signal_va(int i) { return wva(W_SIGNALS + 64 * (uint64_t)i); }
/* amd_signal_t.value */
static volatile int64_t *signal_value(int i) { return (volatile int64_t *)(w.mem + W_SIGNALS + 64 * i + 8); }

/* An amd_signal_t of value 1, its event mailbox `event`'s slot when given. */
static void signal_init(int i, HsaEvent *event)
{
    uint8_t *sig = w.mem + W_SIGNALS + 64 * i;
    memset(sig, 0, 64);
    *(int64_t *)sig = 1; /* AMD_SIGNAL_KIND_USER */
    *(int64_t *)(sig + 8) = 1;
    if (event) {
        *(uint64_t *)(sig + 16) = event->EventData.HWData2;
        *(uint32_t *)(sig + 24) = event->EventId;
    }
}

static uint32_t lo32(uint64_t v) { return (uint32_t)v; }
static uint32_t hi32(uint64_t v) { return (uint32_t)(v >> 32); }

/* SDMA packets (SDMA 4 and later, as ROCr's BlitSdmaV4 and kfdtest build them). */
static void sdma_put(const uint32_t *dw, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        memcpy(w.sdma.base + w.sdma.wptr % w.sdma.size, &dw[i], 4);
        w.sdma.wptr += 4;
    }
}
static void sdma_poll_eq(uint64_t off, uint32_t value)
{
    uint32_t p[6] = {8u | (3u << 28) | (1u << 31), lo32(wva(off)), hi32(wva(off)), value, 0xFFFFFFFFu,
                     4u | (0xFFFu << 16)};
    sdma_put(p, 6);
}
static void sdma_atomic_add(uint64_t off, uint64_t v)
{
    uint32_t p[8] = {10u | (47u << 25), lo32(wva(off)), hi32(wva(off)), lo32(v), hi32(v), 0, 0, 0};
    sdma_put(p, 8);
}
static void sdma_fence_va(uint64_t va, uint32_t data)
{
    uint32_t p[4] = {5, lo32(va), hi32(va), data};
    sdma_put(p, 4);
}
static void sdma_copy(uint64_t src, uint64_t dst, uint32_t bytes)
{
    uint32_t p[7] = {1, bytes - 1, 0, lo32(src), hi32(src), lo32(dst), hi32(dst)};
    sdma_put(p, 7);
}
/* ROCr's completion: the event's id into its slot, then a TRAP with it. */
static void sdma_signal_event(HsaEvent *event)
{
    uint32_t trap[2] = {6, event->EventId};
    sdma_fence_va(event->EventData.HWData2, event->EventId);
    sdma_put(trap, 2);
}
static void sdma_submit(void)
{
    __atomic_store_n(w.sdma.res->Queue_write_ptr_aql, w.sdma.wptr, __ATOMIC_RELEASE);
    __atomic_store_n(w.sdma.res->Queue_DoorBell_aql, w.sdma.wptr, __ATOMIC_RELEASE);
}

/* AQL packets: the body first, the header last (the packet processor
 * waits at an INVALID header). */
static void aql_put(uint16_t type, const uint8_t *body, uint16_t setup)
{
    uint8_t *slot = w.aql.base + (w.aql.wptr % (w.aql.size / 64)) * 64;
    memcpy(slot + 4, body + 4, 60);
    uint32_t header = (uint32_t)(type | AQL_SYSTEM_FENCES | (1u << 8)) | ((uint32_t)setup << 16);
    __atomic_store_n((uint32_t *)slot, header, __ATOMIC_RELEASE);
    w.aql.wptr++;
}
static void aql_barrier(uint64_t dep, int completion)
{
    uint8_t p[64] = {0};
    uint64_t done = signal_va(completion);
    memcpy(p + 8, &dep, 8);
    memcpy(p + 56, &done, 8);
    aql_put(AQL_BARRIER_AND, p, 0);
}
/* A PM4-IB packet running the `n` dwords at `ib_off`. */
static void aql_pm4_ib(uint64_t ib_off, unsigned n, int completion)
{
    uint8_t p[64] = {0};
    uint32_t cmd[5] = {(3u << 30) | (2u << 16) | (0x3Fu << 8) | 2u, lo32(wva(ib_off)) & ~3u,
                       hi32(wva(ib_off)) & 0xFFFFu, n | (1u << 23), 0xA};
    uint64_t done = signal_va(completion);
    memcpy(p + 4, cmd, sizeof(cmd));
    memcpy(p + 56, &done, 8);
    aql_put(AQL_VENDOR, p, AQL_PM4_IB);
}
static void aql_submit(void)
{
    __atomic_store_n(w.aql.res->Queue_write_ptr_aql, w.aql.wptr, __ATOMIC_RELEASE);
    __atomic_store_n(w.aql.res->Queue_DoorBell_aql, w.aql.wptr - 1, __ATOMIC_RELEASE);
}
/* PM4 (GFX9): WRITE_DATA of 16 dwords of `seed`'s pattern to `dst_off`,
 * then, when `stage` is non-zero, RELEASE_MEM of it to W_AQL_STAGE. */
static unsigned pm4_ib(uint64_t ib_off, uint64_t dst_off, uint64_t seed, uint32_t stage)
{
    uint32_t *ib = (uint32_t *)(w.mem + ib_off);
    unsigned n = 0;
    ib[n++] = (3u << 30) | ((20u - 2u) << 16) | (0x37u << 8) | 2u;
    ib[n++] = (5u << 8) | (1u << 20);
    ib[n++] = lo32(wva(dst_off));
    ib[n++] = hi32(wva(dst_off));
    fill(&ib[n], 64, seed);
    n += 16;
    if (stage) {
        ib[n++] = (3u << 30) | ((8u - 2u) << 16) | (0x49u << 8) | 2u;
        ib[n++] = 0x14u | (5u << 8);
        ib[n++] = 1u << 29;
        ib[n++] = lo32(wva(W_AQL_STAGE));
        ib[n++] = hi32(wva(W_AQL_STAGE));
        ib[n++] = stage;
        ib[n++] = 0;
        ib[n++] = 0;
    }
    return n;
}

#define SEED_SRC_PRE 0x1111u
#define SEED_SRC_NEW 0x2222u
#define SEED_AQL_PRE 0x3333u
#define SEED_AQL_NEW 0x4444u

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Waits up to `ms` for `*p == want`. */
static int wait_u64(volatile uint64_t *p, uint64_t want, unsigned ms)
{
    uint64_t end = now_ms() + ms;
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) != want) {
        if (now_ms() > end)
            return 0;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* Builds the queues and the work held at their gates (see the header). */
static void queue_work_before_dump(HSAuint32 gpu, void *ring, void *sdma_ring, HsaEvent *sdma_event,
                                   HsaEvent *aql_event)
{
    HsaNodeProperties props;
    CHECK(hsaKmtGetNodeProperties(gpu, &props));
    if (props.EngineId.ui32.Major < 9) {
        say("ready", "fail queue work needs a GFX9 or later GPU (64-bit doorbells) status=0\n");
        exit(1);
    }
    w.mem = alloc(gpu, gpu, WORK_SIZE, 0, 0);
    memset(w.mem, 0, WORK_SIZE);
    w.vram = (uint64_t)(uintptr_t)alloc(gpu, gpu, COPY_BYTES, 1, 0);
    w.sdma_event = sdma_event;
    w.aql_event = aql_event;
    fill(w.mem + W_SRC_PRE, COPY_BYTES, SEED_SRC_PRE);
    fill(w.mem + W_SRC_NEW, COPY_BYTES, SEED_SRC_NEW);
    signal_init(SIG_GATE, NULL);
    signal_init(SIG_A1, NULL);
    signal_init(SIG_A2, aql_event);
    signal_init(SIG_A3, NULL);
    /* ROCr's amd_queue_t holds an AQL queue's read and write indices. */
    memset(&w.aql_res, 0, sizeof(w.aql_res));
    w.aql_res.QueueRptrValue = wva(W_AQL_RPTR);
    w.aql_res.QueueWptrValue = wva(W_AQL_WPTR);
    for (uint64_t i = 0; i < (64u << 10) / 64; i++)
        *(uint32_t *)((uint8_t *)ring + 64 * i) = AQL_INVALID;
    CHECK(hsaKmtCreateQueue(gpu, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL, ring,
                            64 << 10, NULL, &w.aql_res));
    memset(&w.sdma_res, 0, sizeof(w.sdma_res));
    CHECK(hsaKmtCreateQueue(gpu, HSA_QUEUE_SDMA, 100, HSA_QUEUE_PRIORITY_NORMAL, sdma_ring,
                            64 << 10, NULL, &w.sdma_res));
    w.aql = (struct ring){ring, 64 << 10, 0, &w.aql_res};
    w.sdma = (struct ring){sdma_ring, 64 << 10, 0, &w.sdma_res};

    sdma_poll_eq(W_SDMA_PHASE, 0);
    sdma_atomic_add(W_SDMA_COUNTER, 1);
    sdma_fence_va(wva(W_SDMA_STAGE), 1);
    w.held_sdma = w.sdma.wptr;
    sdma_poll_eq(W_SDMA_GATE, 1);
    sdma_copy(wva(W_SRC_PRE), wva(W_DST_PRE), COPY_BYTES);
    sdma_fence_va(wva(W_SDMA_STAGE), 2);
    sdma_signal_event(sdma_event);
    sdma_submit();

    aql_barrier(0, SIG_A1);
    w.held_aql = w.aql.wptr;
    aql_barrier(signal_va(SIG_GATE), SIG_A2);
    aql_pm4_ib(W_IB_PRE, pm4_ib(W_IB_PRE, W_AQL_DST_PRE, SEED_AQL_PRE, 0), SIG_A3);
    aql_submit();

    int sdma_there = wait_u64(w.sdma_res.Queue_read_ptr_aql, w.held_sdma, READY_MS);
    int aql_there = wait_u64(w64(W_AQL_RPTR), w.held_aql, READY_MS);
    if (!sdma_there || !aql_there) {
        char m[256];
        snprintf(m, sizeof(m), "fail queue work never reached its gates (sdma rptr %llu of %llu, aql %llu of %llu) status=0\n",
                 (unsigned long long)*w.sdma_res.Queue_read_ptr_aql, (unsigned long long)w.held_sdma,
                 (unsigned long long)*w64(W_AQL_RPTR), (unsigned long long)w.held_aql);
        say("ready", m);
        exit(1);
    }
    /* What ran before the gates must not run again. */
    __atomic_store_n(w32(W_SDMA_PHASE), 1, __ATOMIC_RELEASE);
    note("work va=%#llx size=%llu\n", (unsigned long long)wva(0), (unsigned long long)WORK_SIZE);
    note("gate va=%#llx size=4 value=1\n", (unsigned long long)wva(W_SDMA_GATE));
    note("gate va=%#llx size=8 value=0\n", (unsigned long long)signal_va(SIG_GATE) + 8);
    note("held sdma=%llu aql=%llu\n", (unsigned long long)w.held_sdma, (unsigned long long)w.held_aql);
    queue_work_held = 1;
}

static char failure[512];

static int failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int failed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof(failure), fmt, ap);
    va_end(ap);
    return 0;
}

/* Compares `len` bytes at work offset `off` with `seed`'s pattern. */
static int bytes_ok(const char *what, uint64_t off, uint64_t len, uint64_t seed)
{
    long long at = mismatch(w.mem + off, len, seed);
    return at < 0 ? 1 : failed("%s: byte %lld differs", what, at);
}

/* Waits for `event` (WAIT_EVENTS, bounded). */
static int event_ok(const char *what, HsaEvent *event)
{
    HSAKMT_STATUS s = hsaKmtWaitOnEvent(event, WAIT_MS);
    if (s == HSAKMT_STATUS_SUCCESS)
        return 1;
    return failed("%s: event %u not delivered within %d ms (wait status %d; sdma stage %u counter %llu "
                  "rptr %llu of %llu; aql rptr %llu of %llu, signals %lld %lld %lld)",
                  what, event->EventId, WAIT_MS, (int)s, *w32(W_SDMA_STAGE),
                  (unsigned long long)*w64(W_SDMA_COUNTER),
                  (unsigned long long)*w.sdma_res.Queue_read_ptr_aql, (unsigned long long)w.sdma.wptr,
                  (unsigned long long)*w64(W_AQL_RPTR), (unsigned long long)w.aql.wptr,
                  (long long)*signal_value(SIG_A1), (long long)*signal_value(SIG_A2),
                  (long long)*signal_value(SIG_A3));
}

static int value_ok(const char *what, uint64_t got, uint64_t want)
{
    return got == want ? 1
                       : failed("%s is %llu, want %llu", what, (unsigned long long)got,
                                (unsigned long long)want);
}

/* After the restore: the held work, then new work (see the header). */
static int queue_work_after_restore(void)
{
    /* The held SDMA work's event: the shape of CRIU issue 2663. */
    if (!event_ok("the sdma work held at its gate", w.sdma_event) ||
        !value_ok("the sdma stage", *w32(W_SDMA_STAGE), 2) ||
        !value_ok("the sdma counter (added once, before the dump)", *w64(W_SDMA_COUNTER), 1) ||
        !bytes_ok("the sdma copy held at its gate", W_DST_PRE, COPY_BYTES, SEED_SRC_PRE) ||
        !value_ok("the sdma read pointer", *w.sdma_res.Queue_read_ptr_aql, w.sdma.wptr))
        return 0;
    if (!event_ok("the aql barrier held at its gate", w.aql_event) ||
        !value_ok("aql completion signal A1 (completed before the dump)", (uint64_t)*signal_value(SIG_A1), 0) ||
        !value_ok("aql completion signal A2", (uint64_t)*signal_value(SIG_A2), 0))
        return 0;
    if (!wait_u64((volatile uint64_t *)signal_value(SIG_A3), 0, WAIT_MS))
        return failed("the aql PM4-IB behind the gate never completed (signal %lld)",
                      (long long)*signal_value(SIG_A3));
    /* The packet processor reports its read index once the packet's
     * signal is done. */
    if (!wait_u64(w64(W_AQL_RPTR), w.aql.wptr, WAIT_MS))
        return failed("the aql read index stays at %llu, not %llu",
                      (unsigned long long)*w64(W_AQL_RPTR), (unsigned long long)w.aql.wptr);
    if (!bytes_ok("the aql WRITE_DATA behind the gate", W_AQL_DST_PRE, 64, SEED_AQL_PRE))
        return 0;

    /* New SDMA work: GTT -> VRAM -> GTT, a fence, the event. */
    HSAKMT_STATUS reset = hsaKmtResetEvent(w.sdma_event);
    if (reset != HSAKMT_STATUS_SUCCESS)
        return failed("hsaKmtResetEvent status=%d", (int)reset);
    sdma_copy(wva(W_SRC_NEW), w.vram, COPY_BYTES);
    sdma_copy(w.vram, wva(W_DST_NEW), COPY_BYTES);
    sdma_fence_va(wva(W_SDMA_STAGE), 3);
    sdma_signal_event(w.sdma_event);
    sdma_submit();
    if (!event_ok("new sdma copies", w.sdma_event) ||
        !value_ok("the sdma stage", *w32(W_SDMA_STAGE), 3) ||
        !bytes_ok("the new sdma copies", W_DST_NEW, COPY_BYTES, SEED_SRC_NEW) ||
        !value_ok("the sdma read pointer", *w.sdma_res.Queue_read_ptr_aql, w.sdma.wptr))
        return 0;

    /* New AQL work: WRITE_DATA and RELEASE_MEM in a PM4-IB, a barrier
     * whose completion signal fires the event. */
    signal_init(SIG_A4, NULL);
    signal_init(SIG_A5, w.aql_event);
    aql_pm4_ib(W_IB_NEW, pm4_ib(W_IB_NEW, W_AQL_DST_NEW, SEED_AQL_NEW, 7), SIG_A4);
    aql_barrier(0, SIG_A5);
    aql_submit();
    if (!event_ok("new aql packets", w.aql_event) ||
        !value_ok("aql completion signal A4", (uint64_t)*signal_value(SIG_A4), 0) ||
        !value_ok("aql completion signal A5", (uint64_t)*signal_value(SIG_A5), 0) ||
        !value_ok("the aql RELEASE_MEM's stage", *w32(W_AQL_STAGE), 7) ||
        !bytes_ok("the new aql WRITE_DATA", W_AQL_DST_NEW, 64, SEED_AQL_NEW) ||
        !value_ok("the aql read index", *w64(W_AQL_RPTR), w.aql.wptr))
        return 0;
    return 1;
}

/* Appends a beat to DIR/heartbeat every 20 ms, with the mailbox protocol
 * of the header comment; returns only on a write error. */
static int heartbeat(volatile uint64_t *mailbox)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/heartbeat", dir);
    int beat = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (beat < 0)
        return 2;
    uint64_t seen = 0;
    char verdict[128] = "none";
    int queues_checked = 0;
    for (uint64_t n = 1;; n++) {
        mailbox[0] = n;
        if (queue_work_held && !queues_checked && mailbox[2] != 0) {
            queues_checked = 1;
            say("queues", "waiting\n");
            char result[640];
            if (queue_work_after_restore())
                snprintf(result, sizeof(result), "done ok\n");
            else
                snprintf(result, sizeof(result), "done fail %s\n", failure);
            say("queues", result);
        }
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

/* Opens KFD and puts the first `want` GPU nodes in gpus[]. */
static unsigned gpu_nodes(HSAuint32 *gpus, unsigned want)
{
    HsaSystemProperties sys;
    unsigned n = 0;
    CHECK(hsaKmtOpenKFD());
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    for (HSAuint32 node = 0; node < sys.NumNodes && n < want && n < 16; node++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(node, &p));
        if (p.NumFComputeCores)
            gpus[n++] = node;
    }
    if (n < want) {
        say("ready", "fail not enough GPU nodes status=0\n");
        exit(1);
    }
    return n;
}

/* This process's libdrm device on `gpu`'s render node; its minor in *minor. */
static amdgpu_device_handle drm_device(HSAuint32 gpu, unsigned *minor)
{
    HsaNodeProperties p;
    CHECK(hsaKmtGetNodeProperties(gpu, &p));
    *minor = (unsigned)p.DrmRenderMinor;
    char node[64];
    snprintf(node, sizeof(node), "/dev/dri/renderD%u", *minor);
    int render = open(node, O_RDWR | O_CLOEXEC);
    if (render < 0) {
        say("ready", "fail open(render node) status=0\n");
        exit(1);
    }
    uint32_t major, minor_version;
    amdgpu_device_handle dev;
    CHECK_DRM(amdgpu_device_initialize(render, &major, &minor_version, &dev));
    return dev;
}

/* Notes `bo`'s GEM handle on renderD<minor>. */
static void note_shared(amdgpu_bo_handle bo, unsigned minor)
{
    uint32_t handle;
    CHECK_DRM(amdgpu_bo_export(bo, amdgpu_bo_handle_type_kms, &handle));
    note("shared minor=%u handle=%u size=%llu\n", minor, handle, (unsigned long long)(2 * MiB));
}

/* The child of "share": a KFD process of its own with a mailbox, and the
 * parent's buffer imported on its render node from the dma-buf the parent
 * sends with the buffer's pattern seed. */
static int child(int sock)
{
    HSAuint32 gpu;
    gpu_nodes(&gpu, 1);
    note("pid=%d\nstate queues=0 events=0\n", (int)getpid());
    volatile uint64_t *mailbox = alloc(gpu, gpu, 4096, 0, 0);
    memset((void *)mailbox, 0, 4096);
    uint64_t seed;
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&seed, sizeof(seed)};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(seed) || !CMSG_FIRSTHDR(&msg)) {
        say("ready", "fail recvmsg status=0\n");
        return 1;
    }
    int dmabuf;
    memcpy(&dmabuf, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
    close(sock);
    unsigned minor;
    amdgpu_device_handle dev = drm_device(gpu, &minor);
    struct amdgpu_bo_import_result imported;
    CHECK_DRM(amdgpu_bo_import(dev, amdgpu_bo_handle_type_dma_buf_fd, (uint32_t)dmabuf, &imported));
    close(dmabuf);
    void *cpu;
    CHECK_DRM(amdgpu_bo_cpu_map(imported.buf_handle, &cpu));
    /* Its bytes are the parent's: checked, not filled. */
    bos[nbos++] = (struct bo){"shared-cpu", gpu, cpu, 2 * MiB, seed};
    note("mailbox va=%#llx\n", (unsigned long long)(uintptr_t)mailbox);
    note_shared(imported.buf_handle, minor);
    say("ready", listing);
    return heartbeat(mailbox);
}

/* The parent's shared buffer: made and filled through libdrm on `gpu`'s
 * render node, exported, sent to the child over `sock`. */
static void share_buffer(HSAuint32 gpu, int sock)
{
    unsigned minor;
    amdgpu_device_handle dev = drm_device(gpu, &minor);
    struct amdgpu_bo_alloc_request req;
    memset(&req, 0, sizeof(req));
    req.alloc_size = 2 * MiB;
    req.phys_alignment = 4096;
    req.preferred_heap = AMDGPU_GEM_DOMAIN_VRAM;
    req.flags = AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED;
    amdgpu_bo_handle bo;
    void *cpu;
    CHECK_DRM(amdgpu_bo_alloc(dev, &req, &bo));
    CHECK_DRM(amdgpu_bo_cpu_map(bo, &cpu));
    filled("shared-cpu", gpu, cpu, 2 * MiB);
    uint64_t seed = bos[nbos - 1].seed;
    note_shared(bo, minor);
    uint32_t dmabuf;
    CHECK_DRM(amdgpu_bo_export(bo, amdgpu_bo_handle_type_dma_buf_fd, &dmabuf));
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof(control));
    struct iovec iov = {&seed, sizeof(seed)};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    int fd = (int)dmabuf;
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(sock, &msg, 0) != (ssize_t)sizeof(seed)) {
        say("ready", "fail sendmsg status=0\n");
        exit(1);
    }
    close(sock);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && (strcmp(argv[4], "share") == 0 ||
                                     strcmp(argv[4], "gpu-only") == 0))) {
        fprintf(stderr, "usage: %s DIR GPUS VRAM_MIB [share|gpu-only]\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    unsigned want = (unsigned)atoi(argv[2]);
    HSAuint64 vram_size = (HSAuint64)atoll(argv[3]) * MiB;
    int share = argc == 5 && strcmp(argv[4], "share") == 0;
    int gpu_only = argc == 5 && strcmp(argv[4], "gpu-only") == 0;
    /* Files the test harness left open (the host's, which CRIU cannot
     * name from the private mount namespace) are none of this process's. */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);

    int pair[2] = {-1, -1};
    if (share) {
        /* The child first, before either process opens a device. */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
            return 2;
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            static char child_dir[4096];
            snprintf(child_dir, sizeof(child_dir), "%s/child", dir);
            dir = child_dir;
            close(pair[0]);
            return child(pair[1]);
        }
        close(pair[1]);
    }

    HSAuint32 gpus[16];
    unsigned ngpus = gpu_nodes(gpus, want);
    note("pid=%d\nstate queues=2 events=2\n", (int)getpid());
    for (unsigned g = 0; g < ngpus; g++) {
        void *vram = alloc(gpus[g], gpus[g], vram_size, 1, 0);
        filled("vram", gpus[g], vram, vram_size);
        if (gpu_only) {
            /* The bytes stay the BO's; the process no longer sees them.
             * The address range stays reserved, as the thunk keeps a BO's
             * range while the BO lives: this thunk takes a new BO's
             * address from mmap(NULL), and a plain munmap would hand the
             * range out again, to the next BO, whose MAP_MEMORY_TO_GPU
             * then overlaps this one's GPU mapping (EINVAL, the kernel's
             * amdgpu_vm_bo_map). */
            if (mmap(vram, vram_size, PROT_NONE,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != vram)
                return 2;
            bos[nbos - 1].size = 0;
        }
        filled("gtt", gpus[g], alloc(gpus[g], gpus[g], 1 * MiB, 0, 0), 1 * MiB);
    }
    HSAuint32 gpu = gpus[0];

    void *user;
    if (posix_memalign(&user, 4096, 1 * MiB) != 0)
        return 2;
    CHECK(hsaKmtRegisterMemoryToNodes(user, 1 * MiB, 1, &gpu));
    CHECK(hsaKmtMapMemoryToGPUNodes(user, 1 * MiB, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    filled("userptr", gpu, user, 1 * MiB);

    HsaEventDescriptor d;
    HsaEvent *event, *event2;
    memset(&d, 0, sizeof(d));
    d.EventType = HSA_EVENTTYPE_SIGNAL;
    d.NodeId = gpu;
    CHECK(hsaKmtCreateEvent(&d, true, false, &event));
    CHECK(hsaKmtCreateEvent(&d, false, false, &event2));

    void *ring = alloc(gpu, gpu, 64 << 10, 0, 1);
    void *sdma_ring = alloc(gpu, gpu, 64 << 10, 0, 1);
    queue_work_before_dump(gpu, ring, sdma_ring, event, event2);

    volatile uint64_t *mailbox = alloc(gpu, gpu, 4096, 0, 0);
    memset((void *)mailbox, 0, 4096);
    note("mailbox va=%#llx\n", (unsigned long long)(uintptr_t)mailbox);
    if (share)
        share_buffer(gpu, pair[0]);
    say("ready", listing);
    return heartbeat(mailbox);
}
