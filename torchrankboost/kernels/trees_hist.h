/* The node histogram kernels of trees.c (included there: one translation unit; the loader
 * hashes this file with it).
 *
 * hist (F, S, 3) int64 := Σ over rows (all n rows when rows == NULL) of (q[r,0], q[r,1], 1)
 * at (f, codes[r, f]) for every feature f: exact integer sums, so the three passes below give
 * the same sums, and threads split the work by FEATURE:
 *   - plain: the (F, S, 3) bins updated in place, three int64 adds per (row, feature);
 *   - wide (x86-64 with AVX2, exact fixed point): 32-byte bins (q_wt, q_w, 1, 0) in a scratch
 *     (F, S, 4), one 256-bit add per (row, feature) (measured 0.85 against 1.0 ns per update
 *     at 800k x 136), then copied to (F, S, 3);
 *   - packed (quantized channels, kernels/quantized.py: |q_wt| < 2^(b-1), 0 <= q_w < 2^b,
 *     2 <= b <= 8): one uint64 lane per bin holds three unsigned fields, q_wt + bias (bias =
 *     2^(b-1) - 1), q_w and the count, one 64-bit add per (row, feature) (measured 0.59 ns
 *     per update), flushed into the int64 bins every 2^lb rows, lb = floor((63 - 2b) / 3),
 *     before any field can overflow (field widths b + lb, b + lb, lb + 1: 64 bits at most);
 *   - paired (quantized, 9 <= b <= 16): 16-byte bins (q_wt, q_w + 2^40 count), one 128-bit
 *     add per (row, feature).
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TRB_X86_AVX2 1
#endif

/* The row loops are compiled apart (inlined into the OpenMP region they ran out of registers:
 * measured 1.15 against 0.8 ns per packed update). */
#define TRB_NOINLINE __attribute__((noinline))

/* Work below this many (row, feature) updates runs on one thread: a parallel region costs
 * more than it saves on small nodes. */
#define PAR_MIN_WORK 262144
/* rows ahead whose codes are prefetched (measured: 1.1 -> 0.7 ns per update on 30% of 400k rows) */
#define PREFETCH_AHEAD 8

/* This thread's share [lo, hi) of n items inside an OpenMP parallel region (all of them
 * outside one or without OpenMP). */
static inline void thread_slice(int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t tid = 0, T = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    T = omp_get_num_threads();
#endif
    *lo = n * tid / T;
    *hi = n * (tid + 1) / T;
}

/* The value bins of feature f that can hold rows (all S - 1 when num_bins is NULL). */
static inline int64_t used_bins(const int64_t *num_bins, int64_t f, int64_t S)
{
    return (num_bins == NULL || num_bins[f] > S - 1) ? S - 1 : num_bins[f];
}

/* Zero the slots of features [f0, f1) of an (F, S, W) buffer that can hold rows: each
 * feature's value bins [0, num_bins[f]) and its missing slot S - 1. The other slots are never
 * written nor read by trb_grow: sparse features with few bins cost nothing. */
static void zero_slots(int64_t *buf, int W, int64_t S, const int64_t *num_bins, int64_t f0,
                       int64_t f1)
{
    for (int64_t f = f0; f < f1; f++) {
        int64_t *bf = buf + f * S * W;
        memset(bf, 0, sizeof(int64_t) * (size_t)(used_bins(num_bins, f, S) * W));
        memset(bf + (S - 1) * W, 0, sizeof(int64_t) * (size_t)W);
    }
}

/* Prefetch the codes of features [f0, f1) and the channels of the rows i + PREFETCH_AHEAD
 * and the next one (a node's rows are scattered; at 10M rows q is 160 MB, far past the L3
 * cache: measured 0.89-0.95x the time per 10M-row tree, 0.98x at 1M). */
