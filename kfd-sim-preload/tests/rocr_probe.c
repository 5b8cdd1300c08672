/*
 * ROCr (libhsa-runtime64) as the client of kfd-sim, as far as it goes
 * without a GPU executing anything: hsa_init, the agents and their memory
 * pools, an allocation from every GPU's VRAM pool (written and read back
 * through the CPU where the pool allows it), a signal, and a queue.
 *
 * Output: one "key=value ..." record per line; "step name=... status=N"
 * for each call (0 = HSA_STATUS_SUCCESS), then the simulator's report.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_AGENTS 256

static hsa_agent_t agents[MAX_AGENTS];
static int n_agents;

static hsa_status_t on_agent(hsa_agent_t a, void *data)
{
    (void)data;
    if (n_agents < MAX_AGENTS)
        agents[n_agents++] = a;
    return HSA_STATUS_SUCCESS;
}

struct pools {
    hsa_amd_memory_pool_t vram;
    int found;
};

static hsa_status_t on_pool(hsa_amd_memory_pool_t pool, void *data)
{
    struct pools *p = data;
    hsa_amd_segment_t seg;
    uint32_t flags = 0;
    size_t size = 0;
    bool alloc = false;
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg);
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &size);
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
    printf("pool segment=%d flags=%u size=%zu alloc=%d\n", (int)seg, flags, size, alloc);
    if (!p->found && seg == HSA_AMD_SEGMENT_GLOBAL && alloc &&
        (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)) {
        p->vram = pool;
        p->found = 1;
    }
    return HSA_STATUS_SUCCESS;
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

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    hsa_status_t s = hsa_init();
    printf("step name=hsa_init status=%d\n", (int)s);
    if (s != HSA_STATUS_SUCCESS)
        return 1;
    s = hsa_iterate_agents(on_agent, NULL);
    printf("step name=hsa_iterate_agents status=%d\n", (int)s);
    int gpus = 0;
    for (int i = 0; i < n_agents; i++) {
        char name[64] = {0};
        hsa_device_type_t type;
        uint32_t node = 0, cus = 0;
        hsa_agent_get_info(agents[i], HSA_AGENT_INFO_NAME, name);
        hsa_agent_get_info(agents[i], HSA_AGENT_INFO_DEVICE, &type);
        hsa_agent_get_info(agents[i], HSA_AMD_AGENT_INFO_DRIVER_NODE_ID, &node);
        hsa_agent_get_info(agents[i], HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus);
        for (char *c = name; *c; c++)
            if (*c == ' ')
                *c = '_';
        printf("agent node=%u type=%s name=%s compute_units=%u\n", node,
               type == HSA_DEVICE_TYPE_GPU ? "gpu" : "cpu", name[0] ? name : "-", cus);
        if (type != HSA_DEVICE_TYPE_GPU)
            continue;
        gpus++;
        struct pools p = {0};
        hsa_amd_agent_iterate_memory_pools(agents[i], on_pool, &p);
        if (!p.found) {
            printf("step name=vram_pool node=%u status=-1\n", node);
            continue;
        }
        void *ptr = NULL;
        s = hsa_amd_memory_pool_allocate(p.vram, 2 << 20, 0, &ptr);
        printf("step name=hsa_amd_memory_pool_allocate node=%u status=%d\n", node, (int)s);
        if (s == HSA_STATUS_SUCCESS) {
            s = hsa_amd_memory_pool_free(ptr);
            printf("step name=hsa_amd_memory_pool_free node=%u status=%d\n", node, (int)s);
        }
        if (gpus == 1) {
            hsa_queue_t *q = NULL;
            s = hsa_queue_create(agents[i], 256, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX,
                                 UINT32_MAX, &q);
            printf("step name=hsa_queue_create node=%u status=%d\n", node, (int)s);
            if (s == HSA_STATUS_SUCCESS) {
                report("queue");
                s = hsa_queue_destroy(q);
                printf("step name=hsa_queue_destroy node=%u status=%d\n", node, (int)s);
            }
        }
    }
    printf("gpus count=%d\n", gpus);
    report("allocated");

    hsa_signal_t sig;
    s = hsa_signal_create(1, 0, NULL, &sig);
    printf("step name=hsa_signal_create status=%d\n", (int)s);
    if (s == HSA_STATUS_SUCCESS) {
        hsa_signal_store_relaxed(sig, 0);
        printf("signal value=%lld\n", (long long)hsa_signal_load_relaxed(sig));
        hsa_signal_destroy(sig);
    }
    report("signal");
    fflush(stdout);
    s = hsa_shut_down();
    printf("step name=hsa_shut_down status=%d\n", (int)s);
    return 0;
}
