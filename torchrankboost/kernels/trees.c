/* Compiled CPU kernels of the histogram tree learner (torchrankboost.kernels,
 * native_backend.py).
 *
 * Plain C99 + OpenMP, called through ctypes on the memory of contiguous torch tensors (no
 * Python C API, no torch headers). Every kernel reproduces the pure-torch reference path of
 * torch_backend.py bit for bit:
 *   - histograms accumulate each (feature, bin) in row order (as scatter_add_ does), and the
 *     work is split across threads by FEATURE, so the result does not depend on the number of
 *     threads;
 *   - the split search walks the candidates in the reference's (feature, bin, NaN side) order
 *     and keeps the first maximum, with the same floating-point expressions;
 *   - leaf sums are sequential in row order (as index_add_ is).
 * Build flags keep IEEE semantics: -O2 -ffp-contract=off, never -ffast-math.
 *
 * Layouts: codes (n, F) uint8 row-major (int16 above 255 bins: the *16 variants, and
 * trb_grow with code_bytes = 2); gh (n, 2) float64 = (w·target, w) per row;
 * hist (F, S, 3) float64 = (Σ w·t, Σ w, row count) per (feature, slot), S = missing code + 1
 * (the last slot holds NaNs); rows int32.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CH 3

int trb_abi_version(void) { return 7; }

/* Work below this many (row, feature) updates runs on one thread: a parallel region costs
 * more than it saves on small nodes. */
#define PAR_MIN_WORK 262144
/* rows ahead whose codes are prefetched (measured: 1.1 -> 0.7 ns per update on 30% of 400k rows) */
#define PREFETCH_AHEAD 8

/* hist := Σ over rows (or all n rows when rows == NULL) of (gh[r,0], gh[r,1], 1) at
 * (f, codes[r, f]) for every feature f. */
static void histogram_impl(const uint8_t *codes, int64_t n, int64_t F, const int32_t *rows,
                           int64_t m, const double *gh, double *hist, int64_t S, int nthreads,
                           const int64_t *num_bins);

void trb_histogram(const uint8_t *codes, int64_t n, int64_t F, const int32_t *rows, int64_t m,
                   const double *gh, double *hist, int64_t S, int nthreads)
{
    histogram_impl(codes, n, F, rows, m, gh, hist, S, nthreads, NULL);
}

/* Zero the slots of a (F, S, 3) histogram that can hold rows: each feature's value bins
 * [0, num_bins[f]) and its missing slot S - 1 (all slots when num_bins is NULL). The other
 * slots are never written nor read by trb_grow: sparse features with few bins cost nothing. */
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

static void zero_used(double *hist, int64_t F, int64_t S, const int64_t *num_bins)
{
    if (num_bins == NULL) {
        memset(hist, 0, sizeof(double) * (size_t)(F * S * CH));
        return;
    }
    for (int64_t f = 0; f < F; f++) {
        int64_t nb = num_bins[f] < S - 1 ? num_bins[f] : S - 1;
        double *hf = hist + f * S * CH;
        memset(hf, 0, sizeof(double) * (size_t)(nb * CH));
        memset(hf + (S - 1) * CH, 0, sizeof(double) * CH);
    }
}

/* The row-count channel is accumulated as an integer in the slot's own 8 bytes (an integer
 * add instead of a floating-point one: measured ~5% faster per update) and converted to a
 * double when the pass ends. Counts are exact integers either way (< 2^53), so the histogram
 * is the same bit for bit. count_t may alias the double storage. */
typedef int64_t __attribute__((may_alias)) count_t;

static void counts_to_double(double *hist, int64_t F, int64_t S, const int64_t *num_bins)
{
    for (int64_t f = 0; f < F; f++) {
        int64_t nb = num_bins == NULL ? S - 1 : (num_bins[f] < S - 1 ? num_bins[f] : S - 1);
        double *hf = hist + f * S * CH;
        for (int64_t b = 0; b < nb; b++) hf[b * CH + 2] = (double)*(count_t *)(hf + b * CH + 2);
        hf[(S - 1) * CH + 2] = (double)*(count_t *)(hf + (S - 1) * CH + 2);
    }
}

/* The histogram pass, instantiated for uint8 codes (histogram_impl) and int16 codes
 * (histogram_impl16, more than 255 bins; codes in [0, S)): the same sums in the same order
 * for both widths. */