#define TRB_PREFETCH_PAIR(T)                                                                   \
    if (rows && i + PREFETCH_AHEAD + 1 < m) {                                                  \
        const T *p8 = codes + (int64_t)rows[i + PREFETCH_AHEAD] * F + f0;                      \
        const T *p9 = codes + (int64_t)rows[i + PREFETCH_AHEAD + 1] * F + f0;                  \
        for (int64_t o = 0; o < f1 - f0; o += 64 / (int64_t)sizeof(T)) {                       \
            __builtin_prefetch(p8 + o);                                                        \
            __builtin_prefetch(p9 + o);                                                        \
        }                                                                                      \
        __builtin_prefetch(q + 2 * (int64_t)rows[i + PREFETCH_AHEAD]);                         \
        __builtin_prefetch(q + 2 * (int64_t)rows[i + PREFETCH_AHEAD + 1]);                     \
    }

/* The row loop of every pass over rows [i, m) of features [f0, f1), two rows at a time (more
 * independent updates in flight): ROW(r, k) sets up row r as k, UPD(k, c, f) adds it at
 * (f, c[f]). */
#define TRB_ROW_LOOP(T, ROW, UPD)                                                              \
    for (; i + 1 < m; i += 2) {                                                                \
        int64_t r = rows ? (int64_t)rows[i] : i, r2 = rows ? (int64_t)rows[i + 1] : i + 1;     \
        TRB_PREFETCH_PAIR(T)                                                                   \
        const T *c = codes + r * F, *c2 = codes + r2 * F;                                      \
        ROW(r, a)                                                                              \
        ROW(r2, b)                                                                             \
        for (int64_t f = f0; f < f1; f++) {                                                    \
            UPD(a, c, f)                                                                       \
            UPD(b, c2, f)                                                                      \
        }                                                                                      \
    }                                                                                          \
    for (; i < m; i++) {                                                                       \
        int64_t r = rows ? (int64_t)rows[i] : i;                                               \
        const T *c = codes + r * F;                                                            \
        ROW(r, a)                                                                              \
        for (int64_t f = f0; f < f1; f++) {                                                    \
            UPD(a, c, f)                                                                       \
        }                                                                                      \
    }

