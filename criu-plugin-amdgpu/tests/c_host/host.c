/*
 * A minimal CRIU stand-in: loads amdgpu_plugin.so the way criu/plugin.c does
 * (dlopen RTLD_LAZY, no RTLD_GLOBAL, dlsym "CR_PLUGIN_DESC", verify version
 * and max_hooks), exports the CRIU services the plugin looks up at run time
 * (built with -rdynamic), and calls init/exit and every hook below max_hooks
 * with files that are not the plugin's.
 *
 * Build-time knobs (-D):
 *   HOOK_MAX=<n>   export cr_plugin_ctl sized like CRIU's with n hooks
 *   INVENTORY      export the inventory services of CRIU >= 4.1, with an
 *                  inventory that lists the plugin (a dump with GPU files)
 *   INVENTORY_WITHOUT_US  ... with an inventory that does not name the plugin
 *   INVENTORY_OLD  ... for images without a plugin list (every plugin needed)
 *   GET_OPTIONS    export criu_plugin_get_options (criu#3138) with the
 *                  entries of $HOST_PLUGIN_OPTIONS (one per line); the host
 *                  checks the plugin left CRIU's array untouched. With
 *                  $HOST_EXPECT_INIT_FAIL=1 every init must fail (bad options).
 *   DISPATCH       instead of calling each hook directly, load a second
 *                  plugin ($HOST_SIBLING, loaded first with
 *                  $HOST_SIBLING_FIRST=1, as CRIU's readdir order may) and
 *                  dispatch a dump and a restore through CRIU's hook chains
 *                  as CRIU does with its hook changes of 2026 (see
 *                  dispatch_scenario).
 * Like CRIU, a descriptor whose max_hooks exceeds HOOK_MAX is refused as a
 * "Corrupted plugin".
 * Usage: host <plugin.so> <expected max_hooks> <images dir>
 * Prints "LOG <level> <line>" for every log line and "PASS" at the end;
 * any failed expectation prints "FAIL ..." to stderr and exits 1.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin_desc.h"

struct list_head {
	struct list_head *next, *prev;
};

#ifdef HOOK_MAX
struct {
	struct list_head head;
	struct list_head hook_chain[HOOK_MAX];
} cr_plugin_ctl;
#endif

static int image_dir_fd = -1;
static int log_lines;
static int bad_prefix;

void print_on_level(unsigned int level, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	log_lines++;
	/* CRIU's pr_err/pr_warn tags come before the prefix, as in C plugins. */
	if (level == 1 && strncmp(buf, "Error (", 7) == 0 && strstr(buf, "): amdgpu_plugin: "))
		;
	else if (level == 2 && strncmp(buf, "Warn  (", 7) == 0 && strstr(buf, "): amdgpu_plugin: "))
		;
	else if (level > 2 && strncmp(buf, "amdgpu_plugin: ", 15) == 0)
		;
	else
		bad_prefix++;
	printf("LOG %u %s", level, buf);
	if (!strchr(buf, '\n'))
		printf("\n");
	fflush(stdout);
}

int criu_get_image_dir(void)
{
	return image_dir_fd;
}

#ifdef INVENTORY
static int inventory_adds;
int add_inventory_plugin(const char *name)
{
	inventory_adds++;
	return name ? 0 : -1;
}

bool check_and_remove_inventory_plugin(const char *name, size_t n)
{
#if defined(INVENTORY_OLD)
	/* Images without a plugin list: CRIU answers true for every name. */
	(void)name;
	(void)n;
	return true;
#elif defined(INVENTORY_WITHOUT_US)
	/* Images dumped without any GPU file: the inventory lists no plugin. */
	(void)name;
	(void)n;
	return false;
#else
	return strncmp(name, "amdgpu_plugin", n) == 0;
#endif
}
#endif

#ifdef GET_OPTIONS
#define MAX_OPTIONS 16
static char *options_argv[MAX_OPTIONS + 1];
static char *options_copy[MAX_OPTIONS];
static int options_argc;
static int options_calls;

int criu_plugin_get_options(int *argc, char ***argv)
{
	options_calls++;
	*argc = options_argc;
	*argv = options_argv;
	return 0;
}

