/* train_lm: train a GPT-2-style causal language model on text,
 * data-parallel, then report dev loss, perplexity and bits per byte with
 * every dev token counted exactly once across ranks, and optionally sample.
 * Usually started by engine-run:
 *
 *   engine-run --np 2 --config configs/ds_config.json train_lm \
 *       --data corpus.txt --seq-len 128 --epochs 1 --generate 200
 *
 * Every rank reads, splits, tokenizes and packs the data itself (all of it
 * deterministic); the engine's sampler gives each rank its slice of rows.
 * The text side is models/lm_text.h; evaluation and sampling are
 * tools/common/lm_eval.c; the options and --help tools/common/lm_opts.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "models/hf.h"
#include "models/lm_text.h"
#include "models/models.h"
#include "tools/common/lm_eval.h"
#include "tools/common/lm_opts.h"

/* ---- one failing line, and out ---- */
static int fail(const char *what) {
    fprintf(stderr, "train_lm: %s%s%s\n", what, *ds_last_error() ? ": " : "", ds_last_error());
    return 1;
}

static void quiet_warn(void *user, const char *msg) {
    (void)user;
    (void)msg; /* the engine prints the config's warnings once, on rank 0 */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool exists(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* mkdir -p */
static ds_status make_dir(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; ; s++) {
        bool end = *s == '\0';
        if (*s == '/' || end) {
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return DS_ERR(DS_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
            if (end) break;
            *s = '/';
        }
    }
    return DS_OK;
}

/* ---- the model's description and its tokenizer ---- */

/* --init DIR: the folder's config and the tokenizer it was trained with. A
 * folder without train_lm's tokenizer description is refused: its token ids
 * mean nothing to the byte or char tokenizers (a Hugging Face GPT-2's 50257
 * are BPE tokens). */
static ds_status init_model_dir(const lm_opts *o, ds_gpt2_desc *desc, ds_lm_tokenizer **tok) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", o->init_dir);
    DS_TRY(ds_hf_gpt2_config_read(path, desc));
    if (!exists(o->init_dir, "lm_tokenizer.json")) {
        if (desc->vocab_size == 50257 || exists(o->init_dir, "merges.txt"))
            return DS_ERR(DS_ERR_UNSUPPORTED,
                          "%s: a GPT-2 with a BPE vocabulary (vocab_size %d%s): train_lm has only "
                          "the byte and char tokenizers, and the model's token ids would mean "
                          "other text to them",
                          o->init_dir, desc->vocab_size,
                          exists(o->init_dir, "merges.txt") ? ", merges.txt" : "");
        return DS_ERR(DS_ERR_DATA,
                      "%s: no lm_tokenizer.json, so the tokenizer the model was trained with is "
                      "unknown (train_lm --save-dir writes it)",
                      o->init_dir);
    }
    DS_TRY(ds_lm_tokenizer_load(o->init_dir, tok));
    return DS_OK;
}

/* The GPT-2 shape from the flags, --model-config or --init (desc already
 * read), checked against the tokenizer and --seq-len. */
static ds_status model_desc(const lm_opts *o, const ds_lm_tokenizer *tok, ds_gpt2_desc *d) {
    int V = ds_lm_tokenizer_vocab_size(tok);
    const char *from = o->init_dir ? "--init" : o->model_config ? "--model-config" : NULL;
    if (o->model_config) {
        DS_TRY(ds_hf_gpt2_config_read(o->model_config, d));
    } else if (!o->init_dir) {
        *d = (ds_gpt2_desc){.vocab_size = V, .n_positions = o->seq_len, .n_embd = o->hidden,
                            .n_layer = o->layers, .n_head = o->heads, .resid_pdrop = o->dropout,
                            .embd_pdrop = o->dropout, .attn_pdrop = o->dropout,
                            .dropout_set = true};
    }
    if (o->dropout_set) {
        d->resid_pdrop = d->embd_pdrop = d->attn_pdrop = o->dropout;
        d->dropout_set = true;
    }
    if (d->vocab_size < V)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "the model's vocab_size %d (%s) is smaller than the %s tokenizer's %d",
                      d->vocab_size, from ? from : "flags", ds_lm_tokenizer_kind(tok), V);
    if (d->n_positions && d->n_positions < o->seq_len)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "--seq-len %d exceeds the model's n_positions %d (%s): a row cannot be "
                      "longer than the position table",
                      o->seq_len, d->n_positions, from ? from : "flags");
    d->max_seq_len = o->seq_len;
    return DS_OK;
}

