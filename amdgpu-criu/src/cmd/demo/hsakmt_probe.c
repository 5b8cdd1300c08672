/*
 * AMD's thunk (libhsakmt) as the client of kfd-sim: the test compiles this
 * against libhsakmt-dev and runs it with libkfd_sim_preload.so preloaded.
 *
 *   hsakmt_probe topology   what hsaKmt* reads for every node
 *   hsakmt_probe memory     memory of every kind, queues, events, policies,
 *                           then everything freed, with the simulator's
 *                           report (kfd_sim_preload_report) at each stage
 *   hsakmt_probe checkpoint FIRST SECOND SHM
 *                           builds the memory state, then has CRIU (the
 *                           host emulator) checkpoint it into FIRST, restore
 *                           it on a renumbered machine (SHM standing for its
 *                           /dev/shm) and checkpoint that into SECOND
 *                           (kfd_sim_preload_checkpoint); then frees it all
 *
 * Output: one "key=value ..." record per line; a failed call prints
 * "fail CALL status=N" and the program exits 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <hsakmt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                          \
    do {                                                                     \
        HSAKMT_STATUS s_ = (call);                                           \
        if (s_ != HSAKMT_STATUS_SUCCESS) {                                   \
            printf("fail %s status=%d\n", #call, (int)s_);                   \
            fflush(stdout);                                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

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

static void marketing(const HSAuint16 *name, char *out, size_t len)
{
    size_t i;
    for (i = 0; i + 1 < len && i < HSA_PUBLIC_NAME_SIZE && name[i]; i++)
        out[i] = name[i] < 0x80 && name[i] >= 0x20 ? (char)name[i] : '?';
    out[i] = 0;
}

static int topology(void)
{
    HsaSystemProperties sys;
    CHECK(hsaKmtOpenKFD());
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    printf("system nodes=%u platform_oem=%u platform_id=%u platform_rev=%u\n",
           sys.NumNodes, sys.PlatformOem, sys.PlatformId, sys.PlatformRev);
    for (HSAuint32 n = 0; n < sys.NumNodes; n++) {
        HsaNodeProperties p;
        char mname[HSA_PUBLIC_NAME_SIZE + 1];
        char aname[HSA_PUBLIC_NAME_SIZE + 1];
        CHECK(hsaKmtGetNodeProperties(n, &p));
        marketing(p.MarketingName, mname, sizeof(mname));
        memcpy(aname, p.AMDName, HSA_PUBLIC_NAME_SIZE);
        aname[HSA_PUBLIC_NAME_SIZE] = 0;
        for (char *c = aname; *c; c++)
            if (*c == ' ' || *c < 0x20)
                *c = '_';
        for (char *c = mname; *c; c++)
            if (*c == ' ')
                *c = '_';
        printf("node id=%u cpu_cores=%u simds=%u mem_banks=%u caches=%u io_links=%u "
               "cpu_core_id_base=%u simd_id_base=%u max_waves_per_simd=%u lds_kb=%u "
               "gds_kb=%u wave_front_size=%u shader_banks=%u arrays=%u cu_per_array=%u "
               "simd_per_cu=%u max_slots_scratch_cu=%u gfx_major=%u gfx_minor=%u "
               "gfx_stepping=%u ucode=%u vendor_id=%u device_id=%u location_id=%u domain=%u "
               "local_mem_size=%llu max_clock_f=%u max_clock_c=%u drm_render_minor=%d "
               "hive_id=%llu sdma=%u sdma_xgmi=%u sdma_queues=%u cp_queues=%u gws=%u "
               "unique_id=%llu capability=%u marketing=%s amd_name=%s\n",
               n, p.NumCPUCores, p.NumFComputeCores, p.NumMemoryBanks, p.NumCaches,
               p.NumIOLinks, p.CComputeIdLo, p.FComputeIdLo, p.MaxWavesPerSIMD,
               p.LDSSizeInKB, p.GDSSizeInKB, p.WaveFrontSize, p.NumShaderBanks,
               p.NumArrays, p.NumCUPerArray, p.NumSIMDPerCU, p.MaxSlotsScratchCU,
               p.EngineId.ui32.Major, p.EngineId.ui32.Minor, p.EngineId.ui32.Stepping,
               p.EngineId.ui32.uCode, p.VendorId, p.DeviceId, p.LocationId, p.Domain,
               (unsigned long long)p.LocalMemSize, p.MaxEngineClockMhzFCompute,
               p.MaxEngineClockMhzCCompute, p.DrmRenderMinor,
               (unsigned long long)p.HiveID, p.NumSdmaEngines, p.NumSdmaXgmiEngines,
               p.NumSdmaQueuesPerEngine, p.NumCpQueues, p.NumGws,
               (unsigned long long)p.UniqueID, p.Capability.Value,
               mname[0] ? mname : "-", aname[0] ? aname : "-");
        if (p.NumMemoryBanks) {
            HsaMemoryProperties *m = calloc(p.NumMemoryBanks, sizeof(*m));
            CHECK(hsaKmtGetNodeMemoryProperties(n, p.NumMemoryBanks, m));
            for (HSAuint32 i = 0; i < p.NumMemoryBanks; i++)
                printf("mem node=%u index=%u heap=%d size=%llu flags=%u width=%u "
                       "clock_max=%u base=%llu\n",
                       n, i, (int)m[i].HeapType, (unsigned long long)m[i].SizeInBytes,
                       m[i].Flags.MemoryProperty, m[i].Width, m[i].MemoryClockMax,
                       (unsigned long long)m[i].VirtualBaseAddress);
            free(m);
        }
        if (p.NumCaches) {
            HsaCacheProperties *c = calloc(p.NumCaches, sizeof(*c));
            HSAuint32 proc = p.NumCPUCores ? p.CComputeIdLo : p.FComputeIdLo;
            CHECK(hsaKmtGetNodeCacheProperties(n, proc, p.NumCaches, c));
            for (HSAuint32 i = 0; i < p.NumCaches; i++)
                printf("cache node=%u index=%u processor_id_low=%u level=%u size=%u "
                       "line_size=%u lines_per_tag=%u associativity=%u latency=%u type=%u\n",
                       n, i, c[i].ProcessorIdLow, c[i].CacheLevel, c[i].CacheSize,
                       c[i].CacheLineSize, c[i].CacheLinesPerTag, c[i].CacheAssociativity,
                       c[i].CacheLatency, c[i].CacheType.Value);
            free(c);
        }
        if (p.NumIOLinks) {
            HsaIoLinkProperties *l = calloc(p.NumIOLinks, sizeof(*l));
            CHECK(hsaKmtGetNodeIoLinkProperties(n, p.NumIOLinks, l));
            for (HSAuint32 i = 0; i < p.NumIOLinks; i++)
                printf("link node=%u index=%u type=%d from=%u to=%u weight=%u "
                       "min_latency=%u max_latency=%u min_bandwidth=%u max_bandwidth=%u "
                       "rec_transfer_size=%u flags=%u\n",
                       n, i, (int)l[i].IoLinkType, l[i].NodeFrom, l[i].NodeTo,
                       l[i].Weight, l[i].MinimumLatency, l[i].MaximumLatency,
                       l[i].MinimumBandwidth, l[i].MaximumBandwidth, l[i].RecTransferSize,
                       l[i].Flags.LinkProperty);
            free(l);
        }
    }
    report("topology");
    CHECK(hsaKmtReleaseSystemProperties());
    CHECK(hsaKmtCloseKFD());
    return 0;
}

/* What the memory scenario built, to free it again. */
struct built {
    HSAuint32 gpu;
    void *vram, *vram_host, *gtt, *ring, *sdma_ring, *userptr;
    HsaQueueResource compute, sdma;
    HsaEvent *event, *event2;
};