static void load_options(void)
{
	const char *env = getenv("HOST_PLUGIN_OPTIONS");
	char *all, *line, *save = NULL;

	if (!env || !*env)
		return;
	all = strdup(env);
	for (line = strtok_r(all, "\n", &save); line && options_argc < MAX_OPTIONS;
	     line = strtok_r(NULL, "\n", &save)) {
		options_argv[options_argc] = line;
		options_copy[options_argc] = strdup(line);
		options_argc++;
	}
}
#endif

static int failures;
#define EXPECT(cond, ...)                                      \
	do {                                                   \
		if (!(cond)) {                                 \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);          \
			fprintf(stderr, "\n");                 \
			failures++;                            \
		}                                              \
	} while (0)

typedef int (*fd_id_t)(int, int);
typedef int (*restore_file_t)(int, bool *);
typedef int (*vma_t)(int, const struct stat *);
typedef int (*update_vma_t)(const char *, uint64_t, uint64_t, uint64_t *, int *);
typedef int (*int_t)(int);
typedef int (*void_t)(void);

#ifdef DISPATCH
/*
 * CRIU's hook chains with two plugins, ours and a sibling, in load order.
 * criu/include/plugin.h's run_plugins walks a hook's chain and stops at the
 * first answer other than -ENOTSUP. With the hook changes of 2026:
 *   criu#3105 calls CHECKPOINT_DEVICES (seize.c, checkpoint_devices) and
 *   RESUME_DEVICES_LATE (cr-restore.c, restore_root_task) once more with
 *   pid -1 after the per-task loop, through run_plugins: a plugin the call
 *   is not for answers -ENOTSUP and the next one hears it;
 *   66fe7a1dd (criu#3076) makes DUMP_DEVICES_LATE, RESTORE_INIT and
 *   POST_FORKING broadcasts: every plugin's handler runs, and the first
 *   error (an answer other than 0 and -ENOTSUP) is returned after all ran.
 * Each handler call prints "CALL <plugin> <hook> <arg> = <answer>", each
 * dispatch "DISPATCH <chain|broadcast> <hook> <arg> = <result>".
 */
#define NO_ARG 0x7fffffff

static desc_t *loaded[2];

static bool on_chain(const desc_t *p, int hook)
{
	return hook < (int)p->max_hooks && p->hooks[hook];
}

static int call_hook(desc_t *p, int hook, int arg)
{
	int ret = arg == NO_ARG ? ((void_t)p->hooks[hook])() : ((int_t)p->hooks[hook])(arg);

	printf("CALL %s %d %d = %d\n", p->name, hook, arg == NO_ARG ? 0 : arg, ret);
	fflush(stdout);
	return ret;
}

static int run_chain(int hook, int arg)
{
	int i, ret = -ENOTSUP;

	for (i = 0; i < 2; i++) {
		if (!on_chain(loaded[i], hook))
			continue;
		ret = call_hook(loaded[i], hook, arg);
		if (ret == -ENOTSUP)
			continue;
		break;
	}
	printf("DISPATCH chain %d %d = %d\n", hook, arg == NO_ARG ? 0 : arg, ret);
	return ret;
}

static int run_broadcast(int hook, int arg)
{
	int i, ret, result = -ENOTSUP, first_error = 0;

	for (i = 0; i < 2; i++) {
		if (!on_chain(loaded[i], hook))
			continue;
		ret = call_hook(loaded[i], hook, arg);
		if (ret == 0)
			result = 0;
		else if (ret != -ENOTSUP && !first_error)
			first_error = ret;
	}
	if (first_error)
		result = first_error;
	printf("DISPATCH broadcast %d %d = %d\n", hook, arg == NO_ARG ? 0 : arg, result);
	return result;
}

/* What CRIU's call sites take as success. */
static bool criu_goes_on(int ret)
{
	return !(ret < 0 && ret != -ENOTSUP);
}

