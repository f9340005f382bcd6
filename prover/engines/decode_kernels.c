/* The hf engine's CPU kernels for decode steps (prover.engines.decode_kernels): small-batch matrix products,
 * y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for a few rows m of x against a weight w stored as torch keeps
 * an nn.Linear's, (n, k) row major; and, at the end of the file, the rest of a one-token step of a
 * Llama-family layer (prover.engines.fused_step), and the loop over layers that chains them in one call.
 *
 * At one to sixteen rows a decode step is bound by reading the weights from memory, and the library GEMMs
 * torch calls at that shape read them at half the machine's bandwidth or less (bfloat16 worst). These
 * loops stream each weight row once for every row of x, accumulate in float32, and round the result once.
 * Compiled on the machine that runs them (-O3 -march=native by prover.engines.decode_kernels), so the widest
 * instructions it has are the ones used: AVX512-BF16 dot products, else AVX-512 FMAs, else AVX2 FMAs on
 * 8-float vectors (most laptop and AMD Zen 2/3 CPUs). Plain C loops were 3-20x slower than torch (a float sum
 * is not reordered into vectors), so a CPU without AVX2 and FMA gets no build and keeps torch's products.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
#error "these loops need AVX-512, or AVX2 with FMA; without them the engine keeps torch's products"
#endif
#include <immintrin.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch's float -> bfloat16 cast */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#if defined(__AVX512F__)
static inline __attribute__((always_inline)) __m512 widen(__m256i h) { /* 16 bfloat16 -> 16 float */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* A pass takes nb weight rows (read from memory once, used for every row of x) against mb rows of x, in nb x
 * mb float32 accumulators: 1 x 1 or 1 x 2 for one or two rows of x, 4 x 4 for more. At one or two rows a
 * product is a read of the matrix from start to end, one sequential stream that the hardware prefetcher
 * follows best: on an AMD Zen 4 it streamed 1.4-2.3x the GB/s of eight rows at once with the next eight
 * prefetched. At more rows, a pass prefetches the next nb rows while it runs, which measured faster there. */
#define NB 4
#define MB 4
#define NARROW_NB 4 /* weight rows a pass at three rows of x or more */

/* The lane sums of a, b, c and d into out[0..3]: three levels of adds over shuffled halves, a third of the
 * instructions of four separate reductions (at 8 or 16 rows of x they were the loop's largest cost). */
static inline __attribute__((always_inline)) void reduce4(__m512 a, __m512 b, __m512 c, __m512 d, float *out) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
    r = _mm512_add_ps(r, _mm512_shuffle_f32x4(r, r, 0x4E));
    r = _mm512_add_ps(r, _mm512_shuffle_f32x4(r, r, 0xB1));
    _mm_storeu_ps(out, _mm512_castps512_ps128(r));
}

/* The lane sum of a by the tree of adds reduce4 makes of each input, so that a row's product does not depend
 * on the pass it was in (one weight row at one or two rows of x, four at more). */
static inline __attribute__((always_inline)) float reduce1(__m512 a) {
    __m512 t = _mm512_add_ps(a, _mm512_shuffle_ps(a, a, 0x4E));  /* per 128 bits: x0 + x2, x1 + x3 */
    t = _mm512_add_ps(t, _mm512_shuffle_ps(t, t, 0xB1));          /* (x0 + x2) + (x1 + x3) */
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0x4E));       /* 128-bit lanes 0 + 2, 1 + 3 */
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));       /* (0 + 2) + (1 + 3) */
    return _mm512_cvtss_f32(t);
}

static inline __attribute__((always_inline)) void store_sums(__m512 acc[NB][MB], float *out, int nb, int mb) {
    for (int i = 0; i < mb; i++) {
        int j = 0;
        for (; j + 4 <= nb; j += 4) reduce4(acc[j][i], acc[j + 1][i], acc[j + 2][i], acc[j + 3][i], out + i * NB + j);
        for (; j < nb; j++) out[i * NB + j] = reduce1(acc[j][i]);
    }
}

