/* y = x Wᵀ + b for decoding's products, written for a few rows of x (speed only; see few_rows_linear.py).
 *
 * x [M, K] row-major; W as panels [ceil(N / 16), K, 16]: panel p holds outputs 16p .. 16p + 15, for
 * each k their 16 weights side by side (zero past N); b [N] or NULL; y [M, N] row-major. A panel is
 * read start to end once per MAX_ROWS rows, while those rows' 16 running sums stay in registers:
 * at a few rows the weight streams through at close to memory speed, which is what such a product
 * is bound by. `vec` is the CPU's widest vector (GCC's vector extension): one AVX-512 register holds
 * a panel row's 16 floats, and 8 rows' sums fit in its 32 registers; with AVX2 two registers hold
 * them, and 4 rows' sums fit in 16. (Six rows' 12 sums, tried once on an AMD EPYC Zen 3, one thread,
 * a 3+3 decoder's 19 products, ms against four rows': 6-8 rows 2.3-2.6 / 2.9-3.3, 12 rows 4.1 / 3.5,
 * 16-32 rows level, 64 rows 19.8 / 12.7, 256 rows 66 / 46: no clear gain where the kernel takes the
 * rows on such a CPU, up to 32.)
 *
 * More than MAX_ROWS rows with AVX-512 (`group_product`): four panels at a time, 6 rows a pass, 24
 * sums in registers. A pass over one panel spends a load on every multiply-add (x[r, k] broadcast)
 * besides the panel row's: past a few rows it is bound by loads, not by the weight's reading. Four
 * panels share each broadcast: 4 + 6 loads for 24 multiply-adds. Intel Xeon (family 6, model 167),
 * one thread, the products below from a C loop, ms (one panel / four): the 3+3 decoder's 19, 16 rows
 * 1.31-1.33 / 1.25-1.32, 64 rows 4.9-5.4 / 3.8-4.2, 256 rows 20-22 / 14-16 (MKL's sgemm 15.1-17.5,
 * oneDNN's packed weights 15.8, through torch); the base shape's 37, 16 rows 20.1-20.4 / 16.0,
 * 64 rows 47.6-48.4 / 38.1-40.0, 256 rows 153-162 / 115-128 (MKL 135-139, oneDNN 122). The panels
 * past the last four, and every product on AVX2 (whose 16 registers hold no more sums), take one
 * panel at a time.
 *
 * The first pass over a panel (or four) also asks for the next panel (or four), one cache line per
 * panel and k (__builtin_prefetch, into L1): that pass is the one that reads the weight from memory,
 * and having the next on its way meanwhile measured faster. The base shape's 37 products (6 layers
 * of d 512, d_ff 2048, then a 32,000-row output projection) in turn, this library called from a C
 * loop, one thread, ms for all of them (without / with):
 *   AMD EPYC Zen 3 (AVX2), medians of six runs alternating: 2 rows 20.7 / 19.7, 4 rows 25.3 / 19.5,
 *   8 rows 32.8 / 27.0, 16 rows 47.7 / 43.6, 32 rows 79.3 / 71.7;
 *   Intel Xeon (family 6, model 167, AVX-512), best of ten, three runs alternating: 2 rows
 *   13.8-14.2 / 12.3-12.6, 4 rows 14.8-15.2 / 13.4-14.0, 8 rows 17.9-18.6 / 15.2-15.5; four panels,
 *   16 rows 17.0-17.3 / 15.9-16.0, 64 and 256 rows level. The 3+3 decoder's 19 products (19 MB,
 *   which the caches hold), best of 30: level up to 4 rows (0.67-0.68 ms), 8 rows 0.72-0.73 / 0.70.
 * Not for one row (greedy decoding, a search's first step at batch 1), whose one pass streams the
 * weight at memory speed unaided: Zen 3 17.1 / 18.0 with it (ten runs), the Xeon 10.5-11.0 /
 * 10.4-10.8.
 *
 * few_rows_linear_bf16 (CPUs with AVX-512 bf16 only): the same for bfloat16 x, W, b and y, W as panels
 * [ceil(N / 16), K / 2, 16, 2] (K even): for each pair of k, the 16 outputs' two weights side by
 * side, as the dot-product instruction (vdpbf16ps) reads them. Sums in float32, rounded to bfloat16
 * once, after the bias, as torch's bfloat16 linear does. */
#include <stdint.h>
#include <string.h>
#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

#ifdef __AVX512F__
#define MAX_ROWS 8
#define VEC_FLOATS 16
#else
#define MAX_ROWS 4
#define VEC_FLOATS 8
#endif
#define WIDTH 16
#define LANES (WIDTH / VEC_FLOATS)

