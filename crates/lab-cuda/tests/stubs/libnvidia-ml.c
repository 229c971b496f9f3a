/* A stand-in for NVML (libnvidia-ml.so.1): initialises, names the driver, and knows the GPUs the
 * libcuda stub reports by their UUIDs (device i is GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7XX with
 * XX = f8 + i, as the libcuda stub numbers them), and a few of their facts.
 *
 * Built with -DMIG the GPUs are MIG instances: NVML knows them only as MIG-....
 *
 * What each GPU reports is chosen at run time by environment variables, so that each test picks
 * its scenario; lists are comma-separated, one item per device in NVML's (physical) order, and a
 * list shorter than the devices repeats its last item. Unset, a fact is NOT_SUPPORTED (as on an
 * NVML too old to know it), except the current PCIe link (Gen5 x16) and the power limit (700 W):
 *   STUB_DEVICE_COUNT         devices (shared with the libcuda stub; default 1)
 *   STUB_NVML_PCIE            current link, GENxWIDTH per device (default 5x16)
 *   STUB_NVML_PCIE_MAX        highest link in this system, GENxWIDTH (unset: not supported)
 *   STUB_NVML_THROTTLE        clock-event reason bits per device (0x8 = HW slowdown)
 *   STUB_NVML_SM_CLOCK        current SM clock, MHz (max is STUB_NVML_MAX_SM_CLOCK, default 1980)
 *   STUB_NVML_POWER           enforced power limit, W (default 700); default limit 700 W
 *   STUB_NVML_ECC             uncorrected volatile ECC errors per device (ECC on when set)
 *   STUB_NVML_RETIRED_PENDING 1 where pages wait to be retired
 *   STUB_NVML_REMAP           rows remapped as UNC:PENDING:FAILURE per device (e.g. 2:1:0)
 *   STUB_NVML_MIG_MODE        1 where MIG mode is on
 *   STUB_NVML_PERSISTENCE     1 on, 0 off
 *   STUB_NVML_NVLINK          active NVLink links per device (of 18)
 *   STUB_NVML_PROCS           other processes, DEVICE:PID:BYTES separated by commas
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOT_SUPPORTED 3
#define NOT_FOUND 6
#define INSUFFICIENT_SIZE 7

int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *v, unsigned len) { strncpy(v, "550.54.15", len); return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }

#ifdef MIG
#define LABEL "MIG"
#else
#define LABEL "GPU"
#endif

static int count(void) {
    const char *v = getenv("STUB_DEVICE_COUNT");
    return v ? atoi(v) : 1;
}

/* The index of a handle (handles are index + 1). */
static int index_of(void *dev) { return (int)(unsigned long)dev - 1; }

/* Item `i` of a comma-separated list in variable `name` (the last item when the list is
 * shorter), copied into `out`; 0 when the variable is unset. */
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

static int number(const char *name, int i, unsigned long long *out) {
    char buf[64];
    if (!item(name, i, buf, sizeof buf)) return 0;
    *out = strtoull(buf, NULL, 0);
    return 1;
}

int nvmlDeviceGetCount_v2(unsigned *n) { *n = (unsigned)count(); return 0; }

int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev) {
    int i;
    char want[64];
    for (i = 0; i < count(); i++) {
        snprintf(want, sizeof want, LABEL "-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7%02x", 0xf8 + i);
        if (strcmp(uuid, want) == 0) {
            *dev = (void *)(unsigned long)(i + 1);
            return 0;
        }
    }
    return NOT_FOUND;
}

int nvmlDeviceGetEnforcedPowerLimit(void *dev, unsigned *mw) {
    unsigned long long w = 700;
    number("STUB_NVML_POWER", index_of(dev), &w);
    *mw = (unsigned)(w * 1000);
    return 0;
}
int nvmlDeviceGetPowerManagementDefaultLimit(void *dev, unsigned *mw) {
    (void)dev;
    if (!getenv("STUB_NVML_POWER")) return NOT_SUPPORTED;
    *mw = 700000;
    return 0;
}

