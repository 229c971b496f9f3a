/* Stand-ins for cuBLAS and cuBLASLt (compiled twice: -DLT for libcublasLt.so.N). They report a
 * version; the functions a measurement calls are present and fail (status 13,
 * CUBLAS_STATUS_EXECUTION_FAILED) if ever called, or, with -DRECORD, succeed and append their
 * arguments to the file named by $STUB_LOG (scalars read through their host pointers). */
#ifdef LT
int cublasLtGetProperty(int type, int *value) {
    *value = type == 0 ? 12 : type == 1 ? 8 : 4;
    return 0;
}
#else
int cublasGetProperty(int type, int *value) {
    *value = type == 0 ? 12 : type == 1 ? 8 : 4;
    return 0;
}
#ifdef RECORD
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
int cublasCreate_v2(void **h) { *h = (void *)0xb1a5; say("cublas_create\n"); return 0; }
int cublasDestroy_v2(void *h) { say("cublas_destroy handle=%lx\n", (unsigned long)h); return 0; }
int cublasSetStream_v2(void *h, void *s) {
    say("cublas_set_stream handle=%lx stream=%lx\n", (unsigned long)h, (unsigned long)s);
    return 0;
}
int cublasSetWorkspace_v2(void *h, void *p, unsigned long bytes) {
    say("cublas_set_workspace handle=%lx ptr=%lu bytes=%lu\n", (unsigned long)h, (unsigned long)p, bytes);
    return 0;
}
int cublasSetMathMode(void *h, int mode) {
    say("cublas_set_math_mode handle=%lx mode=%d\n", (unsigned long)h, mode);
    return 0;
}
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const void *a,
                 int at, int lda, const void *b, int bt, int ldb, const float *beta, void *c, int ct,
                 int ldc, int compute, int algo) {
    say("gemm handle=%lx ta=%d tb=%d m=%d n=%d k=%d alpha=%g a=%lu at=%d lda=%d b=%lu bt=%d ldb=%d "
        "beta=%g c=%lu ct=%d ldc=%d compute=%d algo=%d\n",
        (unsigned long)h, ta, tb, m, n, k, *alpha, (unsigned long)a, at, lda, (unsigned long)b, bt,
        ldb, *beta, (unsigned long)c, ct, ldc, compute, algo);
    return 0;
}
#else
#define FAILS(name) int name(void) { return 13; }
FAILS(cublasCreate_v2)
FAILS(cublasDestroy_v2)
FAILS(cublasSetStream_v2)
FAILS(cublasSetWorkspace_v2)
FAILS(cublasSetMathMode)
FAILS(cublasGemmEx)
#endif
#endif
