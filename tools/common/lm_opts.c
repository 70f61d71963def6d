/* train_lm's command line: its own flags, defaults and --help (the
 * manual); the shared flags are parsed by tools/common/trainer_opts.c. */
#include "tools/common/lm_opts.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "text/lm_text.h"

static const char k_usage[] =
    "usage: train_lm --config ds_config.json --data FILE [options]\n"
    "\n"
    "Train a GPT-2-style causal language model on text, data-parallel with ZeRO,\n"
    "report dev loss, perplexity and bits per byte, and optionally sample text.\n"
    "Usually started by engine-run, which passes --config:\n"
    "  engine-run --np 2 --config ds_config.json train_lm --data corpus.txt\n"
    "\n"
    "data:\n"
    "  --data FILE          training text (UTF-8), one of:\n"
    "                         text   plain text; documents are separated by one or\n"
    "                                more blank lines (a document's own line breaks\n"
    "                                are kept)\n"
    "                         lines  plain text, one document per line\n"
    "                         jsonl  JSON lines, the document in field \"text\"\n"
    "                         csv    CSV or TSV with a header (RFC 4180 quoting,\n"
    "                                comma or tab sniffed), the document in column\n"
    "                                text, sentence, 文本 or review\n"
    "  --format F           text | lines | jsonl | csv (default from the suffix:\n"
    "                       .jsonl/.ndjson jsonl, .csv/.tsv csv, otherwise text)\n"
    "  --text-field NAME    the JSON lines field holding the text (default text)\n"
    "  --column NAME        the CSV column holding the text (ASCII case ignored)\n"
    "  --eval-data FILE     dev text, same format rules (else --dev-ratio of --data)\n"
    "  --dev-ratio R        share of DOCUMENTS held out for dev, drawn with --seed\n"
    "                       before packing (default 0.1; 0: no dev evaluation;\n"
    "                       not with --eval-data)\n"
    "  --seq-len N          tokens per training row (default 128)\n"
    "                       Documents become one stream <|endoftext|> doc1\n"
    "                       <|endoftext|> doc2 ... <|endoftext|>, cut into rows of N\n"
    "                       tokens that overlap by one, so every token but the\n"
    "                       first is predicted exactly once; the last row is\n"
    "                       padded (masked out of attention and loss), nothing\n"
    "                       is dropped.\n"
    "tokenizer:\n"
    "  --tokenizer byte|char  byte (default): ids 0..255 are the UTF-8 bytes, 256\n"
    "                       is <|endoftext|>; any language, nothing to build.\n"
    "                       char: one token per character, the vocabulary built\n"
    "                       from the training split ([PAD] [UNK] [CLS] [SEP], then\n"
    "                       characters by descending count); [SEP] ends a document,\n"
    "                       unseen characters become [UNK]\n"
    "  --min-char-count N   char: characters seen fewer times become [UNK]\n"
    "                       (default 1)\n"
    "model (GPT-2: learned positions, pre-LayerNorm blocks, output tied to the\n"
    "token embedding; the vocabulary is the tokenizer's):\n"
    "  --layers N --hidden N --heads N --dropout P\n"
    "                       shape (default 4 layers, hidden 256, 4 heads, dropout\n"
    "                       0.1 on embeddings, attention and residuals); the\n"
    "                       position table has --seq-len rows\n"
    "  --model-config FILE  a Hugging Face GPT-2 config.json instead of the flags\n"
    "                       (its vocab_size must cover the tokenizer's, its\n"
    "                       n_positions --seq-len)\n"
    "  --init DIR           continue from a model folder that train_lm --save-dir\n"
    "                       wrote: config.json, model.safetensors and the tokenizer\n"
    "                       (lm_tokenizer.json, vocab.txt), which replaces\n"
    "                       --tokenizer. A Hugging Face GPT-2 folder without\n"
    "                       lm_tokenizer.json is read with the byte tokenizer when\n"
    "                       its vocab_size is at least 257 or --tokenizer byte is\n"
    "                       given; one with a BPE vocabulary (50257 tokens,\n"
    "                       merges.txt) is refused: train_lm has no BPE tokenizer.\n"
    "                       --seq-len may not exceed the model's n_positions\n"
    "training:\n"
    "  --epochs N           passes over the training rows (default 1)\n"
    TR_USAGE_EPOCH
    "  --max-steps N        stop after N optimizer steps (overrides --epochs; 0:\n"
    "                       no training, only evaluation and --generate)\n"
    "  --seed N             split, shuffling, init and dropout (default 42)\n"
    TR_USAGE_AUTO
    TR_USAGE_EVAL_BATCH("evaluation")
    "evaluation (on dev, before training when starting at step 0, and after):\n"
    "  every dev token is counted exactly once across ranks; reported are the\n"
    "  loss in nats per predicted token, perplexity exp(loss), and bits per byte:\n"
    "  total nats / ln 2 / the UTF-8 bytes of the predicted tokens' text (a byte\n"
    "  token is 1 byte, a character its 1-4 bytes, also when it became [UNK];\n"
    "  <|endoftext|> counts as predicted token with 0 bytes)\n"
    "output:\n"
    "  --metrics FILE       JSON lines: {\"initial_eval\": {...}} when evaluated\n"
    "                       before training, one line per optimizer step (step,\n"
    "                       epoch, loss, lr, grad_norm, tokens_per_s, samples_per_s,\n"
    "                       loss_scale, skipped; tokens are rows x --seq-len), a\n"
    "                       last {\"eval\": {...}}; a number that is not finite is\n"
    "                       written null and its key listed in \"nonfinite\"\n"
    "  --save-dir DIR       config.json (GPT2LMHeadModel), model.safetensors and the\n"
    "                       tokenizer (lm_tokenizer.json, + vocab.txt for char):\n"
    "                       loadable by --init and, for the weights, by Hugging\n"
    "                       Face transformers (GPT2LMHeadModel.from_pretrained)\n"
    TR_USAGE_CHECKPOINTS
    TR_USAGE_HABITS("loss, perplexity")
    "generation (after training; every rank runs it, rank 0 prints):\n"
    "  --generate N         continue --prompt by N tokens, one at a time, feeding\n"
    "                       the model <|endoftext|> + prompt + what it generated,\n"
    "                       the last --seq-len - 1 tokens of it (a row's last\n"
    "                       position never predicts in training)\n"
    "  --prompt TEXT        the start (default: empty, a new document)\n"
    "  --temperature T      0: greedy (the most likely token); > 0: sample from\n"
    "                       softmax(logits / T) (default 1)\n"
    "  --top-k K            sample among the K most likely tokens only (default 0:\n"
    "                       all)\n"
    "  --sample-seed S      the sampling RNG's seed (default: --seed)\n"
    "  Bytes that do not form valid UTF-8 are printed as U+FFFD; <|endoftext|> is\n"
    "  printed as such.\n"
    "\n"
    TR_USAGE_PREEMPTION("train_lm")
    "\n"
    TR_USAGE_EXIT("train_lm");

