/* Internal: byte counts as people write them ("16G", "512MiB") and as error
 * messages print them ("1.50 GiB"). */
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

#endif /* TPURT_BASE_BYTES_H_ */
