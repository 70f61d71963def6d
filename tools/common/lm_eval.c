/* train_lm's dev evaluation and sampling (tools/common/lm_eval.h). */
#include "tools/common/lm_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/trainer_run.h"

/* ---- evaluation ---- */

typedef struct eval_sums {
    engine_t *e;
    const ds_dataset *dev;
    int kl, kb;      /* the labels' and token bytes' columns */
    int32_t *row;    /* [2 T]: one row's labels, then its bytes */
    double sum[4];   /* [nats, weight, bytes, targets] of this rank, then of all */
} eval_sums;

/* Targets and their bytes in rows idx[0..count) of dev: position t is scored
 * on labels[t + 1], so the targets are positions 1..T-1 not ignored. The
 * rows are read one at a time (ds_lm_pack's columns are computed). */
static ds_status count_targets(eval_sums *s, const size_t *idx, int count) {
    size_t T = (size_t)s->dev->seq_len;
    int32_t *l = s->row, *b = s->row + T;
    for (int r = 0; r < count; r++) {
        DS_TRY(ds_dataset_read_rows(s->dev, s->kl, idx[r], 1, l));
        DS_TRY(ds_dataset_read_rows(s->dev, s->kb, idx[r], 1, b));
        for (size_t j = 1; j < T; j++)
            if (l[j] != DS_IGNORE_INDEX) {
                s->sum[3] += 1.0;
                s->sum[2] += (double)b[j];
            }
    }
    return DS_OK;
}

static ds_status eval_call(void *user, const ds_batch *b, const size_t *idx, int count) {
    eval_sums *s = user;
    double loss = 0, weight = 0;
    DS_TRY(ds_evaluate(s->e, b, &loss, &weight));
    s->sum[0] += loss * weight;
    s->sum[1] += weight;
    return count_targets(s, idx, count);
}

ds_status lm_evaluate(engine_t *e, const ds_dataset *dev, int batch, lm_eval_result *out) {
    memset(out, 0, sizeof *out);
    int kl = ds_dataset_find(dev, "labels"), kb = ds_dataset_find(dev, "token_bytes");
    if (kl < 0 || kb < 0 || dev->cols[kl].dtype != DS_I32 || dev->cols[kb].dtype != DS_I32 ||
        dev->seq_len < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "evaluation: the dev set lacks labels or token_bytes "
                      "(not packed by ds_lm_pack)");
    eval_sums s = {.e = e, .dev = dev, .kl = kl, .kb = kb,
                   .row = malloc(2 * (size_t)dev->seq_len * sizeof *s.row)};
    if (!s.row) return DS_ERR(DS_ERR_OOM, "evaluation: out of memory");
    ds_status st = tr_eval_slices(e, dev, batch, eval_call, &s);
    free(s.row);
    DS_TRY(st);
    double *sum = s.sum;
    DS_TRY(ds_all_reduce_host(e, sum, 4, DS_F64));
    /* The loss's weight is the count of tokens it scored: the same number
     * the rows hold as targets, or the packing and the model disagree on
     * what is predicted. Token counts are exact in double. */
    if (sum[1] != sum[3])
        return DS_ERR(DS_ERR_INTERNAL,
                      "evaluation: the loss counted %.0f tokens, the dev rows hold %.0f targets",
                      sum[1], sum[3]);
    out->nats = sum[0];
    out->tokens = sum[1];
    out->bytes = sum[2];
    out->rows = (int64_t)dev->n;
    out->loss = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    out->ppl = exp(out->loss);
    out->bpb = sum[2] > 0 ? sum[0] / log(2.0) / sum[2] : NAN;
    return DS_OK;
}

void lm_eval_print(FILE *f, const char *prefix, const lm_eval_result *r) {
    fprintf(f, "%sloss %.4f nats/token, perplexity %.3f, %.4f bits/byte (%.0f tokens, %.0f bytes, "
               "%lld rows)\n",
            prefix, r->loss, r->ppl, r->bpb, r->tokens, r->bytes, (long long)r->rows);
}

void lm_eval_write_line(FILE *f, const char *key, const lm_eval_result *r) {
    tr_jline top, ev;
    tr_jline_begin(&top, f);
    tr_jline_key(&top, key);
    tr_jline_begin(&ev, f);
    tr_jline_num(&ev, "loss", "%.6f", r->loss);
    tr_jline_num(&ev, "perplexity", "%.6f", r->ppl);
    tr_jline_num(&ev, "bits_per_byte", "%.6f", r->bpb);
    tr_jline_num(&ev, "nats", "%.6f", r->nats);
    tr_jline_num(&ev, "tokens", "%.0f", r->tokens);
    tr_jline_num(&ev, "bytes", "%.0f", r->bytes);
    tr_jline_int(&ev, "rows", (long long)r->rows);
    tr_jline_end(&ev);
    tr_jline_end(&top);
    fputc('\n', f);
    fflush(f);
}