#define MiB (1024ull * 1024ull)

static void print_object(const char *kind, void *addr, HSAuint64 size, unsigned char fill)
{
    printf("object kind=%s addr=%llu size=%llu fill=%u\n", kind,
           (unsigned long long)(uintptr_t)addr, (unsigned long long)size, fill);
}

static void build(struct built *b)
{
    HsaSystemProperties sys;
    HsaMemFlags f;
    CHECK(hsaKmtOpenKFD());
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    b->gpu = 0;
    for (HSAuint32 n = 0; n < sys.NumNodes && !b->gpu; n++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(n, &p));
        if (p.NumFComputeCores)
            b->gpu = n;
    }
    printf("gpu node=%u\n", b->gpu);
    /* The thunk's shared memory, as the C plugin probes it at dump. */
    int shm = shm_open("/hsakmt_shared_mem", O_RDONLY, 0);
    struct stat st;
    if (shm >= 0 && fstat(shm, &st) == 0) {
        unsigned int magic = 0;
        if (read(shm, &magic, sizeof(magic)) != sizeof(magic))
            magic = 0;
        printf("shm name=hsakmt_shared_mem size=%lld magic=%u\n", (long long)st.st_size, magic);
        close(shm);
    } else {
        printf("shm name=hsakmt_shared_mem size=-1 magic=0\n");
    }
    report("opened");

    /* SetMemoryPolicy and XNACK before any queue exists, as ROCr does.
     * The thunk answers SetMemoryPolicy itself on anything but Kaveri
     * (NOT_IMPLEMENTED, "legacy API useful on Kaveri only"); it made the
     * SET_MEMORY_POLICY ioctl for the alternate aperture at open. */
    printf("call name=hsaKmtSetMemoryPolicy status=%d\n",
           (int)hsaKmtSetMemoryPolicy(b->gpu, HSA_CACHING_CACHED, HSA_CACHING_NONCACHED, NULL, 0));
    HSAint32 xnack = -1;
    CHECK(hsaKmtGetXNACKMode(&xnack));
    CHECK(hsaKmtSetXNACKMode(0));
    printf("xnack before=%d\n", xnack);

    /* VRAM, GPU only. */
    memset(&f, 0, sizeof(f));
    f.ui32.NonPaged = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(b->gpu, 2 * MiB, f, &b->vram));
    CHECK(hsaKmtMapMemoryToGPUNodes(b->vram, 2 * MiB, NULL, (HsaMemMapFlags){0}, 1, &b->gpu));

    /* VRAM the CPU can reach (large BAR), filled through the CPU. */
    memset(&f, 0, sizeof(f));
    f.ui32.NonPaged = 1;
    f.ui32.HostAccess = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(b->gpu, 2 * MiB, f, &b->vram_host));
    CHECK(hsaKmtMapMemoryToGPUNodes(b->vram_host, 2 * MiB, NULL, (HsaMemMapFlags){0}, 1, &b->gpu));
    memset(b->vram_host, 0xa5, 2 * MiB);
    print_object("vram_host", b->vram_host, 2 * MiB, 0xa5);

    /* System memory for the GPU (GTT), host accessible. */
    memset(&f, 0, sizeof(f));
    f.ui32.HostAccess = 1;
    f.ui32.NonPaged = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(0, 1 * MiB, f, &b->gtt));
    CHECK(hsaKmtMapMemoryToGPUNodes(b->gtt, 1 * MiB, NULL, (HsaMemMapFlags){0}, 1, &b->gpu));
    memset(b->gtt, 0x3c, 1 * MiB);
    print_object("gtt", b->gtt, 1 * MiB, 0x3c);

    /* A user pointer (malloc'd memory registered with the GPU). */
    if (posix_memalign(&b->userptr, 4096, 256 * 1024) != 0) {
        printf("fail posix_memalign\n");
        exit(1);
    }
    memset(b->userptr, 0x5a, 256 * 1024);
    CHECK(hsaKmtRegisterMemoryToNodes(b->userptr, 256 * 1024, 1, &b->gpu));
    CHECK(hsaKmtMapMemoryToGPUNodes(b->userptr, 256 * 1024, NULL, (HsaMemMapFlags){0}, 1, &b->gpu));
    print_object("userptr", b->userptr, 256 * 1024, 0x5a);

    /* Queue rings in host-accessible system memory; the doorbell page is
     * the thunk's own allocation at the first queue. */
    memset(&f, 0, sizeof(f));
    f.ui32.HostAccess = 1;
    f.ui32.NonPaged = 1;
    f.ui32.ExecuteAccess = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(0, 64 * 1024, f, &b->ring));
    CHECK(hsaKmtMapMemoryToGPUNodes(b->ring, 64 * 1024, NULL, (HsaMemMapFlags){0}, 1, &b->gpu));
    CHECK(hsaKmtAllocMemory(0, 64 * 1024, f, &b->sdma_ring));
    CHECK(hsaKmtMapMemoryToGPUNodes(b->sdma_ring, 64 * 1024, NULL, (HsaMemMapFlags){0}, 1, &b->gpu));
    memset(&b->compute, 0, sizeof(b->compute));
    memset(&b->sdma, 0, sizeof(b->sdma));
    CHECK(hsaKmtCreateQueue(b->gpu, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL,
                            b->ring, 64 * 1024, NULL, &b->compute));
    CHECK(hsaKmtCreateQueue(b->gpu, HSA_QUEUE_SDMA, 100, HSA_QUEUE_PRIORITY_NORMAL,
                            b->sdma_ring, 64 * 1024, NULL, &b->sdma));
    printf("queue kind=compute id=%llu doorbell=%llu\n",
           (unsigned long long)b->compute.QueueId, (unsigned long long)b->compute.QueueDoorBell);
    printf("queue kind=sdma id=%llu doorbell=%llu\n", (unsigned long long)b->sdma.QueueId,
           (unsigned long long)b->sdma.QueueDoorBell);

    /* Events: the first one makes the thunk allocate the events page. */
    HsaEventDescriptor d;
    memset(&d, 0, sizeof(d));
    d.EventType = HSA_EVENTTYPE_SIGNAL;
    d.NodeId = b->gpu;
    CHECK(hsaKmtCreateEvent(&d, true, false, &b->event));
    CHECK(hsaKmtCreateEvent(&d, false, false, &b->event2));
    CHECK(hsaKmtSetEvent(b->event));
    CHECK(hsaKmtWaitOnEvent(b->event, 0));
    printf("event id=%u\n", b->event->EventId);
    printf("event id=%u\n", b->event2->EventId);

    HsaClockCounters c;
    CHECK(hsaKmtGetClockCounters(b->gpu, &c));
    printf("clock gpu=%llu cpu=%llu system=%llu frequency=%llu\n",
           (unsigned long long)c.GPUClockCounter, (unsigned long long)c.CPUClockCounter,
           (unsigned long long)c.SystemClockCounter, (unsigned long long)c.SystemClockFrequencyHz);
    report("built");
}

