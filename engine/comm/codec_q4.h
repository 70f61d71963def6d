/* ZeRO++ qgZ as DeepSpeed runs it: blockwise int4 in two levels, inside
 * each host and then across hosts (DeepSpeed's runtime/comm/
 * coalesced_collectives.py all_to_all_quant_reduce over the swizzled
 * quantizer and quantized_reduction of csrc/quantization). Chosen by
 * zero_engine.qgz_scheme "int4" (zero/stage3.c); the default "int8" is the
 * one-level scheme of engine/comm/codec_q8.h.
 *
 *   ds_q4_rs *q;  ds_q4_rs_create(be, comm, 2, 0, &q);   hosts of 2 ranks
 *   ds_comm_reduce_scatterv_q4_add(comm, q, bucket, DS_F32, counts, part, DS_F32);
 *   -> part (counts[rank] values) += the sum over ranks of their block
 *      `rank`, as the two levels carry it.
 *
 * A record of n values: the fp32 scales of its ceil(n / DS_Q4_BLOCK) blocks,
 * then the n values as int4, two a byte, padded to 4 bytes:
 * ds_q4_record_bytes(n) = 4 ceil(n / 256) + roundup4(ceil(n / 2)), against
 * 4n for fp32 (1/8, and 1/64 more for the scales). The arithmetic is
 * DeepSpeed's symmetric 4-bit one (engine/backend/math.h 2c: multiplier
 * 2^4 / (2 max), round to nearest even, clamp to [-8, 7]); every decoded
 * value is within max / 8 + max * 2^-21 of its block's max, a block with
 * inf or NaN decodes to NaN.
 *
 * Block size: DeepSpeed quantizes each gradient tensor on its own with
 * max(rows, cols, world) groups, i.e. groups of the smaller dimension of a
 * 2-D weight (256 for BERT-mini's hidden layers, the hidden size in
 * general). A bucket here is a flat run of many tensors with no shapes, so
 * the groups are a fixed 256 values from each block's start.
 *
 * The exchange, for a communicator of H hosts x L ranks (rank h L + l on
 * host h at place l, consecutive as launchers number them):
 *   1. each rank encodes, for every place l', the H blocks of ranks
 *      h' L + l' (DeepSpeed's swizzle: the blocks grouped by the place that
 *      reduces them) and an all_to_allv inside its host sends them to the
 *      rank at place l';
 *   2. that rank decodes, for each host h', the L records of block h' L + l
 *      it got, sums them in fp32 in rank order, and encodes the sum again
 *      (blocks of 256 from the block's start);
 *   3. an all_to_allv across hosts, among the ranks at place l, sends the
 *      record of block h' L + l to host h';
 *   4. the owner decodes the H records of its block, sums them in fp32 in
 *      host order and adds the sum to acc.
 * Bytes a rank sends per call, n_b = counts[b]:
 *   inside its host: sum over l' != l, over h', of rec(n_{h' L + l'})
 *   across hosts:    sum over h' != h of rec(n_{h' L + l})
 * so at H hosts only about 1/L of a bucket's int4 crosses hosts, once, as
 * the partial sums of its host. DeepSpeed sums in fp16 (its gradients'
 * dtype) and divides the final sum by the number of nodes; here the sums
 * are fp32 and the result is the plain sum, as for every reduce-scatter of
 * the engine (averaging is the caller's). DeepSpeed sends 1-D tensors
 * (biases, norms) through the plain reduce-scatter; a flat bucket has no
 * shapes, so they go in int4 too (14,086 of BERT-mini's 8,767,238 values,
 * 0.16%), as do tensors whose size is not a multiple of 2 x world (which
 * DeepSpeed also sends plain: its two all-to-alls need even pieces; here
 * the blocks may be of any size).
 *
 * It goes in rounds of a fixed scratch like the int8 scheme: round j
 * carries values [j C, (j + 1) C) of every block (C a multiple of 256), the
 * groups start at the same places as in one round, so the results and the
 * bytes are the same as one round's, in ceil(max counts / C) pairs of
 * all_to_all calls. */
#ifndef DS_COMM_CODEC_Q4_H
#define DS_COMM_CODEC_Q4_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values per quantization group (see above). */
#define DS_Q4_BLOCK ((size_t)256)

/* Bytes of the record of n values. */
size_t ds_q4_record_bytes(size_t n);

/* x (n values of F32/F16/BF16, backend memory) into one record at rec
 * (ds_q4_record_bytes(n) bytes, backend memory). Errors: the backend's. */
ds_status ds_q4_encode(ds_backend *be, const void *x, ds_dtype t, size_t n, void *rec);

/* The record of n values at rec decoded into y (n fp32, backend memory). */
ds_status ds_q4_decode(ds_backend *be, const void *rec, size_t n, float *y);

/* Scratch and sub-communicators of the two-level reduce-scatter. Collective
 * over c: splits it into hosts of per_host consecutive ranks (the ranks at
 * each host's place l form the across-host group), so per_host must divide
 * c->world; the engine passes the ranks per host the communicator found
 * (a test may pass any divisor to fake hosts on one machine). Allocated
 * once through the backend (DS_MEM_BUFFERS, device): one round's records
 * for level 1 (world records each way) and level 2 (hosts records each
 * way), and two fp32 slices of 64 Ki values. chunk: values of each block
 * per round, rounded down to a multiple of DS_Q4_BLOCK (at least one
 * group); 0 picks 2 Mi / world. Errors: DS_ERR_INVALID_ARG for a
 * per_host that does not divide the world, the communicator's, the
 * backend's. */
typedef struct ds_q4_rs ds_q4_rs;
ds_status ds_q4_rs_create(ds_backend *be, ds_comm *c, int per_host, size_t chunk, ds_q4_rs **out);
/* Safe on NULL; destroys the sub-communicators, so call it before c's
 * world communicator goes, and after any thread using it has stopped. */
void ds_q4_rs_destroy(ds_q4_rs *q);
/* What ds_q4_rs_create allocates for that world, hosts of per_host ranks
 * and chunk (zero/estimate.c counts it); 0 for a per_host that does not
 * divide world. */
size_t ds_q4_rs_bytes(int world, int per_host, size_t chunk);
/* The all_to_all bytes this rank sent so far inside its host (level 1) and
 * across hosts (level 2), from the sub-communicators' counters: exact
 * where the hosts are faked too. */
void ds_q4_rs_traffic(const ds_q4_rs *q, uint64_t *inside, uint64_t *across);

/* send: the blocks of counts[0], counts[1], ... values (t: F32, F16 or
 * BF16) back to back, backend memory; acc (counts[rank] values of acc_t,
 * F32/F16/BF16, backend memory) gets added the sum over ranks of their
 * block `rank`, as the two levels carry it. Collective over c, which must
 * be the communicator q was made over; counts the same on every rank, of
 * any size. */
ds_status ds_comm_reduce_scatterv_q4_add(ds_comm *c, ds_q4_rs *q, const void *send, ds_dtype t,
                                         const size_t *counts, void *acc, ds_dtype acc_t);

#ifdef __cplusplus
}
#endif
#endif /* DS_COMM_CODEC_Q4_H */
