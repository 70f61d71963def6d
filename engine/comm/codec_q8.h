/* The blockwise int8 codec of ZeRO++: qwZ's parameter all-gathers and qgZ's
 * gradient reduce-scatter (zero/stage3.c, zero/grad_buckets.c) carry their
 * values in it, written once here.
 *
 *   size_t counts[2] = {n0, n1};          rank r's block of a bucket: counts[r]
 *   ds_q8_rs *q;  ds_q8_rs_create(be, 2, 0, &q);     scratch of a fixed size
 *   ds_comm_reduce_scatterv_q8_add(comm, q, bucket, DS_F32, counts, part, DS_F32);
 *   -> part (counts[rank] values) += the sum over ranks of their block
 *      `rank`, each rank's block as int8 decoded, summed in fp32 at the
 *      receiver, then added.
 *
 * A record of n values: the fp32 scales of its ceil(n / DS_Q8_BLOCK) blocks,
 * then the n int8 values, padded to 4 bytes so that the next record's
 * scales stay aligned: ds_q8_record_bytes(n) = 4 ceil(n / 4096) +
 * roundup4(n) bytes, against 4n for fp32 (a quarter and 0.1% for the
 * scales) and 2n for bf16. The arithmetic is engine/backend/math.h 2b (one
 * scale max|x| / 127 per block, round to nearest even): the backend's
 * quantize_i8 / dequantize_i8 slots run it, the same bytes on cpu and cuda,
 * so the records are device memory on the cuda backend and host memory on
 * cpu, whatever the communicator reads. Every decoded value is within half
 * a step of its block (step = max|block| / 127) plus max * 2^-21; a block
 * holding inf or NaN decodes to NaN (the overflow checks see it).
 *
 * qgZ's reduce-scatter (ds_comm_reduce_scatterv_q8_add) is DeepSpeed's
 * all-to-all scheme (runtime/comm/coalesced_collectives.py,
 * all_to_all_quant_reduce) at one level: each rank encodes its block for
 * every rank r as one record, an all_to_allv sends record r to rank r, and
 * rank r decodes the world records of its block and sums them in fp32 in
 * rank order. A rank sends the records of the other ranks' blocks:
 * sum over b != rank of ds_q8_record_bytes(counts[b]) bytes, against
 * (world - 1) / world of the fp32 ring's whole buffer.
 *
 * It goes in rounds so that its scratch does not grow with the model: round
 * j carries values [j C, (j + 1) C) of every rank's block (C: the scratch's
 * chunk, a multiple of DS_Q8_BLOCK), one all_to_allv per round, and the
 * receiver decodes and sums 64 Ki values at a time, adding each summed
 * slice to its destination at once. The quantization blocks start at the
 * same places as in one record of the whole block (C is a multiple of
 * them), the bytes sent are the same (a record of k blocks is the sum of
 * its pieces' records), and every value goes through the same fp32
 * operations in the same order: the same bits as one round, in
 * ceil(max counts / C) all_to_all calls instead of one. DeepSpeed quantizes
 * to int4 and goes in two levels (inside hosts, a re-quantized partial sum
 * across them); this is int8 at one level over the communicator's ranks. */
#ifndef DS_COMM_CODEC_Q8_H
#define DS_COMM_CODEC_Q8_H

#include <stddef.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the record of n values. */
size_t ds_q8_record_bytes(size_t n);

/* x (n values of F32/F16/BF16, backend memory) into one record at rec
 * (ds_q8_record_bytes(n) bytes, backend memory). Errors: the backend's. */
ds_status ds_q8_encode(ds_backend *be, const void *x, ds_dtype t, size_t n, void *rec);

/* The record of n values at rec decoded into y (n fp32, backend memory). */
ds_status ds_q8_decode(ds_backend *be, const void *rec, size_t n, float *y);

/* Records of counts[0], counts[1], ... values back to back (an all-gather
 * of records) decoded into y, the values back to back (sum of counts). */
ds_status ds_q8_decode_all(ds_backend *be, const void *recs, const size_t *counts, int world,
                           float *y);

/* Room for the records of pieces of a span of n values cut among `world`
 * ranks (the sum over r of ds_q8_record_bytes(n_r), at most
 * n + 4 (n / 4096 + world) + 3 world). */
size_t ds_q8_records_bytes_max(size_t n, int world);

/* Scratch of the quantized reduce-scatter, allocated once through the
 * backend (DS_MEM_BUFFERS, device: the memory accountant sees it): one
 * round's records sent and received (world records of `chunk` values
 * each way) and two fp32 slices of 64 Ki values, whatever the blocks'
 * sizes. chunk: values of each rank's block per round, rounded down to a
 * multiple of DS_Q8_BLOCK (at least one block); 0 picks
 * DS_Q8_RS_ROUND / world, so that a round carries about DS_Q8_RS_ROUND
 * values (2 MiB of records each way) at any world size. */
#define DS_Q8_RS_ROUND ((size_t)1 << 21)
typedef struct ds_q8_rs ds_q8_rs;
ds_status ds_q8_rs_create(ds_backend *be, int world, size_t chunk, ds_q8_rs **out);
void ds_q8_rs_destroy(ds_q8_rs *q); /* safe on NULL */
/* What ds_q8_rs_create(be, world, chunk) allocates (zero/estimate.c counts
 * it); 0 for world < 1. */
size_t ds_q8_rs_bytes(int world, size_t chunk);

/* send: the blocks of counts[0], counts[1], ... values (t: F32, F16 or
 * BF16) back to back, backend memory; acc (counts[rank] values of acc_t,
 * F32/F16/BF16, backend memory) gets added the sum over ranks of their
 * block `rank`, as the codec carries it (summed in fp32, then added as the
 * backend's axpy adds). Collective over c (all_to_allv of bytes, counted as
 * all_to_all, one per round); counts the same on every rank, of any size.
 * Errors: DS_ERR_INVALID_ARG for a world other than the scratch's, the
 * communicator's and the backend's. */
ds_status ds_comm_reduce_scatterv_q8_add(ds_comm *c, ds_q8_rs *q, const void *send, ds_dtype t,
                                         const size_t *counts, void *acc, ds_dtype acc_t);

#ifdef __cplusplus
}
#endif
#endif /* DS_COMM_CODEC_Q8_H */
