/* A stand-in for the NVIDIA driver's libcuda.so.1, for tests on machines without a GPU.
 * Its behaviour is chosen at compile time:
 *   INIT_RESULT     what cuInit returns (34 = CUDA_ERROR_STUB_LIBRARY, 100 = CUDA_ERROR_NO_DEVICE)
 *   DRIVER_VERSION  what cuDriverGetVersion reports (12040 = CUDA 12.4)
 *   DEVICE_COUNT    devices seen after a successful cuInit
 *   CC_MAJOR/CC_MINOR compute capability
 *   WITH_V2         export cuEventElapsedTime_v2 and cuDeviceGetUuid_v2 (R570+ drivers do)
 *   OMIT_MEMGETINFO leave out cuMemGetInfo_v2 (a symbol every supported driver has)
 *   FULL            make the context, stream, memory, module, launch and event calls succeed:
 *                   cuMemAlloc hands out fake addresses from a budget of MEMORY_BUDGET bytes and
 *                   then fails with CUDA_ERROR_OUT_OF_MEMORY; copies and launches do nothing
 *   HOSTMEM         (with FULL) device memory is host memory: cuMemAlloc mallocs, copies copy, and
 *                   streams, event records, copies, launches (kernel name, grid, block, stream,
 *                   parameter values), frees and the context release are appended to the file
 *                   named by $STUB_LOG, so a test can check every argument the device passes
 *   EXECUTE         (with HOSTMEM) launches run the kernels on the host, as kernels/lab.cu defines
 *                   them (seeded inputs, exact GELU in float32, for the three dtypes; the bias
 *                   broadcast for 4- and 2-byte elements), so a whole measurement runs and its
 *                   numerical check means something
 *
 * Several GPUs, chosen at run time by environment variables so that each test picks its scenario
 * (lists are comma-separated, one item per physical device; a shorter list repeats its last item):
 *   STUB_DEVICE_COUNT  devices seen (overrides DEVICE_COUNT; the NVML stub reads it too)
 *   STUB_CUDA_ORDER    the physical device of each CUDA ordinal (as CUDA_VISIBLE_DEVICES reorders
 *                      them), e.g. 1,0; physical device i has the UUID ...e7f8 + i
 *   STUB_NAMES         device names (default "Stub GPU")
 *   STUB_TOTAL_BYTES   total memory per device; STUB_FREE_BYTES what cuMemGetInfo calls free
 *   STUB_CC            compute capability per device, MAJOR.MINOR (default CC_MAJOR.CC_MINOR)
 *   STUB_NO_PEER       ordinal pairs without peer access, FROM>TO (e.g. 0>1,1>0)
 *   STUB_EVENT_MS      (with FULL) the milliseconds every timed interval takes on each device, so
 *                      a test knows the bandwidth and throughput the probe must compute
 * With FULL the probe's calls are there too: pinned host memory (malloc), device-to-device and
 * peer copies (nothing is copied unless HOSTMEM), peer access.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef INIT_RESULT
#define INIT_RESULT 0
#endif
#ifndef DRIVER_VERSION
#define DRIVER_VERSION 12040
#endif
#ifndef DEVICE_COUNT
#define DEVICE_COUNT 1
#endif
#ifndef CC_MAJOR
#define CC_MAJOR 9
#endif
#ifndef CC_MINOR
#define CC_MINOR 0
#endif

static int initialised = 0;
static const unsigned char uuid[16] = {0x6f, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70,
                                       0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7, 0xf8};
/* The physical device of the current context. */
static __thread int current = 0;

/* Item `i` of the comma-separated list in `name` (its last item when shorter); 0 if unset. */
static int item(const char *name, int i, char *out, size_t len) {
    const char *v = getenv(name);
    const char *start, *comma;
    int k = 0;
    size_t n;
    if (!v || !*v) return 0;
    start = v;
    for (;;) {
        comma = strchr(start, ',');
        if (k == i || !comma) break;
        start = comma + 1;
        k++;
    }
    n = comma ? (size_t)(comma - start) : strlen(start);
    if (n >= len) n = len - 1;
    memcpy(out, start, n);
    out[n] = 0;
    return 1;
}
static int device_count(void) {
    const char *v = getenv("STUB_DEVICE_COUNT");
    return v ? atoi(v) : DEVICE_COUNT;
}
static int physical(int ordinal) {
    char buf[16];
    return item("STUB_CUDA_ORDER", ordinal, buf, sizeof buf) ? atoi(buf) : ordinal;
}
static unsigned long bytes_of(const char *name, int dev, unsigned long fallback) {
    char buf[32];
    return item(name, dev, buf, sizeof buf) ? strtoul(buf, NULL, 0) : fallback;
}
static void uuid_of(int dev, unsigned char *out) {
    memcpy(out, uuid, 16);
    out[15] = (unsigned char)(uuid[15] + dev);
}
static int cc(int dev, int minor) {
    char buf[16];
    int major_v = CC_MAJOR, minor_v = CC_MINOR;
    if (item("STUB_CC", dev, buf, sizeof buf)) sscanf(buf, "%d.%d", &major_v, &minor_v);
    return minor ? minor_v : major_v;
}

