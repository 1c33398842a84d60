/* y = x Wᵀ + b for a few rows of x: the decoding step's products (speed only; see few_rows_linear.py).
 *
 * x [M, K] row-major, M at most MAX_ROWS per pass; W as panels [ceil(N / 16), K, 16]: panel p holds
 * outputs 16p .. 16p + 15, for each k their 16 weights side by side (zero past N); b [N] or NULL;
 * y [M, N] row-major. A panel is read once, start to end, while the rows' 16 running sums stay in
 * registers: the weight streams through at close to memory speed, which is what a product of a
 * few rows is bound by. GCC's vector extension lowers v16 to the widest vectors the CPU has (one
 * AVX-512 register, two AVX2 ones). */
#include <string.h>

#define MAX_ROWS 8
#define WIDTH 16

typedef float v16 __attribute__((vector_size(WIDTH * sizeof(float))));

static inline __attribute__((always_inline)) v16 load(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);  /* unaligned load */
    return v;
}

/* rows (a constant where it is inlined, so the loops unroll) rows of x against one panel. */
static inline __attribute__((always_inline)) void panel_product(const float *x, long K, const float *panel,
                                                                v16 *sums, const int rows) {
    v16 acc[MAX_ROWS] = {{0}};
    for (long k = 0; k < K; ++k) {
        v16 w = load(panel + WIDTH * k);
        for (int r = 0; r < rows; ++r)
            acc[r] += x[r * K + k] * w;
    }
    for (int r = 0; r < rows; ++r)
        sums[r] = acc[r];
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
            v16 sums[MAX_ROWS];
            switch (rows) {
                case 8: panel_product(xr, K, panel, sums, 8); break;
                case 7: panel_product(xr, K, panel, sums, 7); break;
                case 6: panel_product(xr, K, panel, sums, 6); break;
                case 5: panel_product(xr, K, panel, sums, 5); break;
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
