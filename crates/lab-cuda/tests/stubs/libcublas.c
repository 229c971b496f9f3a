/* Stand-ins for cuBLAS and cuBLASLt (compiled twice: -DLT for libcublasLt.so.N). They report a
 * version; the functions a measurement calls are present and fail (status 13,
 * CUBLAS_STATUS_EXECUTION_FAILED) if ever called, or, with -DRECORD, succeed and append their
 * arguments to the file named by $STUB_LOG (scalars read through their host pointers, attribute
 * values read as the integers they are).
 *
 * With -DLT -DRECORD, the cuBLASLt descriptors are real structures holding what was set, and:
 *   COMPUTE     cublasLtMatmul computes D = alpha op(A) op(B) + beta C (+ the bias epilogue) on
 *               host memory (the driver stub's HOSTMEM), for float32, float16 and bfloat16 as
 *               the layouts say, as cuBLASLt documents it: column-major, element (r, c) at
 *               r + c * ld, a layout of op(A) created cols x rows when TRANSA is T, and
 *               CUBLASLT_EPILOGUE_BIAS adding bias[r] (one value per row of D) to every column
 *   NO_ALGO     the heuristic returns no algorithm
 * With RECORD (cuBLAS), cublasGemmEx records every argument (alpha and beta read as floats) and:
 *   COMPUTE          computes C = alpha op(A) op(B) + beta C on host memory, as cuBLAS documents it
 *                    (column-major, element (r, c) at r + c * ld, op(A) read transposed for
 *                    CUBLAS_OP_T), for float32, float16 and bfloat16
 *   DESTROY_FAILS    cublasDestroy_v2 returns CUBLAS_STATUS_INTERNAL_ERROR (a failing teardown)
 *   DESTROY_CRASHES  cublasDestroy_v2 aborts the process (a teardown that crashes)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define FAILS(name) int name(void) { return 13; }

#ifdef COMPUTE
/* Elements of cudaDataType 0 (CUDA_R_32F), 2 (CUDA_R_16F) and 14 (CUDA_R_16BF), as float. */
static float load(int type, const void *p, unsigned long long i) {
    unsigned short h;
    unsigned int u;
    float f;
    switch (type) {
    case 0: return ((const float *)p)[i];
    case 2: return (float)((const _Float16 *)p)[i];
    case 14:
        h = ((const unsigned short *)p)[i];
        u = (unsigned int)h << 16;
        memcpy(&f, &u, 4);
        return f;
    default: abort();
    }
}
static void store(int type, void *p, unsigned long long i, float v) {
    unsigned int u;
    switch (type) {
    case 0: ((float *)p)[i] = v; return;
    case 2: ((_Float16 *)p)[i] = (_Float16)v; return;
    case 14:
        memcpy(&u, &v, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fff0000u;
        else u += 0x7fffu + ((u >> 16) & 1u);
        ((unsigned short *)p)[i] = (unsigned short)(u >> 16);
        return;
    default: abort();
    }
}
#endif

#ifdef LT
int cublasLtGetProperty(int type, int *value) {
    *value = type == 0 ? 12 : type == 1 ? 8 : 4;
    return 0;
}
#ifdef RECORD
struct desc { int compute, scale, transa, transb; unsigned epilogue; const void *bias; };
struct layout { int type; unsigned long long rows, cols; long long ld; };
struct pref { unsigned long long max_ws; unsigned align[4]; };
typedef struct { unsigned long long data[8]; } algo_t;
typedef struct { algo_t algo; size_t workspaceSize; int state; float wavesCount; int reserved[4]; } heuristic_t;

static unsigned long long value_of(const void *buf, size_t size) {
    unsigned long long v = 0;
    memcpy(&v, buf, size < 8 ? size : 8);
    return v;
}

int cublasLtMatmulDescCreate(struct desc **d, int compute, int scale) {
    *d = calloc(1, sizeof **d);
    (*d)->compute = compute;
    (*d)->scale = scale;
    (*d)->epilogue = 1;
    say("lt_desc_create desc=%lu compute=%d scale=%d\n", (unsigned long)*d, compute, scale);
    return 0;
}
int cublasLtMatmulDescSetAttribute(struct desc *d, int attr, const void *buf, size_t size) {
    unsigned long long v = value_of(buf, size);
    say("lt_desc_set desc=%lu attr=%d size=%lu value=%llu\n", (unsigned long)d, attr,
        (unsigned long)size, v);
    switch (attr) {
    case 3: d->transa = (int)v; break;
    case 4: d->transb = (int)v; break;
    case 7: d->epilogue = (unsigned)v; break;
    case 8: d->bias = (const void *)(unsigned long)v; break;
    case 25: break; /* CUBLASLT_MATMUL_DESC_FAST_ACCUM (FP8 products) */
    default: return 7;
    }
    return 0;
}
int cublasLtMatmulDescDestroy(struct desc *d) {
    say("lt_desc_destroy desc=%lu\n", (unsigned long)d);
    free(d);
    return 0;
}
int cublasLtMatrixLayoutCreate(struct layout **l, int type, unsigned long long rows,
                               unsigned long long cols, long long ld) {
    *l = calloc(1, sizeof **l);
    (*l)->type = type;
    (*l)->rows = rows;
    (*l)->cols = cols;
    (*l)->ld = ld;
    say("lt_layout_create layout=%lu type=%d rows=%llu cols=%llu ld=%lld\n", (unsigned long)*l,
        type, rows, cols, ld);
    return 0;
}
int cublasLtMatrixLayoutDestroy(struct layout *l) {
    say("lt_layout_destroy layout=%lu\n", (unsigned long)l);
    free(l);
    return 0;
}
int cublasLtMatmulPreferenceCreate(struct pref **p) {
    *p = calloc(1, sizeof **p);
    say("lt_pref_create pref=%lu\n", (unsigned long)*p);
    return 0;
}
int cublasLtMatmulPreferenceSetAttribute(struct pref *p, int attr, const void *buf, size_t size) {
    unsigned long long v = value_of(buf, size);
    say("lt_pref_set pref=%lu attr=%d size=%lu value=%llu\n", (unsigned long)p, attr,
        (unsigned long)size, v);
    if (attr == 1) p->max_ws = v;
    else if (attr >= 5 && attr <= 8) p->align[attr - 5] = (unsigned)v;
    else return 7;
    return 0;
}
int cublasLtMatmulPreferenceDestroy(struct pref *p) {
    say("lt_pref_destroy pref=%lu\n", (unsigned long)p);
    free(p);
    return 0;
}
int cublasLtMatmulAlgoGetHeuristic(void *h, struct desc *d, struct layout *a, struct layout *b,
                                   struct layout *c, struct layout *dd, struct pref *p,
                                   int requested, heuristic_t *results, int *returned) {
    say("lt_heuristic handle=%lx desc=%lu a=%lu b=%lu c=%lu d=%lu pref=%lu requested=%d\n",
        (unsigned long)h, (unsigned long)d, (unsigned long)a, (unsigned long)b, (unsigned long)c,
        (unsigned long)dd, (unsigned long)p, requested);
#ifdef NO_ALGO
    *returned = 0;
    return 0;
#else
    memset(results, 0, sizeof *results);
    results->algo.data[0] = 0xa160;
    results->workspaceSize = p->max_ws < 4096 ? p->max_ws : 4096;
    results->wavesCount = 1.0f;
    *returned = 1;
    return 0;
#endif
}

#ifdef COMPUTE
static void compute(struct desc *d, float alpha, const void *A, struct layout *a, const void *B,
                    struct layout *b, float beta, const void *C, struct layout *c, void *D,
                    struct layout *dd) {
    unsigned long long m = dd->rows, n = dd->cols;
    unsigned long long k = d->transa ? a->rows : a->cols;
    unsigned long long i, j, p;
    for (j = 0; j < n; j++) {
        for (i = 0; i < m; i++) {
            double acc = 0;
            float v;
            for (p = 0; p < k; p++) {
                float x = d->transa ? load(a->type, A, p + i * a->ld) : load(a->type, A, i + p * a->ld);
                float y = d->transb ? load(b->type, B, j + p * b->ld) : load(b->type, B, p + j * b->ld);
                acc += (double)x * (double)y;
            }
            v = alpha * (float)acc;
            if (beta != 0.0f) v += beta * load(c->type, C, i + j * c->ld);
            if (d->epilogue == 4) v += load(dd->type, d->bias, i);
            store(dd->type, D, i + j * dd->ld, v);
        }
    }
}
#endif

int cublasLtMatmul(void *h, struct desc *d, const float *alpha, const void *A, struct layout *a,
                   const void *B, struct layout *b, const float *beta, const void *C,
                   struct layout *c, void *D, struct layout *dd, const algo_t *algo, void *ws,
                   size_t ws_bytes, void *stream) {
    say("lt_matmul handle=%lx desc=%lu alpha=%g a=%lu adesc=%lu b=%lu bdesc=%lu beta=%g c=%lu "
        "cdesc=%lu d=%lu ddesc=%lu algo=%llx ws=%lu ws_bytes=%lu stream=%lx\n",
        (unsigned long)h, (unsigned long)d, *alpha, (unsigned long)A, (unsigned long)a,
        (unsigned long)B, (unsigned long)b, *beta, (unsigned long)C, (unsigned long)c,
        (unsigned long)D, (unsigned long)dd, algo->data[0], (unsigned long)ws,
        (unsigned long)ws_bytes, (unsigned long)stream);
#ifdef COMPUTE
    compute(d, *alpha, A, a, B, b, *beta, C, c, D, dd);
#endif
    return 0;
}
#else
FAILS(cublasLtMatmulDescCreate)
FAILS(cublasLtMatmulDescDestroy)
FAILS(cublasLtMatmulDescSetAttribute)
FAILS(cublasLtMatrixLayoutCreate)
FAILS(cublasLtMatrixLayoutDestroy)
FAILS(cublasLtMatmulPreferenceCreate)
FAILS(cublasLtMatmulPreferenceDestroy)
FAILS(cublasLtMatmulPreferenceSetAttribute)
FAILS(cublasLtMatmulAlgoGetHeuristic)
FAILS(cublasLtMatmul)
#endif
#else
int cublasGetProperty(int type, int *value) {
    *value = type == 0 ? 12 : type == 1 ? 8 : 4;
    return 0;
}
#ifdef RECORD
int cublasCreate_v2(void **h) { *h = (void *)0xb1a5; say("cublas_create\n"); return 0; }
int cublasDestroy_v2(void *h) {
    say("cublas_destroy handle=%lx\n", (unsigned long)h);
#ifdef DESTROY_CRASHES
    abort();
#endif
#ifdef DESTROY_FAILS
    return 14;
#else
    return 0;
#endif
}
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
int cublasGemmEx(void *h, int transa, int transb, int m, int n, int k, const float *alpha,
                 const void *A, int atype, int lda, const void *B, int btype, int ldb,
                 const float *beta, void *C, int ctype, int ldc, int compute, int algo) {
    say("gemm_ex handle=%lx transa=%d transb=%d m=%d n=%d k=%d alpha=%g a=%lu atype=%d lda=%d "
        "b=%lu btype=%d ldb=%d beta=%g c=%lu ctype=%d ldc=%d compute=%d algo=%d\n",
        (unsigned long)h, transa, transb, m, n, k, *alpha, (unsigned long)A, atype, lda,
        (unsigned long)B, btype, ldb, *beta, (unsigned long)C, ctype, ldc, compute, algo);
#ifdef COMPUTE
    {
        long long i, j, p;
        for (j = 0; j < n; j++) {
            for (i = 0; i < m; i++) {
                double acc = 0;
                float v;
                for (p = 0; p < k; p++) {
                    float x = transa ? load(atype, A, p + i * lda) : load(atype, A, i + p * lda);
                    float y = transb ? load(btype, B, j + p * ldb) : load(btype, B, p + j * ldb);
                    acc += (double)x * (double)y;
                }
                v = *alpha * (float)acc;
                if (*beta != 0.0f) v += *beta * load(ctype, C, i + j * ldc);
                store(ctype, C, i + j * ldc, v);
            }
        }
    }
#endif
    return 0;
}
#else
FAILS(cublasCreate_v2)
FAILS(cublasDestroy_v2)
FAILS(cublasSetStream_v2)
FAILS(cublasSetWorkspace_v2)
FAILS(cublasSetMathMode)
FAILS(cublasGemmEx)
#endif
#endif