int cuDriverGetVersion(int *v) { *v = DRIVER_VERSION; return 0; }
int cuInit(unsigned flags) { (void)flags; if (INIT_RESULT == 0) initialised = 1; return INIT_RESULT; }
int cuGetErrorName(int code, const char **s) {
    switch (code) {
    case 34: *s = "CUDA_ERROR_STUB_LIBRARY"; return 0;
    case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 999: *s = "CUDA_ERROR_UNKNOWN"; return 0;
    default: return 1;
    }
}
int cuDeviceGetCount(int *n) { if (!initialised) return 3; *n = device_count(); return 0; }
int cuDeviceGet(int *d, int ordinal) {
    if (ordinal >= device_count()) return 101;
    *d = physical(ordinal);
    return 0;
}
int cuDeviceGetName(char *name, int len, int dev) {
    char buf[128];
    strncpy(name, item("STUB_NAMES", dev, buf, sizeof buf) ? buf : "Stub GPU", len);
    return 0;
}
/* Ordinal pairs named in STUB_NO_PEER cannot reach each other; every other pair can. */
int cuDeviceCanAccessPeer(int *can, int dev, int peer) {
    const char *v = getenv("STUB_NO_PEER");
    const char *p = v;
    int a, b;
    *can = dev != peer;
    while (p && *p) {
        if (sscanf(p, "%d>%d", &a, &b) == 2 && physical(a) == dev && physical(b) == peer) *can = 0;
        p = strchr(p, ',');
        if (p) p++;
    }
    return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    switch (attr) {
    case 16: *v = 132; return 0;            /* MULTIPROCESSOR_COUNT */
    case 32: *v = 1; return 0;              /* ECC_ENABLED */
    case 33: *v = 0x1b; return 0;           /* PCI_BUS_ID */
    case 34: *v = 0; return 0;              /* PCI_DEVICE_ID */
    case 50: *v = 0; return 0;              /* PCI_DOMAIN_ID */
    case 38: *v = 50 * 1024 * 1024; return 0; /* L2_CACHE_SIZE */
    case 37: *v = 6144; return 0;           /* GLOBAL_MEMORY_BUS_WIDTH */
    case 75: *v = cc(dev, 0); return 0;
    case 76: *v = cc(dev, 1); return 0;
    default: return 1;
    }
}
int cuDeviceTotalMem_v2(unsigned long *bytes, int dev) {
    *bytes = bytes_of("STUB_TOTAL_BYTES", dev, 150754820096UL);
    return 0;
}
int cuDeviceGetUuid(unsigned char *out, int dev) { uuid_of(dev, out); return 0; }
/* A device's primary context is its index + 1. */
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)(unsigned long)(dev + 1); return 0; }
#if !(defined(FULL) && defined(HOSTMEM))
int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
#endif
int cuCtxSetCurrent(void *ctx) {
    if (ctx) current = (int)(unsigned long)ctx - 1;
    return 0;
}
#ifndef OMIT_MEMGETINFO
int cuMemGetInfo_v2(unsigned long *free_bytes, unsigned long *total) {
    *free_bytes = bytes_of("STUB_FREE_BYTES", current, 149000000000UL);
    *total = bytes_of("STUB_TOTAL_BYTES", current, 150754820096UL);
    return 0;
}
#endif
/* STUB_EVENT_MS of the current device, else 1.5 ms. */
static float event_ms(void) {
    char buf[32];
    return item("STUB_EVENT_MS", current, buf, sizeof buf) ? strtof(buf, NULL) : 1.5f;
}
#ifdef WITH_V2
int cuDeviceGetUuid_v2(unsigned char *out, int dev) { uuid_of(dev, out); return 0; }
int cuEventElapsedTime_v2(float *ms, void *a, void *b) { (void)a; (void)b; *ms = event_ms(); return 0; }
#endif