#define TRB_HISTOGRAM(NAME, T)                                                                 \
static void NAME(const T *codes, int64_t n, int64_t F, const int32_t *rows, int64_t m,         \
                 const double *gh, double *hist, int64_t S, int nthreads,                      \
                 const int64_t *num_bins)                                                      \
{                                                                                              \
    zero_used(hist, F, S, num_bins); /* +0.0 and integer 0 have the same bits */               \
    if (rows == NULL) m = n;                                                                   \
    int nt = nthreads;                                                                         \
    if (nt < 1 || (double)m * (double)F < PAR_MIN_WORK) nt = 1;                                \
    if (nt > F) nt = (int)F;                                                                   \
    _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                        \
    {                                                                                          \
        int64_t f0, f1;                                                                        \
        thread_slice(F, &f0, &f1);                                                             \
        int64_t i = 0;                                                                         \
        /* two rows at a time (more independent updates in flight; each bin still sums its     \
         * rows in row order, so the result is the same bit for bit) */                        \
        for (; i + 1 < m; i += 2) {                                                            \
            int64_t r = rows ? (int64_t)rows[i] : i, r2 = rows ? (int64_t)rows[i + 1] : i + 1; \
            if (rows && i + PREFETCH_AHEAD + 1 < m) { /* a node's rows are scattered */        \
                const T *q = codes + (int64_t)rows[i + PREFETCH_AHEAD] * F + f0;               \
                const T *q2 = codes + (int64_t)rows[i + PREFETCH_AHEAD + 1] * F + f0;          \
                for (int64_t o = 0; o < f1 - f0; o += 64 / (int64_t)sizeof(T)) {               \
                    __builtin_prefetch(q + o);                                                 \
                    __builtin_prefetch(q2 + o);                                                \
                }                                                                              \
                /* and their (w·t, w): at 10M rows gh is 160 MB, far past the L3 cache         \
                 * (measured: 0.89-0.95x the time per 10M-row tree, 0.98x at 1M) */            \
                __builtin_prefetch(gh + 2 * (int64_t)rows[i + PREFETCH_AHEAD]);                \
                __builtin_prefetch(gh + 2 * (int64_t)rows[i + PREFETCH_AHEAD + 1]);            \
            }                                                                                  \
            const T *c = codes + r * F, *c2 = codes + r2 * F;                                  \
            double g = gh[2 * r], h = gh[2 * r + 1], g2 = gh[2 * r2], h2 = gh[2 * r2 + 1];     \
            for (int64_t f = f0; f < f1; f++) {                                                \
                double *p = hist + (f * S + c[f]) * CH;                                        \
                p[0] += g;                                                                     \
                p[1] += h;                                                                     \
                *(count_t *)(p + 2) += 1;                                                      \
                double *p2 = hist + (f * S + c2[f]) * CH;                                      \
                p2[0] += g2;                                                                   \
                p2[1] += h2;                                                                   \
                *(count_t *)(p2 + 2) += 1;                                                     \
            }                                                                                  \
        }                                                                                      \
        for (; i < m; i++) {                                                                   \
            int64_t r = rows ? (int64_t)rows[i] : i;                                           \
            const T *c = codes + r * F;                                                        \
            double g = gh[2 * r], h = gh[2 * r + 1];                                           \
            for (int64_t f = f0; f < f1; f++) {                                                \
                double *p = hist + (f * S + c[f]) * CH;                                        \
                p[0] += g;                                                                     \
                p[1] += h;                                                                     \
                *(count_t *)(p + 2) += 1;                                                      \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    counts_to_double(hist, F, S, num_bins);                                                    \
}
TRB_HISTOGRAM(histogram_impl, uint8_t)
TRB_HISTOGRAM(histogram_impl16, int16_t)

/* out := a - b, elementwise over len doubles (the larger child's histogram). */
void trb_subtract_mt(const double *a, const double *b, double *out, int64_t len, int nthreads)
{
    int nt = (nthreads > 1 && len >= PAR_MIN_WORK) ? nthreads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < len; i++) out[i] = a[i] - b[i];
}

void trb_subtract(const double *a, const double *b, double *out, int64_t len)
{
    trb_subtract_mt(a, b, out, len, 1);
}

/* The node histogram on codes of either width (wide: int16, else uint8). */
static void node_histogram(const void *codes, int wide, int64_t n, int64_t F, const int32_t *rows,
                           int64_t m, const double *gh, double *hist, int64_t S, int nthreads,
                           const int64_t *num_bins)
{
    if (wide)
        histogram_impl16((const int16_t *)codes, n, F, rows, m, gh, hist, S, nthreads, num_bins);
    else
        histogram_impl((const uint8_t *)codes, n, F, rows, m, gh, hist, S, nthreads, num_bins);
}

void trb_histogram16(const int16_t *codes, int64_t n, int64_t F, const int32_t *rows, int64_t m,
                     const double *gh, double *hist, int64_t S, int nthreads)
{
    histogram_impl16(codes, n, F, rows, m, gh, hist, S, nthreads, NULL);
}

/* a - b over the used slots of (F, S, 3) histograms (see zero_used). */
static void subtract_used(const double *a, const double *b, double *out, int64_t F, int64_t S,
                          const int64_t *num_bins, int nthreads)
{
    int nt = (nthreads > 1 && F * S * CH >= PAR_MIN_WORK) ? nthreads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t f = 0; f < F; f++) {
        int64_t nb = num_bins[f] < S - 1 ? num_bins[f] : S - 1;
        int64_t o = f * S * CH;
        for (int64_t i = o; i < o + nb * CH; i++) out[i] = a[i] - b[i];
        for (int64_t i = o + (S - 1) * CH; i < o + S * CH; i++) out[i] = a[i] - b[i];
    }
}

/* The best split of one node from its histogram.
 *
 * Candidates: feature f with feat_ok[f], threshold bin t < num_bins[f] (t < Vm), NaN going
 * left (side 0) and, where miss_feat[f], NaN going right (side 1). Left sums are the
 * cumulative sums of the value bins (+ the missing slot for NaN-left), right = node total -
 * left, gain = GL²/(HL+λ) + GR²/(HR+λ) where both children have count >= msl_half and
 * Σw >= mcw (and a positive denominator when mcw <= 0). The first maximum wins; a NaN gain
 * anywhere gives no split (as torch.max propagates NaN).
 *
 * out[0] = best raw gain (-inf when none), out[1] = the parent term G²/(H+λ) of feature 0's
 * totals, out[2] = feature, out[3] = bin, out[4] = default_left (1/0), out[5] = 1 if a NaN
 * gain was met, out[6], out[7] = the row counts of the best split's left and right child. */
static void best_split_impl(const double *hist, int64_t F, int64_t S, const int64_t *num_bins,
                            const uint8_t *feat_ok, const uint8_t *miss_feat, int64_t Vm,
                            double lam, double msl_half, double mcw, double *cum, double *out)
{
    const int64_t V = S - 1;
    double best = -INFINITY;
    int64_t bf = 0, bt = 0, bdl = 1;
    double bnl = 0.0, bnr = 0.0;
    int seen_nan = 0;
    int check_den = !(mcw > 0);
    double parent = 0.0;
    for (int64_t f = 0; f < F; f++) {
        const double *hf = hist + f * S * CH;
        if (f > 0 && !feat_ok[f]) continue;
        /* cumulative sums of the value bins (bins at or beyond num_bins[f] are empty: adding
         * their zeros would not change the totals) */
        int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
        if (nb > V) nb = V; /* cum holds 3 * V doubles */
        double c0 = 0.0, c1 = 0.0, c2 = 0.0;
        for (int64_t t = 0; t < nb; t++) {
            c0 += hf[t * CH];
            c1 += hf[t * CH + 1];
            c2 += hf[t * CH + 2];
            cum[3 * t] = c0;
            cum[3 * t + 1] = c1;
            cum[3 * t + 2] = c2;
        }
        const double m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
        const double T0 = c0 + m0, T1 = c1 + m1, T2 = c2 + m2;
        if (f == 0) {
            double d0 = T1 + lam;
            parent = d0 > 0 ? T0 * T0 / d0 : 0.0;
            if (!feat_ok[0]) continue;
        }
        int sides = miss_feat[f] ? 2 : 1;
        for (int64_t t = 0; t < nb; t++) {
            const double s0 = cum[3 * t], s1 = cum[3 * t + 1], s2 = cum[3 * t + 2];
            for (int side = 0; side < sides; side++) {
                double gl, hl, nl;
                if (side == 0) {
                    gl = s0 + m0; hl = s1 + m1; nl = s2 + m2;
                } else {
                    gl = s0; hl = s1; nl = s2;
                }
                double gr = T0 - gl, hr = T1 - hl, nr = T2 - nl;
                int ok = (nl < nr ? nl : nr) >= msl_half && (hl < hr ? hl : hr) >= mcw;
                double dl = hl + lam, dr = hr + lam;
                if (check_den) ok = ok && (dl < dr ? dl : dr) > 0;
                if (!ok) continue; /* gain -inf: never the maximum */
                double gain = gl * gl / dl + gr * gr / dr;
                if (isnan(gain)) { seen_nan = 1; continue; }
                if (gain > best) {
                    best = gain; bf = f; bt = t; bdl = side == 0; bnl = nl; bnr = nr;
                }
            }
        }
    }
    out[0] = best;
    out[1] = parent;
    out[2] = (double)bf;
    out[3] = (double)bt;
    out[4] = (double)bdl;
    out[5] = (double)seen_nan;
    out[6] = bnl;
    out[7] = bnr;
}

/* best_split_impl with its scratch: cum holds the cumulative sums of one feature's value
 * bins, 3 * (S - 1) doubles (on the stack up to 256 value bins, else allocated; out[5] = 1,
 * "no split", when that allocation fails). */
void trb_best_split(const double *hist, int64_t F, int64_t S, const int64_t *num_bins,
                    const uint8_t *feat_ok, const uint8_t *miss_feat, int64_t Vm, double lam,
                    double msl_half, double mcw, double *out)
{
    double stack[3 * 256];
    double *cum = S - 1 <= 256 ? stack : (double *)malloc(sizeof(double) * 3 * (size_t)(S - 1));
    if (cum == NULL) {
        out[0] = -INFINITY;
        out[5] = 1.0;
        return;
    }
    best_split_impl(hist, F, S, num_bins, feat_ok, miss_feat, Vm, lam, msl_half, mcw, cum, out);
    if (cum != stack) free(cum);
}

/* The best question of one level of an oblivious tree from its B nodes' histograms hist
 * (B, F, S, 3): for every candidate (f, t, side) in (feature, bin, NaN left / NaN right)
 * order, the level gain is the sum over the nodes, in node order, of
 * T(G_L, H_L) + T(G_R, H_R) - T(G, H) (T(g, h) = g^2 / (h + lam), 0 where h + lam <= 0; the
 * node totals G, H of feature 0), allowed when every non-empty child has >= msl_half rows and
 * >= mcw weight. cum: scratch of B * 256 * 3 doubles. out[0] = best level gain (NaN when a
 * NaN gain was met, -inf when no candidate is allowed), out[1] = the sum of the nodes'
 * parent terms, out[2..4] = feature, bin, default_left. The arithmetic is that of the torch
 * reference (learners/oblivious.py), bit for bit. */
static double obl_term(double g, double h, double lam)
{
    double d = h + lam;
    return d > 0 ? g * g / d : 0.0;
}

void trb_oblivious_level(const double *hist, int64_t B, int64_t F, int64_t S,
                         const int64_t *num_bins, const uint8_t *feat_ok, const uint8_t *miss_feat,
                         int64_t Vm, double lam, double msl_half, double mcw, double *cum,
                         double *parent, double *out)
{
    const int64_t V = S - 1;
    double best = -INFINITY, psum = 0.0;
    int64_t bf = 0, bt = 0, bdl = 1;
    int seen_nan = 0;
    for (int64_t j = 0; j < B; j++) { /* node totals of feature 0 (as the reference) */
        const double *h0 = hist + (j * F) * S * CH;
        int64_t nb = num_bins[0] < Vm ? num_bins[0] : Vm;
        double c0 = 0.0, c1 = 0.0;
        for (int64_t t = 0; t < Vm; t++) {
            if (t < nb) { c0 += h0[t * CH]; c1 += h0[t * CH + 1]; }
            else { c0 += 0.0; c1 += 0.0; }
        }
        parent[j] = obl_term(c0 + h0[V * CH], c1 + h0[V * CH + 1], lam);
        psum = j == 0 ? parent[0] : psum + parent[j];
    }
    for (int64_t f = 0; f < F; f++) {
        if (!feat_ok[f]) continue;
        int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
        if (nb > 256) nb = 256;
        for (int64_t j = 0; j < B; j++) {
            const double *hf = hist + (j * F + f) * S * CH;
            double *cj = cum + j * 256 * 3;
            double c0 = 0.0, c1 = 0.0, c2 = 0.0;
            for (int64_t t = 0; t < nb; t++) {
                c0 += hf[t * CH]; c1 += hf[t * CH + 1]; c2 += hf[t * CH + 2];
                cj[3 * t] = c0; cj[3 * t + 1] = c1; cj[3 * t + 2] = c2;
            }
        }
        int sides = miss_feat[f] ? 2 : 1;
        for (int64_t t = 0; t < nb; t++) {
            for (int side = 0; side < sides; side++) {
                double acc = 0.0;
                int ok = 1;
                for (int64_t j = 0; j < B && ok; j++) {
                    const double *hf = hist + (j * F + f) * S * CH;
                    const double *cj = cum + j * 256 * 3;
                    const double m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
                    const double *ce = cj + 3 * (nb - 1);
                    const double T0 = ce[0] + m0, T1 = ce[1] + m1, T2 = ce[2] + m2;
                    double gl = cj[3 * t], hl = cj[3 * t + 1], nl = cj[3 * t + 2];
                    if (side == 0) { gl = gl + m0; hl = hl + m1; nl = nl + m2; }
                    double gr = T0 - gl, hr = T1 - hl, nr = T2 - nl;
                    ok = (nl < 0.5 || (nl >= msl_half && hl >= mcw))
                         && (nr < 0.5 || (nr >= msl_half && hr >= mcw));
                    double g = obl_term(gl, hl, lam) + obl_term(gr, hr, lam) - parent[j];
                    acc = j == 0 ? g : acc + g;
                }
                if (!ok) continue;
                if (isnan(acc)) { seen_nan = 1; continue; }
                if (acc > best) { best = acc; bf = f; bt = t; bdl = side == 0; }
            }
        }
    }
    out[0] = seen_nan ? NAN : best;
    out[1] = psum;
    out[2] = (double)bf;
    out[3] = (double)bt;
    out[4] = (double)bdl;
}

/* The per-node gains and left row counts of one candidate of an oblivious level: feature f,
 * bin t (< its value bins), NaN left when dleft; gain[j] = T(G_L, H_L) + T(G_R, H_R) -
 * parent[j] and left_count[j] = the left child's rows, for the B nodes of hist (B, F, S, 3):
 * the terms trb_oblivious_level sums, with its arithmetic (and the torch reference's). */
void trb_oblivious_nodes(const double *hist, int64_t B, int64_t F, int64_t S,
                         const int64_t *num_bins, int64_t Vm, double lam, int64_t f, int64_t t,
                         int dleft, const double *parent, double *gain, double *left_count)
{
    const int64_t V = S - 1;
    int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
    if (nb > 256) nb = 256;
    for (int64_t j = 0; j < B; j++) {
        const double *hf = hist + (j * F + f) * S * CH;
        double c0 = 0.0, c1 = 0.0, c2 = 0.0, l0 = 0.0, l1 = 0.0, l2 = 0.0;
        for (int64_t b = 0; b < nb; b++) {
            c0 += hf[b * CH]; c1 += hf[b * CH + 1]; c2 += hf[b * CH + 2];
            if (b == t) { l0 = c0; l1 = c1; l2 = c2; }
        }
        const double m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
        const double T0 = c0 + m0, T1 = c1 + m1;
        double gl = l0, hl = l1, nl = l2;
        if (dleft) { gl = gl + m0; hl = hl + m1; nl = nl + m2; }
        double gr = T0 - gl, hr = T1 - hl;
        gain[j] = obl_term(gl, hl, lam) + obl_term(gr, hr, lam) - parent[j];
        left_count[j] = nl;
    }
}

/* Leaf index of every row of raw features X (n, F) (float64, or float32 when is_f32): x <=
 * threshold goes left, NaN to the default side. */
void trb_tree_leaves_raw(const void *X, int is_f32, int64_t n, int64_t F,
                         const int64_t *split_feature, const double *threshold,
                         const uint8_t *default_left, const int64_t *left_child,
                         const int64_t *right_child, int64_t K, int64_t *leaf, int nthreads)
{
    int nt = nthreads < 1 ? 1 : nthreads;
    if (n < 65536) nt = 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        if (K == 0) { leaf[i] = 0; continue; }
        int64_t node = 0;
        while (node >= 0) {
            int64_t j = i * F + split_feature[node];
            double x = is_f32 ? (double)((const float *)X)[j] : ((const double *)X)[j];
            int go = isnan(x) ? default_left[node] : (x <= threshold[node]);
            node = go ? left_child[node] : right_child[node];
        }
        leaf[i] = ~node;
    }
}

