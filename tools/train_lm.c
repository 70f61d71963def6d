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
 * The text side is text/lm_text.h; evaluation and sampling are
 * tools/common/lm_eval.c; the options and --help tools/common/lm_opts.c; the
 * run from ds_initialize to the saved weights (checkpoints, --resume,
 * preemption, --metrics) is shared with train_cls: tools/common/trainer_run.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "hf/hf.h"
#include "text/lm_text.h"
#include "models/models.h"
#include "tools/common/lm_eval.h"
#include "tools/common/train_habits.h"
#include "tools/common/lm_opts.h"
#include "tools/common/trainer_run.h"

/* ---- one failing line, and out ---- */
/* what NULL: the message says it all ("loading --init DIR: ..."). */
static int fail(const char *what) { return tr_fail("train_lm", what); }

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

/* --init DIR: the folder's config and the tokenizer it was trained with
 * (lm_tokenizer.json, which train_lm --save-dir writes). A plain Hugging
 * Face GPT-2 folder (config.json, model.safetensors) has none: its ids are
 * taken as the byte tokenizer's when its vocab_size holds them (257: bytes
 * and <|endoftext|>), or when --tokenizer byte says so. A BPE vocabulary (a
 * Hugging Face GPT-2's 50257, merges.txt) is refused: its ids would mean
 * other text to the byte tokenizer; so is --tokenizer char, whose ids come
 * from the training text. Errors say "loading --init DIR". */
static ds_status init_model_dir(const lm_opts *o, ds_gpt2_desc *desc, ds_lm_tokenizer **tok,
                                bool *plain) {
    const char *dir = o->tr.init_dir;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ds_status st = ds_hf_gpt2_config_read(path, desc);
    *plain = st == DS_OK && !exists(dir, "lm_tokenizer.json");
    int V = 257; /* the byte tokenizer's ids */
    if (*plain && (desc->vocab_size == 50257 || exists(dir, "merges.txt")))
        st = DS_ERR(DS_ERR_UNSUPPORTED,
                    "a GPT-2 with a BPE vocabulary (vocab_size %d%s): train_lm has only the "
                    "byte and char tokenizers, and the model's token ids would mean other "
                    "text to them",
                    desc->vocab_size, exists(dir, "merges.txt") ? ", merges.txt" : "");
    else if (*plain && o->tokenizer_set && strcmp(o->tokenizer, "byte"))
        st = DS_ERR(DS_ERR_INVALID_ARG, "no lm_tokenizer.json, and --tokenizer %s builds its "
                    "ids from the training text, not the model's: only --tokenizer byte "
                    "reads such a folder", o->tokenizer);
    else if (*plain && !o->tokenizer_set && desc->vocab_size < V)
        st = DS_ERR(DS_ERR_DATA, "no lm_tokenizer.json, and vocab_size %d is smaller than the "
                    "byte tokenizer's %d ids, so the tokenizer the model was trained with is "
                    "unknown (train_lm --save-dir writes lm_tokenizer.json)",
                    desc->vocab_size, V);
    if (st == DS_OK) st = *plain ? ds_lm_tokenizer_byte(tok) : ds_lm_tokenizer_load(dir, tok);
    if (st != DS_OK) ds_error_prefix("loading --init %s", dir);
    return st;
}

/* The GPT-2 shape from the flags, --model-config or --init (desc already
 * read), checked against the tokenizer and --seq-len. */
