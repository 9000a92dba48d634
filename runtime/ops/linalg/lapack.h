/* The LAPACK routines the dense linear algebra kernels call where a matrix is large enough for the
 * library's blocked algorithms to matter (eigh.c, svd.c): OpenBLAS's LAPACK (Debian's libopenblas
 * carries it; the runtime links it for fp32 GEMM already), Fortran calling convention (arguments by
 * address, 32-bit integers, a hidden length after the arguments for each character argument).
 * Internal. */
#ifndef TPURT_OPS_LINALG_LAPACK_H_
#define TPURT_OPS_LINALG_LAPACK_H_

#include <pthread.h>
#include <stddef.h>

void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void openblas_set_num_threads(int);

/* OpenBLAS on the calling thread only (as gemm.c's calls): its own threads would spin beside the
 * chip's. Called before each LAPACK use; the setting is made once per process. */
static void lapack_set_one_thread(void) { openblas_set_num_threads(1); }
static inline void lapack_single_thread(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, lapack_set_one_thread);
}

#endif /* TPURT_OPS_LINALG_LAPACK_H_ */