/* One block rows[i0..i1) of a partition by the split (f, t, default_left): its left rows
 * to left[0..), its right rows to right[0..), each in their original order (left may be
 * rows + i0 itself: it is written behind the reads). Returns the number of left rows and
 * sets *n_right. Instantiated for uint8 and int16 codes. */
#define TRB_PART_BLOCK(NAME, T)                                                           \
    static inline int64_t NAME(const T *codes, int64_t F, const int32_t *rows, int64_t i0,  \
                               int64_t i1, int64_t f, int64_t t, int dleft, int miss,       \
                               int32_t *left, int32_t *right, int64_t *n_right)             \
    {                                                                                       \
        int64_t nl = 0, nr = 0;                                                             \
        for (int64_t i = i0; i < i1; i++) {                                                 \
            int32_t r = rows[i];                                                            \
            if (i + 2 * PREFETCH_AHEAD < i1)                                                \
                __builtin_prefetch(codes + (int64_t)rows[i + 2 * PREFETCH_AHEAD] * F + f);  \
            int c = codes[(int64_t)r * F + f];                                              \
            int go = (c == miss) ? dleft : (c <= t);                                        \
            if (go) left[nl++] = r;                                                         \
            else right[nr++] = r;                                                           \
        }                                                                                   \
        *n_right = nr;                                                                      \
        return nl;                                                                          \
    }
