/*
 * A ROCm program on AMD's runtime (ROCr, libhsa-runtime64) for the
 * `amdgpu-criu sim` tests, run unmodified on a simulated machine and
 * checkpointed and restored there by real CRIU.
 *
 *   rocr_app MIB
 *
 * On the first GPU agent: a fine-grained host buffer of MIB MiB filled with
 * a pattern, a coarse-grained VRAM buffer of the same size the pattern is
 * copied into with hsa_amd_memory_async_copy, and a second host buffer it
 * is copied back into, each copy waited on with hsa_signal_wait_scacquire.
 * Then one line, "ready pid=P agents=A copy=V" (V "ok" when the bytes came
 * back), and the program runs on.
 *
 * On SIGUSR1: "check pid=P n=N host=H copy=C": H is "ok" when the host
 * buffer still holds the pattern as the process reads it; C is what a new
 * VRAM-to-host copy (a new signal, a new SDMA submission) brought back: the
 * pattern that was put in VRAM before the checkpoint ("ok") or not
 * ("bad:OFFSET"), or the HSA status of a call that failed. On SIGTERM it
 * exits 0.
 */
#define _GNU_SOURCE
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static hsa_agent_t cpu, gpu;
static int have_cpu, n_gpus;
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

static hsa_status_t on_agent(hsa_agent_t a, void *data)
{
    (void)data;
    hsa_device_type_t type;
    hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type);
    if (type == HSA_DEVICE_TYPE_CPU && !have_cpu) {
        cpu = a;
        have_cpu = 1;
    } else if (type == HSA_DEVICE_TYPE_GPU) {
        if (n_gpus == 0)
            gpu = a;
        n_gpus++;
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

static void *alloc_in(hsa_agent_t agent, uint32_t flag, size_t bytes)
{
    struct pool_pick p = {.want_flag = flag};
    hsa_amd_agent_iterate_memory_pools(agent, on_pool, &p);
    void *ptr = NULL;
    hsa_status_t s = p.found ? hsa_amd_memory_pool_allocate(p.pool, bytes, 0, &ptr)
                             : HSA_STATUS_ERROR;
    if (s != HSA_STATUS_SUCCESS) {
        printf("fail hsa_amd_memory_pool_allocate status=%d pid=%d\n", (int)s, (int)getpid());
        exit(1);
    }
    return ptr;
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 131 + (i >> 12) * 7 + 3);
}

/* The first offset where `p` differs from the pattern, or -1. */
static long long mismatch(const uint8_t *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != pattern(i))
            return (long long)i;
    return -1;
}

/* One async copy waited on; what it did, in `out`. */
static const char *copy(void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent,
                        size_t bytes, const uint8_t *check, char *out, size_t len)
{
    hsa_signal_t done;
    hsa_status_t s = hsa_signal_create(1, 0, NULL, &done);
    if (s == HSA_STATUS_SUCCESS)
        s = hsa_amd_memory_async_copy(dst, dst_agent, src, src_agent, bytes, 0, NULL, done);
    if (s != HSA_STATUS_SUCCESS) {
        snprintf(out, len, "status:%d", (int)s);
        return out;
    }
    hsa_signal_value_t v = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1,
                                                     UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    hsa_signal_destroy(done);
    if (v != 0) {
        snprintf(out, len, "signal:%lld", (long long)v);
        return out;
    }
    if (!check)
        return "ok";
    long long at = mismatch(check, bytes);
    if (at < 0)
        return "ok";
    snprintf(out, len, "bad:%lld", at);
    return out;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MIB\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t bytes = (size_t)atoi(argv[1]) << 20;
    signal(SIGUSR1, on_usr1);
    signal(SIGTERM, on_term);
    hsa_status_t s = hsa_init();
    if (s != HSA_STATUS_SUCCESS) {
        printf("fail hsa_init status=%d pid=%d\n", (int)s, (int)getpid());
        return 1;
    }
    hsa_iterate_agents(on_agent, NULL);
    if (!have_cpu || n_gpus == 0) {
        printf("fail no GPU agent status=0 pid=%d\n", (int)getpid());
        return 1;
    }
    uint8_t *src = alloc_in(cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, bytes);
    uint8_t *back = alloc_in(cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, bytes);
    void *vram = alloc_in(gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, bytes);
    uint8_t *hosts[] = {src, back};
    for (int i = 0; i < 2; i++) {
        s = hsa_amd_agents_allow_access(1, &gpu, NULL, hosts[i]);
        if (s != HSA_STATUS_SUCCESS) {
            printf("fail hsa_amd_agents_allow_access status=%d pid=%d\n", (int)s, (int)getpid());
            return 1;
        }
    }
    for (size_t i = 0; i < bytes; i++)
        src[i] = pattern(i);
    char what[64];
    const char *up = copy(vram, gpu, src, cpu, bytes, NULL, what, sizeof(what));
    memset(back, 0, bytes);
    const char *down = strcmp(up, "ok") == 0
                           ? copy(back, cpu, vram, gpu, bytes, back, what, sizeof(what))
                           : up;
    printf("ready pid=%d agents=%d copy=%s\n", (int)getpid(), n_gpus, down);
    for (unsigned n = 1; !stop_asked; n++) {
        if (check_asked) {
            check_asked = 0;
            long long at = mismatch(src, bytes);
            char host[64] = "ok";
            if (at >= 0)
                snprintf(host, sizeof(host), "bad:%lld", at);
            memset(back, 0, bytes);
            printf("check pid=%d n=%u host=%s copy=%s\n", (int)getpid(), n, host,
                   copy(back, cpu, vram, gpu, bytes, back, what, sizeof(what)));
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    hsa_amd_memory_pool_free(src);
    hsa_amd_memory_pool_free(back);
    hsa_amd_memory_pool_free(vram);
    hsa_shut_down();
    return 0;
}