#if defined(__AVX512BF16__)
/* rows n0..n0+nb of w against rows m0..m0+mb of x, 32 bfloat16 pairs a step */
static inline __attribute__((always_inline)) void block_bf16(const uint16_t *w, const uint16_t *x, float *out,
                                                             int64_t k, int64_t ldx, int nb, int mb) {
    __m512 acc[NB][MB];
    for (int j = 0; j < NB; j++)
        for (int i = 0; i < MB; i++) acc[j][i] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 32 <= k; kk += 32) {
        __m512i wv[NB];
        for (int j = 0; j < nb; j++) {
            wv[j] = _mm512_loadu_si512((const void *)(w + j * k + kk));
            if (nb > 1) _mm_prefetch((const char *)(w + (j + nb) * k + kk), _MM_HINT_T0);
        }
        for (int i = 0; i < mb; i++) {
            __m512i xv = _mm512_loadu_si512((const void *)(x + i * ldx + kk));
            for (int j = 0; j < nb; j++)
                acc[j][i] = _mm512_dpbf16_ps(acc[j][i], (__m512bh)wv[j], (__m512bh)xv);
        }
    }
    if (kk < k) { /* the last k % 32 columns, zero filled */
        __mmask32 mask = (__mmask32)((1ull << (k - kk)) - 1);
        __m512i wv[NB];
        for (int j = 0; j < nb; j++) wv[j] = _mm512_maskz_loadu_epi16(mask, (const void *)(w + j * k + kk));
        for (int i = 0; i < mb; i++) {
            __m512i xv = _mm512_maskz_loadu_epi16(mask, (const void *)(x + i * ldx + kk));
            for (int j = 0; j < nb; j++)
                acc[j][i] = _mm512_dpbf16_ps(acc[j][i], (__m512bh)wv[j], (__m512bh)xv);
        }
    }
    store_sums(acc, out, nb, mb);
}
#endif

static inline __attribute__((always_inline)) void block_f32(const float *w, const float *x, float *out, int64_t k,
                                                            int64_t ldx, int nb, int mb) {
    __m512 acc[NB][MB];
    for (int j = 0; j < NB; j++)
        for (int i = 0; i < MB; i++) acc[j][i] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk < k; kk += 16) {
        __mmask16 mask = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
        __m512 wv[NB];
        for (int j = 0; j < nb; j++) {
            wv[j] = _mm512_maskz_loadu_ps(mask, w + j * k + kk);
            if (nb > 1) _mm_prefetch((const char *)(w + (j + nb) * k + kk), _MM_HINT_T0);
        }
        for (int i = 0; i < mb; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + kk);
            for (int j = 0; j < nb; j++) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
        }
    }
    store_sums(acc, out, nb, mb);
}

#if !defined(__AVX512BF16__)

static inline __attribute__((always_inline)) void block_bf16(const uint16_t *w, const uint16_t *x, float *out,
                                                             int64_t k, int64_t ldx, int nb, int mb) {
    __m512 acc[NB][MB];
    for (int j = 0; j < NB; j++)
        for (int i = 0; i < MB; i++) acc[j][i] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k; kk += 16) {
        __mmask16 mask = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
        __m512 wv[NB];
        for (int j = 0; j < nb; j++) {
            wv[j] = widen(_mm256_maskz_loadu_epi16(mask, (const void *)(w + j * k + kk)));
            if (nb > 1) _mm_prefetch((const char *)(w + (j + nb) * k + kk), _MM_HINT_T0);
        }
        for (int i = 0; i < mb; i++) {
            __m512 xv = widen(_mm256_maskz_loadu_epi16(mask, (const void *)(x + i * ldx + kk)));
            for (int j = 0; j < nb; j++) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
        }
    }
    store_sums(acc, out, nb, mb);
}
#endif

#else /* AVX2 and FMA: 8 floats a vector, 16 vector registers */

static inline __attribute__((always_inline)) __m256 widen8(const uint16_t *h) { /* 8 bfloat16 -> 8 float */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)), 16));
}

/* A pass takes nb weight rows against mb rows of x: 1 x 1 or 1 x 2, one sequential stream as with AVX-512
 * (this build on a Zen 4 streamed 1.2-1.7x the GB/s of eight rows with prefetches), 2 x 4 for more rows, which
 * fits the 16 registers. The last k % 8 columns are summed one by one. */
#define NB 2
#define MB 4
#define NARROW_NB 2

/* The lane sum of a by the tree of adds that reduce4 makes of each of its inputs, so that a row's product does
 * not depend on the pass's shape (one weight row at one or two rows of x, two at more), nor so on how many rows
 * share the call: the decode loop drops rows that have stopped. */
static inline __attribute__((always_inline)) float hsum8(__m256 a) {
    __m256 pairs = _mm256_hadd_ps(a, a);
    __m256 quads = _mm256_hadd_ps(pairs, pairs);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1)));
}

static inline __attribute__((always_inline)) void reduce4(__m256 a, __m256 b, __m256 c, __m256 d, float *out) {
    __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d)); /* per 128-bit half: a b c d */
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

static inline __attribute__((always_inline)) void store_sums(__m256 acc[NB][MB], float *out, int nb, int mb) {
    for (int i = 0; i < mb; i++) /* passes of at most NB = 2 weight rows: one lane sum each */
        for (int j = 0; j < nb; j++) out[i * NB + j] = hsum8(acc[j][i]);
}