TRB_PART_BLOCK(part_block8, uint8_t)
TRB_PART_BLOCK(part_block16, int16_t)

static inline int64_t part_block(const void *codes, int wide, int64_t F, const int32_t *rows,
                                 int64_t i0, int64_t i1, int64_t f, int64_t t, int dleft,
                                 int miss, int32_t *left, int32_t *right, int64_t *n_right)
{
    return wide ? part_block16((const int16_t *)codes, F, rows, i0, i1, f, t, dleft, miss, left,
                               right, n_right)
                : part_block8((const uint8_t *)codes, F, rows, i0, i1, f, t, dleft, miss, left,
                              right, n_right);
}

/* Stable partition of rows[0..m) by the split (f, t, default_left): left rows first, then
 * right rows, each in their original order. Returns the number of left rows. codes: uint8,
 * or int16 when wide. */
static int64_t partition_serial(const void *codes, int wide, int64_t F, int32_t *rows, int64_t m,
                                int64_t f, int64_t t, int dleft, int miss, int32_t *scratch)
{
    int64_t nr;
    int64_t nl = part_block(codes, wide, F, rows, 0, m, f, t, dleft, miss, rows, scratch, &nr);
    memcpy(rows + nl, scratch, sizeof(int32_t) * (size_t)nr);
    return nl;
}