static int link(const char *name, void *dev, unsigned *gen, unsigned *width, const char *fallback) {
    char buf[32];
    const char *text = buf;
    if (!item(name, index_of(dev), buf, sizeof buf)) {
        if (!fallback) return NOT_SUPPORTED;
        text = fallback;
    }
    if (sscanf(text, "%ux%u", gen, width) != 2) return NOT_SUPPORTED;
    return 0;
}
int nvmlDeviceGetCurrPcieLinkGeneration(void *dev, unsigned *g) {
    unsigned w;
    return link("STUB_NVML_PCIE", dev, g, &w, "5x16");
}
int nvmlDeviceGetCurrPcieLinkWidth(void *dev, unsigned *w) {
    unsigned g;
    return link("STUB_NVML_PCIE", dev, &g, w, "5x16");
}
int nvmlDeviceGetMaxPcieLinkGeneration(void *dev, unsigned *g) {
    unsigned w;
    return link("STUB_NVML_PCIE_MAX", dev, g, &w, NULL);
}
int nvmlDeviceGetMaxPcieLinkWidth(void *dev, unsigned *w) {
    unsigned g;
    return link("STUB_NVML_PCIE_MAX", dev, &g, w, NULL);
}
int nvmlDeviceGetGpuMaxPcieLinkGeneration(void *dev, unsigned *g) {
    unsigned w;
    return link("STUB_NVML_PCIE_MAX", dev, g, &w, NULL);
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void *dev, unsigned long long *reasons) {
    return number("STUB_NVML_THROTTLE", index_of(dev), reasons) ? 0 : NOT_SUPPORTED;
}
/* type 1 is NVML_CLOCK_SM. */
int nvmlDeviceGetClockInfo(void *dev, int type, unsigned *mhz) {
    unsigned long long v;
    if (type != 1 || !number("STUB_NVML_SM_CLOCK", index_of(dev), &v)) return NOT_SUPPORTED;
    *mhz = (unsigned)v;
    return 0;
}
int nvmlDeviceGetMaxClockInfo(void *dev, int type, unsigned *mhz) {
    unsigned long long v = 1980;
    if (type != 1 || !getenv("STUB_NVML_SM_CLOCK")) return NOT_SUPPORTED;
    number("STUB_NVML_MAX_SM_CLOCK", index_of(dev), &v);
    *mhz = (unsigned)v;
    return 0;
}

int nvmlDeviceGetEccMode(void *dev, int *current, int *pending) {
    (void)dev;
    if (!getenv("STUB_NVML_ECC")) return NOT_SUPPORTED;
    *current = 1;
    *pending = 1;
    return 0;
}
/* error type 1 is NVML_MEMORY_ERROR_TYPE_UNCORRECTED; counter 0 is NVML_VOLATILE_ECC. */
int nvmlDeviceGetTotalEccErrors(void *dev, int type, int counter, unsigned long long *n) {
    unsigned long long v;
    if (counter != 0 || !number("STUB_NVML_ECC", index_of(dev), &v)) return NOT_SUPPORTED;
    *n = type == 1 ? v : 0;
    return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void *dev, int *pending) {
    unsigned long long v;
    if (!number("STUB_NVML_RETIRED_PENDING", index_of(dev), &v)) return NOT_SUPPORTED;
    *pending = (int)v;
    return 0;
}
int nvmlDeviceGetRemappedRows(void *dev, unsigned *corr, unsigned *unc, unsigned *pending,
                              unsigned *failure) {
    char buf[32];
    unsigned u = 0, p = 0, f = 0;
    if (!item("STUB_NVML_REMAP", index_of(dev), buf, sizeof buf)) return NOT_SUPPORTED;
    sscanf(buf, "%u:%u:%u", &u, &p, &f);
    *corr = 0;
    *unc = u;
    *pending = p;
    *failure = f;
    return 0;
}
int nvmlDeviceGetMigMode(void *dev, unsigned *current, unsigned *pending) {
    unsigned long long v;
    if (!number("STUB_NVML_MIG_MODE", index_of(dev), &v)) return NOT_SUPPORTED;
    *current = (unsigned)v;
    *pending = (unsigned)v;
    return 0;
}
int nvmlDeviceGetPersistenceMode(void *dev, int *mode) {
    unsigned long long v;
    if (!number("STUB_NVML_PERSISTENCE", index_of(dev), &v)) return NOT_SUPPORTED;
    *mode = (int)v;
    return 0;
}
/* nvmlEnableState_t: 1 active, 0 not; links past the device's 18 are not supported. */
int nvmlDeviceGetNvLinkState(void *dev, unsigned link, int *active) {
    unsigned long long n;
    if (link >= 18 || !number("STUB_NVML_NVLINK", index_of(dev), &n)) return NOT_SUPPORTED;
    *active = link < n;
    return 0;
}

/* nvmlProcessInfo_t (v2/v3 layout). */
typedef struct {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance;
    unsigned compute_instance;
} process_t;

static int processes(void *dev, unsigned *n, process_t *out) {
    const char *v = getenv("STUB_NVML_PROCS");
    const char *p = v;
    unsigned found = 0;
    int d;
    unsigned pid;
    unsigned long long bytes;
    while (p && *p) {
        if (sscanf(p, "%d:%u:%llu", &d, &pid, &bytes) == 3 && d == index_of(dev)) {
            if (out && found < *n) {
                out[found].pid = pid;
                out[found].used = bytes;
                out[found].gpu_instance = 0xffffffffu;
                out[found].compute_instance = 0xffffffffu;
            }
            found++;
        }
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!out || found > *n) {
        *n = found;
        return found ? INSUFFICIENT_SIZE : 0;
    }
    *n = found;
    return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *n, process_t *out) {
    return processes(dev, n, out);
}
int nvmlDeviceGetGraphicsRunningProcesses_v3(void *dev, unsigned *n, process_t *out) {
    (void)dev;
    (void)out;
    *n = 0;
    return 0;
}
