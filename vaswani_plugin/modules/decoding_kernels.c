/* The lean beam search's decoding step between its products (speed only; see decoding_kernels.py).
 *
 * grouped_attention: Eq. 1 for the g query rows of each of N sentences against that sentence's keys
 * and values, every head in one call. Query row r = n g + j, head h, reads q[r q_row + h dk .. + dk];
 * its keys are k[n k_sentence + h k_head + s dk .. + dk] for s < S (values likewise); the bias,
 * added to the scaled scores where given (0 or -inf: the masks), is bias[(n H + h) b_head + j b_row + s].
 * out [N g, H dk] row-major. Each score is (q . k) scale, then + bias; softmax subtracts the row's
 * maximum, exponentiates, and divides by the sum; out is the weights' sum of the values, s in order.
 * A key whose bias is -inf is passed over: its weight would be exp(-inf) = 0, so the sums are the same
 * (at beam 4 the self-attention hides three keys in four: the other hypotheses' columns).
 * A row with every key hidden would be 0/0: the decoder never makes one (every source sentence has
 * a token, and every hypothesis sees itself).
 *
 * add_layer_norm: x <- LayerNorm(x + a) gamma + beta row by row (§3.1's post-LN residual block, in
 * eval: no dropout), x and a [rows, d] row-major; mean and variance over the row in double, the
 * variance biased, as torch's layer_norm takes it.
 *
 * decoder_layer: one post-LN decoder layer (§3.1-§3.3, eval) for the step's newest token of every row,
 * x [N g, d] updated in place: the same products (few_rows_linear.c, built into this library), the
 * same grouped_attention and add_layer_norm, in the order decoding_step.py calls them one by one,
 * with the step's keys and values written into the self-attention cache between. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

void few_rows_linear(const float *x, long M, long K, const float *panels, const float *bias, long N, float *y,
                     int threads);

/* The attention's vectors: the CPU's widest (GCC's vector extension, as in few_rows_linear.c). */
#ifdef __AVX512F__
#define VEC_FLOATS 16
#else
#define VEC_FLOATS 8
#endif
typedef float vec __attribute__((vector_size(VEC_FLOATS * sizeof(float))));
typedef float eight __attribute__((vector_size(8 * sizeof(float))));
typedef float four __attribute__((vector_size(4 * sizeof(float))));
#define OUT_VECS 4  /* output vectors summed at once by weighted_values: d_k 64 on AVX-512 */

static inline __attribute__((always_inline)) vec load(const float *p) {
    vec v;
    memcpy(&v, p, sizeof v);  /* unaligned */
    return v;
}

/* a . b over n floats: two vector sums, whose lanes are then added pairwise. `omp simd reduction`
 * had GCC 12 store the lanes on the stack and add them one by one, 15 dependent additions a key
 * (with the output's sums below, about half of the attention's perf samples on an AMD EPYC Zen 4). */
