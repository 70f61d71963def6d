/* train_lm's command line: defaults, parsing, --help (the manual). */
#include "tools/common/lm_opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/lm_text.h"

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
    "                       before packing (default 0.1; 0: no dev evaluation)\n"
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
    "                       --tokenizer. A Hugging Face GPT-2 with its BPE\n"
    "                       vocabulary (50257 tokens) is refused: train_lm has no\n"
    "                       BPE tokenizer. --seq-len may not exceed the model's\n"
    "                       n_positions\n"
    "training:\n"
    "  --epochs N           passes over the training rows (default 1)\n"
    "  --max-steps N        stop after N optimizer steps (overrides --epochs; 0:\n"
    "                       no training, only evaluation and --generate)\n"
    "  --seed N             split, shuffling, init and dropout (default 42)\n"
    "  --lr X --weight-decay X --batch N --warmup N\n"
    "                       values for the config's \"auto\" keys (optimizer lr and\n"
    "                       weight_decay, train_micro_batch_size_per_gpu,\n"
    "                       warmup_num_steps); total_num_steps \"auto\" is the run's\n"
    "  --eval-batch N       rows per evaluation call (default: the micro batch)\n"
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
    "                       written null\n"
    "  --save-dir DIR       config.json (GPT2LMHeadModel), model.safetensors and the\n"
    "                       tokenizer (lm_tokenizer.json, + vocab.txt for char):\n"
    "                       loadable by --init and, for the weights, by Hugging\n"
    "                       Face transformers (GPT2LMHeadModel.from_pretrained)\n"
    "checkpoints:\n"
    "  --save-steps N       save a training checkpoint every N optimizer steps and at\n"
    "                       the end (crash-safe; zero_to_fp32 converts one to\n"
    "                       safetensors)\n"
    "  --ckpt-dir DIR       where checkpoints go (default SAVE_DIR/checkpoints)\n"
    "  --resume             continue from the checkpoint CKPT_DIR/latest names, on\n"
    "                       any number of ranks (from step 0 when there is none)\n"
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
    "Errors print one line (train_lm: what: why) and exit 1; a bad command line\n"
    "exits 2.\n";

enum {
    O_CONFIG = 256, O_DATA, O_FORMAT, O_TEXT_FIELD, O_COLUMN, O_EVAL_DATA, O_DEV_RATIO,
    O_SEQ_LEN, O_TOKENIZER, O_MIN_CHAR, O_LAYERS, O_HIDDEN, O_HEADS, O_DROPOUT,
    O_MODEL_CONFIG, O_INIT, O_EPOCHS, O_MAX_STEPS, O_SEED, O_LR, O_WD, O_BATCH, O_WARMUP,
    O_EVAL_BATCH, O_METRICS, O_SAVE, O_SAVE_STEPS, O_CKPT_DIR, O_RESUME, O_GENERATE,
    O_PROMPT, O_TEMPERATURE, O_TOP_K, O_SAMPLE_SEED, O_HELP
};

static const struct option k_long[] = {
    {"config", required_argument, 0, O_CONFIG},
    {"data", required_argument, 0, O_DATA},
    {"format", required_argument, 0, O_FORMAT},
    {"text-field", required_argument, 0, O_TEXT_FIELD},
    {"column", required_argument, 0, O_COLUMN},
    {"eval-data", required_argument, 0, O_EVAL_DATA},
    {"dev-ratio", required_argument, 0, O_DEV_RATIO},
    {"seq-len", required_argument, 0, O_SEQ_LEN},
    {"tokenizer", required_argument, 0, O_TOKENIZER},
    {"min-char-count", required_argument, 0, O_MIN_CHAR},
    {"layers", required_argument, 0, O_LAYERS},
    {"hidden", required_argument, 0, O_HIDDEN},
    {"heads", required_argument, 0, O_HEADS},
    {"dropout", required_argument, 0, O_DROPOUT},
    {"model-config", required_argument, 0, O_MODEL_CONFIG},
    {"init", required_argument, 0, O_INIT},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"max-steps", required_argument, 0, O_MAX_STEPS},
    {"seed", required_argument, 0, O_SEED},
    {"lr", required_argument, 0, O_LR},
    {"weight-decay", required_argument, 0, O_WD},
    {"batch", required_argument, 0, O_BATCH},
    {"warmup", required_argument, 0, O_WARMUP},
    {"eval-batch", required_argument, 0, O_EVAL_BATCH},
    {"metrics", required_argument, 0, O_METRICS},
    {"save-dir", required_argument, 0, O_SAVE},
    {"save-steps", required_argument, 0, O_SAVE_STEPS},
    {"ckpt-dir", required_argument, 0, O_CKPT_DIR},
    {"resume", no_argument, 0, O_RESUME},
    {"generate", required_argument, 0, O_GENERATE},
    {"prompt", required_argument, 0, O_PROMPT},
    {"temperature", required_argument, 0, O_TEMPERATURE},
    {"top-k", required_argument, 0, O_TOP_K},
    {"sample-seed", required_argument, 0, O_SAMPLE_SEED},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