/* ---- data ---- */
typedef struct data {
    ds_lm_docs *train_docs, *dev_docs;
    ds_lm_tokenizer *tok;
    ds_dataset *train, *dev;
    ds_lm_pack_stats train_ps, dev_ps;
} data;

static ds_status load_data(const lm_opts *o, data *d) {
    ds_lm_read_opts ro = {.format = (ds_lm_format)o->format, .text_field = o->text_field,
                          .column = o->column};
    ds_lm_docs *all = NULL;
    DS_TRY(ds_lm_docs_read(o->data, &ro, &all));
    if (o->eval_data) {
        d->train_docs = all;
        DS_TRY(ds_lm_docs_read(o->eval_data, &ro, &d->dev_docs));
    } else {
        ds_status st = ds_lm_docs_split(all, o->dev_ratio, o->seed, &d->train_docs, &d->dev_docs);
        size_t n = all->n;
        ds_lm_docs_destroy(all);
        DS_TRY(st);
        if (d->train_docs->n == 0)
            return DS_ERR(DS_ERR_DATA, "%s: %zu document%s, none left for training after "
                          "--dev-ratio %g", o->data, n, n == 1 ? "" : "s", o->dev_ratio);
    }
    if (!d->tok && !strcmp(o->tokenizer, "char"))
        DS_TRY(ds_lm_tokenizer_char_build(d->train_docs, o->min_char_count, &d->tok));
    else if (!d->tok)
        DS_TRY(ds_lm_tokenizer_byte(&d->tok));
    DS_TRY(ds_lm_pack(d->train_docs, d->tok, o->seq_len, &d->train, &d->train_ps));
    DS_TRY(ds_lm_pack(d->dev_docs, d->tok, o->seq_len, &d->dev, &d->dev_ps));
    return DS_OK;
}

static void free_data(data *d) {
    ds_dataset_destroy(d->train);
    ds_dataset_destroy(d->dev);
    ds_lm_tokenizer_destroy(d->tok);
    ds_lm_docs_destroy(d->train_docs);
    ds_lm_docs_destroy(d->dev_docs);
}

/* ---- checkpoints ---- */
/* --resume: load the checkpoint latest names, if there is one. */
static ds_status resume(engine_t *e, const lm_opts *o) {
    char tag[256], latest[4200];
    snprintf(latest, sizeof latest, "%s/latest", o->ckpt_dir);
    if (access(latest, F_OK) != 0) {
        if (ds_rank(e) == 0)
            printf("train_lm: --resume: no checkpoint in %s yet (no %s), starting from step 0\n",
                   o->ckpt_dir, latest);
        return DS_OK;
    }
    DS_TRY(ds_checkpoint_latest(o->ckpt_dir, tag, sizeof tag));
    DS_TRY(ds_load_checkpoint(e, o->ckpt_dir, tag, DS_LOAD_ALL));
    if (ds_rank(e) == 0)
        printf("train_lm: resumed from %s/%s at step %lld\n", o->ckpt_dir, tag,
               (long long)ds_global_step(e));
    return DS_OK;
}

/* --save-dir at the start: config.json and the tokenizer, so the checkpoints
 * of a run that never reaches its end can still become a loadable folder
 * (zero_to_fp32 + these files). Rank 0 writes; every rank learns whether it
 * worked, so none goes on alone. */
