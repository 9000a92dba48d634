/* tpurt base: status objects and the ownership rules every runtime module follows.
 *
 * Ownership, written down once:
 *  - `tpurt_*_create` returns an owned object; the caller releases it with the
 *    matching `_release`/`_destroy`.
 *  - Accessors (`tpurt_*_get`, `tpurt_device_default_queue`) borrow: the object
 *    outlives the call and is not released by the caller.
 *  - Every fallible function returns a tpurt_status_t. NULL means OK (so OK is 0);
 *    any other value is an owned status the caller must consume with
 *    tpurt_status_free (or pass upward). A library function never aborts the
 *    process on bad input.
 */
#ifndef TPURT_BASE_H_
#define TPURT_BASE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TPURT_API __attribute__((visibility("default")))
#define TPURT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TPURT_LIKELY(x) __builtin_expect(!!(x), 1)
#define TPURT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TPURT_API
#define TPURT_PRINTF(f, a)
#define TPURT_LIKELY(x) (x)
#define TPURT_UNLIKELY(x) (x)
#endif

/* Canonical codes (absl numbering) so they map one-to-one onto Python
 * exceptions and HTTP codes. */
typedef enum tpurt_status_code_e {
  TPURT_STATUS_OK = 0,
  TPURT_STATUS_CANCELLED = 1,
  TPURT_STATUS_UNKNOWN = 2,
  TPURT_STATUS_INVALID_ARGUMENT = 3,
  TPURT_STATUS_DEADLINE_EXCEEDED = 4,
  TPURT_STATUS_NOT_FOUND = 5,
  TPURT_STATUS_ALREADY_EXISTS = 6,
  TPURT_STATUS_PERMISSION_DENIED = 7,
  TPURT_STATUS_RESOURCE_EXHAUSTED = 8,
  TPURT_STATUS_FAILED_PRECONDITION = 9,
  TPURT_STATUS_ABORTED = 10,
  TPURT_STATUS_OUT_OF_RANGE = 11,
  TPURT_STATUS_UNIMPLEMENTED = 12,
  TPURT_STATUS_INTERNAL = 13,
  TPURT_STATUS_UNAVAILABLE = 14,
  TPURT_STATUS_DATA_LOSS = 15,
} tpurt_status_code_t;

typedef struct tpurt_status_s* tpurt_status_t;
#define TPURT_OK ((tpurt_status_t)NULL)

/* Creates an owned status with a printf-style message and the file:line where
 * it arose. Never returns NULL for a non-OK code (falls back to a static
 * out-of-memory status). */
TPURT_API tpurt_status_t tpurt_status_make(tpurt_status_code_t code, const char* file, int line,
                                           const char* fmt, ...) TPURT_PRINTF(4, 5);
#define TPURT_STATUS(code, ...) \
  tpurt_status_make(TPURT_STATUS_##code, __FILE__, __LINE__, __VA_ARGS__)

/* Prefixes more context onto an existing status ("while running aten::add: ...").
 * Consumes `status`, returns the annotated one. OK passes through. */
TPURT_API tpurt_status_t tpurt_status_annotate(tpurt_status_t status, const char* fmt, ...)
    TPURT_PRINTF(2, 3);

TPURT_API tpurt_status_code_t tpurt_status_code(tpurt_status_t status);
/* Borrowed; valid until the status is freed. "OK" for TPURT_OK. */
TPURT_API const char* tpurt_status_message(tpurt_status_t status);
/* "file.c:123" of the origin, or "" */
TPURT_API const char* tpurt_status_location(tpurt_status_t status);
TPURT_API const char* tpurt_status_code_name(tpurt_status_code_t code);
TPURT_API void tpurt_status_free(tpurt_status_t status);
/* An owned copy (code, message, location); OK for OK. */
TPURT_API tpurt_status_t tpurt_status_copy(tpurt_status_t status);

#define TPURT_RETURN_IF_ERROR(expr)           \
  do {                                        \
    tpurt_status_t tpurt_status_ = (expr);    \
    if (TPURT_UNLIKELY(tpurt_status_ != NULL)) \
      return tpurt_status_;                   \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPURT_BASE_H_ */
