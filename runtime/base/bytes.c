/* Byte-count parsing and human-readable formatting. */
#include "base/bytes.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool tpurt_bytes_parse(const char* text, uint64_t* out_bytes) {
  if (!text) return false;
  while (isspace((unsigned char)*text)) ++text;
  if (!isdigit((unsigned char)*text)) return false;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno) return false;
  while (isspace((unsigned char)*end)) ++end;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; ++end; break;
    case 'M': shift = 20; ++end; break;
    case 'G': shift = 30; ++end; break;
    case 'T': shift = 40; ++end; break;
    case 'B': break;
    default: return false;
  }
  if (shift && (*end == 'i' || *end == 'I')) ++end;
  if (*end == 'b' || *end == 'B') ++end;
  while (isspace((unsigned char)*end)) ++end;
  if (*end) return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out_bytes = (uint64_t)v << shift;
  return true;
}

const char* tpurt_bytes_format(uint64_t bytes, char* buf, size_t buf_size) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    snprintf(buf, buf_size, "%llu bytes", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) { v /= 1024.0; ++u; }
  snprintf(buf, buf_size, "%.2f %s", v, kUnits[u]);
  return buf;
}

void tpurt_bytebuf_put(tpurt_bytebuf_t* b, const void* src, size_t n) {
  if (b->oom) return;
  if (n > b->cap - b->n) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->n < n) cap *= 2;
    uint8_t* np = realloc(b->p, cap);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  if (src) memcpy(b->p + b->n, src, n);
  else memset(b->p + b->n, 0, n);
  b->n += n;
}
