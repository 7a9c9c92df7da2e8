/* Compiled CPU kernels of the histogram tree learner (torchrankboost.kernels,
 * native_backend.py).
 *
 * Plain C99 + OpenMP, called through ctypes on the memory of contiguous torch tensors (no
 * Python C API, no torch headers). Every kernel reproduces the pure-torch reference path of
 * torch_backend.py bit for bit:
 *   - histograms are int64 sums of the fixed-point channels (kernels/fixed_point.py): exact,
 *     so the same for any row order and any split of the work (threads split by FEATURE);
 *   - the split search walks the candidates in the reference's (feature, bin, NaN side) order
 *     and keeps the first maximum; its left / right sums are exact integer sums, each
 *     converted once to float64 ((double)Q * scale, scale = 2^-shift) and the gains computed
 *     with the reference's floating-point expressions;
 *   - leaf sums are the integer sums of the leaves (the chosen splits' sides): exact.
 * Build flags keep IEEE semantics: -O2 -ffp-contract=off, never -ffast-math.
 *
 * Layouts: codes (n, F) uint8 row-major (int16 above 255 bins: the *16 variants, and
 * trb_grow with code_bytes = 2); q (n, 2) int64 = (q_wt, q_w) per row, the fixed point of
 * (w·target, w); hist (F, S, 3) int64 = (Σ q_wt, Σ q_w, row count) per (feature, slot),
 * S = missing code + 1 (the last slot holds NaNs); rows int32. A fit's sums stay below 2^62
 * (the fixed point's choice of scale), so no int64 sum or difference here overflows.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CH 3

int trb_abi_version(void) { return 9; }

#include "trees_hist.h"

/* The best split of one node (best_split_impl's result). */
typedef struct {
    double gain;      /* the best raw gain GL²/(HL+λ) + GR²/(HR+λ) (-inf when none) */
    double parent;    /* G²/(H+λ) of the node's totals (0 where H + λ <= 0) */
    int64_t f, t, dl; /* its feature, threshold bin, NaN side (1: left) */
    int seen_nan;     /* a NaN gain was met: no split (as torch.max propagates NaN) */
    int64_t l[CH], r[CH]; /* the integer sums of its left and right child */
} split_t;

/* The float64 value of an integer sum: one correctly rounded conversion and an exact
 * multiplication by a power of two (torch: Q.double() * scale). */
static inline double fx(int64_t v, double scale) { return (double)v * scale; }

/* The best split of one node from its int64 histogram.
 *
 * Candidates: feature f with feat_ok[f], threshold bin t < num_bins[f] (t < Vm), NaN going
 * left (side 0) and, where miss_feat[f], NaN going right (side 1). Left sums are the integer
 * cumulative sums of the value bins (+ the missing slot for NaN-left), right = node total -
 * left (exact); with gl = fx(GL, sg), hl = fx(HL, sh), nl = (double)NL (and the same for the
 * right), gain = gl²/(hl+λ) + gr²/(hr+λ) where both children have nl >= msl_half rows and
 * hl >= mcw (and a positive denominator when mcw <= 0). The first maximum wins. cum: scratch
 * of 3 * (S - 1) int64. */