#define MAX_THREADS 256

/* The same partition with nthreads threads over contiguous blocks of rows: pass 1 sorts each
 * block's rows into its left rows (in scratch) and right rows (in a temporary buffer), pass 2
 * copies them to their offsets (prefix sums of the blocks' counts). The result is the serial
 * one. */
static int64_t partition_mt(const void *codes, int wide, int64_t F, int32_t *rows, int64_t m,
                            int64_t f, int64_t t, int dleft, int miss, int32_t *scratch,
                            int nthreads)
{
    int nt = nthreads;
    if (nt > MAX_THREADS) nt = MAX_THREADS;
    if (nt <= 1 || m < 65536)
        return partition_serial(codes, wide, F, rows, m, f, t, dleft, miss, scratch);
    int32_t *tmp = (int32_t *)malloc(sizeof(int32_t) * (size_t)m);
    if (tmp == NULL) return partition_serial(codes, wide, F, rows, m, f, t, dleft, miss, scratch);
    int64_t nls[MAX_THREADS + 1];
    int64_t total_left = 0;
#pragma omp parallel num_threads(nt)
    {
        int tid = 0, T = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        int64_t i0 = m * tid / T, i1 = m * (tid + 1) / T, nr;
        int64_t nl = part_block(codes, wide, F, rows, i0, i1, f, t, dleft, miss, scratch + i0,
                                tmp + i0, &nr);
        nls[tid] = nl;
#pragma omp barrier
#pragma omp single
        {
            int64_t acc = 0;
            for (int k = 0; k < T; k++) { int64_t v = nls[k]; nls[k] = acc; acc += v; }
            total_left = acc;
        }
        /* rows before this block: i0 = (lefts before) + (rights before) */
        memcpy(rows + nls[tid], scratch + i0, sizeof(int32_t) * (size_t)nl);
        memcpy(rows + total_left + (i0 - nls[tid]), tmp + i0, sizeof(int32_t) * (size_t)nr);
    }
    free(tmp);
    return total_left;
}

int64_t trb_partition_mt(const uint8_t *codes, int64_t F, int32_t *rows, int64_t m, int64_t f,
                         int64_t t, int dleft, int miss, int32_t *scratch, int nthreads)
{
    return partition_mt(codes, 0, F, rows, m, f, t, dleft, miss, scratch, nthreads);
}

int64_t trb_partition(const uint8_t *codes, int64_t F, int32_t *rows, int64_t m, int64_t f,
                      int64_t t, int dleft, int miss, int32_t *scratch)
{
    return partition_serial(codes, 0, F, rows, m, f, t, dleft, miss, scratch);
}

/* Per-leaf sums (Σ w·t, Σ w) in row order over the leaves' row ranges
 * rows[begin[k] .. begin[k] + count[k]). */
void trb_leaf_sums_mt(const int32_t *rows, const int64_t *begin, const int64_t *count, int64_t L,
                      const double *gh, double *out, int nthreads)
{
    int64_t total = 0;
    for (int64_t k = 0; k < L; k++) total += count[k];
    int nt = (nthreads > 1 && total >= 65536) ? nthreads : 1;
    /* leaves in parallel, each summed sequentially in row order: the same sums */
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t k = 0; k < L; k++) {
        double a = 0.0, b = 0.0;
        const int32_t *rk = rows + begin[k];
        for (int64_t i = 0; i < count[k]; i++) {
            a += gh[2 * (int64_t)rk[i]];
            b += gh[2 * (int64_t)rk[i] + 1];
        }
        out[2 * k] = a;
        out[2 * k + 1] = b;
    }
}

void trb_leaf_sums(const int32_t *rows, const int64_t *begin, const int64_t *count, int64_t L,
                   const double *gh, double *out)
{
    trb_leaf_sums_mt(rows, begin, count, L, gh, out, 1);
}

/* Leaf index of every row of codes (n, F) in a tree (internal nodes 0..K-1, children >= 0
 * internal, < 0 leaf ~child); K == 0: leaf 0. trb_tree_leaves: uint8 codes;
 * trb_tree_leaves16: int16 codes (more than 255 bins). */