static int bad(const char *flag, const char *value, const char *want) {
    fprintf(stderr, "train_lm: --%s %s: %s (see train_lm --help)\n", flag, value, want);
    return 2;
}

/* Integer in [lo, hi] or a usage error naming the flag. */
static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        char want[96];
        snprintf(want, sizeof want, "must be an integer in %lld..%lld", (long long)lo,
                 (long long)hi);
        return bad(flag, v, want);
    }
    *out = x;
    return -1;
}

static int parse_f64(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || end == v || !(x >= lo && x <= hi)) {
        char want[96];
        snprintf(want, sizeof want, "must be a number in [%g, %g]", lo, hi);
        return bad(flag, v, want);
    }
    *out = x;
    return -1;
}

static int usage_error(const char *msg) {
    fprintf(stderr, "train_lm: %s (see train_lm --help)\n", msg);
    return 2;
}

int lm_opts_parse(int argc, char **argv, lm_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokenizer = "byte";
    o->min_char_count = 1;
    o->dev_ratio = 0.1;
    o->seq_len = 128;
    o->epochs = 1;
    o->max_steps = -1;
    o->seed = 42;
    o->layers = 4;
    o->hidden = 256;
    o->heads = 4;
    o->dropout = 0.1f;
    o->lr = -1;
    o->weight_decay = -1;
    o->warmup = -1;
    o->temperature = 1.0;
    bool sample_seed_set = false;
    int64_t i;
    double x;
    int rc, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", k_long, NULL)) != -1) {
        const char *v = optarg, *flag = c >= 256 && c <= O_HELP ? k_long[c - 256].name : "?";
        rc = -1;
        switch (c) {
        case O_CONFIG: o->config = v; break;
        case O_DATA: o->data = v; break;
        case O_EVAL_DATA: o->eval_data = v; break;
        case O_TEXT_FIELD: o->text_field = v; break;
        case O_COLUMN: o->column = v; break;
        case O_MODEL_CONFIG: o->model_config = v; break;
        case O_INIT: o->init_dir = v; break;
        case O_METRICS: o->metrics = v; break;
        case O_SAVE: o->save_dir = v; break;
        case O_CKPT_DIR: o->ckpt_dir = v; break;
        case O_RESUME: o->resume = true; break;
        case O_PROMPT: o->prompt = v; break;
        case O_FORMAT:
            o->format = ds_lm_format_parse(v);
            if (o->format <= 0) rc = bad(flag, v, "must be text, lines, jsonl or csv");
            break;
        case O_TOKENIZER:
            if (strcmp(v, "byte") && strcmp(v, "char")) rc = bad(flag, v, "must be byte or char");
            o->tokenizer = v;
            o->tokenizer_set = true;
            break;
        case O_DEV_RATIO: rc = parse_f64(flag, v, 0.0, 0.99, &o->dev_ratio); break;
        case O_DROPOUT:
            rc = parse_f64(flag, v, 0.0, 0.95, &x);
            o->dropout = (float)x;
            o->dropout_set = true;
            break;
        case O_LR: rc = parse_f64(flag, v, 1e-12, 10.0, &o->lr); break;
        case O_WD: rc = parse_f64(flag, v, 0.0, 10.0, &o->weight_decay); break;
        case O_TEMPERATURE: rc = parse_f64(flag, v, 0.0, 100.0, &o->temperature); break;
        case O_MAX_STEPS: rc = parse_i64(flag, v, 0, INT64_MAX, &o->max_steps); break;
        case O_SAVE_STEPS: rc = parse_i64(flag, v, 1, INT64_MAX, &o->save_steps); break;
        case O_SEED:
            rc = parse_i64(flag, v, 0, INT64_MAX, &i);
            o->seed = (uint64_t)i;
            break;
        case O_SAMPLE_SEED:
            rc = parse_i64(flag, v, 0, INT64_MAX, &i);
            o->sample_seed = (uint64_t)i;
            sample_seed_set = true;
            break;
        case O_BATCH: rc = parse_i64(flag, v, 1, 1 << 20, &o->batch); break;
        case O_WARMUP: rc = parse_i64(flag, v, 0, INT64_MAX, &o->warmup); break;
        case O_GENERATE: case O_TOP_K:
            rc = parse_i64(flag, v, 0, 1 << 20, &i);
            if (c == O_GENERATE) o->generate = (int)i;
            else o->top_k = (int)i;
            break;
        case O_EPOCHS: case O_SEQ_LEN: case O_LAYERS: case O_HIDDEN: case O_HEADS:
        case O_EVAL_BATCH: case O_MIN_CHAR:
            rc = parse_i64(flag, v, c == O_SEQ_LEN ? 2 : 1, 1 << 20, &i);
            if (c == O_EPOCHS) o->epochs = (int)i;
            if (c == O_SEQ_LEN) o->seq_len = (int)i;
            if (c == O_LAYERS) o->layers = (int)i;
            if (c == O_HIDDEN) o->hidden = (int)i;
            if (c == O_HEADS) o->heads = (int)i;
            if (c == O_EVAL_BATCH) o->eval_batch = (int)i;
            if (c == O_MIN_CHAR) o->min_char_count = (int)i;
            break;
        case O_HELP: fputs(k_usage, stdout); return 0;
        default:
            fprintf(stderr, "train_lm: unknown or incomplete option %s (see train_lm --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (rc >= 0) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "train_lm: unexpected argument %s (see train_lm --help)\n", argv[optind]);
        return 2;
    }
    if (!o->config) return usage_error("--config is required (engine-run passes it)");
    if (!o->data) return usage_error("--data is required");
    if (o->init_dir && o->tokenizer_set)
        return usage_error("--init brings the model's own tokenizer; drop --tokenizer");
    if (o->init_dir && o->model_config)
        return usage_error("--init brings the model's config.json; drop --model-config");
    if (o->hidden % o->heads != 0 && !o->init_dir && !o->model_config) {
        char msg[128];
        snprintf(msg, sizeof msg, "--hidden %d is not a multiple of --heads %d", o->hidden,
                 o->heads);
        return usage_error(msg);
    }
    if (o->top_k > 0 && o->temperature == 0.0)
        return usage_error("--top-k needs sampling (--temperature > 0); temperature 0 is greedy");
    if (!sample_seed_set) o->sample_seed = o->seed;
    if (!o->eval_batch) o->eval_batch = o->batch > 0 ? (int)o->batch : 0; /* 0: the micro batch */
    if (!o->ckpt_dir && o->save_dir) {
        snprintf(o->ckpt_dir_buf, sizeof o->ckpt_dir_buf, "%s/checkpoints", o->save_dir);
        o->ckpt_dir = o->ckpt_dir_buf;
    }
    if ((o->save_steps > 0 || o->resume) && !o->ckpt_dir) {
        fprintf(stderr, "train_lm: --%s needs --ckpt-dir or --save-dir (see train_lm --help)\n",
                o->resume ? "resume" : "save-steps");
        return 2;
    }
    return -1;
}
