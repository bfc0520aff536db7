/*
 * The sample provider's one extra export: counters that tests (and a curious vendor) read to see what the core asked
 * of the provider.  A real provider needs nothing like it; it shows how a plugin can export a symbol of its own next
 * to tess_plugin_entry (see sample.map) without breaking the "plugins export C names only" rule.
 *
 * Look it up with dlsym(handle, "tessera_sample_stats") on the plugin file the environment loaded (dlopen of the same
 * path returns the same library, so the counters are the ones the provider updates).
 */
#ifndef TESSERA_SAMPLE_H_
#define TESSERA_SAMPLE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Counters over every instance of the provider in the process.  Like every struct of the ABI it starts with
 * struct_size (set by the caller) and only grows at its end. */
typedef struct TesseraSampleStats {
    size_t struct_size;
    uint64_t live_allocations;  /* blocks from the provider's allocator not freed yet */
    uint64_t live_bytes;        /* their bytes */
    uint64_t total_allocations; /* every allocation so far */
    uint64_t copies_to_host;    /* copy_to_host calls (provider memory -> host) */
    uint64_t copies_from_host;  /* copy_from_host calls (host -> provider memory) */
    uint64_t bytes_to_host;
    uint64_t bytes_from_host;
    uint64_t live_instances;    /* provider instances (one per session) not released yet */
    uint64_t live_compiled;     /* compiled partitions not released yet */
    uint64_t computes;          /* compute calls */
} TesseraSampleStats;

typedef void (*TesseraSampleStatsFn)(TesseraSampleStats* out);
#define TESSERA_SAMPLE_STATS_NAME "tessera_sample_stats"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_SAMPLE_H_ */
