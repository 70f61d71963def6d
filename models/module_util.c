/* The three GEMMs of a linear layer, shared by the modules of models/. */
#include "models/modules.h"

ds_status ds_linear_fwd(ds_backend *be, float *y, const float *x, int ldx, const float *W, int N,
                        int in, int out, float beta) {
    return be->ops->gemm(be, false, true, N, out, in, 1.0f, x, ldx, 0, W, in, 0, beta, y, out, 0,
                         1);
}

ds_status ds_linear_bias_fwd(ds_backend *be, float *y, const float *x, int ldx, const float *W,
                             const float *b, int N, int in, int out) {
    if (!b) return ds_linear_fwd(be, y, x, ldx, W, N, in, out, 0.0f);
    return be->ops->gemm_bias(be, false, true, N, out, in, x, ldx, W, in, b, y);
}

ds_status ds_linear_bwd_w(ds_backend *be, float *dW, const float *dy, const float *x, int ldx,
                          int N, int in, int out) {
    return be->ops->gemm(be, true, false, out, in, N, 1.0f, dy, out, 0, x, ldx, 0, 1.0f, dW, in, 0,
                         1);
}

ds_status ds_linear_bwd_x(ds_backend *be, float *dx, int lddx, const float *dy, const float *W,
                          int N, int in, int out, float beta) {
    return be->ops->gemm(be, false, false, N, in, out, 1.0f, dy, out, 0, W, in, 0, beta, dx, lddx,
                         0, 1);
}

void ds_linear_plan_gemms(ds_gemm_plan *plan, int N, int in, int out) {
    ds_gemm_plan_add(plan, false, true, N, out, in, 0, 0, 1);  /* ds_linear_fwd */
    ds_gemm_plan_add(plan, true, false, out, in, N, 0, 0, 1);  /* ds_linear_bwd_w */
    ds_gemm_plan_add(plan, false, false, N, in, out, 0, 0, 1); /* ds_linear_bwd_x */
}

void ds_attn_plan_gemms(ds_gemm_plan *plan, int nb, int Tq, int T, int hd) {
    /* every operand is one matrix per sequence: a stride of a whole
     * sequence's block, here written as its size (only zero or not matters) */
    const int64_t sq = (int64_t)Tq * hd, sk = (int64_t)T * hd, sp = (int64_t)Tq * T;
    ds_gemm_plan_add(plan, false, true, Tq, T, hd, sq, sk, nb);   /* S = Q K^T; dP = dC V^T */
    ds_gemm_plan_add(plan, false, false, Tq, hd, T, sp, sk, nb);  /* C = P V; dQ = dS K */
    ds_gemm_plan_add(plan, true, false, T, hd, Tq, sp, sq, nb);   /* dV = P^T dC; dK = dS^T Q */
}

int ds_attn_chunk_rows(const ds_backend *be, int B, int nh, int Tq, int T) {
    if (!be->chunk_bytes) return B;
    size_t sample = (size_t)nh * Tq * T * sizeof(float);
    size_t rows = be->chunk_bytes / (sample ? sample : 1);
    if (rows < (size_t)be->num_threads) rows = (size_t)be->num_threads;
    if (rows < 1) rows = 1;
    return rows < (size_t)B ? (int)rows : B;
}

uint32_t *ds_attn_keep_rows(uint32_t *keep, int nh, int Tq, int T, int first) {
    return keep ? keep + (size_t)first * nh * Tq * ds_dropout_mask_ld(T) : NULL;
}

ds_status ds_cls_model_inputs(ds_model *model, int max_seq_len, int vocab, int type_vocab,
                              int n_classes) {
    const int64_t seq[1] = {DS_DIM_SEQ};
    model->max_seq_len = max_seq_len;
    DS_TRY(ds_model_add_input(model, "input_ids", DS_I32, 1, seq, 0));
    DS_TRY(ds_model_input_range(model, "input_ids", 0, vocab, false));
    DS_TRY(ds_model_add_input(model, "attention_mask", DS_F32, 1, seq, DS_INPUT_OPTIONAL));
    if (type_vocab > 0) {
        DS_TRY(ds_model_add_input(model, "token_type_ids", DS_I32, 1, seq, DS_INPUT_OPTIONAL));
        DS_TRY(ds_model_input_range(model, "token_type_ids", 0, type_vocab, false));
    }
    DS_TRY(ds_model_add_input(model, "labels", DS_I32, 0, NULL, DS_INPUT_TARGET));
    DS_TRY(ds_model_input_range(model, "labels", 0, n_classes, true));
    DS_TRY(ds_model_add_input(model, "weights", DS_F32, 0, NULL,
                              DS_INPUT_TARGET | DS_INPUT_OPTIONAL));
    return DS_OK;
}