static void best_split_impl(const int64_t *hist, int64_t F, int64_t S, const int64_t *num_bins,
                            const uint8_t *feat_ok, const uint8_t *miss_feat, int64_t Vm,
                            double lam, double msl_half, double mcw, double sg, double sh,
                            int64_t *cum, split_t *out)
{
    const int64_t V = S - 1;
    double best = -INFINITY;
    int64_t bf = 0, bt = 0, bdl = 1;
    int64_t bl[CH] = {0, 0, 0}, br[CH] = {0, 0, 0};
    int seen_nan = 0;
    int check_den = !(mcw > 0);
    double parent = 0.0;
    for (int64_t f = 0; f < F; f++) {
        const int64_t *hf = hist + f * S * CH;
        if (f > 0 && !feat_ok[f]) continue;
        /* cumulative sums of the value bins (bins at or beyond num_bins[f] are empty) */
        int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
        if (nb > V) nb = V; /* cum holds 3 * V int64 */
        int64_t c0 = 0, c1 = 0, c2 = 0;
        for (int64_t t = 0; t < nb; t++) {
            c0 += hf[t * CH];
            c1 += hf[t * CH + 1];
            c2 += hf[t * CH + 2];
            cum[3 * t] = c0;
            cum[3 * t + 1] = c1;
            cum[3 * t + 2] = c2;
        }
        const int64_t m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
        const int64_t T0 = c0 + m0, T1 = c1 + m1, T2 = c2 + m2;
        if (f == 0) {
            double g0 = fx(T0, sg), d0 = fx(T1, sh) + lam;
            parent = d0 > 0 ? g0 * g0 / d0 : 0.0;
            if (!feat_ok[0]) continue;
        }
        int sides = miss_feat[f] ? 2 : 1;
        for (int64_t t = 0; t < nb; t++) {
            const int64_t s0 = cum[3 * t], s1 = cum[3 * t + 1], s2 = cum[3 * t + 2];
            for (int side = 0; side < sides; side++) {
                int64_t GL = s0, HL = s1, NL = s2;
                if (side == 0) { GL += m0; HL += m1; NL += m2; }
                const int64_t GR = T0 - GL, HR = T1 - HL, NR = T2 - NL;
                double gl = fx(GL, sg), hl = fx(HL, sh), nl = (double)NL;
                double gr = fx(GR, sg), hr = fx(HR, sh), nr = (double)NR;
                int ok = (nl < nr ? nl : nr) >= msl_half && (hl < hr ? hl : hr) >= mcw;
                double dl = hl + lam, dr = hr + lam;
                if (check_den) ok = ok && (dl < dr ? dl : dr) > 0;
                if (!ok) continue; /* gain -inf: never the maximum */
                double gain = gl * gl / dl + gr * gr / dr;
                if (isnan(gain)) { seen_nan = 1; continue; }
                if (gain > best) {
                    best = gain; bf = f; bt = t; bdl = side == 0;
                    bl[0] = GL; bl[1] = HL; bl[2] = NL;
                    br[0] = GR; br[1] = HR; br[2] = NR;
                }
            }
        }
    }
    out->gain = best;
    out->parent = parent;
    out->f = bf;
    out->t = bt;
    out->dl = bdl;
    out->seen_nan = seen_nan;
    for (int c = 0; c < CH; c++) { out->l[c] = bl[c]; out->r[c] = br[c]; }
}

/* The best question of one level of an oblivious tree from its B nodes' int64 histograms hist
 * (B, F, S, 3): for every candidate (f, t, side) in (feature, bin, NaN left / NaN right)
 * order, the level gain is the sum over the nodes, in node order, of
 * T(G_L, H_L) + T(G_R, H_R) - T(G, H) (T(g, h) = g^2 / (h + lam), 0 where h + lam <= 0; G, H
 * the nodes' totals), allowed when every non-empty child has >= msl_half rows and >= mcw
 * weight; every G, H is an exact integer sum converted once (fx, scales sg, sh). cum: scratch
 * of B * 256 * 3 int64. out[0] = best level gain (NaN when a NaN gain was met, -inf when no
 * candidate is allowed), out[1] = the sum of the nodes' parent terms, out[2..4] = feature,
 * bin, default_left. The arithmetic is that of the torch reference (kernels/levels.py), bit
 * for bit. */
static double obl_term(double g, double h, double lam)
{
    double d = h + lam;
    return d > 0 ? g * g / d : 0.0;
}

/* The totals of one node's feature f (B, F, S, 3 layout: hf = its (S, 3) slots). */
static void feature_totals(const int64_t *hf, int64_t S, int64_t nb, int64_t *tot)
{
    tot[0] = tot[1] = tot[2] = 0;
    if (nb > S - 1) nb = S - 1;
    for (int64_t b = 0; b < nb; b++)
        for (int c = 0; c < CH; c++) tot[c] += hf[b * CH + c];
    for (int c = 0; c < CH; c++) tot[c] += hf[(S - 1) * CH + c];
}

