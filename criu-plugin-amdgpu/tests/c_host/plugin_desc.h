/*
 * CRIU's plugin descriptor (criu-plugin.h's cr_plugin_desc_t, version 2,
 * 16 hook slots), for the C host and the plugin it loads beside ours.
 */
#ifndef C_HOST_PLUGIN_DESC_H
#define C_HOST_PLUGIN_DESC_H

#define SLOTS 16

typedef struct {
	const char *name;
	int (*init)(int stage);
	void (*exit)(int stage, int ret);
	unsigned int version;
	unsigned int max_hooks;
	void *hooks[SLOTS];
} desc_t;

#endif
