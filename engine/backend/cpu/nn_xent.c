/* cpu softmax cross-entropy with optional per-row weights and an ignore
 * index (torch.nn.CrossEntropyLoss(reduction="mean", ignore_index)). Rows
 * are independent and run in parallel (a language model's head has B*T rows
 * of a 50k vocabulary); the loss is summed afterwards in double, in row
 * order, so the result does not depend on the thread count. */
#include <math.h>

#include "engine/backend/cpu/nn_cpu.h"

/* One row: probs[c] = e^(z_c - lse) and the return value lse = log sum_c
 * e^(z_c), from a pass for the maximum, one computing e^(z_c - max) into
 * probs while summing them, and one scaling by 1 / sum. Comparisons and
 * ds_expf rather than libm's fmaxf and expf, so every pass vectorises: on a
 * 50k vocabulary (GPT-2's B*T rows) the libm version took 3.3% of a training
 * step, half of it in scalar expf calls, and evaluated each exponential twice
 * (in the log-sum-exp and again for the probabilities). A NaN logit gives a
 * NaN sum, loss and probabilities, as before; the maximum skips it. */
static float xent_row(float *pr, const float *z, int C) {
    float mx = -INFINITY;
    DS_SIMD_MAX(mx)
    for (int c = 0; c < C; c++) mx = z[c] > mx ? z[c] : mx;
    /* fixed-lane sum (nn_math.h): the same bits for every vector width */
    float acc[DS_LANES] = {0.0f};
    int cb = ds_lanes_end(C);
    for (int c0 = 0; c0 < cb; c0 += DS_LANES) {
        DS_SIMD
        for (int k = 0; k < DS_LANES; k++) {
            float e = ds_expf(z[c0 + k] - mx);
            pr[c0 + k] = e;
            acc[k] += e;
        }
    }
    float sum = ds_lanes_sum(acc);
    for (int c = cb; c < C; c++) {
        float e = ds_expf(z[c] - mx);
        pr[c] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    DS_SIMD
    for (int c = 0; c < C; c++) pr[c] *= inv;
    return mx + logf(sum);
}

ds_status ds_nn_cpu_xent_fwd(ds_backend *be, float *loss, float *wsum, float *probs,
                             float *row_loss, const float *logits, const int32_t *labels,
                             const float *weights, int R, int C, int ignore_index) {
    if (!labels) return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: the batch has no labels");
    DS_TRY(ds_check_nn_sizes("xent_fwd", "R", R, "C", C));
    for (int r = 0; r < R; r++)
        if (labels[r] != ignore_index && (labels[r] < 0 || labels[r] >= C))
            return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: label %d of row %d is outside [0, %d)",
                          labels[r], r, C);
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)R * C >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *z = logits + (size_t)r * C;
        float *pr = probs + (size_t)r * C;
        float lse = xent_row(pr, z, C);
        row_loss[r] = labels[r] == ignore_index ? 0.0f : lse - z[labels[r]];
    }
    double num = 0.0, den = 0.0;
    for (int r = 0; r < R; r++) {
        if (labels[r] == ignore_index) continue;
        float w = weights ? weights[r] : 1.0f;
        num += (double)w * (double)row_loss[r];
        den += (double)w;
    }
    loss[0] = den > 0.0 ? (float)(num / den) : 0.0f;
    wsum[0] = (float)den;
    return DS_OK;
}

ds_status ds_nn_cpu_xent_bwd(ds_backend *be, float *dlogits, const float *probs,
                             const float *wsum, const int32_t *labels, const float *weights, int R,
                             int C, int ignore_index, float scale) {
    DS_TRY(ds_check_nn_sizes("xent_bwd", "R", R, "C", C));
    if (R == 0 || C == 0) return DS_OK; /* wsum is not read (as cuda) */
    float inv = wsum[0] > 0.0f ? scale / wsum[0] : 0.0f;
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)R * C >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < R; r++) {
        bool counted = labels[r] != ignore_index;
        float coef = counted ? (weights ? weights[r] : 1.0f) * inv : 0.0f;
        const float *pr = probs + (size_t)r * C;
        float *d = dlogits + (size_t)r * C;
        for (int c = 0; c < C; c++) d[c] = ds_xent_dlogit(pr[c], counted && c == labels[r], coef);
    }
    return DS_OK;
}