static ds_status save_description(engine_t *e, const lm_opts *o, const ds_gpt2_desc *desc,
                                  const ds_lm_tokenizer *tok) {
    ds_status st = DS_OK;
    if (ds_rank(e) == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", o->save_dir);
        st = make_dir(o->save_dir);
        /* transformers' generate() stops at eos_token_id: our end of text */
        ds_gpt2_desc hf = *desc;
        hf.token_ids_set = true;
        hf.bos_token_id = hf.eos_token_id = ds_lm_tokenizer_eot_id(tok);
        if (st == DS_OK) st = ds_hf_gpt2_config_write(path, &hf);
        if (st == DS_OK) st = ds_lm_tokenizer_save(tok, o->save_dir);
    }
    int32_t bad = st != DS_OK;
    DS_TRY(ds_all_reduce_host(e, &bad, 1, DS_I32));
    if (bad && ds_rank(e) != 0) return DS_ERR(DS_ERR_IO, "rank 0 could not write --save-dir");
    return st;
}

/* ---- metrics ---- */
static void write_step(FILE *f, const ds_step_info *i, double tps, double sps) {
    fprintf(f, "{\"step\": %lld, \"epoch\": %lld, \"loss\": ", (long long)i->step,
            (long long)i->epoch);
    lm_json_number(f, "%.6f", i->loss);
    fputs(", \"lr\": ", f);
    lm_json_number(f, "%.6e", i->lr);
    fputs(", \"grad_norm\": ", f);
    lm_json_number(f, "%.6f", i->grad_norm);
    fputs(", \"tokens_per_s\": ", f);
    lm_json_number(f, "%.1f", tps);
    fputs(", \"samples_per_s\": ", f);
    lm_json_number(f, "%.3f", sps);
    fputs(", \"loss_scale\": ", f);
    lm_json_number(f, "%g", i->loss_scale);
    fprintf(f, ", \"skipped\": %s}\n", i->skipped ? "true" : "false");
    fflush(f);
}

/* Evaluate dev (when it has rows), print on rank 0 and add a metrics line
 * {"<key>": {...}}. */
static ds_status report_dev(engine_t *e, const data *d, int batch, const char *when, FILE *mf,
                            const char *key) {
    if (d->dev->n == 0) return DS_OK;
    lm_eval_result r;
    DS_TRY(lm_evaluate(e, d->dev, batch, &r));
    if (ds_rank(e) == 0) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "train_lm: dev %s: ", when);
        lm_eval_print(stdout, prefix, &r);
        if (mf) {
            fprintf(mf, "{\"%s\": ", key);
            lm_eval_write_json(mf, &r);
            fputs("}\n", mf);
            fflush(mf);
        }
    }
    return DS_OK;
}

static void print_summary(const lm_opts *o, const data *d, const ds_gpt2_desc *m, int64_t params,
                          int64_t total, int64_t per_epoch, int world) {
    printf("train_lm: train %zu documents -> %zu tokens in %zu rows of %d; dev %zu documents -> "
           "%zu tokens in %zu rows%s\n",
           d->train_ps.docs, d->train_ps.tokens, d->train_ps.rows, o->seq_len, d->dev_ps.docs,
           d->dev_ps.tokens, d->dev_ps.rows, d->dev->n ? "" : " (no dev evaluation)");
    printf("train_lm: tokenizer %s (vocab %d); GPT-2 %d layers x %d, %d heads, vocab %d, %lld "
           "parameters; %lld steps (%lld per epoch), world %d\n",
           ds_lm_tokenizer_kind(d->tok), ds_lm_tokenizer_vocab_size(d->tok), m->n_layer,
           m->n_embd, m->n_head, m->vocab_size, (long long)params, (long long)total,
           (long long)per_epoch, world);
}