/* ---- sampling ---- */

/* The next token from logits[0..V): the argmax (temperature 0) or a draw
 * from softmax(logits / temperature) over the top_k largest (0: all). */
static int32_t choose(const float *logits, int V, const lm_gen_opts *g, uint64_t *rng,
                      int32_t *order, double *p) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (g->temperature == 0.0) return best;
    int k = g->top_k > 0 && g->top_k < V ? g->top_k : V;
    /* the k largest by selection: k passes over V (V is a few hundred to a
     * few thousand characters; one token at a time) */
    for (int i = 0; i < V; i++) order[i] = i;
    for (int a = 0; a < k && k < V; a++) {
        int m = a;
        for (int i = a + 1; i < V; i++)
            if (logits[order[i]] > logits[order[m]]) m = i;
        int32_t tmp = order[a];
        order[a] = order[m];
        order[m] = tmp;
    }
    double total = 0, top = logits[best];
    for (int i = 0; i < k; i++) total += p[i] = exp(((double)logits[order[i]] - top) / g->temperature);
    /* 53 random bits -> [0, 1) */
    double u = (double)(ds_splitmix64_next(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    for (int i = 0; i < k; i++) {
        if (u < p[i]) return order[i];
        u -= p[i];
    }
    return order[k - 1]; /* u rounded past the last */
}

ds_status lm_generate(engine_t *e, const ds_lm_tokenizer *t, const lm_gen_opts *g, char **text,
                      size_t *text_len) {
    *text = NULL;
    *text_len = 0;
    int rank = ds_rank(e);
    int Vm = ds_get_model(e)->vocab_size, Vt = ds_lm_tokenizer_vocab_size(t);
    /* a model vocabulary larger than the tokenizer's (--model-config) has
     * rows no text maps to: never chosen */
    int V = Vt < Vm ? Vt : Vm;
    ds_lm_tokens ctx = {0};
    /* A row of seq_len tokens is scored at positions 0..seq_len-2 only (the
     * last one has no next token), so the last position never learns to
     * predict: its position embedding gets no gradient. The context keeps
     * the seq_len - 1 positions that were trained. */
    size_t T = (size_t)g->seq_len - 1;
    float *logits = malloc(ds_output_elems(e, 1, g->seq_len) * sizeof *logits);
    int32_t *order = malloc((size_t)V * sizeof *order);
    double *p = malloc((size_t)V * sizeof *p);
    size_t cap = (size_t)g->n_new * 16 + 1;
    char *raw = rank == 0 ? malloc(cap) : NULL;
    size_t n_raw = 0;
    ds_status st = DS_OK;
    if (!logits || !order || !p || (rank == 0 && !raw)) {
        st = DS_ERR(DS_ERR_OOM, "generation: buffers for %d tokens", g->n_new);
        goto done;
    }
    DS_TRY_GOTO(st, ds_lm_tokens_push(&ctx, ds_lm_tokenizer_eot_id(t), 0), done);
    const char *prompt = g->prompt ? g->prompt : "";
    st = ds_lm_tokenizer_encode(t, prompt, strlen(prompt), &ctx);
    if (st != DS_OK) {
        ds_error_prefix("--prompt");
        goto done;
    }
    uint64_t rng = g->seed;
    for (int k = 0; k < g->n_new; k++) {
        size_t n = ctx.n < T ? ctx.n : T;
        ds_batch b = {0};
        b.B = 1;
        b.T = (int)n;
        DS_TRY_GOTO(st, ds_batch_set(&b, "input_ids", DS_I32, ctx.ids + ctx.n - n), done);
        DS_TRY_GOTO(st, ds_predict(e, &b, logits), done);
        /* logits [1, n, Vm]: the last position predicts the next token */
        int32_t next = choose(logits + (n - 1) * (size_t)Vm, V, g, &rng, order, p);
        int32_t shared = rank == 0 ? next : 0; /* rank 0's choice, everywhere */
        DS_TRY_GOTO(st, ds_all_reduce_host(e, &shared, 1, DS_I32), done);
        DS_TRY_GOTO(st, ds_lm_tokens_push(&ctx, shared, 0), done);
        if (rank == 0) n_raw += ds_lm_tokenizer_decode(t, shared, raw + n_raw, cap - n_raw);
    }
    if (rank == 0) {
        char *clean = malloc(3 * n_raw + 1);
        if (!clean) {
            st = DS_ERR(DS_ERR_OOM, "generation: %zu bytes of text", n_raw);
            goto done;
        }
        *text_len = ds_lm_utf8_sanitize(raw, n_raw, clean);
        clean[*text_len] = '\0';
        *text = clean;
    }
done:
    ds_lm_tokens_free(&ctx);
    free(logits);
    free(order);
    free(p);
    free(raw);
    return st;
}
