/* Text for causal language models: documents read from a file, byte and
 * char tokenizers with an end-of-text token, and the packing of the token
 * stream into fixed-length rows for a GPT-2 (models/models.h, gpt2).
 *
 *     ds_lm_read_opts ro = {0};                      // format from the suffix
 *     ds_lm_docs *all, *train, *dev;
 *     DS_TRY(ds_lm_docs_read("corpus.txt", &ro, &all));
 *     DS_TRY(ds_lm_docs_split(all, 0.1, 42, &train, &dev));
 *     ds_lm_tokenizer *tok;
 *     DS_TRY(ds_lm_tokenizer_byte(&tok));            // or ds_lm_tokenizer_char_build
 *     ds_dataset *d;
 *     ds_lm_pack_stats ps;
 *     DS_TRY(ds_lm_pack(train, tok, 128, &d, &ps));  // rows of 128 tokens
 *
 * ---- documents (text/lm_docs.c) ----------------------------------------
 *
 * Formats (ds_lm_format). DS_LM_AUTO picks by the file's suffix, ASCII case
 * ignored: .jsonl / .ndjson JSONL, .csv / .tsv CSV, anything else TEXT.
 *   TEXT   plain text. Documents are separated by one or more blank lines
 *          (lines that are empty or hold only spaces, tabs and a CR). A
 *          document is its lines joined with '\n', each line as written
 *          but for the CR of a CRLF ending.
 *   LINES  plain text, one document per line that is not blank (as TEXT
 *          with a document break after every line).
 *   JSONL  one JSON object per line that is not blank; its string field
 *          `text_field` (default "text") is the document; other keys are
 *          ignored.
 *   CSV    delimited text with a header, read with text/text.h's rules
 *          (RFC 4180 quoting, comma or tab sniffed from the header, every
 *          record as many fields as the header); each record's `column`
 *          field is a document. The column is matched ASCII case-insensitively;
 *          without `column`: text, sentence, 文本 or review.
 * The file must be UTF-8 without NUL bytes (a leading byte-order mark is
 * skipped). Documents that are empty (JSONL and CSV fields "") are skipped
 * and counted, never an error. Errors: DS_ERR_DATA "path:line: what" (the
 * line where the document or record starts), DS_ERR_IO naming the path.
 *
 * ---- tokenizers (text/lm_tokenizer.c) ----------------------------------
 *
 *   byte   ids 0..255 are the bytes of the UTF-8 text, 256 is <|endoftext|>:
 *          vocabulary 257, any language, nothing to build or store.
 *   char   one token per Unicode code point, the vocabulary built from the
 *          training documents by text/tokenizer_char.c (ds_char_vocab_build:
 *          [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3, then every character seen at
 *          least min_count times, by descending count, ties by code point).
 *          [SEP] is the end-of-text token; a character outside the
 *          vocabulary becomes [UNK]; [PAD] and [CLS] are never produced.
 *
 * Every token carries the number of UTF-8 bytes of the text it stands for:
 * 1 for a byte token, the character's 1..4 for a char token (also for [UNK],
 * which stands for a character that was there), 0 for the end-of-text token.
 * Bits per byte are counted on these (ds_lm_pack's token_bytes).
 *
 * ---- packing (text/lm_pack.c) ------------------------------------------
 *
 * The documents, in their order, become one token stream
 *
 *     EOT d1 EOT d2 EOT ... EOT dn EOT               (EOT: the end-of-text id)
 *
 * (GPT-2's convention: every document follows an end-of-text, so a model
 * starts a document from it, as generation does). The stream is cut into
 * rows of seq_len tokens, row k starting at stream position k (seq_len - 1):
 * consecutive rows share one token, the last of a row being the first of the
 * next. Since the model scores position t on the label of t + 1, every stream
 * token but the first is a target exactly once over all rows: all document
 * tokens and each document's closing EOT. The last row is padded at its end
 * (input_ids EOT, attention_mask 0, labels DS_IGNORE_INDEX); nothing is
 * dropped. Attention runs across document boundaries within a row, as Hugging
 * Face's run_clm packing does.
 *
 * Columns, each [n, seq_len]:
 *   input_ids       int32  token ids
 *   attention_mask  fp32   1 real token, 0 padding
 *   labels          int32  input_ids, DS_IGNORE_INDEX at padding
 *   token_bytes     int32  UTF-8 bytes of each token (above), 0 at padding;
 *                          the model does not read it (the loader skips it)
 *
 * Everything here is deterministic: every rank reads, splits, tokenizes and
 * packs the same way and gets the same rows. */