static ds_status model_desc(const lm_opts *o, const ds_lm_tokenizer *tok, ds_gpt2_desc *d) {
    const tr_opts *t = &o->tr;
    int V = ds_lm_tokenizer_vocab_size(tok);
    const char *from = t->init_dir ? "--init" : t->model_config ? "--model-config" : NULL;
    if (t->model_config) {
        ds_status st = ds_hf_gpt2_config_read(t->model_config, d);
        if (st != DS_OK) tr_error_name_flag("--model-config", t->model_config);
        DS_TRY(st);
    } else if (!t->init_dir) {
        *d = (ds_gpt2_desc){.vocab_size = V, .n_positions = o->seq_len, .n_embd = t->hidden,
                            .n_layer = t->layers, .n_head = t->heads, .resid_pdrop = t->dropout,
                            .embd_pdrop = t->dropout, .attn_pdrop = t->dropout,
                            .dropout_set = true};
    }
    if (t->dropout_set) {
        d->resid_pdrop = d->embd_pdrop = d->attn_pdrop = t->dropout;
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
    const lm_opts *o;
    ds_lm_docs *train_docs, *dev_docs; /* freed once packed */
    size_t train_empty, dev_empty;     /* their empty documents, skipped */
    ds_lm_tokenizer *tok;
    ds_dataset *train, *dev;
    ds_lm_pack_stats train_ps, dev_ps;
    ds_gpt2_desc desc; /* the model's, for --save-dir's config.json */
} data;

static ds_status load_data(const lm_opts *o, data *d) {
    const tr_opts *t = &o->tr;
    /* the readers name a missing file themselves, a folder only as "read error" */
    DS_TRY(tr_check_not_folder("--data", t->data));
    if (t->eval_data) DS_TRY(tr_check_not_folder("--eval-data", t->eval_data));
    ds_lm_read_opts ro = {.format = (ds_lm_format)o->format, .text_field = o->text_field,
                          .column = o->column};
    ds_lm_docs *all = NULL;
    ds_status rs = ds_lm_docs_read(t->data, &ro, &all);
    if (rs != DS_OK) { /* the readers name the file: say which option gave it */
        tr_error_name_flag("--data", t->data);
        return rs;
    }
    if (t->eval_data) {
        d->train_docs = all;
        rs = ds_lm_docs_read(t->eval_data, &ro, &d->dev_docs);
        if (rs != DS_OK) tr_error_name_flag("--eval-data", t->eval_data);
        DS_TRY(rs);
    } else {
        ds_status st = ds_lm_docs_split(all, t->dev_ratio, t->seed, &d->train_docs, &d->dev_docs);
        size_t n = all->n;
        ds_lm_docs_destroy(all);
        DS_TRY(st);
        if (d->train_docs->n == 0)
            return DS_ERR(DS_ERR_DATA, "%s: %zu document%s, none left for training after "
                          "--dev-ratio %g", t->data, n, n == 1 ? "" : "s", t->dev_ratio);
    }
    if (!d->tok && !strcmp(o->tokenizer, "char"))
        DS_TRY(ds_lm_tokenizer_char_build(d->train_docs, t->min_char_count, &d->tok));
    else if (!d->tok)
        DS_TRY(ds_lm_tokenizer_byte(&d->tok));
    DS_TRY(ds_lm_pack(d->train_docs, d->tok, o->seq_len, &d->train, &d->train_ps));
    DS_TRY(ds_lm_pack(d->dev_docs, d->tok, o->seq_len, &d->dev, &d->dev_ps));
    /* the rows are windows over the token streams now: the text goes (a
     * byte of it per token kept besides the streams' 5 bytes a token) */
    d->train_empty = d->train_docs->n_empty;
    d->dev_empty = d->dev_docs->n_empty;
    ds_lm_docs_destroy(d->train_docs);
    ds_lm_docs_destroy(d->dev_docs);
    d->train_docs = d->dev_docs = NULL;
    return DS_OK;
}

static void free_data(data *d) {
    ds_dataset_destroy(d->train);
    ds_dataset_destroy(d->dev);
    ds_lm_tokenizer_destroy(d->tok);
    ds_lm_docs_destroy(d->train_docs);
    ds_lm_docs_destroy(d->dev_docs);
}

/* --save-dir at the start (tr_describe_fn): config.json and the tokenizer. */
static ds_status describe(void *user, const char *save_dir) {
    const data *d = user;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", save_dir);
    DS_TRY(make_dir(save_dir));
    /* transformers' generate() stops at eos_token_id: our end of text */
    ds_gpt2_desc hf = d->desc;
    hf.token_ids_set = true;
    hf.bos_token_id = hf.eos_token_id = ds_lm_tokenizer_eot_id(d->tok);
    DS_TRY(ds_hf_gpt2_config_write(path, &hf));
    DS_TRY(ds_lm_tokenizer_save(d->tok, save_dir));
    return DS_OK;
}

/* ---- metrics ---- */
/* A step's members after grad_norm (tr_step_fields_fn); tokens are rows x
 * --seq-len. */
static void step_fields(void *user, tr_jline *l, const ds_step_info *i, double sps) {
    const data *d = user;
    tr_jline_num(l, "tokens_per_s", "%.1f", sps * d->o->seq_len);
    tr_jline_num(l, "samples_per_s", "%.3f", sps);
    tr_jline_num(l, "loss_scale", "%g", i->loss_scale);
    tr_jline_bool(l, "skipped", i->skipped);
}

/* Evaluate dev (when it has rows), print on rank 0 and add a metrics line
 * {"<key>": {...}}. */
static ds_status report_dev(tr_run *r, const data *d, const char *when, const char *key) {
    if (d->dev->n == 0) return DS_OK;
    lm_eval_result res;
    DS_TRY(lm_evaluate(r->e, d->dev, r->eval_batch, &res));
    if (r->rank == 0) {
        tr_eval_result ev = {0}; /* in the monitors too, at this point's samples */
        ds_step_info li;
        ds_last_step_info(r->e, &li);
        tr_eval_put(&ev, "loss", res.loss);
        tr_eval_put(&ev, "perplexity", res.ppl);
        tr_monitor_eval(r->e, "train_lm", &ev, li.samples);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "train_lm: dev %s: ", when);
        lm_eval_print(stdout, prefix, &res);
        if (r->metrics) {
            lm_eval_write_line(r->metrics, key, &res);
            tr_metrics_written(r);
        }
    }
    return DS_OK;
}