static inline __attribute__((always_inline)) float dot(const float *a, const float *b, long n) {
    vec s0 = {0}, s1 = {0};
    long i = 0;
    for (; i + 2 * VEC_FLOATS <= n; i += 2 * VEC_FLOATS) {
        s0 += load(a + i) * load(b + i);
        s1 += load(a + i + VEC_FLOATS) * load(b + i + VEC_FLOATS);
    }
    if (i + VEC_FLOATS <= n) {
        s0 += load(a + i) * load(b + i);
        i += VEC_FLOATS;
    }
    s0 += s1;
#if defined(__clang__) || __GNUC__ >= 12  /* __builtin_shufflevector: the halves stay in registers */
#if VEC_FLOATS == 16
    eight halves = __builtin_shufflevector(s0, s0, 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(s0, s0, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    eight halves = s0;
#endif
    four quarters = __builtin_shufflevector(halves, halves, 0, 1, 2, 3) +
                    __builtin_shufflevector(halves, halves, 4, 5, 6, 7);
#else  /* older GCC: the same additions, the quarters through memory (attention 4-6% slower on a Zen 4) */
    four q[VEC_FLOATS / 4];
    memcpy(q, &s0, sizeof q);
#if VEC_FLOATS == 16
    four quarters = (q[0] + q[2]) + (q[1] + q[3]);
#else
    four quarters = q[0] + q[1];
#endif
#endif
    float sum = (quarters[0] + quarters[2]) + (quarters[1] + quarters[3]);
    for (; i < n; ++i)
        sum += a[i] * b[i];
    return sum;
}

/* o[0 .. vecs VEC_FLOATS) (vecs <= OUT_VECS) = the sum over s of w[s] / total x values[s k_row + ..], s in order, the sums
 * held in registers while the values stream past (summed in `o` itself, each key's additions waited
 * for the last key's stores). A zero weight (a hidden key, or one too small to count) is passed over:
 * adding 0 x value changes nothing. */
static inline __attribute__((always_inline)) void weighted_values(const float *w, float total, const float *values,
                                                                  long k_row, long S, float *o, const int vecs) {
    vec acc[OUT_VECS];
    for (int u = 0; u < vecs; ++u)
        acc[u] = (vec){0};
    for (long s = 0; s < S; ++s) {
        if (w[s] == 0.0f)
            continue;
        float weight = w[s] / total;
        for (int u = 0; u < vecs; ++u)
            acc[u] += weight * load(values + s * k_row + u * VEC_FLOATS);
    }
    memcpy(o, acc, vecs * sizeof(vec));
}

/* grouped_attention with keys (and values) k_row floats apart, and `visible` (or NULL) hiding more
 * keys: query row r sees key s only where visible[r visible_row + s] is nonzero (decoder_layer's
 * self-attention: BeamAncestry's booleans, in place of a bias made from them every step). */
static void attention(const float *q, long q_row, const float *k, const float *v, long k_sentence, long k_head,
                      long k_row, long S, const float *bias, long b_head, long b_row, const unsigned char *visible,
                      long visible_row, long N, long g, long H, long dk, float scale, float *out, int threads) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *w = malloc(S * sizeof(float));
#pragma omp for schedule(static)
        for (long nh = 0; nh < N * H; ++nh) {
            long n = nh / H, h = nh % H;
            const float *keys = k + n * k_sentence + h * k_head, *values = v + n * k_sentence + h * k_head;
            for (long j = 0; j < g; ++j) {
                const float *qr = q + (n * g + j) * q_row + h * dk;
                const float *b = bias ? bias + nh * b_head + j * b_row : NULL;
                const unsigned char *seen = visible ? visible + (n * g + j) * visible_row : NULL;
                float top = -INFINITY;
                for (long s = 0; s < S; ++s) {
                    if ((b && b[s] == -INFINITY) || (seen && !seen[s])) {  /* hidden: no dot product */
                        w[s] = -INFINITY;
                        continue;
                    }
                    float score = dot(qr, keys + s * k_row, dk) * scale;
                    if (b)
                        score += b[s];
                    w[s] = score;
                    top = score > top ? score : top;
                }
                float sum = 0.0f;
                for (long s = 0; s < S; ++s) {
                    /* a hidden key's weight is exp(-inf) = 0, without the call (at beam 4, 3 keys in 4) */
                    w[s] = w[s] == -INFINITY ? 0.0f : expf(w[s] - top);
                    sum += w[s];
                }
                float *o = out + (n * g + j) * H * dk + h * dk;
                long i = 0;
                for (; i + OUT_VECS * VEC_FLOATS <= dk; i += OUT_VECS * VEC_FLOATS)
                    weighted_values(w, sum, values + i, k_row, S, o + i, OUT_VECS);
                for (; i + VEC_FLOATS <= dk; i += VEC_FLOATS)
                    weighted_values(w, sum, values + i, k_row, S, o + i, 1);
                for (; i < dk; ++i) {
                    o[i] = 0.0f;
                    for (long s = 0; s < S; ++s)
                        if (w[s] != 0.0f)
                            o[i] += w[s] / sum * values[s * k_row + i];
                }
            }
        }
        free(w);
    }
}

void grouped_attention(const float *q, long q_row, const float *k, const float *v, long k_sentence, long k_head,
                       long S, const float *bias, long b_head, long b_row, long N, long g, long H, long dk,
                       float scale, float *out, int threads) {
    attention(q, q_row, k, v, k_sentence, k_head, dk, S, bias, b_head, b_row, NULL, 0, N, g, H, dk, scale, out,
              threads);
}

