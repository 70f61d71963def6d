/* Compression codecs for collectives, one layer under the ZeRO stages and
 * the optimizers: a caller asks for "all-reduce this vector, 1-bit
 * compressed" and never sees the wire format.
 *
 *   size_t segs[2] = {n0, n1};           the tensors of buf, back to back
 *   ds_coded_layout lay = ds_coded_layout_of(&ds_codec_onebit, segs, 2, world);
 *   float err_w[lay.worker_n], err_s[lay.server_n];   caller-owned feedback
 *   ds_coded_scratch *scr;  ds_coded_scratch_create(&ds_codec_onebit, be, segs, 2, world, &scr);
 *   ds_comm_all_reduce_coded(comm, buf, n0 + n1, &ds_codec_onebit, err_w, err_s, scr);
 *   -> buf holds the mean over ranks, as the codec could carry it; err_w and
 *      err_s hold what this call's encodings lost, added back next call.
 *
 * A codec encodes a vector into wire records, one per block, and decodes a
 * record back. Encoding with error feedback (error-compensated compression,
 * the 1-bit Adam paper, arXiv:2102.02888) first adds the caller's error
 * buffer to the input and afterwards leaves in it what the code lost:
 *     c = x + err;  wire = code(c);  err = c - decode(wire)
 * so what one call drops is sent by the next, and the sum over calls of what
 * was decoded differs from the sum of the inputs by one call's error only.
 * The error buffers are the caller's (they are optimizer state: checkpoints
 * carry them), the codec holds nothing between calls.
 *
 * A codec's arithmetic runs in the backend's slots, so the vector, the
 * error buffers, the records and the scratch are the backend's memory: the
 * GPU's on cuda, the communicator (NCCL, or the staged MPI path) moving
 * device records.
 *
 * The 1-bit codec (ds_codec_onebit), DeepSpeed's, in the backend's onebit
 * slots (engine/backend/onebit_math.h): a record is one fp32 scale then the
 * signs, one bit per element (most significant bit first, as
 * numpy.packbits; 1 means >= 0, so zero and NaN decode positive as in
 * DeepSpeed's sign().add_(1).bool()). The scale is the root mean square of
 * the whole encoded vector (||c||_2 / sqrt(n), the sum of squares in double)
 * and every block's record repeats it, so decode(c)_i = scale * sign(c_i).
 * n/8 + 4 bytes for n elements: 32x fewer than fp32 on large blocks.
 *
 * The compressed all-reduce (ds_comm_all_reduce_coded) is DeepSpeed's
 * chunked scheme (deepspeed/runtime/comm/mpi.py, compressed_allreduce),
 * with the worker and the server error feedback, applied to each segment
 * of the vector (a tensor: DeepSpeed calls it once per parameter, each with
 * its own scale and error buffers) but with one message per peer for all
 * segments together:
 *   1. each segment, padded with zeros to a multiple of world *
 *      lcm(world, 8) elements (as DeepSpeed pads), is encoded with its worker
 *      error into `world` chunk records; rank r's chunks of every segment go
 *      to rank r in one all_to_all;
 *   2. rank r, the server of chunk r, decodes the world records of each of
 *      its chunks and averages them (each record's scale times 1/world,
 *      summed in rank order), then encodes that with its server error;
 *   3. the server records are all-gathered; every rank decodes all chunks.
 * Every rank ends with the same vector. A rank sends (world-1)/world of the
 * encoded vector in each phase: 2 (world-1)/world (padded/8 + 4 world nseg)
 * bytes, against 2 (world-1)/world 4 n bytes of an fp32 ring all-reduce.
 * With one rank nothing is encoded and buf is left as it is (DeepSpeed
 * compresses only when size > 1).
 *
 * The blockwise int8 codec of ZeRO++ qwZ and qgZ is engine/comm/codec_q8.h:
 * its records hold a scale per 4096 elements and are encoded by the
 * backend's quantization slots too, in rounds of a fixed scratch and with
 * no error feedback: reduce-scatters and all-gathers rather than this
 * all-reduce. */
#ifndef DS_COMM_CODEC_H
#define DS_COMM_CODEC_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_codec {
    const char *name; /* "onebit" */
    /* A block's element count must be a multiple of this (8 for 1-bit: a
     * byte of signs). */
    size_t elem_align;
    /* Bytes of one record of n elements. */
    size_t (*wire_bytes)(size_t n);
    /* Encode x (n elements) into nblocks records of n/nblocks elements each,
     * record b at wire + b * stride bytes (n/nblocks a multiple of
     * elem_align). With err (n elements) non-NULL: c = x + err is encoded
     * and err becomes c - decode(code(c)). x is not written. */
    ds_status (*encode)(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                        void *wire, size_t stride);
    /* out[i] = alpha * decoded[i] for a record of n elements; with
     * accumulate, out[i] += that instead. */
    ds_status (*decode)(ds_backend *be, const void *wire, size_t n, float alpha, bool accumulate,
                        float *out);
} ds_codec;

extern const ds_codec ds_codec_onebit;

/* Sizes of the compressed all-reduce of segments segs[0..nseg) over world
 * ranks (each segment rounded up to a multiple of world * lcm(world, 8)). */
typedef struct ds_coded_layout {
    size_t n;        /* sum of the segments: the vector's elements */
    size_t padded;   /* sum of the padded segments */
    size_t worker_n; /* elements of the caller's worker error buffer (padded) */
    size_t server_n; /* elements of the caller's server error buffer (padded / world) */
    size_t region;   /* wire bytes a rank sends each peer per phase: one record
                      * of every segment's chunk */
} ds_coded_layout;

ds_coded_layout ds_coded_layout_of(const ds_codec *codec, const size_t *segs, int nseg,
                                   int world);

/* Scratch of one segmentation (the padded vector, the send and receive
 * records) in be's memory (recorded as DS_MEM_BUFFERS), allocated once so a
 * call allocates nothing; the calls run on be. segs is copied. */
typedef struct ds_coded_scratch ds_coded_scratch;
ds_status ds_coded_scratch_create(const ds_codec *codec, ds_backend *be, const size_t *segs,
                                  int nseg, int world, ds_coded_scratch **out);
void ds_coded_scratch_destroy(ds_coded_scratch *s); /* safe on NULL */

/* buf (n fp32 elements of the scratch's backend, its segments back to back) becomes
 * the mean over all ranks as the scheme above carries it; worker_err
 * (layout.worker_n) and server_err (layout.server_n) are this rank's error
 * feedback, read and updated. Every rank calls it with the same segments;
 * the traffic counts as one all_to_all and one all_gather of
 * layout.region bytes (DS_U8) in the communicator's stats. Errors: the
 * collectives', DS_ERR_INVALID_ARG for a scratch of another size or world. */
ds_status ds_comm_all_reduce_coded(ds_comm *c, float *buf, size_t n, const ds_codec *codec,
                                   float *worker_err, float *server_err,
                                   ds_coded_scratch *scratch);

#ifdef __cplusplus
}
#endif
#endif /* DS_COMM_CODEC_H */
