/* cpu softmax cross-entropy with optional class weights (the formula of
 * torch.nn.CrossEntropyLoss(weight=w, reduction="mean")). B x C is small
 * (batch x classes): one thread, sums in double. */
#include <math.h>

#include "engine/backend/cpu/nn_cpu.h"

ds_status ds_nn_cpu_xent_fwd(ds_backend *be, float *loss, float *wsum, float *probs,
                             const float *logits, const int32_t *labels, const float *weights,
                             int B, int C) {
    (void)be;
    if (!labels) return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: the batch has no labels");
    for (int b = 0; b < B; b++)
        if (labels[b] < 0 || labels[b] >= C)
            return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: label %d of row %d is outside [0, %d)",
                          labels[b], b, C);
    double num = 0.0, den = 0.0;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * C;
        float *pr = probs + (size_t)b * C;
        float lse = ds_logsumexp_row(z, C);
        for (int c = 0; c < C; c++) pr[c] = expf(z[c] - lse);
        float w = weights ? weights[labels[b]] : 1.0f;
        num += (double)w * (double)(lse - z[labels[b]]);
        den += (double)w;
    }
    /* PyTorch divides by the weight sum too, so a batch whose labels all have
     * weight 0 gives 0/0 = NaN there; we report it instead. */
    if (den <= 0.0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "xent_fwd: the class weights of this batch's labels sum to %g (need > 0)",
                      den);
    loss[0] = (float)(num / den);
    wsum[0] = (float)den;
    return DS_OK;
}

ds_status ds_nn_cpu_xent_bwd(ds_backend *be, float *dlogits, const float *probs,
                             const float *wsum, const int32_t *labels, const float *weights, int B,
                             int C, float scale) {
    (void)be;
    float inv = scale / wsum[0];
    for (int b = 0; b < B; b++) {
        float coef = (weights ? weights[labels[b]] : 1.0f) * inv;
        const float *pr = probs + (size_t)b * C;
        float *d = dlogits + (size_t)b * C;
        for (int c = 0; c < C; c++) d[c] = ds_xent_dlogit(pr[c], c == labels[b], coef);
    }
    return DS_OK;
}
