/* y = x Wᵀ + b for decoding's products, written for a few rows of x (speed only; see few_rows_linear.py).
 *
 * x [M, K] row-major; W as panels [ceil(N / 16), K, 16]: panel p holds outputs 16p .. 16p + 15, for
 * each k their 16 weights side by side (zero past N); b [N] or NULL; y [M, N] row-major. A panel is
 * read start to end once per MAX_ROWS rows, while those rows' 16 running sums stay in registers:
 * at a few rows the weight streams through at close to memory speed, which is what such a product
 * is bound by. `vec` is the CPU's widest vector (GCC's vector extension): one AVX-512 register holds
 * a panel row's 16 floats, and 8 rows' sums fit in its 32 registers; with AVX2 two registers hold
 * them, and 4 rows' sums fit in 16. */
#include <string.h>

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

/* rows (a constant where it is inlined, so the loops unroll) rows of x against one panel. */
static inline __attribute__((always_inline)) void panel_product(const float *x, long K, const float *panel,
                                                                float sums[][WIDTH], const int rows) {
    vec acc[MAX_ROWS][LANES] = {{{0}}};
    for (long k = 0; k < K; ++k) {
        for (int l = 0; l < LANES; ++l) {
            vec w = load(panel + WIDTH * k + VEC_FLOATS * l);
            for (int r = 0; r < rows; ++r)
                acc[r][l] += x[r * K + k] * w;
        }
    }
    for (int r = 0; r < rows; ++r)
        memcpy(sums[r], acc[r], sizeof acc[r]);
}

void few_rows_linear(const float *x, long M, long K, const float *panels, const float *bias, long N, float *y,
                     int threads) {
    long n_panels = (N + WIDTH - 1) / WIDTH;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (long p = 0; p < n_panels; ++p) {
        const float *panel = panels + p * K * WIDTH;
        long first = p * WIDTH, width = N - first < WIDTH ? N - first : WIDTH;
        for (long r0 = 0; r0 < M; r0 += MAX_ROWS) {
            long rows = M - r0 < MAX_ROWS ? M - r0 : MAX_ROWS;
            const float *xr = x + r0 * K;
            float sums[MAX_ROWS][WIDTH];
            switch (rows) {
#if MAX_ROWS == 8
                case 8: panel_product(xr, K, panel, sums, 8); break;
                case 7: panel_product(xr, K, panel, sums, 7); break;
                case 6: panel_product(xr, K, panel, sums, 6); break;
                case 5: panel_product(xr, K, panel, sums, 5); break;
#endif
                case 4: panel_product(xr, K, panel, sums, 4); break;
                case 3: panel_product(xr, K, panel, sums, 3); break;
                case 2: panel_product(xr, K, panel, sums, 2); break;
                default: panel_product(xr, K, panel, sums, 1); break;
            }
            for (long r = 0; r < rows; ++r) {
                float *out = y + (r0 + r) * N + first;
                for (long j = 0; j < width; ++j)
                    out[j] = sums[r][j] + (bias ? bias[first + j] : 0.0f);
            }
        }
    }
}
