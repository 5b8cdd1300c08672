/*
 * ROCr (libhsa-runtime64) moving data through the simulated GPUs with
 * hsa_amd_memory_async_copy: host to VRAM, VRAM to host, and GPU to GPU
 * (VRAM of the first GPU to VRAM of the second, then back to the host),
 * each waited on with hsa_signal_wait_scacquire and checked byte for byte.
 *
 *   rocr_copy_probe [MIB]           the copies, MIB MiB each (default 8)
 *   rocr_copy_probe MIB busy A B S  the same, with a checkpoint while the
 *                                   copies are in flight (images in A and B,
 *                                   restore /dev/shm S), see
 *                                   kfd_sim_preload_checkpoint_busy
 *
 * Output: one "key=value ..." record per line: "step name=... status=N"
 * for each call (0 = HSA_STATUS_SUCCESS), "copy ..." and "verify ..." per
 * copy, then the simulator's report (with the packets the queues ran when
 * KFD_SIM_PACKET_TRACE is set).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_AGENTS 64

static hsa_agent_t cpu, gpus[MAX_AGENTS];
static int n_gpus, have_cpu;

static hsa_status_t on_agent(hsa_agent_t a, void *data)
{
    (void)data;
    hsa_device_type_t type;
    hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type);
    if (type == HSA_DEVICE_TYPE_CPU && !have_cpu) {
        cpu = a;
        have_cpu = 1;
    } else if (type == HSA_DEVICE_TYPE_GPU && n_gpus < MAX_AGENTS) {
        gpus[n_gpus++] = a;
    }
    return HSA_STATUS_SUCCESS;
}

struct pool_pick {
    hsa_amd_memory_pool_t pool;
    int found;
    uint32_t want_flag;
};

static hsa_status_t on_pool(hsa_amd_memory_pool_t pool, void *data)
{
    struct pool_pick *p = data;
    hsa_amd_segment_t seg;
    uint32_t flags = 0;
    bool alloc = false;
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg);
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
    if (!p->found && seg == HSA_AMD_SEGMENT_GLOBAL && alloc && (flags & p->want_flag)) {
        p->pool = pool;
        p->found = 1;
    }
    return HSA_STATUS_SUCCESS;
}

static void *alloc_in(hsa_agent_t agent, uint32_t flag, size_t bytes, const char *what)
{
    struct pool_pick p = {.want_flag = flag};
    hsa_amd_agent_iterate_memory_pools(agent, on_pool, &p);
    if (!p.found) {
        printf("step name=pool what=%s status=-1\n", what);
        exit(1);
    }
    void *ptr = NULL;
    hsa_status_t s = hsa_amd_memory_pool_allocate(p.pool, bytes, 0, &ptr);
    printf("step name=hsa_amd_memory_pool_allocate what=%s status=%d\n", what, (int)s);
    if (s != HSA_STATUS_SUCCESS)
        exit(1);
    return ptr;
}

static void report(const char *stage)
{
    int (*fn)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "kfd_sim_preload_report");
    printf("report stage=%s\n", stage);
    fflush(stdout);
    if (!fn || fn(1) != 0) {
        printf("fail kfd_sim_preload_report\n");
        exit(1);
    }
    printf("end-report\n");
    fflush(stdout);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* FNV-1a over a buffer: what the checkpoint compares. */
static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

struct copy {
    const char *name;
    void *dst;
    hsa_agent_t dst_agent;
    const void *src;
    hsa_agent_t src_agent;
    hsa_signal_t done;
    double start;
};

static void start(struct copy *c, size_t bytes, int dep)
{
    hsa_status_t s = hsa_signal_create(1, 0, NULL, &c->done);
    printf("step name=hsa_signal_create copy=%s status=%d\n", c->name, (int)s);
    c->start = now_ms();
    s = hsa_amd_memory_async_copy(c->dst, c->dst_agent, c->src, c->src_agent, bytes,
                                  dep >= 0 ? 1 : 0, NULL, c->done);
    printf("step name=hsa_amd_memory_async_copy copy=%s status=%d\n", c->name, (int)s);
}