#ifdef FULL
#ifndef MEMORY_BUDGET
#define MEMORY_BUDGET (64UL * 1024 * 1024)
#endif
#ifdef HOSTMEM
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long used = 0;
static void say(const char *fmt, ...) {
    const char *path = getenv("STUB_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    va_list ap;
    if (!f) return;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}
int cuMemAlloc_v2(unsigned long *p, unsigned long bytes) {
    void *m;
    if (used + bytes > MEMORY_BUDGET) return 2;
    /* cuMemAlloc's pointers are aligned to at least 256 bytes. */
    m = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!m) return 2;
    used += bytes;
    *p = (unsigned long)m;
    return 0;
}
int cuMemFree_v2(unsigned long p) { say("free ptr=%lu\n", p); free((void *)p); return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { say("ctx_release dev=%d\n", dev); return 0; }
int cuStreamCreate(void **out, unsigned flags) {
    *out = (void *)0x5757;
    say("stream_create flags=%u\n", flags);
    return 0;
}
int cuMemcpyHtoDAsync_v2(unsigned long dst, const void *src, unsigned long n, void *stream) {
    memcpy((void *)dst, src, n);
    say("htod bytes=%lu stream=%lx\n", n, (unsigned long)stream);
    return 0;
}
int cuMemcpyDtoHAsync_v2(void *dst, unsigned long src, unsigned long n, void *stream) {
    memcpy(dst, (const void *)src, n);
    say("dtoh bytes=%lu stream=%lx\n", n, (unsigned long)stream);
    return 0;
}
int cuModuleGetFunction(const char **out, void *module, const char *name) {
    static char names[16][32];
    static int count = 0;
    int i;
    (void)module;
    for (i = 0; i < count; i++) if (strcmp(names[i], name) == 0) { *out = names[i]; return 0; }
    if (count == 16) return 500;
    strncpy(names[count], name, 31);
    *out = names[count++];
    return 0;
}
#ifdef EXECUTE
#include <math.h>
/* kernels/lab.cu's inputs, GELU and bias broadcast, one thread at a time. */
static unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static float input_value(unsigned long long key, unsigned long long i) {
    unsigned long long bits = mix64(key ^ (i * 0x9E3779B97F4A7C15ULL));
    volatile float scaled = (float)(unsigned int)(bits >> 40) * 1.1920928955078125e-07f;
    return scaled + -1.0f;
}
static unsigned short to_bf16(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
static float from_bf16(unsigned short h) {
    unsigned int u = (unsigned int)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static void execute(const char *f, unsigned long long *a) {
    unsigned long long i, n = a[1];
    if (strncmp(f, "inputs_", 7) == 0) {
        unsigned long long key = mix64(a[2]);
        for (i = 0; i < n; i++) {
            float v = input_value(key, i);
            if (strcmp(f, "inputs_f32") == 0) ((float *)a[0])[i] = v;
            else if (strcmp(f, "inputs_f16") == 0) ((_Float16 *)a[0])[i] = (_Float16)v;
            else ((unsigned short *)a[0])[i] = to_bf16(v);
        }
    } else if (strncmp(f, "bias_rows_", 10) == 0) {
        /* bias_rows_b{32,16}(bias, out, n, cols): out[i] = bias[i % cols]. */
        unsigned long long cols = a[3];
        n = a[2];
        for (i = 0; i < n; i++) {
            if (strcmp(f, "bias_rows_b32") == 0)
                ((unsigned int *)a[1])[i] = ((const unsigned int *)a[0])[i % cols];
            else
                ((unsigned short *)a[1])[i] = ((const unsigned short *)a[0])[i % cols];
        }
    } else if (strncmp(f, "gelu_", 5) == 0) {
        n = a[2];
        for (i = 0; i < n; i++) {
            if (strcmp(f, "gelu_f32") == 0)
                ((float *)a[1])[i] = gelu(((const float *)a[0])[i]);
            else if (strcmp(f, "gelu_f16") == 0)
                ((_Float16 *)a[1])[i] = (_Float16)gelu((float)((const _Float16 *)a[0])[i]);
            else
                ((unsigned short *)a[1])[i] = to_bf16(gelu(from_bf16(((const unsigned short *)a[0])[i])));
        }
    }
}
#endif
int cuLaunchKernel(const char *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
    unsigned long long a[4];
    char args[128] = "";
    int i, count = strncmp(f, "bias_rows_", 10) == 0 ? 4 : 3;
    for (i = 0; i < count; i++) {
        a[i] = *(unsigned long long *)params[i];
        snprintf(args + strlen(args), sizeof args - strlen(args), "%s%llu", i ? "," : "", a[i]);
    }
    say("launch %s grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%lx extra=%lx args=%s\n", f, gx, gy,
        gz, bx, by, bz, smem, (unsigned long)stream, (unsigned long)extra, args);
#ifdef EXECUTE
    execute(f, a);
#endif
    return 0;
}
int cuEventRecord(void *e, void *stream) {
    say("record event=%lx stream=%lx\n", (unsigned long)e, (unsigned long)stream);
    return 0;
}
int cuEventCreate(void **out, unsigned flags) {
    static unsigned long next = 0xe0;
    *out = (void *)next++;
    say("event_create flags=%u\n", flags);
    return 0;
}
#define OK(name) int name() { return 0; }
#define OK_HANDLE(name) int name(void **out) { *out = (void *)0x10; return 0; }
OK_HANDLE(cuModuleLoadData)
#else
static unsigned long used = 0, next_address = 0x7f0000000000UL;
int cuMemAlloc_v2(unsigned long *p, unsigned long bytes) {
    if (used + bytes > MEMORY_BUDGET) return 2;
    used += bytes;
    *p = next_address;
    next_address += (bytes + 511) / 512 * 512 + 512;
    return 0;
}
/* The stub does not track sizes; frees are counted by the test through the allocator. */
int cuMemFree_v2(unsigned long p) { (void)p; return 0; }
#define OK(name) int name() { return 0; }
#define OK_HANDLE(name) int name(void **out) { *out = (void *)0x10; return 0; }
OK_HANDLE(cuStreamCreate)
OK_HANDLE(cuEventCreate)
OK_HANDLE(cuModuleLoadData)
OK_HANDLE(cuModuleGetFunction)
OK(cuMemcpyHtoDAsync_v2)
OK(cuMemcpyDtoHAsync_v2)
OK(cuLaunchKernel)
OK(cuEventRecord)
#endif
OK(cuCtxSynchronize)
OK(cuStreamDestroy_v2)
OK(cuStreamSynchronize)
OK(cuModuleUnload)
OK(cuEventSynchronize)
OK(cuEventDestroy_v2)
int cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = event_ms(); return 0; }
#else
int cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 0; return 999; }
/* Present so the symbol table resolves; the tests never get this far (they return
 * CUDA_ERROR_UNKNOWN if called). */
#define UNUSED(name) int name(void) { return 999; }
UNUSED(cuCtxSynchronize)
UNUSED(cuStreamCreate)
UNUSED(cuStreamDestroy_v2)
UNUSED(cuStreamSynchronize)
UNUSED(cuMemAlloc_v2)
UNUSED(cuMemFree_v2)
UNUSED(cuMemcpyHtoDAsync_v2)
UNUSED(cuMemcpyDtoHAsync_v2)
UNUSED(cuModuleLoadData)
UNUSED(cuModuleGetFunction)
UNUSED(cuModuleUnload)
UNUSED(cuLaunchKernel)
UNUSED(cuEventCreate)
UNUSED(cuEventRecord)
UNUSED(cuEventSynchronize)
UNUSED(cuEventDestroy_v2)
#endif
/* The probe's and the lot report's calls, present with or without FULL as in a real driver:
 * pinned host memory is ordinary host memory here; device-to-device and peer copies copy only
 * when device memory is host memory (HOSTMEM). */
int cuMemAllocHost_v2(void **p, unsigned long bytes) {
    *p = malloc(bytes ? bytes : 1);
    return *p ? 0 : 2;
}
int cuMemFreeHost(void *p) { free(p); return 0; }
int cuMemcpyDtoDAsync_v2(unsigned long dst, unsigned long src, unsigned long n, void *stream) {
    (void)stream;
#ifdef HOSTMEM
    memcpy((void *)dst, (const void *)src, n);
#else
    (void)dst; (void)src; (void)n;
#endif
    return 0;
}
int cuMemcpyPeerAsync(unsigned long dst, void *dst_ctx, unsigned long src, void *src_ctx,
                      unsigned long n, void *stream) {
    (void)dst_ctx; (void)src_ctx;
    return cuMemcpyDtoDAsync_v2(dst, src, n, stream);
}
int cuCtxEnablePeerAccess(void *peer, unsigned flags) { (void)peer; (void)flags; return 0; }