static void dispatch_scenario(desc_t *ours)
{
	const char *path = getenv("HOST_SIBLING");
	const char *first = getenv("HOST_SIBLING_FIRST");
	desc_t *sibling;
	void *h;
	int stage, i, pid = getpid();

	h = path ? dlopen(path, RTLD_LAZY) : NULL;
	sibling = h ? dlsym(h, "CR_PLUGIN_DESC") : NULL;
	if (!sibling) {
		fprintf(stderr, "FAIL no sibling plugin at $HOST_SIBLING: %s\n", path ? dlerror() : "unset");
		exit(1);
	}
	if (first && strcmp(first, "1") == 0) {
		loaded[0] = sibling;
		loaded[1] = ours;
	} else {
		loaded[0] = ours;
		loaded[1] = sibling;
	}
	for (stage = 0; stage <= 2; stage += 2) {
		for (i = 0; i < 2; i++)
			EXPECT(loaded[i]->init(stage) == 0, "init(%d) of %s", stage, loaded[i]->name);
		if (stage == 0) {
			EXPECT(criu_goes_on(run_chain(11, pid)), "CHECKPOINT_DEVICES(%d)", pid);
			EXPECT(criu_goes_on(run_chain(11, -1)), "CHECKPOINT_DEVICES(-1)");
			EXPECT(criu_goes_on(run_broadcast(14, pid)), "DUMP_DEVICES_LATE");
		} else {
			EXPECT(criu_goes_on(run_broadcast(13, NO_ARG)), "RESTORE_INIT");
			EXPECT(criu_goes_on(run_broadcast(12, NO_ARG)), "POST_FORKING");
			EXPECT(criu_goes_on(run_chain(9, pid)), "RESUME_DEVICES_LATE(%d)", pid);
			EXPECT(criu_goes_on(run_chain(9, -1)), "RESUME_DEVICES_LATE(-1)");
		}
		for (i = 0; i < 2; i++)
			loaded[i]->exit(stage, 0);
	}
	dlclose(h);
}
#endif

