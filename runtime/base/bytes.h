/* Internal: byte counts as people write them ("16G", "512MiB") and as error
 * messages print them ("1.50 GiB"); a growable byte buffer for writers of
 * binary formats (programs, export artifacts). */
#ifndef TPURT_BASE_BYTES_H_
#define TPURT_BASE_BYTES_H_

#include <stddef.h>
#include <stdint.h>

#include "tpurt/base.h"

/* Parses a plain byte count or one with a K/M/G/T suffix (binary units; "KB",
 * "KiB" and "K" mean the same). Returns false on malformed input. */
bool tpurt_bytes_parse(const char* text, uint64_t* out_bytes);

/* Writes "1.50 GiB" / "812.00 MiB" / "512 bytes" into buf (>= 32 chars). */
const char* tpurt_bytes_format(uint64_t bytes, char* buf, size_t buf_size);

/* Bytes appended at the end, growing by doubling; `oom` sticks once an
 * allocation failed (later puts do nothing), so a writer checks it once. */
typedef struct tpurt_bytebuf_t {
  uint8_t* p;
  size_t n, cap;
  bool oom;
} tpurt_bytebuf_t;

/* Appends n bytes from src (NULL: n zero bytes). */
void tpurt_bytebuf_put(tpurt_bytebuf_t* b, const void* src, size_t n);

#endif /* TPURT_BASE_BYTES_H_ */