#define AVX2_BLOCK(name, T, LOADW, LOADX, SCALAR)                                                              \
    static inline __attribute__((always_inline)) void name(const T *w, const T *x, float *out, int64_t k,      \
                                                           int64_t ldx, int nb, int mb) {                      \
        __m256 acc[NB][MB];                                                                                    \
        for (int j = 0; j < NB; j++)                                                                           \
            for (int i = 0; i < MB; i++) acc[j][i] = _mm256_setzero_ps();                                      \
        int64_t kk = 0;                                                                                        \
        for (; kk + 8 <= k; kk += 8) {                                                                         \
            __m256 wv[NB];                                                                                     \
            for (int j = 0; j < nb; j++) {                                                                     \
                wv[j] = LOADW(w + j * k + kk);                                                                 \
                if (nb > 1) _mm_prefetch((const char *)(w + (j + nb) * k + kk), _MM_HINT_T0);                  \
            }                                                                                                  \
            for (int i = 0; i < mb; i++) {                                                                     \
                __m256 xv = LOADX(x + i * ldx + kk);                                                           \
                for (int j = 0; j < nb; j++) acc[j][i] = _mm256_fmadd_ps(wv[j], xv, acc[j][i]);                \
            }                                                                                                  \
        }                                                                                                      \
        store_sums(acc, out, nb, mb);                                                                          \
        for (int i = 0; i < mb; i++)                                                                           \
            for (int j = 0; j < nb; j++)                                                                       \
                for (int64_t t = kk; t < k; t++)                                                               \
                    out[i * NB + j] += SCALAR(w[j * k + t]) * SCALAR(x[i * ldx + t]);                          \
    }

static inline float f32_as_is(float v) { return v; }
AVX2_BLOCK(block_f32, float, _mm256_loadu_ps, _mm256_loadu_ps, f32_as_is)
AVX2_BLOCK(block_bf16, uint16_t, widen8, widen8, bf16_to_f32)
#endif

/* The constant nb and mb of each call below let the compiler unroll every loop over them and keep the
 * accumulators in registers. */
#define DISPATCH(fn, w, x, out, k, ldx, nb, mb)                                                                  \
    switch ((nb) * 8 + (mb)) {                                                                                 \
    case 1 * 8 + 1: fn(w, x, out, k, ldx, 1, 1); break;                                                        \
    case 1 * 8 + 2: fn(w, x, out, k, ldx, 1, 2); break;                                                        \
    case NARROW_NB * 8 + 4: fn(w, x, out, k, ldx, NARROW_NB, 4); break;                                        \
    case NARROW_NB * 8 + 3: fn(w, x, out, k, ldx, NARROW_NB, 3); break;                                        \
    default: fn(w, x, out, k, ldx, nb, mb); break; /* the last weight rows of a matrix, n % nb of them */       \
    }

static inline int rows_per_pass(int64_t m) { return m <= 2 ? 1 : NARROW_NB; }
static inline int x_rows_per_pass(int64_t m) { return m <= 2 ? 2 : 4; }

static inline float bias_at(const void *bias, int bf16, int64_t i) {
    return !bias ? 0.0f : bf16 ? bf16_to_f32(((const uint16_t *)bias)[i]) : ((const float *)bias)[i];
}

/* The product's passes over w and x, each pass's sums plus the bias stored by ``store`` (rounding for bfloat16). */
#define GEMV(block, T, store)                                                                                  \
    float out[NB * MB];                                                                                        \
    int pass_n = rows_per_pass(m), pass_m = x_rows_per_pass(m);                                                \
    for (int64_t n0 = 0; n0 < n; n0 += pass_n) {                                                               \
        int nb = n - n0 < pass_n ? (int)(n - n0) : pass_n;                                                     \
        for (int64_t m0 = 0; m0 < m; m0 += pass_m) {                                                           \
            int mb = m - m0 < pass_m ? (int)(m - m0) : pass_m;                                                 \
            DISPATCH(block, w + n0 * k, x + m0 * ldx, out, k, ldx, nb, mb)                                     \
            for (int i = 0; i < mb; i++)                                                                       \
                for (int j = 0; j < nb; j++)                                                                   \
                    y[(m0 + i) * ldy + n0 + j] = store(out[i * NB + j] + bias_at(bias, sizeof(T) == 2, n0 + j)); \
        }                                                                                                      \
    }                                                                                                          \
    return 0;

static inline float as_is(float v) { return v; }

int prover_gemv_bf16(const uint16_t *w, const uint16_t *x, uint16_t *y, const uint16_t *bias, int64_t n,
                     int64_t k, int64_t m, int64_t ldx, int64_t ldy) {
    GEMV(block_bf16, uint16_t, f32_to_bf16)
}

int prover_gemv_f32(const float *w, const float *x, float *y, const float *bias, int64_t n, int64_t k, int64_t m,
                    int64_t ldx, int64_t ldy) {
    GEMV(block_f32, float, as_is)
}

/* The rest of a one-token step, and the loop over layers: decode_step.c, compiled as part of this file. */
#include "decode_step.c"

/* What the build chose, for the benchmarks' records: 2 AVX512-BF16 dot products, 1 AVX-512 FMAs, 0 AVX2 FMAs. */
int prover_gemv_isa(void) {
#if defined(__AVX512BF16__)
    return 2;
#elif defined(__AVX512F__)
    return 1;
#else
    return 0;
#endif
}