#ifndef DS_MODELS_LM_TEXT_H
#define DS_MODELS_LM_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/data/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- documents ------------------------------------------------------------ */

typedef enum ds_lm_format {
    DS_LM_AUTO = 0,
    DS_LM_TEXT,  /* documents separated by blank lines */
    DS_LM_LINES, /* one document per line */
    DS_LM_JSONL, /* {"text": ...} per line */
    DS_LM_CSV,   /* a column of a CSV / TSV file with a header */
} ds_lm_format;

/* Zeroed (or a NULL pointer): AUTO format, the default field names. */
typedef struct ds_lm_read_opts {
    ds_lm_format format;
    const char *text_field; /* JSONL key; NULL: "text" */
    const char *column;     /* CSV column; NULL: text | sentence | 文本 | review */
} ds_lm_read_opts;

/* Documents; every array has n entries and is owned by the set. */
typedef struct ds_lm_docs {
    size_t n;
    char **texts;     /* UTF-8, NUL-terminated */
    size_t *lens;     /* bytes of each text */
    int32_t *lines;   /* line in the source file where the document starts */
    char *path;       /* source file, for messages */
    size_t n_empty;   /* empty documents skipped while reading (a split's train
                         part keeps the count of the file, its dev part 0) */
} ds_lm_docs;

/* The format DS_LM_AUTO means for `path`. */
ds_lm_format ds_lm_format_of(const char *path);
/* "text", "lines", "jsonl", "csv" ("auto" for DS_LM_AUTO). */
const char *ds_lm_format_name(ds_lm_format f);
/* The format named `name` (one of the above), or -1. */
int ds_lm_format_parse(const char *name);

/* Read `path` into *out (owned by the caller: ds_lm_docs_destroy). Errors as
 * in the file comment; DS_ERR_DATA "path: no documents ..." when nothing is
 * left. */
ds_status ds_lm_docs_read(const char *path, const ds_lm_read_opts *opts, ds_lm_docs **out);
/* Frees the set; NULL is fine. */
void ds_lm_docs_destroy(ds_lm_docs *d);
/* Total bytes of the texts. */
size_t ds_lm_docs_bytes(const ds_lm_docs *d);

/* Split by document into new sets *train and *dev (owned by the caller).
 * The documents are permuted by ds_permutation(n, seed) (engine/data/
 * dataset.h, reproducible in Python); the first
 *     n_train = floor(n * (1 - dev_ratio) + 1e-9)
 * of the permutation go to train, the rest to dev (text/text.h's
 * ds_text_split rule), and each part keeps the file's order. Either part may
 * be empty (dev_ratio 0 gives an empty dev). Errors: DS_ERR_INVALID_ARG for
 * dev_ratio outside [0, 1); DS_ERR_OOM. */
ds_status ds_lm_docs_split(const ds_lm_docs *all, double dev_ratio, uint64_t seed,
                           ds_lm_docs **train, ds_lm_docs **dev);

/* ---- tokenizers ------------------------------------------------------------- */

typedef struct ds_lm_tokenizer ds_lm_tokenizer;

/* A token sequence with the UTF-8 bytes each token stands for. Zero it
 * before the first push; ds_lm_tokens_free after. */
typedef struct ds_lm_tokens {
    size_t n, cap;
    int32_t *ids;
    uint8_t *bytes; /* 0..4 a token (a character's UTF-8 bytes at most) */
} ds_lm_tokens;

ds_status ds_lm_tokens_push(ds_lm_tokens *s, int32_t id, int32_t bytes);
void ds_lm_tokens_free(ds_lm_tokens *s);

