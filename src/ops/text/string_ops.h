/* Ops on string tensors (core/strings.h): StringNormalizer, StringConcat, StringSplit,
 * RegexFullMatch, Equal on strings, Cast to and from string and ai.onnx.ml LabelEncoder.
 * A string result's size depends on the values, so each op is one evaluation that inference
 * runs once the inputs' data is known (before that it only checks the attributes, so a bad
 * one is a build-time error) and that the CPU kernel runs again to fill the memory inference
 * sized. String ops run on the CPU only. */
#ifndef KN_OPS_STRING_OPS_H
#define KN_OPS_STRING_OPS_H

#include "core/strings.h"
#include "ops/op.h"

/* Computes every output of node n into out[0..n_out), each with data of its own (kn_malloc);
 * kn_string_results_free releases them. The inputs must have data. */
kiln_status kn_string_op_eval(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                              kn_tensor *out);
void kn_string_results_free(int n_out, kn_tensor *out);
/* The infer function of every string op (and of Equal and Cast when strings are involved). */
kiln_status kn_infer_string_op(kn_infer_ctx *c);

/* Per op: check attributes (build time), and evaluate. */
kiln_status kn_regex_check(const kn_node *n);
kiln_status kn_regex_full_match(const kn_node *n, const kn_strings *x, kn_tensor *out);
kiln_status kn_label_encoder_check(const kn_node *n, int32_t in_dtype);
kiln_status kn_label_encoder(const kn_node *n, const kn_tensor *x, kn_tensor *out);
kiln_status kn_string_cast(const kn_node *n, const kn_tensor *x, int32_t to, kn_tensor *out);
/* Whether Cast node n's `to` (or CastLike's input) involves strings. */
bool kn_string_cast_involved(const kn_infer_ctx *c);

/* Opens input i of what as strings, naming it in errors. */
kiln_status kn_string_input(const kn_tensor *t, const char *name, kn_strings *s);

#endif