int main(int argc, char **argv)
{
	void *h;
	desc_t *d;
	unsigned int expected;
	int stage, i, ret;
	int pipefd[2];
	int null_fd;
	struct stat st;
	bool have_kfd = access("/dev/kfd", F_OK) == 0;

	if (argc != 4) {
		fprintf(stderr, "usage: %s plugin.so max_hooks images-dir\n", argv[0]);
		return 2;
	}
	expected = (unsigned int)atoi(argv[2]);
	image_dir_fd = open(argv[3], O_RDONLY | O_DIRECTORY);
#ifdef GET_OPTIONS
	load_options();
#endif
	EXPECT(image_dir_fd >= 0, "cannot open images dir %s", argv[3]);

	h = dlopen(argv[1], RTLD_LAZY);
	if (!h) {
		fprintf(stderr, "FAIL dlopen: %s\n", dlerror());
		return 1;
	}
	d = dlsym(h, "CR_PLUGIN_DESC");
	if (!d) {
		fprintf(stderr, "FAIL no CR_PLUGIN_DESC\n");
		return 1;
	}
	EXPECT(d->name && strcmp(d->name, "amdgpu_plugin") == 0, "name %s", d->name ? d->name : "(null)");
	EXPECT(d->version == 0x200, "version %#x", d->version);
#ifdef HOOK_MAX
	/* criu/plugin.c: max_hooks above CR_PLUGIN_HOOK__MAX is refused. */
	if (d->max_hooks > HOOK_MAX) {
		fprintf(stderr, "FAIL Corrupted plugin amdgpu_plugin: max_hooks %u -> %u\n", d->max_hooks, HOOK_MAX);
		return 1;
	}
#endif
	EXPECT(d->max_hooks == expected, "max_hooks %u, expected %u", d->max_hooks, expected);
	EXPECT(d->init && d->exit, "init/exit missing");
	{
		/* Slot 15 (UPDATE_INETSK) and every other hook the plugin does
		 * not implement stay NULL. */
		int ours[] = { 2, 3, 7, 8, 9, 12, 13, 14 };
		bool want[SLOTS] = { false };

		for (i = 0; i < (int)(sizeof(ours) / sizeof(ours[0])); i++)
			want[ours[i]] = true;
		for (i = 0; i < SLOTS; i++)
			EXPECT((d->hooks[i] != NULL) == want[i], "hook slot %d", i);
	}

#ifdef DISPATCH
	dispatch_scenario(d);
	(void)pipefd;
	(void)null_fd;
	(void)st;
	(void)stage;
	(void)ret;
	(void)have_kfd;
	goto done;
#endif
	EXPECT(pipe(pipefd) == 0, "pipe");
	null_fd = open("/dev/null", O_RDWR);
	EXPECT(null_fd >= 0 && fstat(null_fd, &st) == 0, "/dev/null");

	for (stage = 0; stage <= 2; stage++) {
		ret = d->init(stage);
		if (getenv("HOST_EXPECT_INIT_FAIL") && strcmp(getenv("HOST_EXPECT_INIT_FAIL"), "1") == 0) {
			EXPECT(ret != 0, "init(%d) accepted invalid plugin options", stage);
			continue;
		}
#if defined(INVENTORY) && !defined(INVENTORY_WITHOUT_US) && !defined(INVENTORY_OLD)
		/* Images listing the plugin cannot be restored without /dev/kfd:
		 * init refuses, and CRIU unloads the plugin without calling exit. */
		if (stage == 2 && !have_kfd) {
			EXPECT(ret != 0, "init(RESTORE) of listed images without /dev/kfd = %d", ret);
			break;
		}
#endif
		EXPECT(ret == 0, "init(%d) = %d", stage, ret);

		/* Like CRIU, never call a hook at or above max_hooks. */
		if (7 < d->max_hooks) {
			ret = ((vma_t)d->hooks[7])(null_fd, &st);
			EXPECT(ret == -ENOTSUP, "HANDLE_DEVICE_VMA(/dev/null) = %d", ret);
		}
		ret = ((fd_id_t)d->hooks[2])(pipefd[0], 11);
		EXPECT(ret == -ENOTSUP, "DUMP_EXT_FILE(pipe) = %d", ret);
		ret = ((fd_id_t)d->hooks[2])(null_fd, 12);
		EXPECT(ret == -ENOTSUP, "DUMP_EXT_FILE(/dev/null) = %d", ret);
		if (14 < d->max_hooks) {
			ret = ((int_t)d->hooks[14])(getpid());
			EXPECT(ret == -ENOTSUP, "DUMP_DEVICES_LATE = %d", ret);
		}
		if (13 < d->max_hooks) {
			ret = ((void_t)d->hooks[13])();
			EXPECT(ret == -ENOTSUP, "RESTORE_INIT = %d", ret);
		}
		if (12 < d->max_hooks) {
			ret = ((void_t)d->hooks[12])();
			EXPECT(ret == -ENOTSUP, "POST_FORKING = %d", ret);
		}
		{
			/* A canary: hosts without the retry protocol must find it intact. */
			union {
				bool b;
				unsigned char raw;
			} retry = { .raw = 0x55 };

			ret = ((restore_file_t)d->hooks[3])(77, &retry.b);
			EXPECT(ret == -ENOTSUP, "RESTORE_EXT_FILE(77) = %d", ret);
			if (d->max_hooks >= 14)
				EXPECT(retry.raw == 0, "retry_needed not written: %#x", retry.raw);
			else
				EXPECT(retry.raw == 0x55, "retry_needed written on an old host: %#x", retry.raw);
		}
		{
			uint64_t new_pgoff = 0xdead;
			int plugin_fd = 1234;

			ret = ((update_vma_t)d->hooks[8])("/usr/lib/libfoo.so", 0x7f0000000000ULL, 0, &new_pgoff, &plugin_fd);
			EXPECT(ret == -ENOTSUP, "UPDATE_VMA_MAP(foreign) = %d", ret);
			if (!have_kfd) {
				ret = ((update_vma_t)d->hooks[8])("/dev/kfd", 0x7f0000000000ULL, 0, &new_pgoff, &plugin_fd);
				EXPECT(ret == -ENOTSUP, "UPDATE_VMA_MAP(/dev/kfd) without KFD = %d", ret);
			}
			EXPECT(new_pgoff == 0xdead, "new_pgoff written for a foreign mapping");
		}
		ret = ((int_t)d->hooks[9])(getpid());
		EXPECT(ret == -ENOTSUP, "RESUME_DEVICES_LATE(self) = %d", ret);

		d->exit(stage, 0);
	}

#ifdef DISPATCH
done:
#endif
#ifdef GET_OPTIONS
	EXPECT(options_argc == 0 || options_calls > 0, "criu_plugin_get_options never called");
	for (i = 0; i < options_argc; i++)
		EXPECT(strcmp(options_argv[i], options_copy[i]) == 0, "plugin option %d changed: %s -> %s", i,
		       options_copy[i], options_argv[i]);
#endif
	EXPECT(log_lines > 0, "no log line reached print_on_level");
	EXPECT(bad_prefix == 0, "%d log lines without the amdgpu_plugin: prefix", bad_prefix);
	dlclose(h);
	if (failures)
		return 1;
	printf("PASS\n");
	return 0;
}