typedef float vec __attribute__((vector_size(VEC_FLOATS * sizeof(float))));

static inline __attribute__((always_inline)) vec load(const float *p) {
    vec v;
    memcpy(&v, p, sizeof v);  /* unaligned load */
    return v;
}

/* rows (a constant where it is inlined, so the loops unroll) rows of x against one panel; the panel
 * `next` (or NULL) is fetched into the cache meanwhile, a line a k. */
static inline __attribute__((always_inline)) void panel_product(const float *x, long K, const float *panel,
                                                                float sums[][WIDTH], const int rows,
                                                                const float *next) {
    vec acc[MAX_ROWS][LANES] = {{{0}}};
    for (long k = 0; k < K; ++k) {
        if (next)
            __builtin_prefetch(next + WIDTH * k, 0, 3);
        for (int l = 0; l < LANES; ++l) {
            vec w = load(panel + WIDTH * k + VEC_FLOATS * l);
            for (int r = 0; r < rows; ++r)
                acc[r][l] += x[r * K + k] * w;
        }
    }
    for (int r = 0; r < rows; ++r)
        memcpy(sums[r], acc[r], sizeof acc[r]);
}

/* `rows` rows' sums for the outputs first .. first + width - 1, plus their bias, into y. */
static inline __attribute__((always_inline)) void store_rows(float *y, long N, long first, long width,
                                                             const float *sums, long sums_width, long rows,
                                                             const float *bias) {
    for (long r = 0; r < rows; ++r) {
        float *out = y + r * N + first;
        for (long j = 0; j < width; ++j)
            out[j] = sums[r * sums_width + j] + (bias ? bias[first + j] : 0.0f);
    }
}

#ifdef __AVX512F__
#define GROUP 4  /* panels a pass, past MAX_ROWS rows (the header) */
#define GROUP_ROWS 6

/* rows (a constant where inlined) rows of x against the GROUP panels from `panel` on, each panel row's
 * x[r, k] broadcast once for all of them; the GROUP panels from `next` on (or none) fetched meanwhile. */
static inline __attribute__((always_inline)) void group_product(const float *x, long K, const float *panel,
                                                                float sums[][GROUP * WIDTH], const int rows,
                                                                const float *next) {
    vec acc[GROUP_ROWS][GROUP];  /* zeroed row by row: `= {0}` had GCC 12 memset all of it on the stack */
    for (int r = 0; r < rows; ++r)
        for (int g = 0; g < GROUP; ++g)
            acc[r][g] = (vec){0};
    for (long k = 0; k < K; ++k) {
        if (next)
            for (int g = 0; g < GROUP; ++g)
                __builtin_prefetch(next + g * K * WIDTH + WIDTH * k, 0, 3);
        vec w[GROUP];
        for (int g = 0; g < GROUP; ++g)
            w[g] = load(panel + g * K * WIDTH + WIDTH * k);
        for (int r = 0; r < rows; ++r) {
            float xr = x[r * K + k];
            for (int g = 0; g < GROUP; ++g)
                acc[r][g] += xr * w[g];
        }
    }
    for (int r = 0; r < rows; ++r)
        memcpy(sums[r], acc[r], sizeof acc[r]);
}

/* The panels below `grouped` (a multiple of GROUP), GROUP at a time. */
static void grouped_panels(const float *x, long M, long K, const float *panels, const float *bias, long N,
                           float *y, int threads, long grouped) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (long p = 0; p < grouped; p += GROUP) {
        const float *panel = panels + p * K * WIDTH;
        const float *next = p + GROUP < grouped ? panel + GROUP * K * WIDTH : NULL;
        long first = p * WIDTH, width = N - first < GROUP * WIDTH ? N - first : GROUP * WIDTH;
        for (long r0 = 0; r0 < M; r0 += GROUP_ROWS) {
            long rows = M - r0 < GROUP_ROWS ? M - r0 : GROUP_ROWS;
            const float *xr = x + r0 * K, *fetch = r0 == 0 ? next : NULL;
            float sums[GROUP_ROWS][GROUP * WIDTH];
            switch (rows) {
                case 6: group_product(xr, K, panel, sums, 6, fetch); break;
                case 5: group_product(xr, K, panel, sums, 5, fetch); break;
                case 4: group_product(xr, K, panel, sums, 4, fetch); break;
                case 3: group_product(xr, K, panel, sums, 3, fetch); break;
                case 2: group_product(xr, K, panel, sums, 2, fetch); break;
                default: group_product(xr, K, panel, sums, 1, fetch); break;
            }
            store_rows(y + r0 * N, N, first, width, sums[0], GROUP * WIDTH, rows, bias);
        }
    }
}
#endif

