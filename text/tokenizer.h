/* Tokenizers: text -> token ids with [CLS] ... [SEP].
 *
 * Two kinds behind one handle:
 *   char       one token per Unicode code point, vocabulary built from the
 *              training texts (ds_char_vocab_build) or loaded from a file:
 *              [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3, then every character seen at
 *              least min_count times, by descending count, ties by ascending
 *              code point (the protocol of the BERT issue).
 *   wordpiece  Hugging Face's BertTokenizer (transformers 5, which runs the
 *              Rust `tokenizers` BertNormalizer + BertPreTokenizer +
 *              WordPiece) on a vocab.txt: special tokens written literally in
 *              the text ([CLS], [SEP], [PAD], [UNK], [MASK], exact case) are
 *              kept as such; the rest is cleaned (NUL, U+FFFD and control
 *              characters dropped, whitespace made ' '), CJK ideographs get
 *              spaces around them, accents are stripped (NFD, then
 *              nonspacing marks dropped) and text lower-cased when asked, then
 *              split on whitespace and around punctuation (ASCII punctuation
 *              and Unicode P*), and each word is cut greedily into the
 *              longest vocabulary pieces ("##" marks a continuation); a word
 *              that cannot be cut, or has more than max_input_chars_per_word
 *              characters, becomes one [UNK]. Checked id for id against
 *              transformers on the committed fixture
 *              (tests/data/wordpiece/, tools/make_tokenizer_fixture.py).
 *              Known differences from the older pure-Python BertTokenizer
 *              (transformers 4 "slow"): that one also drops unassigned code
 *              points and lower-cases a word-final capital sigma to 'ς'; we
 *              follow the current one.
 *
 *     ds_tokenizer *tok;
 *     DS_TRY(ds_wordpiece_load_dir("all-MiniLM-L6-v2", &tok));
 *     int32_t ids[128];
 *     int n;
 *     DS_TRY(ds_tokenizer_encode(tok, "Hello, 世界", 128, ids, &n));
 *     // ids = 101 7592 1010 1745 100 102, n = 6
 *     ds_tokenizer_destroy(tok);
 *
 * A tokenizer is immutable after creation: encode may run from several
 * threads at once. */
#ifndef DS_MODELS_TOKENIZER_H
#define DS_MODELS_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "text/text.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_tokenizer ds_tokenizer;

/* Encode `text` (NUL-terminated UTF-8) into ids[0..*len): [CLS], the text's
 * tokens truncated to max_len - 2, [SEP]. ids must hold max_len entries.
 * Errors: DS_ERR_INVALID_ARG for max_len < 2; DS_ERR_DATA "invalid UTF-8 at
 * byte N" for a text that is not UTF-8; DS_ERR_OOM. */
ds_status ds_tokenizer_encode(const ds_tokenizer *t, const char *text, int max_len, int32_t *ids,
                              int *len);

/* "char" or "wordpiece". */
const char *ds_tokenizer_kind(const ds_tokenizer *t);
int ds_tokenizer_vocab_size(const ds_tokenizer *t);
/* The token of `id` (borrowed, valid while t lives); NULL outside the vocab. */
const char *ds_tokenizer_id_to_token(const ds_tokenizer *t, int32_t id);
/* The id of a token string, -1 when absent. For the char kind, a single
 * character or a special such as "[CLS]". */
int32_t ds_tokenizer_token_to_id(const ds_tokenizer *t, const char *token);
int32_t ds_tokenizer_pad_id(const ds_tokenizer *t);
int32_t ds_tokenizer_unk_id(const ds_tokenizer *t);
int32_t ds_tokenizer_cls_id(const ds_tokenizer *t);
int32_t ds_tokenizer_sep_id(const ds_tokenizer *t);

/* Write the vocabulary, one token per line, line i (from 0) = id i, so the
 * matching load function reads it back to the same ids. In a char vocab a
 * control character (U+0000..U+001F, U+007F) is written as \uXXXX (4 hex
 * digits): a line break inside a line would break the format.
 * Errors: DS_ERR_IO naming the path. */
ds_status ds_tokenizer_save_vocab(const ds_tokenizer *t, const char *path);

/* Frees everything; NULL is fine. */
void ds_tokenizer_destroy(ds_tokenizer *t);

/* ---- char ---------------------------------------------------------------- */

/* Build a char vocabulary from the texts of `train` (min_count >= 1; the BERT
 * protocol uses 2). *out is owned by the caller.
 * Errors: DS_ERR_INVALID_ARG for min_count < 1; DS_ERR_DATA for a text that
 * is not UTF-8 ("path:line: ..."); DS_ERR_OOM. */
ds_status ds_char_vocab_build(const ds_text_set *train, int min_count, ds_tokenizer **out);

/* Load a char vocabulary written by ds_tokenizer_save_vocab: each line one
 * character, a \uXXXX escape, or a bracketed special; [PAD], [UNK], [CLS]
 * and [SEP] must be present.
 * Errors: DS_ERR_IO; DS_ERR_DATA "path:line: ..." for a bad line, a
 * duplicate or a missing special. */
ds_status ds_char_tokenizer_load(const char *vocab_path, ds_tokenizer **out);

/* ---- wordpiece -------------------------------------------------------------- */

typedef struct ds_wordpiece_opts {
    bool do_lower_case;          /* default true */
    int strip_accents;           /* -1: as do_lower_case (default); 0 no; 1 yes */
    bool tokenize_chinese_chars; /* default true */
    int max_input_chars_per_word;/* default 100 */
} ds_wordpiece_opts;

/* BertTokenizer's defaults. */
ds_wordpiece_opts ds_wordpiece_opts_default(void);

/* Load a BERT vocab.txt (one token per line, line i = id i; a trailing '\r'
 * is dropped; a token listed twice keeps its last id, as transformers does).
 * opts NULL means the defaults. [PAD], [UNK], [CLS] and [SEP] must be in the
 * vocabulary. Errors: DS_ERR_IO; DS_ERR_DATA "path: ..." for a missing
 * special or invalid UTF-8 ("path:line"); DS_ERR_INVALID_ARG for
 * max_input_chars_per_word < 1; DS_ERR_OOM. */
ds_status ds_wordpiece_load(const char *vocab_path, const ds_wordpiece_opts *opts,
                            ds_tokenizer **out);

/* Load DIR/vocab.txt with the options of DIR/tokenizer_config.json when
 * that file exists (do_lower_case, strip_accents, tokenize_chinese_chars;
 * other keys ignored), as a Hugging Face model directory holds them.
 * Errors: those of ds_wordpiece_load; DS_ERR_DATA "DIR/tokenizer_config.json:
 * ..." for bad JSON or a key of the wrong type. */
ds_status ds_wordpiece_load_dir(const char *dir, ds_tokenizer **out);

/* The options a WordPiece tokenizer was loaded with; NULL for another kind.
 * Borrowed from the tokenizer. */
const ds_wordpiece_opts *ds_wordpiece_opts_of(const ds_tokenizer *t);

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_TOKENIZER_H */