/* --eval-steps' evaluation (tr_evaluate_fn): loss and perplexity over dev. */
static ds_status eval_during(void *user, engine_t *e, int batch, tr_eval_result *out) {
    const data *d = user;
    if (d->dev->n == 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "--eval-steps: the dev split has no rows (raise "
                      "--dev-ratio or give --eval-data)");
    lm_eval_result res;
    DS_TRY(lm_evaluate(e, d->dev, batch, &res));
    tr_eval_put(out, "loss", res.loss);
    tr_eval_put(out, "perplexity", res.ppl);
    out->samples = res.rows;
    return DS_OK;
}

/* " (N empty skipped)" for a file that had empty documents, else "" */
static const char *empty_note(size_t n_empty, char *buf, size_t cap) {
    buf[0] = '\0';
    if (n_empty) snprintf(buf, cap, " (%zu empty skipped)", n_empty);
    return buf;
}

static void print_summary(const tr_run *r, const data *d, int64_t params) {
    const ds_gpt2_desc *m = &d->desc;
    char te[48], de[48];
    printf("train_lm: train %zu documents%s -> %zu tokens in %zu rows of %d; dev %zu documents%s "
           "-> %zu tokens in %zu rows%s\n",
           d->train_ps.docs, empty_note(d->train_empty, te, sizeof te), d->train_ps.tokens,
           d->train_ps.rows, d->o->seq_len, d->dev_ps.docs,
           empty_note(d->dev_empty, de, sizeof de), d->dev_ps.tokens, d->dev_ps.rows,
           d->dev->n ? "" : " (no dev evaluation)");
    printf("train_lm: tokenizer %s (vocab %d); GPT-2 %d layers x %d, %d heads, vocab %d, %lld "
           "parameters; %lld steps (%lld per epoch), world %d\n",
           ds_lm_tokenizer_kind(d->tok), ds_lm_tokenizer_vocab_size(d->tok), m->n_layer,
           m->n_embd, m->n_head, m->vocab_size, (long long)params, (long long)r->total,
           (long long)r->per_epoch, r->world);
}

