/*
 * The process real CRIU dumps in real_criu_guardian.rs: AMD's thunk
 * (libhsakmt) builds GPU state on the served simulated machine (the
 * interposer in its KFD_SIM_REMOTE mode), then the program runs on,
 * appending a line to DIR/heartbeat every 20 ms.
 *
 *   real_criu_app DIR
 *
 * State: a 2 MiB CPU-visible VRAM BO filled with 0xa5, a 64 KiB GTT ring
 * and a compute queue on it. DIR/ready holds the pid once it is built;
 * a failed call writes "fail CALL status=N" there and exits 1.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <hsakmt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    /* Files the test harness left open (the host's, which CRIU cannot
     * name from the private mount namespace) are none of this process's. */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    HsaSystemProperties sys;
    HsaMemFlags f;
    HSAuint32 gpu = 0;
    void *vram, *ring;
    HsaQueueResource queue;

    CHECK(hsaKmtOpenKFD());
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    for (HSAuint32 n = 0; n < sys.NumNodes && !gpu; n++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(n, &p));
        if (p.NumFComputeCores)
            gpu = n;
    }
    memset(&f, 0, sizeof(f));
    f.ui32.NonPaged = 1;
    f.ui32.HostAccess = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(gpu, 2 << 20, f, &vram));
    CHECK(hsaKmtMapMemoryToGPUNodes(vram, 2 << 20, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    memset(vram, 0xa5, 2 << 20);

    memset(&f, 0, sizeof(f));
    f.ui32.HostAccess = 1;
    f.ui32.NonPaged = 1;
    f.ui32.ExecuteAccess = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    CHECK(hsaKmtAllocMemory(0, 64 << 10, f, &ring));
    CHECK(hsaKmtMapMemoryToGPUNodes(ring, 64 << 10, NULL, (HsaMemMapFlags){0}, 1, &gpu));
    memset(&queue, 0, sizeof(queue));
    CHECK(hsaKmtCreateQueue(gpu, HSA_QUEUE_COMPUTE_AQL, 100, HSA_QUEUE_PRIORITY_NORMAL, ring,
                            64 << 10, NULL, &queue));

    char pid[32];
    snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    say("ready", pid);

    char path[4096];
    snprintf(path, sizeof(path), "%s/heartbeat", dir);
    int beat = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (beat < 0)
        return 2;
    for (unsigned long n = 0;; n++) {
        char line[32];
        int len = snprintf(line, sizeof(line), "%lu\n", n);
        if (write(beat, line, (size_t)len) != len)
            return 2;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
