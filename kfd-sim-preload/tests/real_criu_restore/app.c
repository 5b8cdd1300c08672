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
 * a compute job's device memory is: their bytes stay the simulator's (the
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
 * Then, every 20 ms, the program stores its beat count in mailbox word 0
 * (through its CPU mapping: the simulator sees it when the mapping is the
 * BO's memory), and appends "N seen=X verify=V" to DIR/heartbeat, where X
 * is mailbox word 1 (written by the test through the simulator) and V is
 * what the program found when it last compared every filled BO, through
 * its own CPU mappings, with its pattern: "none" before the first change of
 * word 1, then "ok" or "bad:KIND:OFFSET".
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
            /* The bytes stay the BO's; the process no longer sees them. */
            if (munmap(vram, vram_size) != 0)
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
    if (share)
        share_buffer(gpu, pair[0]);
    say("ready", listing);
    return heartbeat(mailbox);
}