/* ---- sampling ---- */
static int generate(const tr_run *r, const lm_opts *o, const data *d) {
    lm_gen_opts g = {.n_new = o->generate, .prompt = o->prompt, .temperature = o->temperature,
                     .top_k = o->top_k, .seed = o->sample_seed, .seq_len = o->seq_len};
    char *text = NULL;
    size_t len = 0;
    if (lm_generate(r->e, d->tok, &g, &text, &len) != DS_OK) return fail("generating");
    if (r->rank == 0) {
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
    return 0;
}

/* ---- the run ---- */
static int run(const lm_opts *o) {
    data d = {.o = o};
    ds_model *model = NULL;
    bool plain = false; /* --init of a folder without lm_tokenizer.json */
    if (o->tr.init_dir && init_model_dir(o, &d.desc, &d.tok, &plain) != DS_OK) {
        free_data(&d);
        return fail(NULL);
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
    if (model_desc(o, d.tok, &d.desc) != DS_OK || ds_gpt2_create(&d.desc, &model) != DS_OK) {
        free_data(&d);
        return fail("building the model");
    }
    int64_t n_params = ds_model_num_params(model);
    tr_run r;
    int rc = tr_run_init(&r, "train_lm", &o->tr, model, d.train);
    tr_habits habits; /* --eval-steps, --save-best, --early-stopping, --logging-steps */
    tr_habits_init(&habits, &o->tr, eval_during, &d, describe, &d);
    r.habits = &habits;
    if (rc == 0)
        rc = tr_run_prepare(&r, describe, &d,
                            "writing config.json and the tokenizer to --save-dir");
    if (rc == 0 && r.rank == 0) {
        if (plain)
            printf("train_lm: --init %s has no lm_tokenizer.json: its ids are read as the byte "
                   "tokenizer's (vocab_size %d)\n", o->tr.init_dir, d.desc.vocab_size);
        print_summary(&r, &d, n_params);
    }
    if (rc == 0 && r.start == 0 && r.total > 0 &&
        report_dev(&r, &d, "before training", "initial_eval") != DS_OK)
        rc = fail("evaluating");
    if (rc == 0 && r.rank == 0) tr_habits_record(&habits, &r);
    if (rc == 0) rc = tr_habits_resume(&habits, &r);
    if (rc == 0 && !habits.stopped) rc = tr_run_train(&r, step_fields, &d);
    if (rc == 0) tr_habits_finish(&habits, &r);
    if (rc == 0 && r.rank == 0 && r.total > r.start) {
        double sps = (double)r.train_samples / r.train_s;
        printf("train_lm: trained %lld steps in %.1f s (%.1f rows/s, %.0f tokens/s)\n",
               (long long)r.train_steps, r.train_s, sps,
               sps * o->seq_len); /* fewer after an early stop */
    }
    char when[64];
    if (r.total > r.start) snprintf(when, sizeof when, "after training");
    else snprintf(when, sizeof when, "at step %lld", (long long)r.start);
    if (rc == 0 && report_dev(&r, &d, when, "eval") != DS_OK) rc = fail("evaluating");
    if (rc == 0) rc = tr_run_save(&r);
    if (rc == 0 && o->generate > 0) rc = generate(&r, o, &d);
    tr_run_end(&r);
    free_data(&d);
    return rc;
}

int main(int argc, char **argv) {
    lm_opts o;
    int prc = lm_opts_parse(argc, argv, &o);
    if (prc >= 0) return prc; /* --help (0) or a usage error (2) */
    return run(&o);
}