void add_layer_norm(float *x, const float *a, const float *gamma, const float *beta, long rows, long d, float eps,
                    int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && rows > 1)
    for (long r = 0; r < rows; ++r) {
        float *xr = x + r * d;
        const float *ar = a + r * d;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (long i = 0; i < d; ++i) {
            xr[i] += ar[i];
            sum += xr[i];
        }
        double mean = sum / d, squares = 0.0;
#pragma omp simd reduction(+ : squares)
        for (long i = 0; i < d; ++i)
            squares += (xr[i] - mean) * (xr[i] - mean);
        float m = (float)mean, rstd = (float)(1.0 / sqrt(squares / d + eps));
#pragma omp simd
        for (long i = 0; i < d; ++i)
            xr[i] = (xr[i] - m) * rstd * gamma[i] + beta[i];
    }
}

/* A layer's parameters, fixed for a search: each product's weight as few_rows_linear's panels and its
 * bias (or NULL); its residual blocks' LayerNorm gain, bias and eps (an encoder layer has no
 * cross-attention and two blocks). */
struct layer_weights {
    const float *qkv, *qkv_bias, *self_out, *self_out_bias, *cross_q, *cross_q_bias, *cross_out, *cross_out_bias;
    const float *fc1, *fc1_bias, *fc2, *fc2_bias;
    const float *gain[3], *beta[3];
    float eps[3];
    long d, heads, d_ff;
};

/* The position-wise feed-forward (Eq. 2) and its residual block's close with LayerNorm `norm`:
 * x <- LayerNorm(x + max(0, x W1 + b1) W2 + b2); hidden [rows, d_ff] and out [rows, d] scratch. */
static void feed_forward_block(const struct layer_weights *w, float *x, long rows, float *hidden, float *out,
                               int norm, int threads) {
    few_rows_linear(x, rows, w->d, w->fc1, w->fc1_bias, w->d_ff, hidden, threads);
    for (long i = 0; i < rows * w->d_ff; ++i)
        hidden[i] = hidden[i] < 0.0f ? 0.0f : hidden[i];  /* NaN stays NaN, as in torch's relu */
    few_rows_linear(hidden, rows, w->d_ff, w->fc2, w->fc2_bias, w->d, out, threads);
    add_layer_norm(x, out, w->gain[norm], w->beta[norm], rows, w->d, w->eps[norm], threads);
}

/* x [N g, d]; work: room for [N g, 3 d + 2 d + d_ff] floats. Self-attention cache: K and V with
 * a sentence every cache_sentence floats and a head every cache_head, a key every d_k: this step's
 * keys and values go to columns column .. column + g - 1, then the queries attend over the first
 * `filled` columns, row r seeing column s where visible[r visible_row + s]. Encoder-decoder: memory
 * K and V likewise, memory_length keys, memory_bias (one per sentence and head, shared by its rows;
 * NULL: no padding). */
void decoder_layer(const struct layer_weights *w, float *x, long N, long g, float *work, float *cache_k,
                   float *cache_v, long cache_sentence, long cache_head, long column, long filled,
                   const unsigned char *visible, long visible_row, const float *memory_k,
                   const float *memory_v, long memory_sentence, long memory_head, long memory_length,
                   const float *memory_bias, long memory_b_head, float scale, int threads) {
    long rows = N * g, d = w->d, H = w->heads, dk = d / H;
    float *qkv = work, *attended = qkv + rows * 3 * d, *projected = attended + rows * d,
          *hidden = projected + rows * d;  /* [rows, 3d], [rows, d], [rows, d], [rows, d_ff] */
    /* masked self-attention: this step's K, V join the sentence's; each query sees its ancestors' */
    few_rows_linear(x, rows, d, w->qkv, w->qkv_bias, 3 * d, qkv, threads);
    for (long r = 0; r < rows; ++r) {
        long at = (r / g) * cache_sentence + (column + r % g) * dk;
        for (long h = 0; h < H; ++h) {
            memcpy(cache_k + at + h * cache_head, qkv + r * 3 * d + d + h * dk, dk * sizeof(float));
            memcpy(cache_v + at + h * cache_head, qkv + r * 3 * d + 2 * d + h * dk, dk * sizeof(float));
        }
    }
    attention(qkv, 3 * d, cache_k, cache_v, cache_sentence, cache_head, dk, filled, NULL, 0, 0, visible, visible_row,
              N, g, H, dk, scale, attended, threads);
    few_rows_linear(attended, rows, d, w->self_out, w->self_out_bias, d, projected, threads);
    add_layer_norm(x, projected, w->gain[0], w->beta[0], rows, d, w->eps[0], threads);
    /* encoder-decoder attention (the queries in `projected` until the out-projection overwrites them) */
    few_rows_linear(x, rows, d, w->cross_q, w->cross_q_bias, d, projected, threads);
    grouped_attention(projected, d, memory_k, memory_v, memory_sentence, memory_head, memory_length, memory_bias,
                      memory_b_head, 0, N, g, H, dk, scale, attended, threads);
    few_rows_linear(attended, rows, d, w->cross_out, w->cross_out_bias, d, projected, threads);
    add_layer_norm(x, projected, w->gain[1], w->beta[1], rows, d, w->eps[1], threads);
    /* position-wise feed-forward (Eq. 2) */
    feed_forward_block(w, x, rows, hidden, projected, 2, threads);
}