void few_rows_linear(const float *x, long M, long K, const float *panels, const float *bias, long N, float *y,
                     int threads) {
    long n_panels = (N + WIDTH - 1) / WIDTH, grouped = 0;
#ifdef __AVX512F__
    if (M > MAX_ROWS) {
        grouped = n_panels / GROUP * GROUP;
        grouped_panels(x, M, K, panels, bias, N, y, threads, grouped);
    }
#endif
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (long p = grouped; p < n_panels; ++p) {
        const float *panel = panels + p * K * WIDTH;
        const float *next = M > 1 && p + 1 < n_panels ? panel + K * WIDTH : NULL;
        long first = p * WIDTH, width = N - first < WIDTH ? N - first : WIDTH;
        for (long r0 = 0; r0 < M; r0 += MAX_ROWS) {
            long rows = M - r0 < MAX_ROWS ? M - r0 : MAX_ROWS;
            const float *xr = x + r0 * K, *fetch = r0 == 0 ? next : NULL;
            float sums[MAX_ROWS][WIDTH];
            switch (rows) {
#if MAX_ROWS == 8
                case 8: panel_product(xr, K, panel, sums, 8, fetch); break;
                case 7: panel_product(xr, K, panel, sums, 7, fetch); break;
                case 6: panel_product(xr, K, panel, sums, 6, fetch); break;
                case 5: panel_product(xr, K, panel, sums, 5, fetch); break;
#endif
                case 4: panel_product(xr, K, panel, sums, 4, fetch); break;
                case 3: panel_product(xr, K, panel, sums, 3, fetch); break;
                case 2: panel_product(xr, K, panel, sums, 2, fetch); break;
                default: panel_product(xr, K, panel, sums, 1, fetch); break;
            }
            store_rows(y + r0 * N, N, first, width, sums[0], WIDTH, rows, bias);
        }
    }
}

#ifdef __AVX512BF16__
static inline __attribute__((always_inline)) void panel_product_bf16(const uint16_t *x, long K, const uint16_t *panel,
                                                                     __m512 *sums, const int rows) {
    __m512 acc[MAX_ROWS];
    for (int r = 0; r < rows; ++r)
        acc[r] = _mm512_setzero_ps();
    for (long pair = 0; pair < K / 2; ++pair) {
        __m512bh w = (__m512bh)_mm512_loadu_si512(panel + 2 * WIDTH * pair);
        for (int r = 0; r < rows; ++r) {
            int32_t xs;  /* x[r, 2 pair] and x[r, 2 pair + 1], broadcast to every output */
            memcpy(&xs, x + r * K + 2 * pair, sizeof xs);
            acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32(xs), w);
        }
    }
    for (int r = 0; r < rows; ++r)
        sums[r] = acc[r];
}

void few_rows_linear_bf16(const uint16_t *x, long M, long K, const uint16_t *panels, const uint16_t *bias, long N,
                          uint16_t *y, int threads) {
    long n_panels = (N + WIDTH - 1) / WIDTH;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (long p = 0; p < n_panels; ++p) {
        const uint16_t *panel = panels + p * K * WIDTH;
        long first = p * WIDTH, width = N - first < WIDTH ? N - first : WIDTH;
        uint16_t b16[WIDTH] = {0};
        if (bias)
            memcpy(b16, bias + first, width * sizeof(uint16_t));
        /* bfloat16 -> float32: the 16 bits become the high half */
        __m512i widened = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)b16));
        __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
        for (long r0 = 0; r0 < M; r0 += MAX_ROWS) {
            long rows = M - r0 < MAX_ROWS ? M - r0 : MAX_ROWS;
            const uint16_t *xr = x + r0 * K;
            __m512 sums[MAX_ROWS];
            switch (rows) {
                case 8: panel_product_bf16(xr, K, panel, sums, 8); break;
                case 7: panel_product_bf16(xr, K, panel, sums, 7); break;
                case 6: panel_product_bf16(xr, K, panel, sums, 6); break;
                case 5: panel_product_bf16(xr, K, panel, sums, 5); break;
                case 4: panel_product_bf16(xr, K, panel, sums, 4); break;
                case 3: panel_product_bf16(xr, K, panel, sums, 3); break;
                case 2: panel_product_bf16(xr, K, panel, sums, 2); break;
                default: panel_product_bf16(xr, K, panel, sums, 1); break;
            }
            for (long r = 0; r < rows; ++r) {
                __m256bh rounded = _mm512_cvtneps_pbh(_mm512_add_ps(sums[r], b));  /* round to nearest even */
                uint16_t out[WIDTH];
                memcpy(out, &rounded, sizeof out);
                memcpy(y + (r0 + r) * N + first, out, width * sizeof(uint16_t));
            }
        }
    }
}
#endif