static void finish(struct copy *c, size_t bytes)
{
    hsa_signal_value_t v = hsa_signal_wait_scacquire(c->done, HSA_SIGNAL_CONDITION_LT, 1,
                                                     UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    printf("copy name=%s bytes=%zu signal=%lld ms=%.1f\n", c->name, bytes, (long long)v,
           now_ms() - c->start);
    hsa_signal_destroy(c->done);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 8) << 20;
    int busy = argc > 5 && strcmp(argv[2], "busy") == 0;
    hsa_status_t s = hsa_init();
    printf("step name=hsa_init status=%d\n", (int)s);
    if (s != HSA_STATUS_SUCCESS)
        return 1;
    hsa_iterate_agents(on_agent, NULL);
    printf("agents cpu=%d gpus=%d\n", have_cpu, n_gpus);
    if (!have_cpu || n_gpus == 0)
        return 1;
    int peer = n_gpus > 1;
    uint8_t *src = alloc_in(cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, bytes, "host_src");
    uint8_t *back = alloc_in(cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, bytes, "host_back");
    uint8_t *back2 = alloc_in(cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, bytes, "host_back2");
    void *vram0 = alloc_in(gpus[0], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, bytes, "vram0");
    void *vram1 = peer ? alloc_in(gpus[1], HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, bytes,
                                  "vram1")
                       : NULL;
    /* The GPUs reach the host buffers, the first GPU the second's VRAM. */
    uint8_t *hosts[] = {src, back, back2};
    for (int i = 0; i < 3; i++) {
        s = hsa_amd_agents_allow_access(n_gpus > 1 ? 2 : 1, gpus, NULL, hosts[i]);
        printf("step name=hsa_amd_agents_allow_access what=host%d status=%d\n", i, (int)s);
    }
    if (peer) {
        s = hsa_amd_agents_allow_access(1, &gpus[0], NULL, vram1);
        printf("step name=hsa_amd_agents_allow_access what=vram1 status=%d\n", (int)s);
        s = hsa_amd_agents_allow_access(1, &gpus[1], NULL, vram0);
        printf("step name=hsa_amd_agents_allow_access what=vram0 status=%d\n", (int)s);
    }
    for (size_t i = 0; i < bytes; i++)
        src[i] = (uint8_t)(i * 131 + (i >> 12) * 7 + 3);
    memset(back, 0, bytes);
    memset(back2, 0, bytes);
    printf("source hash=%016llx\n", (unsigned long long)fnv(src, bytes));
    report("allocated");

    /* Host to VRAM, VRAM to host, and GPU to GPU then back. */
    struct copy h2d = {"h2d", vram0, gpus[0], src, cpu};
    struct copy d2h = {"d2h", back, cpu, vram0, gpus[0]};
    struct copy d2d = {"d2d", vram1, peer ? gpus[1] : gpus[0], vram0, gpus[0]};
    struct copy d2h2 = {"d2h2", back2, cpu, vram1, peer ? gpus[1] : gpus[0]};
    if (busy) {
        /* All queued at once: the copies of each direction behind each
         * other's completion (ROCr's dependency polls), more than the
         * simulated rate drains before the checkpoint. */
        start(&h2d, bytes, -1);
        hsa_signal_t dep = h2d.done;
        d2h.done.handle = 0;
        hsa_status_t st = hsa_signal_create(1, 0, NULL, &d2h.done);
        d2h.start = now_ms();
        st = hsa_amd_memory_async_copy(d2h.dst, d2h.dst_agent, d2h.src, d2h.src_agent, bytes, 1,
                                       &dep, d2h.done);
        printf("step name=hsa_amd_memory_async_copy copy=d2h status=%d\n", (int)st);
        int (*busy_ck)(const char *, const char *, const char *, const void *const *,
                       const size_t *, int, int) =
            (int (*)(const char *, const char *, const char *, const void *const *,
                     const size_t *, int, int))dlsym(RTLD_DEFAULT,
                                                     "kfd_sim_preload_checkpoint_busy");
        const void *ranges[] = {vram0, back, (const void *)(uintptr_t)h2d.done.handle,
                                (const void *)(uintptr_t)d2h.done.handle};
        size_t lens[] = {bytes, bytes, 64, 64};
        printf("checkpoint-begin\n");
        fflush(stdout);
        int r = busy_ck ? busy_ck(argv[3], argv[4], argv[5], ranges, lens, 4, 1) : -2;
        printf("checkpoint-end status=%d\n", r);
        finish(&h2d, bytes);
        finish(&d2h, bytes);
    } else {
        start(&h2d, bytes, -1);
        finish(&h2d, bytes);
        start(&d2h, bytes, -1);
        finish(&d2h, bytes);
    }
    printf("verify name=d2h ok=%d hash=%016llx\n", memcmp(src, back, bytes) == 0,
           (unsigned long long)fnv(back, bytes));
    if (peer) {
        start(&d2d, bytes, -1);
        finish(&d2d, bytes);
        start(&d2h2, bytes, -1);
        finish(&d2h2, bytes);
        printf("verify name=d2d ok=%d hash=%016llx\n", memcmp(src, back2, bytes) == 0,
               (unsigned long long)fnv(back2, bytes));
    }
    report("copied");
    hsa_amd_memory_pool_free(src);
    hsa_amd_memory_pool_free(back);
    hsa_amd_memory_pool_free(back2);
    hsa_amd_memory_pool_free(vram0);
    if (vram1)
        hsa_amd_memory_pool_free(vram1);
    s = hsa_shut_down();
    printf("step name=hsa_shut_down status=%d\n", (int)s);
    return 0;
}
