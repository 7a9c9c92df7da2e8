/* Compiled CPU kernels of the histogram tree learner (torchrankboost.boosting.learners).
 *
 * Plain C99 + OpenMP, called through ctypes on the memory of contiguous torch tensors (no
 * Python C API, no torch headers). Every kernel reproduces the pure-torch reference path of
 * learners.py bit for bit:
 *   - histograms accumulate each (feature, bin) in row order (as scatter_add_ does), and the
 *     work is split across threads by FEATURE, so the result does not depend on the number of
 *     threads;
 *   - the split search walks the candidates in the reference's (feature, bin, NaN side) order
 *     and keeps the first maximum, with the same floating-point expressions;
 *   - leaf sums are sequential in row order (as index_add_ is).
 * Build flags keep IEEE semantics: -O2 -ffp-contract=off, never -ffast-math.
 *
 * Layouts: codes (n, F) uint8 row-major; gh (n, 2) float64 = (w·target, w) per row;
 * hist (F, S, 3) float64 = (Σ w·t, Σ w, row count) per (feature, slot), S = missing code + 1
 * (the last slot holds NaNs); rows int32.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CH 3

int trb_abi_version(void) { return 1; }

/* Work below this many (row, feature) updates runs on one thread: a parallel region costs
 * more than it saves on small nodes. */
#define PAR_MIN_WORK 262144
/* rows ahead whose codes are prefetched (measured: 1.1 -> 0.7 ns per update on 30% of 400k rows) */
#define PREFETCH_AHEAD 8

/* hist := Σ over rows (or all n rows when rows == NULL) of (gh[r,0], gh[r,1], 1) at
 * (f, codes[r, f]) for every feature f. */
void trb_histogram(const uint8_t *codes, int64_t n, int64_t F, const int32_t *rows, int64_t m,
                   const double *gh, double *hist, int64_t S, int nthreads)
{
    memset(hist, 0, sizeof(double) * (size_t)(F * S * CH));
    if (rows == NULL) m = n;
    int nt = nthreads;
    if (nt < 1 || (double)m * (double)F < PAR_MIN_WORK) nt = 1;
    if (nt > F) nt = (int)F;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int tid = 0, T = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        int64_t f0 = F * tid / T, f1 = F * (tid + 1) / T;
        for (int64_t i = 0; i < m; i++) {
            int64_t r = rows ? (int64_t)rows[i] : i;
            if (rows && i + PREFETCH_AHEAD < m) {  /* a node's rows are scattered: fetch early */
                const uint8_t *q = codes + (int64_t)rows[i + PREFETCH_AHEAD] * F + f0;
                for (int64_t o = 0; o < f1 - f0; o += 64) __builtin_prefetch(q + o);
            }
            const uint8_t *c = codes + r * F;
            double g = gh[2 * r], h = gh[2 * r + 1];
            for (int64_t f = f0; f < f1; f++) {
                double *p = hist + (f * S + c[f]) * CH;
                p[0] += g;
                p[1] += h;
                p[2] += 1.0;
            }
        }
    }
}

