/* A small model with a tied parameter, written against the public module
 * API as a user's would be: the token embedding table is also the output
 * projection (as GPT-2's), so every stage must sum the two uses' gradients,
 * gather the table wherever it is used and store it once.
 *
 *   "embeddings"   embed_pool over input_ids/attention_mask: owns
 *                  embeddings.word_embeddings.weight [V, E]
 *   "hidden"       linear E -> E with tanh
 *   "head"         logits [B, V] = h W^T + b, W the embedding table (tied,
 *                  alias "head.weight"), b = head.bias [V] its own
 *   "loss"         cross-entropy over V classes
 *
 * The untied twin owns head.weight itself, with the same computation: its
 * gradients of the table and of head.weight add up to the tied model's
 * gradient of the table. */
#ifndef DS_TESTS_TIED_MODEL_H
#define DS_TESTS_TIED_MODEL_H

#include <stdbool.h>

#include "engine/core/module.h"

/* vocab V (also the class count), width E, sequence length T. */
ds_status tm_create(int V, int E, int T, bool tied, ds_model **out);

#endif /* DS_TESTS_TIED_MODEL_H */
