/* Stand-ins for cuBLAS and cuBLASLt (compiled twice: -DLT for libcublasLt.so.N). They report a
 * version; the functions a measurement calls are present and fail (status 13,
 * CUBLAS_STATUS_EXECUTION_FAILED) if ever called. */
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
#define FAILS(name) int name(void) { return 13; }
FAILS(cublasCreate_v2)
FAILS(cublasDestroy_v2)
FAILS(cublasSetStream_v2)
FAILS(cublasSetWorkspace_v2)
FAILS(cublasSetMathMode)
FAILS(cublasGemmEx)
#endif