enum {
    O_FORMAT = TR_OPT_OWN, O_TEXT_FIELD, O_COLUMN, O_SEQ_LEN, O_TOKENIZER, O_GENERATE, O_PROMPT,
    O_TEMPERATURE, O_TOP_K, O_SAMPLE_SEED
};

static const struct option k_own[] = {
    {"format", required_argument, 0, O_FORMAT},
    {"text-field", required_argument, 0, O_TEXT_FIELD},
    {"column", required_argument, 0, O_COLUMN},
    {"seq-len", required_argument, 0, O_SEQ_LEN},
    {"tokenizer", required_argument, 0, O_TOKENIZER},
    {"generate", required_argument, 0, O_GENERATE},
    {"prompt", required_argument, 0, O_PROMPT},
    {"temperature", required_argument, 0, O_TEMPERATURE},
    {"top-k", required_argument, 0, O_TOP_K},
    {"sample-seed", required_argument, 0, O_SAMPLE_SEED},
    {0, 0, 0, 0},
};

static int take(const tr_cli *c, void *user, int id, const char *flag, const char *v) {
    lm_opts *o = user;
    int64_t i;
    int rc = -1;
    switch (id) {
    case O_TEXT_FIELD: o->text_field = v; break;
    case O_COLUMN: o->column = v; break;
    case O_PROMPT: o->prompt = v; break;
    case O_FORMAT:
        o->format = ds_lm_format_parse(v);
        if (o->format <= 0) rc = tr_opt_bad(c, flag, v, "must be text, lines, jsonl or csv");
        break;
    case O_TOKENIZER:
        if (strcmp(v, "byte") && strcmp(v, "char"))
            rc = tr_opt_bad(c, flag, v, "must be byte or char");
        o->tokenizer = v;
        o->tokenizer_set = true;
        break;
    case O_TEMPERATURE: rc = tr_opt_f64(c, flag, v, 0.0, 100.0, &o->temperature); break;
    case O_SAMPLE_SEED:
        rc = tr_opt_i64(c, flag, v, 0, INT64_MAX, &i);
        o->sample_seed = (uint64_t)i;
        o->sample_seed_set = true;
        break;
    case O_GENERATE: rc = tr_opt_int(c, flag, v, 0, 1 << 20, &o->generate); break;
    case O_TOP_K: rc = tr_opt_int(c, flag, v, 0, 1 << 20, &o->top_k); break;
    case O_SEQ_LEN: rc = tr_opt_int(c, flag, v, 2, 1 << 20, &o->seq_len); break;
    }
    return rc;
}

/* DIR holds train_lm's tokenizer description (a folder without one, a
 * plain Hugging Face GPT-2, may take --tokenizer byte: tools/train_lm.c). */
static bool has_tokenizer(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/lm_tokenizer.json", dir);
    return access(p, F_OK) == 0;
}

static int check(const tr_cli *c, void *user) {
    lm_opts *o = user;
    const tr_opts *t = &o->tr;
    if (t->init_dir && o->tokenizer_set && has_tokenizer(t->init_dir))
        return tr_usage_error(c, "--init brings the model's own tokenizer; drop --tokenizer");
    if (t->init_dir && t->model_config)
        return tr_usage_error(c, "--init brings the model's config.json; drop --model-config");
    if (t->hidden % t->heads != 0 && !t->init_dir && !t->model_config) {
        char msg[128];
        snprintf(msg, sizeof msg, "--hidden %d is not a multiple of --heads %d", t->hidden,
                 t->heads);
        return tr_usage_error(c, msg);
    }
    if (o->top_k > 0 && o->temperature == 0.0)
        return tr_usage_error(c, "--top-k needs sampling (--temperature > 0); temperature 0 "
                                 "is greedy");
    if (!o->sample_seed_set) o->sample_seed = t->seed;
    return -1;
}

int lm_opts_parse(int argc, char **argv, lm_opts *o) {
    memset(o, 0, sizeof *o);
    tr_opts_defaults(&o->tr);
    o->tokenizer = "byte";
    o->seq_len = 128;
    o->temperature = 1.0;
    tr_cli cli = {.prog = "train_lm", .usage = k_usage, .own = k_own, .take = take,
                  .check = check, .user = o, .max_steps_min = 0, .hint_required = true,
                  .eval_metrics = "loss,perplexity"};
    return tr_opts_parse(argc, argv, &o->tr, &cli);
}