/* out := a - b, elementwise over len doubles (the larger child's histogram). */
void trb_subtract(const double *a, const double *b, double *out, int64_t len)
{
    for (int64_t i = 0; i < len; i++) out[i] = a[i] - b[i];
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
 * gain was met. */
void trb_best_split(const double *hist, int64_t F, int64_t S, const int64_t *num_bins,
                    const uint8_t *feat_ok, const uint8_t *miss_feat, int64_t Vm, double lam,
                    double msl_half, double mcw, double *out)
{
    const int64_t V = S - 1;
    double best = -INFINITY;
    int64_t bf = 0, bt = 0, bdl = 1;
    int seen_nan = 0, any = 0;
    int check_den = !(mcw > 0);
    double parent = 0.0;
    for (int64_t f = 0; f < F; f++) {
        const double *hf = hist + f * S * CH;
        if (f > 0 && !feat_ok[f]) continue;
        /* totals: the sequential sum of the Vm value bins plus the missing slot */
        double c0 = 0.0, c1 = 0.0, c2 = 0.0;
        for (int64_t t = 0; t < Vm; t++) {
            c0 += hf[t * CH];
            c1 += hf[t * CH + 1];
            c2 += hf[t * CH + 2];
        }
        const double m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
        const double T0 = c0 + m0, T1 = c1 + m1, T2 = c2 + m2;
        if (f == 0) {
            double d0 = T1 + lam;
            parent = d0 > 0 ? T0 * T0 / d0 : 0.0;
            if (!feat_ok[0]) continue;
        }
        int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
        int sides = miss_feat[f] ? 2 : 1;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0;
        for (int64_t t = 0; t < nb; t++) {
            s0 += hf[t * CH];
            s1 += hf[t * CH + 1];
            s2 += hf[t * CH + 2];
            for (int side = 0; side < sides; side++) {
                double gl, hl, nl;
                if (side == 0) {
                    gl = s0 + m0; hl = s1 + m1; nl = s2 + m2;
                } else {
                    gl = s0; hl = s1; nl = s2;
                }
                double gr = T0 - gl, hr = T1 - hl, nr = T2 - nl;
                double dl = hl + lam, dr = hr + lam;
                double gain = gl * gl / dl + gr * gr / dr;
                int ok = (nl < nr ? nl : nr) >= msl_half && (hl < hr ? hl : hr) >= mcw;
                if (check_den) ok = ok && (dl < dr ? dl : dr) > 0;
                if (!ok) gain = -INFINITY;
                any = 1;
                if (isnan(gain)) { seen_nan = 1; continue; }
                if (gain > best) {
                    best = gain; bf = f; bt = t; bdl = side == 0;
                }
            }
        }
    }
    (void)any;
    out[0] = best;
    out[1] = parent;
    out[2] = (double)bf;
    out[3] = (double)bt;
    out[4] = (double)bdl;
    out[5] = (double)seen_nan;
}

/* Stable partition of rows[0..m) by the split (f, t, default_left): left rows first, then
 * right rows, each in their original order. Returns the number of left rows. */
int64_t trb_partition(const uint8_t *codes, int64_t F, int32_t *rows, int64_t m, int64_t f,
                      int64_t t, int dleft, int miss, int32_t *scratch)
{
    int64_t nl = 0, nr = 0;
    for (int64_t i = 0; i < m; i++) {
        int32_t r = rows[i];
        if (i + 2 * PREFETCH_AHEAD < m) __builtin_prefetch(codes + (int64_t)rows[i + 2 * PREFETCH_AHEAD] * F + f);
        int c = codes[(int64_t)r * F + f];
        int go = (c == miss) ? dleft : (c <= t);
        if (go) rows[nl++] = r;
        else scratch[nr++] = r;
    }
    memcpy(rows + nl, scratch, sizeof(int32_t) * (size_t)nr);
    return nl;
}

/* Per-leaf sums (Σ w·t, Σ w) in row order over the leaves' row ranges
 * rows[begin[k] .. begin[k] + count[k]). */
void trb_leaf_sums(const int32_t *rows, const int64_t *begin, const int64_t *count, int64_t L,
                   const double *gh, double *out)
{
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

/* Leaf index of every row of codes (n, F) in a tree (internal nodes 0..K-1, children >= 0
 * internal, < 0 leaf ~child); K == 0: leaf 0. */
void trb_tree_leaves(const uint8_t *codes, int64_t n, int64_t F, const int64_t *split_feature,
                     const int64_t *threshold_bin, const uint8_t *default_left,
                     const int64_t *left_child, const int64_t *right_child, int64_t K, int miss,
                     int64_t *leaf, int nthreads)
{
    int nt = nthreads < 1 ? 1 : nthreads;
    if (n < 65536) nt = 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        if (K == 0) { leaf[i] = 0; continue; }
        int64_t node = 0;
        const uint8_t *c = codes + i * F;
        while (node >= 0) {
            int code = c[split_feature[node]];
            int go = (code == miss) ? default_left[node] : (code <= threshold_bin[node]);
            node = go ? left_child[node] : right_child[node];
        }
        leaf[i] = ~node;
    }
}
