/* XXH64, the 64-bit xxHash, for checkpoint frame checksums.
 *
 * Implemented here from the published specification (xxHash's
 * doc/xxhash_spec.md, "XXH64 algorithm description") because libxxhash is
 * not a dependency; the result is bit-identical to the reference
 * XXH64(data, len, seed). zstd uses the same function for its frame content
 * checksum (the low 32 bits of XXH64 with seed 0), which is how the unit test
 * checks this implementation against an independent one at every length.
 *
 * Why XXH64 and not CRC32C: it runs near memory bandwidth in portable C (four
 * independent 64-bit lanes), while a table CRC32C without the SSE4.2
 * instruction is 3-5x slower, and checksums sit on the save and load path. */
#ifndef DS_IO_HASH_H
#define DS_IO_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XXH64 of bytes [data, data + len) with `seed`. data may be NULL when len is 0. */
uint64_t ds_xxh64(const void *data, size_t len, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_HASH_H */
