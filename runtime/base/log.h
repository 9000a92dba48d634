/* Internal: one-line diagnostics on stderr, filtered by TORCH_TPU_LOG_LEVEL
 * (0 = errors only, 1 = warnings (default), 2 = info, 3 = debug). */
#ifndef TPURT_BASE_LOG_H_
#define TPURT_BASE_LOG_H_

#include "tpurt/base.h"

typedef enum tpurt_log_level_e {
  TPURT_LOG_ERROR = 0,
  TPURT_LOG_WARNING = 1,
  TPURT_LOG_INFO = 2,
  TPURT_LOG_DEBUG = 3,
} tpurt_log_level_t;

bool tpurt_log_enabled(tpurt_log_level_t level);
void tpurt_log_write(tpurt_log_level_t level, const char* file, int line, const char* fmt, ...)
    TPURT_PRINTF(4, 5);

#define TPURT_LOG(level, ...)                                              \
  do {                                                                     \
    if (tpurt_log_enabled(TPURT_LOG_##level))                              \
      tpurt_log_write(TPURT_LOG_##level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#endif /* TPURT_BASE_LOG_H_ */