void trb_oblivious_level(const int64_t *hist, int64_t B, int64_t F, int64_t S,
                         const int64_t *num_bins, const uint8_t *feat_ok, const uint8_t *miss_feat,
                         int64_t Vm, double lam, double msl_half, double mcw, double sg, double sh,
                         int64_t *cum, double *parent, double *out)
{
    const int64_t V = S - 1;
    double best = -INFINITY, psum = 0.0;
    int64_t bf = 0, bt = 0, bdl = 1;
    int seen_nan = 0;
    for (int64_t j = 0; j < B; j++) { /* node totals (feature 0's slots: every row once) */
        int64_t tot[CH];
        feature_totals(hist + (j * F) * S * CH, S, num_bins[0], tot);
        parent[j] = obl_term(fx(tot[0], sg), fx(tot[1], sh), lam);
        psum = j == 0 ? parent[0] : psum + parent[j];
    }
    for (int64_t f = 0; f < F; f++) {
        if (!feat_ok[f]) continue;
        int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
        if (nb > 256) nb = 256;
        for (int64_t j = 0; j < B; j++) {
            const int64_t *hf = hist + (j * F + f) * S * CH;
            int64_t *cj = cum + j * 256 * 3;
            int64_t c0 = 0, c1 = 0, c2 = 0;
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
                    const int64_t *hf = hist + (j * F + f) * S * CH;
                    const int64_t *cj = cum + j * 256 * 3;
                    const int64_t m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
                    const int64_t *ce = cj + 3 * (nb - 1);
                    const int64_t T0 = ce[0] + m0, T1 = ce[1] + m1, T2 = ce[2] + m2;
                    int64_t GL = cj[3 * t], HL = cj[3 * t + 1], NL = cj[3 * t + 2];
                    if (side == 0) { GL += m0; HL += m1; NL += m2; }
                    double gl = fx(GL, sg), hl = fx(HL, sh), nl = (double)NL;
                    double gr = fx(T0 - GL, sg), hr = fx(T1 - HL, sh), nr = (double)(T2 - NL);
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
void trb_oblivious_nodes(const int64_t *hist, int64_t B, int64_t F, int64_t S,
                         const int64_t *num_bins, int64_t Vm, double lam, double sg, double sh,
                         int64_t f, int64_t t, int dleft, const double *parent, double *gain,
                         double *left_count)
{
    const int64_t V = S - 1;
    int64_t nb = num_bins[f] < Vm ? num_bins[f] : Vm;
    if (nb > 256) nb = 256;
    for (int64_t j = 0; j < B; j++) {
        const int64_t *hf = hist + (j * F + f) * S * CH;
        int64_t c0 = 0, c1 = 0, l0 = 0, l1 = 0, l2 = 0, c2 = 0;
        for (int64_t b = 0; b < nb; b++) {
            c0 += hf[b * CH]; c1 += hf[b * CH + 1]; c2 += hf[b * CH + 2];
            if (b == t) { l0 = c0; l1 = c1; l2 = c2; }
        }
        const int64_t m0 = hf[V * CH], m1 = hf[V * CH + 1], m2 = hf[V * CH + 2];
        const int64_t T0 = c0 + m0, T1 = c1 + m1;
        if (dleft) { l0 += m0; l1 += m1; l2 += m2; }
        gain[j] = obl_term(fx(l0, sg), fx(l1, sh), lam) + obl_term(fx(T0 - l0, sg), fx(T1 - l1, sh), lam)
                  - parent[j];
        left_count[j] = (double)l2;
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

/* The codes of the split feature: row r's code is col[r * stride] (row-major codes: col =
 * codes + f, stride = F; a column-major copy: col = its column f, stride = 1), of either
 * width (is16: int16, else uint8). */
typedef struct {
    const void *col;
    int64_t stride;
    int is16;
} column_t;

/* One block rows[i0..i1) of a partition by the split (column, t, default_left): its left rows
 * to left[0..), its right rows to right[0..), each in their original order (left may be
 * rows + i0 itself: it is written behind the reads). Returns the number of left rows and
 * sets *n_right. Branchless (both outputs are written, one count moves); instantiated for
 * uint8 and int16 codes. */
#define TRB_PART_BLOCK(NAME, T)                                                           \
    static inline int64_t NAME(const T *col, int64_t stride, const int32_t *rows,          \
                               int64_t i0, int64_t i1, int64_t t, int dleft, int miss,     \
                               int32_t *left, int32_t *right, int64_t *n_right)            \
    {                                                                                       \
        int64_t nl = 0, nr = 0;                                                             \
        for (int64_t i = i0; i < i1; i++) {                                                 \
            int32_t r = rows[i];                                                            \
            if (i + 4 * PREFETCH_AHEAD < i1)                                                \
                __builtin_prefetch(col + (int64_t)rows[i + 4 * PREFETCH_AHEAD] * stride);   \
            int c = col[(int64_t)r * stride];                                               \
            int go = (c == miss) ? dleft : (c <= t);                                        \
            left[nl] = r;                                                                   \
            right[nr] = r;                                                                  \
            nl += go;                                                                       \
            nr += 1 - go;                                                                   \
        }                                                                                   \
        *n_right = nr;                                                                      \
        return nl;                                                                          \
    }
TRB_PART_BLOCK(part_block8, uint8_t)
TRB_PART_BLOCK(part_block16, int16_t)

static inline int64_t part_block(column_t c, const int32_t *rows, int64_t i0, int64_t i1,
                                 int64_t t, int dleft, int miss, int32_t *left, int32_t *right,
                                 int64_t *n_right)
{
    return c.is16 ? part_block16((const int16_t *)c.col, c.stride, rows, i0, i1, t, dleft, miss,
                                 left, right, n_right)
                  : part_block8((const uint8_t *)c.col, c.stride, rows, i0, i1, t, dleft, miss,
                                left, right, n_right);
}

/* Stable partition of rows[0..m) by the split (column, t, default_left): left rows first,
 * then right rows, each in their original order. Returns the number of left rows. */
static int64_t partition_serial(column_t c, int32_t *rows, int64_t m, int64_t t, int dleft,
                                int miss, int32_t *scratch)
{
    int64_t nr;
    int64_t nl = part_block(c, rows, 0, m, t, dleft, miss, rows, scratch, &nr);
    memcpy(rows + nl, scratch, sizeof(int32_t) * (size_t)nr);
    return nl;
}

#define MAX_THREADS 256

/* The same partition with nthreads threads over contiguous blocks of rows: pass 1 sorts each
 * block's rows into its left rows (in scratch) and right rows (in a temporary buffer), pass 2
 * copies them to their offsets (prefix sums of the blocks' counts). The result is the serial
 * one. */
static int64_t partition_mt(column_t c, int32_t *rows, int64_t m, int64_t t, int dleft, int miss,
                            int32_t *scratch, int nthreads)
{
    int nt = nthreads;
    if (nt > MAX_THREADS) nt = MAX_THREADS;
    if (nt <= 1 || m < 65536) return partition_serial(c, rows, m, t, dleft, miss, scratch);
    int32_t *tmp = (int32_t *)malloc(sizeof(int32_t) * (size_t)m);
    if (tmp == NULL) return partition_serial(c, rows, m, t, dleft, miss, scratch);
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
        int64_t nl = part_block(c, rows, i0, i1, t, dleft, miss, scratch + i0, tmp + i0, &nr);
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
    column_t c = {codes + f, F, 0};
    return partition_mt(c, rows, m, t, dleft, miss, scratch, nthreads);
}

int64_t trb_partition(const uint8_t *codes, int64_t F, int32_t *rows, int64_t m, int64_t f,
                      int64_t t, int dleft, int miss, int32_t *scratch)
{
    column_t c = {codes + f, F, 0};
    return partition_serial(c, rows, m, t, dleft, miss, scratch);
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
 * Data-parallel training: every decision is taken from histograms only (row counts and leaf
 * sums included), so when `reduce` is given it is called on every histogram this rank builds
 * (the root's and each smaller child's: F*S*3 int64) and must replace it by its sum over all
 * ranks (exact); every rank then grows the same tree on its own rows.
 */
typedef void (*trb_reduce_fn)(int64_t *buf, int64_t len);

typedef struct {
    int64_t id, begin, count, depth, parent, is_left, hist;
    int has_best;
    double gain;
    int64_t f, t, dl;
    int64_t sum[CH];          /* the leaf's (Σ q_wt, Σ q_w, rows) over all ranks */
    int64_t bl[CH], br[CH];   /* its best split's left and right sums */
} leaf_t;

static void evaluate_leaf(leaf_t *lf, const int64_t *hist, int64_t F, int64_t S,
                          const int64_t *num_bins, const uint8_t *feat_ok, const uint8_t *miss_feat,
                          int64_t Vm, double lam, int64_t msl, double mcw, double min_split_gain,
                          int64_t max_depth, int any_ok, double sg, double sh, int64_t *cum)
{
    lf->has_best = 0;
    if (lf->depth >= max_depth || !any_ok || F == 0 || Vm < 1) return;
    if (lf->sum[2] < 2 * msl) return;
    split_t sp;
    best_split_impl(hist, F, S, num_bins, feat_ok, miss_feat, Vm, lam, msl - 0.5, mcw, sg, sh,
                    cum, &sp);
    double bg = sp.gain, pa = sp.parent;
    if (sp.seen_nan || !isfinite(bg)) return;
    double gain_b = bg - pa;
    double floor_ = 1e-10 * fabs(pa);
    if (!(gain_b > (min_split_gain > floor_ ? min_split_gain : floor_))) return;
    lf->has_best = 1;
    lf->gain = gain_b;
    lf->f = sp.f;
    lf->t = sp.t;
    lf->dl = sp.dl;
    for (int c = 0; c < CH; c++) { lf->bl[c] = sp.l[c]; lf->br[c] = sp.r[c]; }
}

/* The arguments of trb_grow (one struct instead of three dozen positional arguments; the
 * ctypes Structure GrowArgs of native_backend.py mirrors it field for field). */
typedef struct {
    /* the data: codes (n, F) (uint8, or int16 when code_bytes == 2), the fit's rows[0..m)
     * (partitioned in place; all_rows: rows holds 0..n-1 and the root histogram skips the
     * gather), q (n, 2) = the fixed point of (w·t, w) */
    const void *codes;
    int64_t n, F;
    int32_t *rows;
    int64_t m, all_rows;
    const int64_t *q;
    int64_t S;                  /* histogram slots: missing code + 1 */
    const int64_t *num_bins;    /* (F,) value bins per feature */
    const uint8_t *feat_ok;     /* (F,) features this tree may split on */
    int64_t Vm;                 /* max value bins, <= S - 1 */
    /* the settings, and the fixed point's scales 2^-shift of the two channels */
    double l2;
    int64_t min_samples_leaf;
    double min_child_weight, min_split_gain, scale_g, scale_h;
    int64_t max_leaves, max_depth, missing_code, nthreads;
    trb_reduce_fn reduce;       /* NULL in one process */
    /* work buffers: pool (pool_size, F, S, 3) int64, free_list (pool_size,), scratch (m,),
     * miss_feat (F,), leaves (pool_size leaf_t), order (pool_size,) */
    int64_t *pool;
    int64_t pool_size;
    int64_t *free_list;
    int32_t *scratch;
    uint8_t *miss_feat;
    leaf_t *leaves;
    int64_t *order;
    /* outputs: the internal nodes (max_leaves - 1 of each at most), the depth, and per leaf
     * id the sums (L, 3) and the row range [leaf_begin, leaf_begin + leaf_count) in rows */
    int64_t *split_feature, *threshold_bin;
    uint8_t *default_left;
    int64_t *left_child, *right_child;
    double *split_gain;
    int64_t *depth_out;
    int64_t *leaf_sums;
    int64_t *leaf_begin, *leaf_count;
    /* the width of a code (1: uint8, 2: int16) and the split search's scratch: 3 * (S - 1)
     * int64 */
    int64_t code_bytes;
    int64_t *cum;
    /* the channels' kind (0: exact fixed point; 2..16: quantized to that many bits), the
     * histogram passes' scratch (F * S * 4 int64, 32-byte aligned; NULL: the plain pass),
     * and a column-major copy of the codes (F, n) for the partition (NULL: none) */
    int64_t bits;
    int64_t *work;
    const void *codes_cm;
} trb_grow_args;

int64_t trb_grow_args_size(void) { return (int64_t)sizeof(trb_grow_args); }

/* Set a new leaf's record (its histogram index hist, -1 for none). */
static void init_leaf(leaf_t *lf, int64_t id, int64_t begin, int64_t count, int64_t depth,
                      int64_t parent, int is_left, int64_t hist, const int64_t *sum)
{
    lf->id = id; lf->begin = begin; lf->count = count; lf->depth = depth;
    lf->parent = parent; lf->is_left = is_left; lf->hist = hist; lf->has_best = 0;
    for (int c = 0; c < CH; c++) lf->sum[c] = sum[c];
}

/* Returns the number of leaves L (or -1 when max_leaves exceeds the buffers). Outputs: the
 * internal nodes (split_feature, threshold_bin, default_left, left_child, right_child,
 * split_gain; K = L - 1 of them), *depth_out, and per leaf id: leaf_sums (L, 3) = (Σ q_wt,
 * Σ q_w, rows) over all ranks (exact), leaf_begin / leaf_count into rows (the rank's own
 * rows). */
int64_t trb_grow(const trb_grow_args *a)
{
    const void *codes = a->codes;
    const int wide = a->code_bytes == 2;
    int64_t *cum = a->cum;
    const int64_t n = a->n, F = a->F, m = a->m, S = a->S, Vm = a->Vm;
    int32_t *rows = a->rows, *scratch = a->scratch;
    const int all_rows = a->all_rows != 0;
    const int64_t *q = a->q;
    const int64_t *num_bins = a->num_bins;
    const uint8_t *feat_ok = a->feat_ok;
    const double lam = a->l2, mcw = a->min_child_weight, min_split_gain = a->min_split_gain;
    const double sg = a->scale_g, sh = a->scale_h;
    const int64_t msl = a->min_samples_leaf, max_leaves = a->max_leaves, max_depth = a->max_depth;
    const int miss_code = (int)a->missing_code, nthreads = (int)a->nthreads;
    trb_reduce_fn reduce = a->reduce;
    int64_t *pool = a->pool;
    const int64_t pool_size = a->pool_size;
    int64_t *free_list = a->free_list, *order = a->order;
    uint8_t *miss_feat = a->miss_feat;
    leaf_t *leaves = a->leaves;
    int64_t *split_feature = a->split_feature, *threshold_bin = a->threshold_bin;
    uint8_t *default_left = a->default_left;
    int64_t *left_child = a->left_child, *right_child = a->right_child;
    double *split_gain = a->split_gain;
    int64_t *leaf_sums = a->leaf_sums;
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
    int64_t root_hist = free_list[--n_free];
    int64_t *rh = pool + root_hist * HS;
    hist_req hr = {codes, wide ? 2 : 1, n, F, all_rows ? NULL : rows, m, q, rh, S, nthreads,
                   num_bins, (int)a->bits, a->work};
    node_histogram(&hr);
    if (reduce) reduce(rh, HS);
    for (int64_t f = 0; f < F; f++) miss_feat[f] = rh[(f * S + S - 1) * CH + 2] > 0;
    int64_t root_sum[CH] = {0, 0, 0};
    if (F > 0) feature_totals(rh, S, num_bins[0], root_sum);
    init_leaf(&leaves[0], 0, 0, m, 0, -1, 1, root_hist, root_sum);
    order[0] = 0;
    evaluate_leaf(&leaves[0], rh, F, S, num_bins, feat_ok, miss_feat, Vm, lam, msl, mcw,
                  min_split_gain, max_depth, any_ok, sg, sh, cum);
    while (L < max_leaves) {
        int64_t pos = -1;
        double bestg = 0.0;
        for (int64_t i = 0; i < L; i++) {
            leaf_t *lf = &leaves[order[i]];
            if (lf->has_best && (pos < 0 || lf->gain > bestg)) { pos = i; bestg = lf->gain; }
        }
        if (pos < 0) break;
        leaf_t sp = leaves[order[pos]]; /* a copy: its record becomes the left child's */
        column_t col = {(const char *)codes + sp.f * (int64_t)a->code_bytes, F, wide};
        if (a->codes_cm != NULL)
            col = (column_t){(const char *)a->codes_cm + sp.f * n * (int64_t)a->code_bytes, 1, wide};
        int64_t nl = partition_mt(col, rows + sp.begin, sp.count, sp.t, (int)sp.dl, miss_code,
                                  scratch, nthreads);
        int64_t nr = sp.count - nl;
        int64_t k = K++;
        split_feature[k] = sp.f; threshold_bin[k] = sp.t; default_left[k] = (uint8_t)sp.dl;
        split_gain[k] = sp.gain;
        left_child[k] = ~sp.id; right_child[k] = ~L;
        if (sp.parent >= 0) {
            if (sp.is_left) left_child[sp.parent] = k; else right_child[sp.parent] = k;
        }
        /* the smaller child (by the row counts over all ranks: the same choice on every rank)
         * gets a new histogram; the parent's buffer becomes the larger child's */
        const int64_t nlg = sp.bl[2], nrg = sp.br[2];
        int small_left = nlg <= nrg;
        int64_t d = sp.depth + 1;
        /* children that can never be split (this split makes the last leaf, or both are too
         * deep or too small: evaluate_leaf would give has_best = 0 from these same global
         * counts) need no histograms: LightGBM skips them too. The decision is the same on
         * every rank, so the reduce calls still match. */
        int final = L + 1 >= max_leaves || d >= max_depth || !any_ok || F == 0 || Vm < 1
                    || (nlg < 2 * msl && nrg < 2 * msl);
        int64_t hs_idx = -1;
        if (!final) {
            hs_idx = free_list[--n_free];
            int64_t *hs = pool + hs_idx * HS, *hp = pool + sp.hist * HS;
            hr.rows = rows + sp.begin + (small_left ? 0 : nl);
            hr.m = small_left ? nl : nr;
            hr.hist = hs;
            node_histogram(&hr);
            if (reduce) reduce(hs, HS);
            subtract_used(hp, hs, hp, F, S, num_bins, nthreads);
        }
        leaf_t *left = &leaves[sp.id], *right = &leaves[L];
        init_leaf(right, L, sp.begin + nl, nr, d, k, 0, small_left ? sp.hist : hs_idx, sp.br);
        init_leaf(left, sp.id, sp.begin, nl, d, k, 1, small_left ? hs_idx : sp.hist, sp.bl);
        if (d > depth) depth = d;
        order[L] = L; /* the right child is appended; the left keeps the parent's position */
        L++;
        if (final) continue;
        evaluate_leaf(left, pool + left->hist * HS, F, S, num_bins, feat_ok, miss_feat, Vm, lam,
                      msl, mcw, min_split_gain, max_depth, any_ok, sg, sh, cum);
        evaluate_leaf(right, pool + right->hist * HS, F, S, num_bins, feat_ok, miss_feat, Vm,
                      lam, msl, mcw, min_split_gain, max_depth, any_ok, sg, sh, cum);
    }
    for (int64_t id = 0; id < L; id++) {
        leaf_begin[id] = leaves[id].begin;
        leaf_count[id] = leaves[id].count;
        for (int c = 0; c < CH; c++) leaf_sums[CH * id + c] = leaves[id].sum[c];
    }
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
