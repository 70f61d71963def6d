/* GPT2LMHeadModel assembled from the modules of models/:
 *   transformer.embed -> transformer.h.0 .. L-1 -> lm_head (ln_f, tied wte^T)
 *   -> loss (causal cross-entropy: position t scored on labels[t + 1])
 * Parameter names are Hugging Face's; see models.h. */
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "models/models.h"
#include "models/modules.h"

ds_status ds_gpt2_resolve(const ds_gpt2_desc *in, ds_gpt2_desc *d) {
    *d = *in;
    /* GPT-2 small's shape where a field is 0 (GPT2Config's defaults) */
    if (d->vocab_size == 0) d->vocab_size = 50257;
    if (d->n_positions == 0) d->n_positions = 1024;
    if (d->n_embd == 0) d->n_embd = 768;
    if (d->n_layer == 0) d->n_layer = 12;
    if (d->n_head == 0) d->n_head = 12;
    if (d->n_inner == 0 && d->n_embd > 0) {
        /* a config.json may give any width up to 1e9: past INT_MAX / 4 the
         * default does not fit an int (and the product would overflow) */
        if (d->n_embd > INT_MAX / 4)
            return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: n_embd %d: the default n_inner (4 * n_embd) "
                          "exceeds %d; give n_inner", d->n_embd, INT_MAX);
        d->n_inner = 4 * d->n_embd;
    }
    if (d->layer_norm_epsilon == 0.0f) d->layer_norm_epsilon = 1e-5f;
    if (d->initializer_range == 0.0f) d->initializer_range = 0.02f;
    if (d->max_seq_len == 0) d->max_seq_len = d->n_positions;
    if (!d->dropout_set && d->resid_pdrop == 0.0f && d->embd_pdrop == 0.0f &&
        d->attn_pdrop == 0.0f)
        d->resid_pdrop = d->embd_pdrop = d->attn_pdrop = 0.1f;
    d->dropout_set = true; /* the three values are now meant as they are */
#define POSITIVE(f)                                                                       \
    if (d->f <= 0) return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: " #f " must be > 0, got %d", d->f)
    POSITIVE(vocab_size);
    POSITIVE(n_positions);
    POSITIVE(n_embd);
    POSITIVE(n_layer);
    POSITIVE(n_head);
    POSITIVE(n_inner);
    POSITIVE(max_seq_len);
#undef POSITIVE
    /* the loss needs two classes at least (xent's rule) */
    if (d->vocab_size < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: vocab_size must be >= 2, got %d", d->vocab_size);
    if (d->n_embd % d->n_head != 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: n_embd %d is not a multiple of n_head %d",
                      d->n_embd, d->n_head);
    if (d->max_seq_len > d->n_positions)
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: max_seq_len %d exceeds n_positions %d",
                      d->max_seq_len, d->n_positions);
#define PROB(f)                                                                           \
    if (!(d->f >= 0.0f && d->f < 1.0f))                                                   \
    return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: " #f " must be in [0, 1), got %g", (double)d->f)
    PROB(resid_pdrop);
    PROB(embd_pdrop);
    PROB(attn_pdrop);
#undef PROB
    if (!(d->layer_norm_epsilon > 0.0f) || !isfinite(d->layer_norm_epsilon))
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: layer_norm_epsilon must be > 0, got %g",
                      (double)d->layer_norm_epsilon);
    if (!(d->initializer_range > 0.0f) || !isfinite(d->initializer_range))
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: initializer_range must be > 0, got %g",
                      (double)d->initializer_range);
    if (d->token_ids_set &&
        (d->bos_token_id < 0 || d->bos_token_id >= d->vocab_size || d->eos_token_id < 0 ||
         d->eos_token_id >= d->vocab_size))
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2: bos_token_id %d / eos_token_id %d outside the "
                      "vocabulary [0, %d)", d->bos_token_id, d->eos_token_id, d->vocab_size);
    return DS_OK;
}

ds_status ds_gpt2_create(const ds_gpt2_desc *in, ds_model **out) {
    *out = NULL;
    if (!in) return DS_ERR(DS_ERR_INVALID_ARG, "ds_gpt2_create: desc is NULL");
    ds_gpt2_desc d;
    DS_TRY(ds_gpt2_resolve(in, &d));
    const float sd = d.initializer_range;

    ds_model *model;
    DS_TRY(ds_model_create("gpt2", &model));
    model->max_seq_len = d.max_seq_len;
    const int64_t seq[1] = {DS_DIM_SEQ};
    ds_status st = ds_model_add_input(model, "input_ids", DS_I32, 1, seq, 0);
    if (st == DS_OK)
        st = ds_model_add_input(model, "attention_mask", DS_F32, 1, seq, DS_INPUT_OPTIONAL);
    if (st == DS_OK) st = ds_model_add_input(model, "labels", DS_I32, 1, seq, DS_INPUT_TARGET);
    if (st == DS_OK) st = ds_model_input_range(model, "input_ids", 0, d.vocab_size, false);
    if (st == DS_OK) st = ds_model_input_range(model, "labels", 0, d.vocab_size, true);

    ds_module *m = NULL;
    ds_gpt2_embed_desc ed = {.vocab = d.vocab_size, .n_embd = d.n_embd,
                             .n_positions = d.n_positions, .embd_pdrop = d.embd_pdrop,
                             .init_std = sd};
    if (st == DS_OK) st = ds_mod_gpt2_embed_create("transformer.embed", "transformer", &ed, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    /* HF's _init_weights: the residual projections (every c_proj) start
     * with std initializer_range / sqrt(2 n_layer), so the residual stream's
     * variance does not grow with depth (the GPT-2 paper's scheme) */
    ds_gpt2_block_desc bd = {.n_embd = d.n_embd, .n_head = d.n_head, .n_inner = d.n_inner,
                             .resid_pdrop = d.resid_pdrop, .attn_pdrop = d.attn_pdrop,
                             .ln_eps = d.layer_norm_epsilon, .init_std = sd,
                             .proj_std = sd / sqrtf(2.0f * (float)d.n_layer)};
    for (int i = 0; i < d.n_layer && st == DS_OK; i++) {
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%d", i);
        st = ds_mod_gpt2_block_create(name, &bd, &m);
        if (st == DS_OK) st = ds_model_add_module(model, m);
    }
    ds_gpt2_head_desc hd = {.vocab = d.vocab_size, .n_embd = d.n_embd,
                            .ln_eps = d.layer_norm_epsilon, .ln_prefix = "transformer.ln_f",
                            .alias = "lm_head.weight", .tied_to = "transformer.wte.weight"};
    if (st == DS_OK) st = ds_mod_gpt2_head_create("lm_head", &hd, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    ds_xent_desc xd = {.n_classes = d.vocab_size, .per_token = true, .shift = true};
    if (st == DS_OK) st = ds_mod_xent_create("loss", &xd, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st != DS_OK) {
        ds_model_destroy(model);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    model->hidden_size = d.n_embd;
    model->vocab_size = d.vocab_size;
    *out = model;
    return DS_OK;
}