#define TRB_TREE_LEAVES(NAME, T)                                                           \
    void NAME(const T *codes, int64_t n, int64_t F, const int64_t *split_feature,            \
              const int64_t *threshold_bin, const uint8_t *default_left,                     \
              const int64_t *left_child, const int64_t *right_child, int64_t K, int miss,    \
              int64_t *leaf, int nthreads)                                                   \
    {                                                                                        \
        int nt = nthreads < 1 ? 1 : nthreads;                                                \
        if (n < 65536) nt = 1;                                                               \
        _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")             \
        for (int64_t i = 0; i < n; i++) {                                                    \
            if (K == 0) { leaf[i] = 0; continue; }                                           \
            int64_t node = 0;                                                                \
            const T *c = codes + i * F;                                                      \
            while (node >= 0) {                                                              \
                int code = c[split_feature[node]];                                           \
                int go = (code == miss) ? default_left[node] : (code <= threshold_bin[node]); \
                node = go ? left_child[node] : right_child[node];                            \
            }                                                                                \
            leaf[i] = ~node;                                                                 \
        }                                                                                    \
    }
TRB_TREE_LEAVES(trb_tree_leaves, uint8_t)
TRB_TREE_LEAVES(trb_tree_leaves16, int16_t)

/* ---------------------------------------------------------------------------- whole tree
 *
 * trb_grow: the best-first growth of torch_backend.py in one call. Leaves keep the
 * reference's list order (a split puts the left child at the parent's position and appends the
 * right child), so the leaf of largest gain is the first maximum in that order, as there.
 *
 * Data-parallel training: every decision is taken from histograms only (row counts included),
 * so when `reduce` is given it is called on every histogram this rank builds (the root's and
 * each smaller child's: F*S*3 doubles) and on the leaf sums (L*2 doubles), and must replace
 * them by their sum over all ranks; every rank then grows the same tree on its own rows.
 */
typedef void (*trb_reduce_fn)(double *buf, int64_t len);

typedef struct {
    int64_t id, begin, count, depth, parent, is_left, hist;
    int has_best;
    double gain, nl, nr;
    int64_t f, t, dl;
} leaf_t;

static double node_count(const double *hist, int64_t S, int64_t nb0)
{
    /* feature 0's row counts over its used slots: the node's row count, exactly */
    double c = 0.0;
    if (nb0 > S - 1) nb0 = S - 1;
    for (int64_t b = 0; b < nb0; b++) c += hist[b * CH + 2];
    return c + hist[(S - 1) * CH + 2];
}

static void evaluate_leaf(leaf_t *lf, const double *hist, int64_t F, int64_t S,
                          const int64_t *num_bins, const uint8_t *feat_ok, const uint8_t *miss_feat,
                          int64_t Vm, double lam, int64_t msl, double mcw, double min_split_gain,
                          int64_t max_depth, int any_ok, double *cum)
{
    lf->has_best = 0;
    if (lf->depth >= max_depth || !any_ok || F == 0 || Vm < 1) return;
    if (node_count(hist, S, num_bins[0]) < 2.0 * (double)msl) return;
    double out[8];
    best_split_impl(hist, F, S, num_bins, feat_ok, miss_feat, Vm, lam, msl - 0.5, mcw, cum, out);
    double bg = out[0], pa = out[1];
    if (out[5] != 0.0 || !isfinite(bg)) return;
    double gain_b = bg - pa;
    double floor_ = 1e-10 * fabs(pa);
    if (!(gain_b > (min_split_gain > floor_ ? min_split_gain : floor_))) return;
    lf->has_best = 1;
    lf->gain = gain_b;
    lf->f = (int64_t)out[2];
    lf->t = (int64_t)out[3];
    lf->dl = out[4] == 1.0;
    lf->nl = out[6];
    lf->nr = out[7];
}

/* The arguments of trb_grow (one struct instead of three dozen positional arguments; the
 * ctypes Structure GrowArgs of native_backend.py mirrors it field for field). */
typedef struct {
    /* the data: codes (n, F) (uint8, or int16 when code_bytes == 2), the fit's rows[0..m)
     * (partitioned in place; all_rows: rows holds 0..n-1 and the root histogram skips the
     * gather), gh (n, 2) = (w·t, w) */
    const void *codes;
    int64_t n, F;
    int32_t *rows;
    int64_t m, all_rows;
    const double *gh;
    int64_t S;                  /* histogram slots: missing code + 1 */
    const int64_t *num_bins;    /* (F,) value bins per feature */
    const uint8_t *feat_ok;     /* (F,) features this tree may split on */
    int64_t Vm;                 /* max value bins, <= S - 1 */
    /* the settings */
    double l2;
    int64_t min_samples_leaf;
    double min_child_weight, min_split_gain;
    int64_t max_leaves, max_depth, missing_code, nthreads;
    trb_reduce_fn reduce;       /* NULL in one process */
    /* work buffers: pool (pool_size, F, S, 3), free_list (pool_size,), scratch (m,),
     * miss_feat (F,), leaves (pool_size leaf_t), order (pool_size,) */
    double *pool;
    int64_t pool_size;
    int64_t *free_list;
    int32_t *scratch;
    uint8_t *miss_feat;
    leaf_t *leaves;
    int64_t *order;
    /* outputs: the internal nodes (max_leaves - 1 of each at most), the depth, and per leaf
     * id the sums (L, 2) and the row range [leaf_begin, leaf_begin + leaf_count) in rows */
    int64_t *split_feature, *threshold_bin;
    uint8_t *default_left;
    int64_t *left_child, *right_child;
    double *split_gain;
    int64_t *depth_out;
    double *leaf_sums;
    int64_t *leaf_begin, *leaf_count;
    /* the width of a code (1: uint8, 2: int16) and the split search's scratch: 3 * (S - 1)
     * doubles */
    int64_t code_bytes;
    double *cum;
} trb_grow_args;

int64_t trb_grow_args_size(void) { return (int64_t)sizeof(trb_grow_args); }

/* Returns the number of leaves L (or -1 when max_leaves exceeds the buffers). Outputs: the
 * internal nodes (split_feature, threshold_bin, default_left, left_child, right_child,
 * split_gain; K = L - 1 of them), *depth_out, and per leaf id: leaf_sums (L, 2) = (Σ w·t,
 * Σ w) (reduced), leaf_begin / leaf_count into rows (the rank's own rows). */
int64_t trb_grow(const trb_grow_args *a)
{
    const void *codes = a->codes;
    const int wide = a->code_bytes == 2;
    double *cum = a->cum;
    const int64_t n = a->n, F = a->F, m = a->m, S = a->S, Vm = a->Vm;
    int32_t *rows = a->rows, *scratch = a->scratch;
    const int all_rows = a->all_rows != 0;
    const double *gh = a->gh;
    const int64_t *num_bins = a->num_bins;
    const uint8_t *feat_ok = a->feat_ok;
    const double lam = a->l2, mcw = a->min_child_weight, min_split_gain = a->min_split_gain;
    const int64_t msl = a->min_samples_leaf, max_leaves = a->max_leaves, max_depth = a->max_depth;
    const int miss_code = (int)a->missing_code, nthreads = (int)a->nthreads;
    trb_reduce_fn reduce = a->reduce;
    double *pool = a->pool;
    const int64_t pool_size = a->pool_size;
    int64_t *free_list = a->free_list, *order = a->order;
    uint8_t *miss_feat = a->miss_feat;
    leaf_t *leaves = a->leaves;
    int64_t *split_feature = a->split_feature, *threshold_bin = a->threshold_bin;
    uint8_t *default_left = a->default_left;
    int64_t *left_child = a->left_child, *right_child = a->right_child;
    double *split_gain = a->split_gain, *leaf_sums = a->leaf_sums;
    int64_t *leaf_begin = a->leaf_begin, *leaf_count = a->leaf_count;
    const int64_t HS = F * S * CH;
    if (max_leaves > pool_size || max_leaves < 1 || (a->code_bytes != 1 && a->code_bytes != 2)
        || cum == NULL)
        return -1;
    int64_t n_free = pool_size;
    for (int64_t i = 0; i < pool_size; i++) free_list[i] = pool_size - 1 - i;
    int any_ok = 0;
    for (int64_t f = 0; f < F; f++) any_ok |= feat_ok[f] != 0;

    int64_t L = 1, K = 0, depth = 0;
    leaf_t *root = &leaves[0];
    root->id = 0; root->begin = 0; root->count = m; root->depth = 0; root->parent = -1;
    root->is_left = 1; root->hist = free_list[--n_free];
    double *rh = pool + root->hist * HS;
    node_histogram(codes, wide, n, F, all_rows ? NULL : rows, m, gh, rh, S, nthreads, num_bins);
    if (reduce) reduce(rh, HS);
    for (int64_t f = 0; f < F; f++) miss_feat[f] = rh[(f * S + S - 1) * CH + 2] > 0;
    order[0] = 0;
    evaluate_leaf(root, rh, F, S, num_bins, feat_ok, miss_feat, Vm, lam, msl, mcw, min_split_gain,
                  max_depth, any_ok, cum);
    while (L < max_leaves) {
        int64_t pos = -1;
        double bestg = 0.0;
        for (int64_t i = 0; i < L; i++) {
            leaf_t *lf = &leaves[order[i]];
            if (lf->has_best && (pos < 0 || lf->gain > bestg)) { pos = i; bestg = lf->gain; }
        }
        if (pos < 0) break;
        leaf_t *lf = &leaves[order[pos]];
        int64_t nl = partition_mt(codes, wide, F, rows + lf->begin, lf->count, lf->f, lf->t,
                                  (int)lf->dl, miss_code, scratch, nthreads);
        int64_t nr = lf->count - nl;
        int64_t k = K++;
        split_feature[k] = lf->f; threshold_bin[k] = lf->t; default_left[k] = (uint8_t)lf->dl;
        split_gain[k] = lf->gain;
        left_child[k] = ~lf->id; right_child[k] = ~L;
        if (lf->parent >= 0) {
            if (lf->is_left) left_child[lf->parent] = k; else right_child[lf->parent] = k;
        }
        /* the smaller child (by the row counts of the histogram, global when data-parallel:
         * the same choice on every rank) gets a new histogram; the parent's buffer becomes
         * the larger child's */
        double nlg = lf->nl, nrg = lf->nr;
        int small_left = nlg <= nrg;
        int64_t hs_idx = free_list[--n_free];
        double *hs = pool + hs_idx * HS, *hp = pool + lf->hist * HS;
        int64_t d = lf->depth + 1;
        /* children that can never be split (this split makes the last leaf, or both are too
         * deep or too small: evaluate_leaf would give has_best = 0 from these same global
         * counts) need no histograms: LightGBM skips them too. The decision is the same on
         * every rank, so the reduce calls still match. */
        int final = L + 1 >= max_leaves || d >= max_depth || !any_ok || F == 0 || Vm < 1
                    || (nlg < 2.0 * (double)msl && nrg < 2.0 * (double)msl);
        if (!final) {
            if (small_left)
                node_histogram(codes, wide, n, F, rows + lf->begin, nl, gh, hs, S, nthreads,
                               num_bins);
            else
                node_histogram(codes, wide, n, F, rows + lf->begin + nl, nr, gh, hs, S, nthreads,
                               num_bins);
            if (reduce) reduce(hs, HS);
            subtract_used(hp, hs, hp, F, S, num_bins, nthreads);
        }
        leaf_t *left = &leaves[lf->id], *right = &leaves[L];
        int64_t parent_hist = lf->hist, id = lf->id, begin = lf->begin;
        right->id = L; right->begin = begin + nl; right->count = nr; right->depth = d;
        right->parent = k; right->is_left = 0; right->hist = small_left ? parent_hist : hs_idx;
        left->id = id; left->begin = begin; left->count = nl; left->depth = d;
        left->parent = k; left->is_left = 1; left->hist = small_left ? hs_idx : parent_hist;
        if (d > depth) depth = d;
        order[L] = L; /* the right child is appended; the left keeps the parent's position */
        L++;
        if (final) {
            left->has_best = 0;
            right->has_best = 0;
            continue;
        }
        evaluate_leaf(left, pool + left->hist * HS, F, S, num_bins, feat_ok, miss_feat, Vm, lam,
                      msl, mcw, min_split_gain, max_depth, any_ok, cum);
        evaluate_leaf(right, pool + right->hist * HS, F, S, num_bins, feat_ok, miss_feat, Vm,
                      lam, msl, mcw, min_split_gain, max_depth, any_ok, cum);
    }
    for (int64_t id = 0; id < L; id++) {
        leaf_begin[id] = leaves[id].begin;
        leaf_count[id] = leaves[id].count;
    }
    trb_leaf_sums_mt(rows, leaf_begin, leaf_count, L, gh, leaf_sums, nthreads);
    if (reduce) reduce(leaf_sums, 2 * L);
    *a->depth_out = depth;
    return L;
}

int64_t trb_leaf_struct_size(void) { return (int64_t)sizeof(leaf_t); }

/* out[rows[leaf_begin[k] + i]] = value[k] for every leaf k: the tree's output on the rows it
 * was grown on, from the partition (no traversal). */
void trb_scatter_leaves(const int32_t *rows, const int64_t *leaf_begin, const int64_t *leaf_count,
                        int64_t L, const double *value, double *out, int nthreads)
{
    int64_t total = 0;
    for (int64_t k = 0; k < L; k++) total += leaf_count[k];
    int nt = (nthreads > 1 && total >= 65536) ? nthreads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t k = 0; k < L; k++) {
        const int32_t *rk = rows + leaf_begin[k];
        double v = value[k];
        for (int64_t i = 0; i < leaf_count[k]; i++) out[rk[i]] = v;
    }
}