/* plain: (F, S, 3) bins in place */
#define PLAIN_ROW(r, k) const int64_t k##g = q[2 * (r)], k##h = q[2 * (r) + 1];
#define PLAIN_UPD(k, c, f)                                                                     \
    { int64_t *p = hist + ((f) * S + (c)[f]) * CH; p[0] += k##g; p[1] += k##h; p[2] += 1; }
#define TRB_HIST_PLAIN(NAME, T)                                                                \
    static TRB_NOINLINE void NAME(const T *codes, int64_t F, const int32_t *rows, int64_t m,   \
                                  const int64_t *q, int64_t *hist, int64_t S, int64_t f0,      \
                                  int64_t f1)                                                  \
    {                                                                                          \
        int64_t i = 0;                                                                         \
        TRB_ROW_LOOP(T, PLAIN_ROW, PLAIN_UPD)                                                  \
    }
TRB_HIST_PLAIN(hist_plain8, uint8_t)
TRB_HIST_PLAIN(hist_plain16, int16_t)

/* packed: one uint64 lane per bin, flushed every 2^lb rows (see the top of this file) */
#define PACKED_ROW(r, k)                                                                       \
    const uint64_t k = (uint64_t)(q[2 * (r)] + bias) | ((uint64_t)q[2 * (r) + 1] << wf) | one;
#define PACKED_UPD(k, c, f) lane[(f) * S + (c)[f]] += k;

/* Add the fields of the lanes of features [f0, f1) to hist and zero the lanes. */
static void flush_lanes(uint64_t *lane, int64_t *hist, int64_t S, const int64_t *num_bins,
                        int64_t f0, int64_t f1, int wf, int64_t bias)
{
    const uint64_t mask = ((uint64_t)1 << wf) - 1;
    for (int64_t f = f0; f < f1; f++) {
        const int64_t nb = used_bins(num_bins, f, S);
        for (int64_t b = 0; b <= nb; b++) {
            const int64_t s = b < nb ? b : S - 1;
            uint64_t *v = lane + f * S + s;
            if (*v == 0) continue;
            const int64_t cnt = (int64_t)(*v >> (2 * wf));
            int64_t *p = hist + (f * S + s) * CH;
            p[0] += (int64_t)(*v & mask) - bias * cnt;
            p[1] += (int64_t)((*v >> wf) & mask);
            p[2] += cnt;
            *v = 0;
        }
    }
}

#define TRB_HIST_PACKED(NAME, T)                                                               \
    static TRB_NOINLINE void NAME(const T *codes, int64_t F, const int32_t *rows,              \
                                  int64_t m_all, const int64_t *q, uint64_t *lane,             \
                                  int64_t *hist, int64_t S, const int64_t *num_bins,           \
                                  int64_t f0, int64_t f1, int bits)                            \
    {                                                                                          \
        const int lb = (63 - 2 * bits) / 3, wf = bits + lb;                                    \
        const int64_t bias = ((int64_t)1 << (bits - 1)) - 1;                                   \
        const uint64_t one = (uint64_t)1 << (2 * wf);                                          \
        zero_slots((int64_t *)lane, 1, S, num_bins, f0, f1);                                   \
        for (int64_t s = 0; s < m_all; s += (int64_t)1 << lb) {                                \
            const int64_t m = m_all - s < ((int64_t)1 << lb) ? m_all : s + ((int64_t)1 << lb); \
            int64_t i = s;                                                                     \
            TRB_ROW_LOOP(T, PACKED_ROW, PACKED_UPD)                                            \
            flush_lanes(lane, hist, S, num_bins, f0, f1, wf, bias);                            \
        }                                                                                      \
    }
TRB_HIST_PACKED(hist_packed8, uint8_t)
TRB_HIST_PACKED(hist_packed16, int16_t)

/* paired (9 to 16 bits): two lanes per bin, q_wt (int64) and q_w + count * 2^40 (uint64),
 * one 128-bit add per (row, feature); flushed every 2^23 rows (then Σ q_w < 2^39 and the
 * count < 2^24: the second lane cannot overflow) */
#define PAIR_LOG_ROWS 23
#ifdef __SSE2__
#include <emmintrin.h>
#define PAIR_ROW(r, k) const __m128i k = _mm_set_epi64x(q[2 * (r) + 1] + one, q[2 * (r)]);
#define PAIR_UPD(k, c, f)                                                                      \
    { __m128i *p = (__m128i *)(lane + ((f) * S + (c)[f]) * 2);                                 \
      _mm_store_si128(p, _mm_add_epi64(_mm_load_si128(p), k)); }
#else
#define PAIR_ROW(r, k) const int64_t k##g = q[2 * (r)], k##h = q[2 * (r) + 1] + one;
#define PAIR_UPD(k, c, f)                                                                      \
    { int64_t *p = lane + ((f) * S + (c)[f]) * 2; p[0] += k##g; p[1] += k##h; }
#endif

/* Add the paired lanes of features [f0, f1) to hist and zero them. */
static void flush_pairs(int64_t *lane, int64_t *hist, int64_t S, const int64_t *num_bins,
                        int64_t f0, int64_t f1)
{
    const int64_t mask = ((int64_t)1 << 40) - 1;
    for (int64_t f = f0; f < f1; f++) {
        const int64_t nb = used_bins(num_bins, f, S);
        for (int64_t b = 0; b <= nb; b++) {
            const int64_t s = f * S + (b < nb ? b : S - 1);
            int64_t *v = lane + 2 * s, *p = hist + s * CH;
            p[0] += v[0];
            p[1] += v[1] & mask;
            p[2] += (int64_t)((uint64_t)v[1] >> 40);
            v[0] = v[1] = 0;
        }
    }
}

#define TRB_HIST_PAIRED(NAME, T)                                                               \
    static TRB_NOINLINE void NAME(const T *codes, int64_t F, const int32_t *rows,              \
                                  int64_t m_all, const int64_t *q, int64_t *lane,              \
                                  int64_t *hist, int64_t S, const int64_t *num_bins,           \
                                  int64_t f0, int64_t f1)                                      \
    {                                                                                          \
        const int64_t one = (int64_t)1 << 40, B = (int64_t)1 << PAIR_LOG_ROWS;                 \
        zero_slots(lane, 2, S, num_bins, f0, f1);                                              \
        for (int64_t s = 0; s < m_all; s += B) {                                               \
            const int64_t m = m_all - s < B ? m_all : s + B;                                   \
            int64_t i = s;                                                                     \
            TRB_ROW_LOOP(T, PAIR_ROW, PAIR_UPD)                                                \
            flush_pairs(lane, hist, S, num_bins, f0, f1);                                      \
        }                                                                                      \
    }
TRB_HIST_PAIRED(hist_paired8, uint8_t)
TRB_HIST_PAIRED(hist_paired16, int16_t)

#ifdef TRB_X86_AVX2
/* wide: 32-byte bins (q_wt, q_w, 1, 0) in a 32-byte aligned (F, S, 4) scratch */
#define WIDE_ROW(r, k) const __m256i k = _mm256_set_epi64x(0, 1, q[2 * (r) + 1], q[2 * (r)]);
#define WIDE_UPD(k, c, f)                                                                      \
    { __m256i *p = (__m256i *)(w4 + ((f) * S + (c)[f]) * 4);                                   \
      _mm256_store_si256(p, _mm256_add_epi64(_mm256_load_si256(p), k)); }
#define TRB_HIST_WIDE(NAME, T)                                                                 \
    __attribute__((target("avx2"))) static TRB_NOINLINE void NAME(                            \
        const T *codes, int64_t F, const int32_t *rows, int64_t m, const int64_t *q,           \
        int64_t *w4, int64_t S, int64_t f0, int64_t f1)                                        \
    {                                                                                          \
        int64_t i = 0;                                                                         \
        TRB_ROW_LOOP(T, WIDE_ROW, WIDE_UPD)                                                    \
    }
TRB_HIST_WIDE(hist_wide8, uint8_t)
TRB_HIST_WIDE(hist_wide16, int16_t)

static int have_avx2(void)
{
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx2") ? 1 : 0;
    return known;
}
#else
static int have_avx2(void) { return 0; }
#endif

/* Copy the used slots of features [f0, f1) of the (F, S, 4) scratch to hist (F, S, 3). */
static void copy_wide(const int64_t *w4, int64_t *hist, int64_t S, const int64_t *num_bins,
                      int64_t f0, int64_t f1)
{
    for (int64_t f = f0; f < f1; f++) {
        const int64_t nb = used_bins(num_bins, f, S);
        for (int64_t b = 0; b <= nb; b++) {
            const int64_t s = f * S + (b < nb ? b : S - 1);
            for (int c = 0; c < CH; c++) hist[s * CH + c] = w4[s * 4 + c];
        }
    }
}

/* One node histogram: codes (n, F) of code_bytes 1 (uint8) or 2 (int16), rows[0..m) (NULL:
 * all n rows), q (n, 2), hist (F, S, 3) (its used slots written), bits 0 (exact fixed point)
 * or 2..16 (quantized channels), work: a 32-byte aligned scratch of F * S * 4 int64 (NULL:
 * the plain pass). */
typedef struct {
    const void *codes;
    int code_bytes;
    int64_t n, F;
    const int32_t *rows;
    int64_t m;
    const int64_t *q;
    int64_t *hist;
    int64_t S;
    int nthreads;
    const int64_t *num_bins;
    int bits;
    int64_t *work;
} hist_req;

/* 0: every histogram takes the plain pass (the tests compare the passes; the same sums). */
static int fast_passes = 1;

void trb_set_fast_passes(int on) { fast_passes = on != 0; }

static void node_histogram(const hist_req *h)
{
    const int64_t F = h->F, S = h->S, m = h->rows ? h->m : h->n;
    const int is16 = h->code_bytes == 2;
    const int packed = fast_passes && h->work != NULL && h->bits >= 2 && h->bits <= 16;
    const int avx2 = fast_passes && h->work != NULL && !packed && have_avx2();
    int nt = h->nthreads;
    if (nt < 1 || (double)m * (double)F < PAR_MIN_WORK) nt = 1;
    if (nt > F) nt = (int)F;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t f0, f1;
        thread_slice(F, &f0, &f1);
        zero_slots(h->hist, CH, S, h->num_bins, f0, f1);
        if (packed && h->bits > 8) {
            if (is16)
                hist_paired16((const int16_t *)h->codes, F, h->rows, m, h->q, h->work, h->hist,
                              S, h->num_bins, f0, f1);
            else
                hist_paired8((const uint8_t *)h->codes, F, h->rows, m, h->q, h->work, h->hist,
                             S, h->num_bins, f0, f1);
        } else if (packed) {
            if (is16)
                hist_packed16((const int16_t *)h->codes, F, h->rows, m, h->q,
                              (uint64_t *)h->work, h->hist, S, h->num_bins, f0, f1, h->bits);
            else
                hist_packed8((const uint8_t *)h->codes, F, h->rows, m, h->q,
                             (uint64_t *)h->work, h->hist, S, h->num_bins, f0, f1, h->bits);
        } else if (avx2) {
#ifdef TRB_X86_AVX2
            zero_slots(h->work, 4, S, h->num_bins, f0, f1);
            if (is16)
                hist_wide16((const int16_t *)h->codes, F, h->rows, m, h->q, h->work, S, f0, f1);
            else
                hist_wide8((const uint8_t *)h->codes, F, h->rows, m, h->q, h->work, S, f0, f1);
            copy_wide(h->work, h->hist, S, h->num_bins, f0, f1);
#endif
        } else if (is16) {
            hist_plain16((const int16_t *)h->codes, F, h->rows, m, h->q, h->hist, S, f0, f1);
        } else {
            hist_plain8((const uint8_t *)h->codes, F, h->rows, m, h->q, h->hist, S, f0, f1);
        }
    }
}

/* The node histogram of the public entry points: the wide pass with a scratch of its own
 * (the plain one when it cannot be had); bits as in hist_req. */
static void histogram_entry(const void *codes, int code_bytes, int64_t n, int64_t F,
                            const int32_t *rows, int64_t m, const int64_t *q, int64_t *hist,
                            int64_t S, int nthreads, int bits)
{
    void *work = NULL;
    if (have_avx2() || bits > 0) {
        if (posix_memalign(&work, 64, sizeof(int64_t) * 4 * (size_t)(F * S)) != 0) work = NULL;
    }
    if (work == NULL) bits = 0;
    hist_req h = {codes, code_bytes, n, F, rows, m, q, hist, S, nthreads, NULL, bits,
                  (int64_t *)work};
    node_histogram(&h);
    free(work);
}

void trb_histogram(const uint8_t *codes, int64_t n, int64_t F, const int32_t *rows, int64_t m,
                   const int64_t *q, int64_t *hist, int64_t S, int nthreads)
{
    histogram_entry(codes, 1, n, F, rows, m, q, hist, S, nthreads, 0);
}

void trb_histogram16(const int16_t *codes, int64_t n, int64_t F, const int32_t *rows, int64_t m,
                     const int64_t *q, int64_t *hist, int64_t S, int nthreads)
{
    histogram_entry(codes, 2, n, F, rows, m, q, hist, S, nthreads, 0);
}

/* The quantized histogram (bits in [2, 16]; q within the bounds above) on codes of
 * code_bytes 1 or 2: the packed pass. */
void trb_histogram_quantized(const void *codes, int64_t code_bytes, int64_t n, int64_t F,
                             const int32_t *rows, int64_t m, const int64_t *q, int64_t *hist,
                             int64_t S, int nthreads, int64_t bits)
{
    histogram_entry(codes, (int)code_bytes, n, F, rows, m, q, hist, S, nthreads, (int)bits);
}

/* out := a - b, elementwise over len int64 (the larger child's histogram; exact). */
void trb_subtract(const int64_t *a, const int64_t *b, int64_t *out, int64_t len)
{
    for (int64_t i = 0; i < len; i++) out[i] = a[i] - b[i];
}

/* a - b over the used slots of (F, S, 3) histograms (see zero_slots). */
static void subtract_used(const int64_t *a, const int64_t *b, int64_t *out, int64_t F, int64_t S,
                          const int64_t *num_bins, int nthreads)
{
    int nt = (nthreads > 1 && F * S * CH >= PAR_MIN_WORK) ? nthreads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t f = 0; f < F; f++) {
        int64_t nb = used_bins(num_bins, f, S);
        int64_t o = f * S * CH;
        for (int64_t i = o; i < o + nb * CH; i++) out[i] = a[i] - b[i];
        for (int64_t i = o + (S - 1) * CH; i < o + S * CH; i++) out[i] = a[i] - b[i];
    }
}