/* encoder_layer: one post-LN encoder layer (§3.1-§3.3, eval) over N sentences of S positions, x [N S, d]
 * updated in place: the QKV product, every position's queries against its sentence's keys and values
 * where the product left them (bias: -inf at the padding, one [S] per sentence and head, b_head
 * apart; NULL: none), and the blocks' closes as in decoder_layer; the cross-attention's weights and
 * the third LayerNorm are not read (the feed-forward's close takes gain[1], beta[1], eps[1]). work:
 * room for [N S, 5 d + d_ff] floats. */
void encoder_layer(const struct layer_weights *w, float *x, long N, long S, float *work, const float *bias,
                   long b_head, float scale, int threads) {
    long rows = N * S, d = w->d, H = w->heads, dk = d / H;
    float *qkv = work, *attended = qkv + rows * 3 * d, *projected = attended + rows * d,
          *hidden = projected + rows * d;
    few_rows_linear(x, rows, d, w->qkv, w->qkv_bias, 3 * d, qkv, threads);
    attention(qkv, 3 * d, qkv + d, qkv + 2 * d, S * 3 * d, dk, 3 * d, S, bias, b_head, 0, NULL, 0, N, S, H, dk, scale,
              attended, threads);
    few_rows_linear(attended, rows, d, w->self_out, w->self_out_bias, d, projected, threads);
    add_layer_norm(x, projected, w->gain[0], w->beta[0], rows, d, w->eps[0], threads);
    feed_forward_block(w, x, rows, hidden, projected, 1, threads);
}

/* top_candidates: for each of `live` sentences, the c best of its g rows' log-probabilities plus the
 * row's score (lprobs [live g, V] row-major; row r's score at offsets[r offset_stride], or NULL: 0),
 * as torch.topk over the sentence's g V sums: values best first, indices into g V, equal values in
 * index order. Each sum is one float addition, as torch's lprobs + offsets. A chunk of 16 sums none
 * of which beats the c-th best so far is passed over after one vector maximum. c <= g V. */
#define CHUNK 16

static inline void insert(float *best, long *at, long c, float value, long index) {
    long i = c - 1;  /* best[c - 1] < value: it leaves; the new one goes after every value >= it */
    while (i > 0 && best[i - 1] < value) {
        best[i] = best[i - 1];
        at[i] = at[i - 1];
        --i;
    }
    best[i] = value;
    at[i] = index;
}

void top_candidates(const float *lprobs, const float *offsets, long offset_stride, long live, long g, long V, long c,
                    float *values, long *indices, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && live > 1)
    for (long n = 0; n < live; ++n) {
        float *best = values + n * c;
        long *at = indices + n * c, filled = 0;
        for (long j = 0; j < g; ++j) {
            const float *row = lprobs + (n * g + j) * V;
            float offset = offsets ? offsets[(n * g + j) * offset_stride] : 0.0f;
            long t = 0;
            for (; t < V && filled < c; ++t) {  /* the first c sums, kept sorted (index order on ties) */
                best[filled] = -INFINITY;
                at[filled] = 0;
                ++filled;
                insert(best, at, filled, offsets ? row[t] + offset : row[t], j * V + t);
            }
            for (; t < V; t += CHUNK) {
                long end = t + CHUNK < V ? t + CHUNK : V;
                float top = -INFINITY;
#pragma omp simd reduction(max : top)
                for (long u = t; u < end; ++u) {
                    float sum = offsets ? row[u] + offset : row[u];
                    top = sum > top ? sum : top;
                }
                if (!(top > best[c - 1]))
                    continue;
                for (long u = t; u < end; ++u) {
                    float sum = offsets ? row[u] + offset : row[u];
                    if (sum > best[c - 1])
                        insert(best, at, c, sum, j * V + u);
                }
            }
        }
    }
}

