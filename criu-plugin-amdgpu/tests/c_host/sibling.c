/*
 * Another device plugin beside amdgpu_plugin.so in the C host's dispatch
 * scenario (host.c, -DDISPATCH), shaped like the batching plugin criu#3105
 * was written for: it answers -ENOTSUP for each task of CHECKPOINT_DEVICES
 * and RESUME_DEVICES_LATE and acts (answers 0) on the pid -1 call that ends
 * each loop, and it has global work in DUMP_DEVICES_LATE, RESTORE_INIT and
 * POST_FORKING (answers 0). Every call prints "SIBLING <hook> <arg>", on
 * stdout or, with $SIBLING_LOG set (under real CRIU), appended to that
 * file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "plugin_desc.h"

static int heard(int hook, int arg)
{
	const char *path = getenv("SIBLING_LOG");
	FILE *out = path ? fopen(path, "a") : stdout;

	if (out) {
		fprintf(out, "SIBLING %d %d\n", hook, arg);
		if (out == stdout)
			fflush(out);
		else
			fclose(out);
	}
	return 0;
}

static int per_task(int hook, int pid)
{
	heard(hook, pid);
	return pid == -1 ? 0 : -ENOTSUP;
}

static int resume_devices_late(int pid)
{
	return per_task(9, pid);
}

static int checkpoint_devices(int pid)
{
	return per_task(11, pid);
}

static int post_forking(void)
{
	return heard(12, 0);
}

static int restore_init(void)
{
	return heard(13, 0);
}

static int dump_devices_late(int pid)
{
	return heard(14, pid);
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

desc_t CR_PLUGIN_DESC = {
	.name = "sibling",
	.init = init,
	.exit = fini,
	.version = 0x200,
	.max_hooks = 15,
	.hooks = {
		[9] = (void *)resume_devices_late,
		[11] = (void *)checkpoint_devices,
		[12] = (void *)post_forking,
		[13] = (void *)restore_init,
		[14] = (void *)dump_devices_late,
	},
};