/* Scores of an ensemble of trees on raw features X (n, F) (float64, or float32 when is_f32):
 * out[i] += w[t] * value[leaf_t(x_i)] for t = 0..T-1 in round order (out holds the base
 * score), every tree of a row before the next row (cache-friendly). Tree t's nodes are
 * node_off[t] .. node_off[t+1) of the packed arrays (children local to the tree: >= 0
 * internal node, < 0 leaf ~child, leaf values at leaf_off[t]); thr_f32[t]: the tree compares
 * in float32 (x rounded to float32 first, as TreeModel.predict converts X to its thresholds'
 * dtype). The arithmetic of Ensemble.predict's per-round loop, bit for bit. */
void trb_predict_trees(const void *X, int is_f32, int64_t n, int64_t F, int64_t T,
                       const int64_t *node_off, const int64_t *leaf_off, const uint8_t *thr_f32,
                       const int64_t *split_feature, const double *threshold,
                       const uint8_t *default_left, const int64_t *left_child,
                       const int64_t *right_child, const double *value, const double *w,
                       double *out, int nthreads)
{
    int nt = nthreads < 1 ? 1 : nthreads;
    if (n * T < 65536) nt = 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double acc = out[i];
        for (int64_t t = 0; t < T; t++) {
            const int64_t o = node_off[t];
            int64_t node = node_off[t + 1] > o ? 0 : -1; /* no internal node: leaf 0 */
            while (node >= 0) {
                int64_t k = o + node;
                int64_t j = i * F + split_feature[k];
                double x = is_f32 ? (double)((const float *)X)[j] : ((const double *)X)[j];
                if (thr_f32[t] && !is_f32) x = (double)(float)x;
                int go = isnan(x) ? default_left[k] : (x <= threshold[k]);
                node = go ? left_child[k] : right_child[k];
            }
            acc += w[t] * value[leaf_off[t] + ~node];
        }
        out[i] = acc;
    }
}