/* beam_advance: the beam search's bookkeeping after a step's candidates, as models/beam_search.py's
 * `_advance` does it in torch operations (fairseq 0.12's SequenceGenerator): for each of `live`
 * sentences, its C candidates (cand_scores best first; cand: indices into its group rows' g V
 * log-probabilities) end a hypothesis where the token is EOS and the score is not -inf. Of the first
 * k candidates, those that end are finished, in order, while the sentence has fewer than k finished
 * (found, counted on); their live sentence, row and score go to ended_* (n_ended of them). Unless
 * `last`, a sentence with k finished leaves; each other goes on (its live index to keep, found
 * moved along) with its first k candidates that do not end: new row j of kept sentence m is
 * m k + j, whose parent row, tokens (the parent's first step + 1, then the candidate's token) and
 * cumulative scores (the parent's first step, then the candidate's) are written to parents,
 * new_tokens and new_scores (rows token_stride and score_stride apart). Returns the number of
 * sentences that go on (0 at the last step). */
static inline int ends_hypothesis(long candidate, float score, long V, long eos) {
    return candidate % V == eos && score != -INFINITY;
}

long beam_advance(const float *cand_scores, const long *cand, long live, long C, long g, long V, long k, long eos,
                  long *found, int last, long *ended_live, long *ended_row, float *ended_score, long *n_ended,
                  long *keep, long *parents, const long *tokens, long *new_tokens, long token_stride,
                  const float *scores, float *new_scores, long score_stride, long step) {
    long ended = 0, kept = 0, first = k < C ? k : C;
    for (long n = 0; n < live; ++n) {
        const float *value = cand_scores + n * C;
        const long *at = cand + n * C;
        long before = found[n], earlier = 0;  /* earlier: ends among the first k before this one */
        for (long i = 0; i < first; ++i) {
            if (!ends_hypothesis(at[i], value[i], V, eos))
                continue;
            if (before + earlier < k) {
                ended_live[ended] = n;
                ended_row[ended] = n * g + at[i] / V;
                ended_score[ended] = value[i];
                ++ended;
                ++found[n];
            }
            ++earlier;
        }
        if (last || found[n] == k)
            continue;
        found[kept] = found[n];  /* kept <= n: the sentences still to read are not overwritten */
        keep[kept] = n;
        for (long i = 0, j = 0; i < C && j < k; ++i) {
            if (ends_hypothesis(at[i], value[i], V, eos))
                continue;
            long row = kept * k + j++, parent = n * g + at[i] / V;
            parents[row] = parent;
            memcpy(new_tokens + row * token_stride, tokens + parent * token_stride, (step + 1) * sizeof(long));
            new_tokens[row * token_stride + step + 1] = at[i] % V;
            memcpy(new_scores + row * score_stride, scores + parent * score_stride, step * sizeof(float));
            new_scores[row * score_stride + step] = value[i];
        }
        ++kept;
    }
    *n_ended = ended;
    return last ? 0 : kept;
}

/* compact_sentences: the blocks of sentences keep[0] < keep[1] < ... < keep[m - 1] of a tensor whose
 * sentences are `block` floats apart move to blocks 0 .. m - 1, in place: of each block, `runs` runs
 * of `run` floats, `stride` apart (a cache's heads, their filled columns). A block only moves down,
 * onto one already read, so the order of the moves keeps every source intact. */
void compact_sentences(float *t, long block, long runs, long stride, long run, const long *keep, long m) {
    for (long i = 0; i < m; ++i) {
        if (keep[i] == i)
            continue;
        for (long r = 0; r < runs; ++r)
            memmove(t + i * block + r * stride, t + keep[i] * block + r * stride, run * sizeof(float));
    }
}

/* follow_ancestry: attention_cache.BeamAncestry.follow from one buffer into another. Row i of `to`
 * takes the first `length` steps of row parents[i] of `from` (booleans; rows `row` apart, a step
 * `beam`), then at step `length` its own slot i % group alone. */
void follow_ancestry(const unsigned char *from, unsigned char *to, long row, long beam, long length,
                     const long *parents, long rows, long group) {
    for (long i = 0; i < rows; ++i) {
        unsigned char *mine = to + i * row;
        memcpy(mine, from + parents[i] * row, length * beam);
        memset(mine + length * beam, 0, beam);
        mine[length * beam + i % group] = 1;
    }
}