/* ---- the run ---- */
static int run(const lm_opts *o) {
    data d = {0};
    ds_gpt2_desc desc = {0};
    ds_model *model = NULL;
    if (o->init_dir && init_model_dir(o, &desc, &d.tok) != DS_OK) {
        free_data(&d);
        return fail("--init");
    }
    if (load_data(o, &d) != DS_OK) {
        free_data(&d);
        return fail("reading data");
    }
    if (o->generate > 0 && o->prompt) {
        /* a prompt the tokenizer refuses fails now, not after training */
        ds_lm_tokens pt = {0};
        ds_status st = ds_lm_tokenizer_encode(d.tok, o->prompt, strlen(o->prompt), &pt);
        ds_lm_tokens_free(&pt);
        if (st != DS_OK) {
            free_data(&d);
            return fail("--prompt");
        }
    }
    if (model_desc(o, d.tok, &desc) != DS_OK || ds_gpt2_create(&desc, &model) != DS_OK) {
        free_data(&d);
        return fail("building the model");
    }
    int64_t n_params = ds_model_num_params(model);
    ds_rank_info ri;
    if (ds_rank_discover(&ri) != DS_OK) {
        free_data(&d);
        ds_model_destroy(model);
        return fail("discovering ranks");
    }
    int world = ri.world > 0 ? ri.world : 1;

    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_path = o->config;
    id.model = model;
    id.train_data = d.train;
    id.seed = o->seed;
    if (o->lr > 0) id.hints.lr = o->lr;
    if (o->weight_decay >= 0) id.hints.weight_decay = o->weight_decay;
    if (o->batch > 0) id.hints.micro_batch = o->batch;
    if (o->warmup >= 0) id.hints.warmup_num_steps = o->warmup;
    /* total_num_steps for "auto": what the run will do. The micro batch is
     * not known before the config is resolved, so read it once here. */
    ds_config pre;
    if (ds_config_parse_file(o->config, &pre, quiet_warn, NULL) != DS_OK) {
        free_data(&d);
        ds_model_destroy(model);
        return fail("reading the config");
    }
    ds_config_hints h = id.hints;
    h.world_size = world;
    h.world_source = ds_rank_source_name(ri.source);
    if (pre.total_num_steps_auto) h.total_num_steps = 1; /* placeholder for this probe only */
    if (ds_config_resolve(&pre, &h) != DS_OK) {
        free_data(&d);
        ds_model_destroy(model);
        return fail("resolving the config");
    }
    int64_t per_rank = (int64_t)((d.train->n + (size_t)world - 1) / (size_t)world);
    if (pre.dataloader_drop_last) per_rank = (int64_t)(d.train->n / (size_t)world);
    int64_t micro = pre.train_micro_batch_size_per_gpu, gas = pre.gradient_accumulation_steps;
    int64_t steps_per_epoch = ((per_rank + micro - 1) / micro) / gas;
    if (steps_per_epoch < 1) steps_per_epoch = 1;
    int64_t total = o->max_steps >= 0 ? o->max_steps : steps_per_epoch * o->epochs;
    /* a scheduler needs at least one step, also when none is taken */
    id.hints.total_num_steps = total > 0 ? total : 1;

    engine_t *e;
    if (ds_initialize(&id, &e) != DS_OK) {
        free_data(&d);
        return fail("ds_initialize");
    }
    int rank = ds_rank(e), rc = 0;
    FILE *mf = NULL;
    if (o->init_dir) {
        ds_hf_load_report rep = {0};
        ds_status st = ds_hf_load_weights(ds_get_model(e), o->init_dir, ds_set_param_cb, e, &rep);
        if (rank == 0) ds_hf_load_report_print(&rep, stdout);
        ds_hf_load_report_free(&rep);
        if (st != DS_OK) {
            rc = fail("loading --init weights");
            goto out;
        }
    }
    if (o->resume && resume(e, o) != DS_OK) {
        rc = fail("--resume");
        goto out;
    }
    int64_t start = ds_global_step(e);
    if (o->save_dir && save_description(e, o, &desc, d.tok) != DS_OK) {
        rc = fail("writing config.json and the tokenizer to --save-dir");
        goto out;
    }
    if (o->metrics && rank == 0 && !(mf = fopen(o->metrics, start > 0 ? "a" : "w"))) {
        fprintf(stderr, "train_lm: cannot write --metrics %s: %s\n", o->metrics, strerror(errno));
        rc = 1;
        goto out;
    }
    if (rank == 0) print_summary(o, &d, &desc, n_params, total, steps_per_epoch, world);
    /* evaluation batches fit the planned micro batch */
    int eb = o->eval_batch > 0 && o->eval_batch < micro ? o->eval_batch : (int)micro;
    if (start == 0 && total > 0 &&
        report_dev(e, &d, eb, "before training", mf, "initial_eval") != DS_OK) {
        rc = fail("evaluating");
        goto out;
    }
    double t0 = now_s(), t_last = t0;
    ds_step_info li;
    ds_last_step_info(e, &li);
    int64_t samples_last = li.samples, samples_start = li.samples;
    char client[64];
    snprintf(client, sizeof client, "{\"total_steps\": %lld}", (long long)total);
    for (int64_t s = start; s < total; s++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            rc = fail("training");
            goto out;
        }
        /* every --save-steps steps, and the last one (so a finished run
         * resumes straight to evaluation) */
        if (o->save_steps > 0 && (info.step % o->save_steps == 0 || s + 1 == total) &&
            ds_save_checkpoint(e, o->ckpt_dir, NULL, client) != DS_OK) {
            rc = fail("saving a checkpoint");
            goto out;
        }
        double t = now_s();
        double sps = (double)(info.samples - samples_last) / (t - t_last);
        t_last = t;
        samples_last = info.samples;
        if (mf) write_step(mf, &info, sps * o->seq_len, sps);
    }
    if (rank == 0 && total > start) {
        double dt = now_s() - t0, sps = (double)(samples_last - samples_start) / dt;
        printf("train_lm: trained %lld steps in %.1f s (%.1f rows/s, %.0f tokens/s)\n",
               (long long)(total - start), dt, sps, sps * o->seq_len);
    }
    char when[64];
    if (total > start) snprintf(when, sizeof when, "after training");
    else snprintf(when, sizeof when, "at step %lld", (long long)start);
    if (report_dev(e, &d, eb, when, mf, "eval") != DS_OK) {
        rc = fail("evaluating");
        goto out;
    }
    if (mf) {
        fclose(mf);
        mf = NULL;
    }
    if (o->save_dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", o->save_dir);
        if (ds_save_weights(e, path) != DS_OK) {
            rc = fail("saving the weights");
            goto out;
        }
        if (rank == 0) printf("train_lm: saved the model to %s\n", o->save_dir);
    }
    if (o->generate > 0) {
        lm_gen_opts g = {.n_new = o->generate, .prompt = o->prompt, .temperature = o->temperature,
                         .top_k = o->top_k, .seed = o->sample_seed, .seq_len = o->seq_len};
        char *text = NULL;
        size_t len = 0;
        if (lm_generate(e, d.tok, &g, &text, &len) != DS_OK) {
            rc = fail("generating");
            goto out;
        }
        if (rank == 0) {
            printf("train_lm: sample (%d tokens, %s", o->generate,
                   o->temperature == 0.0 ? "greedy" : "temperature ");
            if (o->temperature > 0.0)
                printf("%g, top-k %d, seed %llu", o->temperature, o->top_k,
                       (unsigned long long)o->sample_seed);
            printf("):\n%s", o->prompt ? o->prompt : "");
            fwrite(text, 1, len, stdout);
            printf("\n");
        }
        free(text);
    }
out:
    if (mf) fclose(mf);
    ds_finalize(e);
    free_data(&d);
    return rc;
}

int main(int argc, char **argv) {
    lm_opts o;
    int prc = lm_opts_parse(argc, argv, &o);
    if (prc >= 0) return prc; /* --help (0) or a usage error (2) */
    return run(&o);
}