static void teardown(struct built *b)
{
    CHECK(hsaKmtDestroyEvent(b->event));
    CHECK(hsaKmtDestroyEvent(b->event2));
    CHECK(hsaKmtDestroyQueue(b->compute.QueueId));
    CHECK(hsaKmtDestroyQueue(b->sdma.QueueId));
    report("queues-destroyed");
    CHECK(hsaKmtUnmapMemoryToGPU(b->ring));
    CHECK(hsaKmtFreeMemory(b->ring, 64 * 1024));
    CHECK(hsaKmtUnmapMemoryToGPU(b->sdma_ring));
    CHECK(hsaKmtFreeMemory(b->sdma_ring, 64 * 1024));
    CHECK(hsaKmtUnmapMemoryToGPU(b->userptr));
    CHECK(hsaKmtDeregisterMemory(b->userptr));
    free(b->userptr);
    CHECK(hsaKmtUnmapMemoryToGPU(b->gtt));
    CHECK(hsaKmtFreeMemory(b->gtt, 1 * MiB));
    CHECK(hsaKmtUnmapMemoryToGPU(b->vram_host));
    CHECK(hsaKmtFreeMemory(b->vram_host, 2 * MiB));
    CHECK(hsaKmtUnmapMemoryToGPU(b->vram));
    CHECK(hsaKmtFreeMemory(b->vram, 2 * MiB));
    report("freed");
    CHECK(hsaKmtReleaseSystemProperties());
    CHECK(hsaKmtCloseKFD());
    report("closed");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "topology") == 0)
        return topology();
    if (argc >= 2 && strcmp(argv[1], "memory") == 0) {
        struct built b;
        memset(&b, 0, sizeof(b));
        build(&b);
        teardown(&b);
        printf("done\n");
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "checkpoint") == 0) {
        struct built b;
        int (*fn)(const char *, const char *, const char *, int) =
            (int (*)(const char *, const char *, const char *, int))dlsym(
                RTLD_DEFAULT, "kfd_sim_preload_checkpoint");
        memset(&b, 0, sizeof(b));
        build(&b);
        if (!fn) {
            printf("fail kfd_sim_preload_checkpoint missing\n");
            return 1;
        }
        int r = fn(argv[2], argv[3], argv[4], 1);
        printf("checkpoint result=%d\n", r);
        /* The checkpointed process runs on (--leave-running). */
        report("after-checkpoint");
        teardown(&b);
        printf("done\n");
        return r == 0 ? 0 : 1;
    }
    fprintf(stderr, "usage: %s topology|memory|checkpoint FIRST SECOND SHM\n", argv[0]);
    return 2;
}