/* The byte tokenizer (vocabulary 257, <|endoftext|> = 256). */
ds_status ds_lm_tokenizer_byte(ds_lm_tokenizer **out);
/* A char tokenizer built from the documents of `train` (min_count >= 1).
 * Errors: DS_ERR_INVALID_ARG for min_count < 1; DS_ERR_DATA "path:line:
 * invalid UTF-8 ..."; DS_ERR_OOM. */
ds_status ds_lm_tokenizer_char_build(const ds_lm_docs *train, int min_count,
                                     ds_lm_tokenizer **out);
void ds_lm_tokenizer_destroy(ds_lm_tokenizer *t);

/* "byte" or "char". */
const char *ds_lm_tokenizer_kind(const ds_lm_tokenizer *t);
int ds_lm_tokenizer_vocab_size(const ds_lm_tokenizer *t);
int32_t ds_lm_tokenizer_eot_id(const ds_lm_tokenizer *t);

/* Append the tokens of text[0..len) (UTF-8) to *out. Errors: DS_ERR_DATA
 * "invalid UTF-8 at byte N" (char kind; the byte kind takes any bytes);
 * DS_ERR_OOM. */
ds_status ds_lm_tokenizer_encode(const ds_lm_tokenizer *t, const char *text, size_t len,
                                 ds_lm_tokens *out);

/* The text of token `id` into buf[0..cap) (cap >= 16 always suffices),
 * returning its length (not NUL-terminated): the byte itself (byte kind;
 * possibly part of a UTF-8 sequence: see ds_lm_utf8_sanitize), the
 * character (char kind), "<|endoftext|>" for the end-of-text token, U+FFFD
 * for [UNK], nothing for [PAD], [CLS] and ids outside the vocabulary. */
size_t ds_lm_tokenizer_decode(const ds_lm_tokenizer *t, int32_t id, char *buf, size_t cap);

/* A model folder's tokenizer description:
 *   DIR/lm_tokenizer.json  {"kind": "byte"|"char", "vocab_size": V,
 *                           "eot_id": E, "eot_token": "<|endoftext|>"|"[SEP]"}
 *   DIR/vocab.txt          char kind only: text/tokenizer.h's vocab file
 * save writes them (DIR must exist); load reads them and checks that they
 * agree. Errors: DS_ERR_IO naming the file (load: "DIR/lm_tokenizer.json:
 * cannot open" when the folder has none); DS_ERR_DATA "file: key: ..." for
 * a description that does not match the tokenizer it names. */
ds_status ds_lm_tokenizer_save(const ds_lm_tokenizer *t, const char *dir);
ds_status ds_lm_tokenizer_load(const char *dir, ds_lm_tokenizer **out);

/* Copy s[0..n) into out as valid UTF-8, each byte that does not begin a
 * valid sequence (text/utf8.h's strict rules) replaced by U+FFFD (3
 * bytes); out holds 3 n bytes. Returns the bytes written. For printing what
 * a byte-level model generates. */
size_t ds_lm_utf8_sanitize(const char *s, size_t n, char *out);

/* ---- packing ---------------------------------------------------------------- */

typedef struct ds_lm_pack_stats {
    size_t docs;      /* documents packed */
    size_t tokens;    /* stream length, end-of-text tokens included */
    size_t targets;   /* tokens predicted over all rows: tokens - 1 */
    size_t bytes;     /* UTF-8 bytes of the targets (their token_bytes) */
    size_t rows;      /* dataset rows */
    size_t padding;   /* padded positions of the last row */
} ds_lm_pack_stats;

/* Tokenize `docs` and pack them into a new dataset of rows of seq_len (file
 * comment), owned by the caller (ds_dataset_destroy). An empty `docs` gives
 * 0 rows. stats may be NULL. Errors: DS_ERR_INVALID_ARG for seq_len < 2;
 * DS_ERR_DATA "path:line: ..." for a document that cannot be encoded;
 * DS_ERR_OOM. */
ds_status ds_lm_pack(const ds_lm_docs *docs, const ds_lm_tokenizer *t, int seq_len,
                     ds_dataset **out, ds_lm_pack_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_LM_TEXT_H */
