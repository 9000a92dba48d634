/* Status objects: a code, a message and the file:line where the error arose. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt/base.h"

struct tpurt_status_s {
  tpurt_status_code_t code;
  bool is_static;
  char location[64];
  char message[];
};

/* Returned when allocating a status itself fails; never freed. */
static struct {
  struct tpurt_status_s s;
  char text[40];
} g_oom_status = {{TPURT_STATUS_RESOURCE_EXHAUSTED, true, ""}, "out of host memory creating a status"};

static tpurt_status_t status_vmake(tpurt_status_code_t code, const char* location,
                                   const char* prefix, const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  size_t plen = prefix ? strlen(prefix) : 0;
  struct tpurt_status_s* s = malloc(sizeof(*s) + (size_t)n + plen + 3);
  if (!s) return &g_oom_status.s;
  s->code = code;
  s->is_static = false;
  snprintf(s->location, sizeof(s->location), "%s", location ? location : "");
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  if (prefix) {
    size_t mlen = strlen(s->message);
    memmove(s->message + plen + 2, s->message, mlen + 1);
    memcpy(s->message, prefix, plen);
    s->message[plen] = ':';
    s->message[plen + 1] = ' ';
  }
  return s;
}

tpurt_status_t tpurt_status_make(tpurt_status_code_t code, const char* file, int line,
                                 const char* fmt, ...) {
  if (code == TPURT_STATUS_OK) return TPURT_OK;
  char location[64];
  const char* base = file ? strrchr(file, '/') : NULL;
  snprintf(location, sizeof(location), "%s:%d", base ? base + 1 : (file ? file : "?"), line);
  va_list ap;
  va_start(ap, fmt);
  tpurt_status_t s = status_vmake(code, location, NULL, fmt, ap);
  va_end(ap);
  return s;
}

tpurt_status_t tpurt_status_annotate(tpurt_status_t status, const char* fmt, ...) {
  if (!status) return TPURT_OK;
  char prefix[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  tpurt_status_t out = status->message[0] || !status->is_static
                           ? tpurt_status_make(status->code, NULL, 0, "%s: %s", prefix, status->message)
                           : status;
  if (out != status) {
    snprintf(out->location, sizeof(out->location), "%s", status->location);
    tpurt_status_free(status);
  }
  return out;
}

tpurt_status_code_t tpurt_status_code(tpurt_status_t status) {
  return status ? status->code : TPURT_STATUS_OK;
}

const char* tpurt_status_message(tpurt_status_t status) {
  return status ? status->message : "OK";
}

const char* tpurt_status_location(tpurt_status_t status) {
  return status ? status->location : "";
}

const char* tpurt_status_code_name(tpurt_status_code_t code) {
  static const char* const kNames[] = {
      "OK",          "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",   "ALREADY_EXISTS",   "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",        "UNAVAILABLE",      "DATA_LOSS",
  };
  return (code >= 0 && code <= TPURT_STATUS_DATA_LOSS) ? kNames[code] : "UNKNOWN";
}

void tpurt_status_free(tpurt_status_t status) {
  if (status && !status->is_static) free(status);
}

tpurt_status_t tpurt_status_copy(tpurt_status_t status) {
  if (!status) return TPURT_OK;
  if (status->is_static) return status;
  size_t n = strlen(status->message);
  struct tpurt_status_s* s = malloc(sizeof(*s) + n + 1);
  if (!s) return &g_oom_status.s;
  memcpy(s, status, sizeof(*s) + n + 1);
  return s;
}
