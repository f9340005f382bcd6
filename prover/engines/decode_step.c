/* The rest of a one-token decode step of a Llama-family layer (prover.engines.fused_step) beside the products
 * of decode_kernels.c, which includes this file (one compile, one library): RMSNorm with the residual add, the
 * rotary embedding with the cache write, attention over the reserved cache, SiLU times the up projection, and
 * the loop over layers that chains them with the products in one call. Each is a loop over rows, float32
 * inside; bfloat16 tensors are rounded where torch's module-by-module forward rounds them (each stored result),
 * except inside a fused operation, which rounds once. */

/* One vector (VW floats) of the step's loops: up to VW values from x[at], float32 or bfloat16 widened, zeros
 * past ``count``. */
#if defined(__AVX512F__)
#define VW 16
typedef __m512 vec;
static inline vec vload(const void *x, int bf16, int64_t at, int64_t count) {
    __mmask16 mask = count >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << count) - 1);
    return bf16 ? widen(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)x + at))
                : _mm512_maskz_loadu_ps(mask, (const float *)x + at);
}
static inline vec vzero(void) { return _mm512_setzero_ps(); }
static inline vec vset1(float v) { return _mm512_set1_ps(v); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vsum(vec a) { return _mm512_reduce_add_ps(a); }
static inline void vstore(float *out, vec a) { _mm512_storeu_ps(out, a); }
static inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec vdiv(vec a, vec b) { return _mm512_div_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm512_sub_ps(a, b); }
static inline vec vmax(vec a, vec b) { return _mm512_max_ps(a, b); }
static inline float vmax_lane(vec a) { return _mm512_reduce_max_ps(a); }
/* a where s is finite, else 0 */
static inline vec vkeep(vec a, vec s) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s, vset1(-INFINITY), _CMP_NEQ_OQ), a);
}
static inline vec vclamp(vec a, float lo, float hi) { return _mm512_min_ps(_mm512_max_ps(a, vset1(lo)), vset1(hi)); }
static inline vec vfloor(vec a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
static inline vec vpow2(vec n) { /* 2^n for whole n in float's exponent range */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
#else
#define VW 8
typedef __m256 vec;
static inline vec vload(const void *x, int bf16, int64_t at, int64_t count) {
    if (count >= 8) return bf16 ? widen8((const uint16_t *)x + at) : _mm256_loadu_ps((const float *)x + at);
    float part[8] = {0}; /* AVX2 has no masked 16-bit load: the tail goes through a zeroed buffer */
    for (int64_t i = 0; i < count; i++)
        part[i] = bf16 ? bf16_to_f32(((const uint16_t *)x)[at + i]) : ((const float *)x)[at + i];
    return _mm256_loadu_ps(part);
}
static inline vec vzero(void) { return _mm256_setzero_ps(); }
static inline vec vset1(float v) { return _mm256_set1_ps(v); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline float vsum(vec a) { return hsum8(a); }
static inline void vstore(float *out, vec a) { _mm256_storeu_ps(out, a); }
static inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline vec vdiv(vec a, vec b) { return _mm256_div_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm256_sub_ps(a, b); }
static inline vec vmax(vec a, vec b) { return _mm256_max_ps(a, b); }
static inline float vmax_lane(vec a) {
    float v[8], best = -INFINITY;
    _mm256_storeu_ps(v, a);
    for (int i = 0; i < 8; i++) best = v[i] > best ? v[i] : best;
    return best;
}
/* a where s is finite, else 0 */
static inline vec vkeep(vec a, vec s) {
    return _mm256_and_ps(a, _mm256_cmp_ps(s, vset1(-INFINITY), _CMP_NEQ_OQ));
}
static inline vec vclamp(vec a, float lo, float hi) { return _mm256_min_ps(_mm256_max_ps(a, vset1(lo)), vset1(hi)); }
static inline vec vfloor(vec a) { return _mm256_floor_ps(a); }
static inline vec vpow2(vec n) { /* 2^n for whole n in float's exponent range */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
#endif

/* e^x, Cephes' single-precision method (x = n ln2 + r, a degree-6 polynomial in r, times 2^n): within two units
 * in the last place of expf, as torch's vectorized SiLU is of it. */
static inline vec vexp(vec x) {
    x = vclamp(x, -87.3f, 88.3f);
    vec n = vfloor(vfma(x, vset1(1.44269504088896341f), vset1(0.5f)));
    vec r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vec p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vadd(vfma(p, vmul(r, r), r), vset1(1.0f));
    return vmul(p, vpow2(n));
}

static inline float sum_squares(const void *x, int bf16, int64_t k) {
    vec acc = vzero();
    for (int64_t i = 0; i < k; i += VW) {
        vec v = vload(x, bf16, i, k - i);
        acc = vfma(v, v, acc);
    }
    return vsum(acc);
}

static inline float get(const void *x, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static inline void put(void *x, int bf16, int64_t i, float v) {
    if (bf16)
        ((uint16_t *)x)[i] = f32_to_bf16(v);
    else
        ((float *)x)[i] = v;
}

static inline float rounded(int bf16, float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

/* h += delta (when given), then out = weight * RMSNorm(h), rows of k; LlamaRMSNorm's arithmetic: the norm in
 * float32, cast to the tensor's type, then scaled. */
int prover_add_rmsnorm(void *h, const void *delta, const void *weight, void *out, int64_t rows, int64_t k,
                       float eps, int bf16) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = r * k;
        if (delta)
            for (int64_t i = 0; i < k; i++) put(h, bf16, base + i, get(h, bf16, base + i) + get(delta, bf16, base + i));
        void *row = bf16 ? (void *)((uint16_t *)h + base) : (void *)((float *)h + base);
        float scale = 1.0f / sqrtf(sum_squares(row, bf16, k) / (float)k + eps);
        for (int64_t i = 0; i < k; i++)
            put(out, bf16, base + i, get(weight, bf16, i) * rounded(bf16, get(h, bf16, base + i) * scale));
    }
    return 0;
}

/* One head of d values at x: Qwen3's per-head RMSNorm (when norm is given), then the rotary embedding
 * x*cos + rotate_half(x)*sin, rotate_half(x) = (-x[d/2:], x[:d/2]), in place. */
static void norm_and_rotate(void *x, int64_t at, int64_t d, const void *norm, float eps, const void *cos,
                            const void *sin, int64_t cs, int bf16, float *scratch) {
    float scale = 1.0f;
    if (norm) {
        void *row = bf16 ? (void *)((uint16_t *)x + at) : (void *)((float *)x + at);
        scale = 1.0f / sqrtf(sum_squares(row, bf16, d) / (float)d + eps);
    }
    for (int64_t j = 0; j < d; j++) {
        float v = get(x, bf16, at + j);
        scratch[j] = norm ? rounded(bf16, get(norm, bf16, j) * rounded(bf16, v * scale)) : v;
    }
    int64_t half = d / 2;
    for (int64_t j = 0; j < d; j++) {
        float turned = j < half ? -scratch[j + half] : scratch[j - half];
        put(x, bf16, at + j, scratch[j] * get(cos, bf16, cs + j) + turned * get(sin, bf16, cs + j));
    }
}

/* qkv: rows of [heads*d queries | kv_heads*d keys | kv_heads*d values]. Normalizes and rotates the queries and
 * keys in place (cos and sin: rows x d), and writes each row's keys and values as column ``column`` of the
 * reserved cache buffers (cache rows, kv_heads, capacity, d): row r's into cache row ``row_of[r]``, or r when
 * ``row_of`` is null (the decode loop leaves out rows that have stopped). */
int prover_rope_store(void *qkv, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d, const void *q_norm,
                      const void *k_norm, float eps, const void *cos, const void *sin, void *keys, void *values,
                      int64_t capacity, int64_t column, const int64_t *row_of, int bf16) {
    float scratch[1024];
    if (d > 1024) return -1;
    int64_t width = (heads + 2 * kv_heads) * d;
    for (int64_t r = 0; r < rows; r++) {
        int64_t cache_row = row_of ? row_of[r] : r;
        for (int64_t h = 0; h < heads + kv_heads; h++)
            norm_and_rotate(qkv, r * width + h * d, d, h < heads ? q_norm : k_norm, eps, cos, sin, r * d, bf16,
                            scratch);
        for (int64_t g = 0; g < kv_heads; g++) {
            int64_t at = ((cache_row * kv_heads + g) * capacity + column) * d;
            int64_t key = r * width + (heads + g) * d, value = r * width + (heads + kv_heads + g) * d;
            size_t bytes = (size_t)d * (bf16 ? 2 : 4);
            memcpy((char *)keys + at * (bf16 ? 2 : 4), (char *)qkv + key * (bf16 ? 2 : 4), bytes);
            memcpy((char *)values + at * (bf16 ? 2 : 4), (char *)qkv + value * (bf16 ? 2 : 4), bytes);
        }
    }
    return 0;
}

static inline float dot(const void *a, int64_t ai, const void *b, int64_t bi, int64_t d, int bf16) {
    vec acc = vzero();
    for (int64_t i = 0; i < d; i += VW)
        acc = vfma(vload(a, bf16, ai + i, d - i), vload(b, bf16, bi + i, d - i), acc);
    return vsum(acc);
}

/* One query's scores against the first ``columns`` keys (scaled; -inf where ``allowed`` is 0), four columns at a
 * time: four dot products accumulate side by side and one reduce4 sums them (a horizontal sum a column cost as
 * much as its multiply-adds). Blocks of four masked columns are skipped. */
static void scores(const void *qkv, int64_t q, const void *keys, int64_t kv, int64_t d, int64_t columns,
                   const int64_t *allowed, float scale, float *s, int bf16) {
    int64_t c = 0;
    for (; c + 4 <= columns; c += 4) {
        if (!(allowed[c] | allowed[c + 1] | allowed[c + 2] | allowed[c + 3])) {
            s[c] = s[c + 1] = s[c + 2] = s[c + 3] = -INFINITY;
            continue;
        }
        vec a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
        for (int64_t i = 0; i < d; i += VW) {
            vec qv = vload(qkv, bf16, q + i, d - i);
            int64_t at = kv + c * d + i;
            a0 = vfma(qv, vload(keys, bf16, at, d - i), a0);
            a1 = vfma(qv, vload(keys, bf16, at + d, d - i), a1);
            a2 = vfma(qv, vload(keys, bf16, at + 2 * d, d - i), a2);
            a3 = vfma(qv, vload(keys, bf16, at + 3 * d, d - i), a3);
        }
        float four[4];
        reduce4(a0, a1, a2, a3, four);
        for (int t = 0; t < 4; t++) s[c + t] = allowed[c + t] ? four[t] * scale : -INFINITY;
    }
    for (; c < columns; c++) s[c] = allowed[c] ? dot(qkv, q, keys, kv + c * d, d, bf16) * scale : -INFINITY;
}

/* The softmax weights of scores s[0..columns) in place (0 at -inf), by the vectorized exp, padding s with -inf
 * to a whole number of vectors; their sum. */
static float softmax_weights(float *s, int64_t columns) {
    int64_t padded = (columns + VW - 1) / VW * VW;
    for (int64_t c = columns; c < padded; c++) s[c] = -INFINITY;
    vec top = vset1(-INFINITY);
    for (int64_t c = 0; c < padded; c += VW) top = vmax(top, vload(s, 0, c, VW));
    vec best = vset1(vmax_lane(top)), total = vzero();
    for (int64_t c = 0; c < padded; c += VW) {
        vec v = vload(s, 0, c, VW), p = vkeep(vexp(vsub(v, best)), v);
        vstore(s + c, p);
        total = vadd(total, p);
    }
    return vsum(total);
}

#define GROUP_CHUNK 8 /* query heads of a kv head that attend together */

/* The weighted sums of the values for n query heads sharing a kv head (grouped-query attention): each value
 * vector is read once for all n, whose weights (softmax_weights') sit ``stride`` floats apart in w; n is a
 * constant at each call (values_for's switch), so the sums stay in registers where they fit. */
static inline __attribute__((always_inline)) void weighted_values(const void *values, int64_t kv, int64_t d,
                                                                  int64_t columns, const float *w, int64_t stride,
                                                                  float *acc, int bf16, const int n) {
    int64_t vectors = (d + VW - 1) / VW;
    vec sum[GROUP_CHUNK][256 / VW]; /* d <= 256 */
    for (int j = 0; j < n; j++)
        for (int64_t i = 0; i < vectors; i++) sum[j][i] = vzero();
    for (int64_t c = 0; c < columns; c++) {
        vec p[GROUP_CHUNK];
        int any = 0;
        for (int j = 0; j < n; j++) {
            any |= w[j * stride + c] != 0.0f;
            p[j] = vset1(w[j * stride + c]);
        }
        if (!any) continue; /* a masked column */
        for (int64_t i = 0; i < vectors; i++) {
            vec v = vload(values, bf16, kv + c * d + i * VW, d - i * VW);
            for (int j = 0; j < n; j++) sum[j][i] = vfma(p[j], v, sum[j][i]);
        }
    }
    for (int j = 0; j < n; j++)
        for (int64_t i = 0; i < vectors; i++) vstore(acc + j * 256 + i * VW, sum[j][i]);
}

static void values_for(const void *values, int64_t kv, int64_t d, int64_t columns, const float *w, int64_t stride,
                       float *acc, int bf16, int n) {
    switch (n) {
    case 1: weighted_values(values, kv, d, columns, w, stride, acc, bf16, 1); break;
    case 2: weighted_values(values, kv, d, columns, w, stride, acc, bf16, 2); break;
    case 3: weighted_values(values, kv, d, columns, w, stride, acc, bf16, 3); break;
    case 4: weighted_values(values, kv, d, columns, w, stride, acc, bf16, 4); break;
    default: weighted_values(values, kv, d, columns, w, stride, acc, bf16, n); break;
    }
}

/* Each row's one query per head against the first ``columns`` columns of the cache where mask (rows x
 * mask_stride, nonzero: attend) allows; row r reads cache row ``row_of[r]`` (r when null); out: rows x heads*d.
 * The query heads that share a kv head go through its keys, then its values, together (up to GROUP_CHUNK at a
 * time), so that the keys are hot in cache for all of them and each value vector is read once. Scores, softmax
 * (the vectorized exp of vexp) and the weighted sums in float32, each result rounded once. scratch: at least
 * ATTEND_SCRATCH(columns) floats. */
#define ATTEND_STRIDE(columns) ((columns) + 2 * VW)
#define ATTEND_SCRATCH(columns) (GROUP_CHUNK * ATTEND_STRIDE(columns) + GROUP_CHUNK * 256)
int64_t prover_attend_scratch(int64_t columns) { return ATTEND_SCRATCH(columns); }

int prover_attend(const void *qkv, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d, const void *keys,
                  const void *values, int64_t capacity, int64_t columns, const int64_t *mask, int64_t mask_stride,
                  const int64_t *row_of, float scale, void *out, float *scratch, int bf16) {
    int64_t width = (heads + 2 * kv_heads) * d, group = heads / kv_heads, stride = ATTEND_STRIDE(columns);
    float *acc = scratch + GROUP_CHUNK * stride, total[GROUP_CHUNK];
    if (d > 256) return -1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < kv_heads; g++) {
            int64_t kv = ((row_of ? row_of[r] : r) * kv_heads + g) * capacity * d;
            for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += GROUP_CHUNK) {
                int n = (int)((g + 1) * group - h0 < GROUP_CHUNK ? (g + 1) * group - h0 : GROUP_CHUNK);
                for (int j = 0; j < n; j++) {
                    scores(qkv, r * width + (h0 + j) * d, keys, kv, d, columns, mask + r * mask_stride, scale,
                           scratch + j * stride, bf16);
                    total[j] = softmax_weights(scratch + j * stride, columns);
                }
                values_for(values, kv, d, columns, scratch, stride, acc, bf16, n);
                for (int j = 0; j < n; j++)
                    for (int64_t e = 0; e < d; e++)
                        put(out, bf16, (r * heads + h0 + j) * d + e, acc[j * 256 + e] / total[j]);
            }
        }
    return 0;
}

/* act = SiLU(gate) * up over rows of [gate (inter) | up (inter)], as torch's two operations round: SiLU's result
 * stored, then the product stored. */
static void silu_mul(const void *gate_up, void *act, int64_t rows, int64_t inter, int bf16) {
    float silu[VW];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < inter; i += VW) {
            int64_t at = r * 2 * inter + i, count = inter - i < VW ? inter - i : VW;
            vec g = vload(gate_up, bf16, at, count);
            vstore(silu, vdiv(g, vadd(vset1(1.0f), vexp(vmul(g, vset1(-1.0f))))));
            for (int64_t j = 0; j < count; j++)
                put(act, bf16, r * inter + i + j, rounded(bf16, silu[j]) * get(gate_up, bf16, at + inter + j));
        }
}

static void product(const void *w, const void *x, void *y, const void *bias, int64_t n, int64_t k, int64_t m,
                    int bf16) {
    if (bf16)
        prover_gemv_bf16(w, x, y, bias, n, k, m, k, n);
    else
        prover_gemv_f32(w, x, y, bias, n, k, m, k, n);
}

/* Every layer of a one-token step, then the final norm: the calls FusedStep._in_c makes one by one from Python,
 * in the same order, made here in one call (each layer's dozen Python-side calls cost as much as its products at
 * one row). weights: LAYER_POINTERS a layer (in_norm, post_norm, qkv, qkv_bias, o, o_bias, gate_up, down, q_norm,
 * k_norm; 0 for none); caches: keys and values buffers a layer. h (rows x hidden) is the residual stream, in
 * and out; x ends as the final norm's output, the LM head's input. Scratch: qkv (rows x (heads + 2 kv_heads) d),
 * attended (rows x heads d), delta (rows x hidden), gate_up (rows x 2 inter), act (rows x inter), scratch
 * (ATTEND_SCRATCH(column + 1) floats). row_of: as in prover_rope_store. */
#define LAYER_POINTERS 10
int prover_layers_step(void *h, void *x, void *qkv, void *attended, void *delta, void *gate_up, void *act,
                       const int64_t *weights, const int64_t *caches, const void *final_norm, int64_t layers,
                       int64_t rows, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t d, int64_t inter,
                       float eps, const void *cos, const void *sin, int64_t capacity, int64_t column,
                       const int64_t *mask, int64_t mask_stride, const int64_t *row_of, float scale,
                       float *scratch, int bf16) {
    int64_t width = (heads + 2 * kv_heads) * d;
    for (int64_t l = 0; l < layers; l++) {
        const void *const *w = (const void *const *)(weights + l * LAYER_POINTERS);
        void *keys = (void *)caches[2 * l], *values = (void *)caches[2 * l + 1];
        prover_add_rmsnorm(h, l ? delta : 0, w[0], x, rows, hidden, eps, bf16);
        product(w[2], x, qkv, w[3], width, hidden, rows, bf16);
        if (prover_rope_store(qkv, rows, heads, kv_heads, d, w[8], w[9], eps, cos, sin, keys, values, capacity,
                              column, row_of, bf16) ||
            prover_attend(qkv, rows, heads, kv_heads, d, keys, values, capacity, column + 1, mask, mask_stride,
                          row_of, scale, attended, scratch, bf16))
            return -1;
        product(w[4], attended, delta, w[5], hidden, heads * d, rows, bf16);
        prover_add_rmsnorm(h, delta, w[1], x, rows, hidden, eps, bf16);
        product(w[6], x, gate_up, 0, 2 * inter, hidden, rows, bf16);
        silu_mul(gate_up, act, rows, inter, bf16);
        product(w[7], act, delta, 0, hidden, inter, rows, bf16);
    }
    prover_add_rmsnorm(h, layers ? delta : 0, final_norm, x, rows, hidden, eps, bf16);
    return 0;
}

