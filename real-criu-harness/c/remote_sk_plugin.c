/*
 * A CRIU plugin for the tests that run real CRIU on a served simulated
 * machine: it carries a process's connection to the machine (a unix socket
 * whose peer, the test's server, is outside the dumped tree) through dump
 * and restore, with the help of the preloaded interposer
 * (kfd-sim-preload's criu_socket module), found with dlsym:
 *
 *   DUMP_UNIX_SK(fd, id)   claims the socket when it is such a connection
 *   RESTORE_UNIX_SK(id)    in the restored task, hands CRIU a connection of
 *                          the task itself to put where the socket was
 *
 * Without the interposer (CRIU run without LD_PRELOAD) every call answers
 * -ENOTSUP: not this plugin's socket.
 *
 * The descriptor is CRIU's cr_plugin_desc_t (criu/include/criu-plugin.h),
 * written out: name, init, exit, version (CRIU_PLUGIN_VERSION 0x200),
 * max_hooks, then the hook table, of which this plugin fills the first two
 * (CR_PLUGIN_HOOK__DUMP_UNIX_SK = 0, CR_PLUGIN_HOOK__RESTORE_UNIX_SK = 1),
 * hooks every CRIU release since 2014 has.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

static int dump_unix_sk(int fd, int id)
{
    int (*is_connection)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "kfd_sim_preload_is_connection");
    (void)id;
    if (!is_connection || is_connection(fd) != 1)
        return -ENOTSUP;
    return 0;
}

static int restore_unix_sk(int id)
{
    int (*connection)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "kfd_sim_preload_connection");
    (void)id;
    if (!connection)
        return -ENOTSUP;
    return connection();
}

static int init(int stage)
{
    (void)stage;
    return 0;
}

static void fini(int stage, int ret)
{
    (void)stage;
    (void)ret;
}

struct plugin_desc {
    const char *name;
    int (*init)(int stage);
    void (*exit)(int stage, int ret);
    unsigned int version;
    unsigned int max_hooks;
    void *hooks[2];
};

__attribute__((visibility("default"))) struct plugin_desc CR_PLUGIN_DESC = {
    .name = "kfd_sim_remote",
    .init = init,
    .exit = fini,
    .version = 0x200,
    .max_hooks = 2,
    .hooks = {(void *)dump_unix_sk, (void *)restore_unix_sk},
};