/* Bin codes of raw values X (n, F) with upper edges E (F, B), both float32 (is_f32) or both
 * float64, row-major: code = #{b : E[f, b] < x} (a lower bound: torch.searchsorted(side=
 * "left") on each feature's ascending, +inf-padded, NaN-free edges), NaN -> missing; out is
 * (n, F) uint8, or int16 when out16. Rows are split across the threads. */
#define TRB_BIN_ROWS(T)                                                              \
    for (int64_t i = i0; i < i1; i++) {                                              \
        const T *x = (const T *)X + i * F;                                           \
        for (int64_t f = 0; f < F; f++) {                                            \
            const T v = x[f];                                                        \
            int64_t c;                                                               \
            if (isnan(v)) {                                                          \
                c = missing;                                                         \
            } else {                                                                 \
                const T *e = (const T *)E + f * B, *base = e;                        \
                int64_t len = B;                                                     \
                while (len > 1) { /* branchless lower bound (conditional moves) */   \
                    int64_t half = len >> 1;                                         \
                    base = (base[half] < v) ? base + half : base;                    \
                    len -= half;                                                     \
                }                                                                    \
                c = (base - e) + (B > 0 && *base < v);                               \
            }                                                                        \
            if (out16) ((int16_t *)out)[i * F + f] = (int16_t)c;                     \
            else ((uint8_t *)out)[i * F + f] = (uint8_t)c;                           \
        }                                                                            \
    }

void trb_apply_bins(const void *X, const void *E, int is_f32, int64_t n, int64_t F, int64_t B,
                    int64_t missing, void *out, int out16, int nthreads)
{
    int nt = nthreads < 1 ? 1 : nthreads;
    if ((double)n * (double)F < 262144.0) nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t i0, i1;
        thread_slice(n, &i0, &i1);
        if (is_f32) {
            TRB_BIN_ROWS(float)
        } else {
            TRB_BIN_ROWS(double)
        }
    }
}
