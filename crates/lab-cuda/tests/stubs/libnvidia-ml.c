/* A stand-in for NVML (libnvidia-ml.so.1): initialises, names the driver, knows one GPU by the
 * UUID the libcuda stub reports, and a few of its facts. Everything else is absent, as in an old
 * NVML, which must not break the report. */
#include <string.h>

int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *v, unsigned len) { strncpy(v, "550.54.15", len); return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }
/* With -DMIG the CUDA device is a MIG instance: NVML knows its UUID only as MIG-... */
#ifdef MIG
#define DEVICE_UUID "MIG-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
#else
#define DEVICE_UUID "GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
#endif
int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev) {
    if (strcmp(uuid, DEVICE_UUID) != 0) return 6; /* NOT_FOUND */
    *dev = (void *)0x1;
    return 0;
}
int nvmlDeviceGetEnforcedPowerLimit(void *dev, unsigned *mw) { (void)dev; *mw = 700000; return 0; }
int nvmlDeviceGetCurrPcieLinkGeneration(void *dev, unsigned *g) { (void)dev; *g = 5; return 0; }
int nvmlDeviceGetCurrPcieLinkWidth(void *dev, unsigned *w) { (void)dev; *w = 16; return 0; }
