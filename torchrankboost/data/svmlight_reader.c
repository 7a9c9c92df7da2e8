/* The compiled SVMlight/LETOR reader (see torchrankboost/data/fastread.py).
 *
 * Text arrives in blocks of whole lines (trl_block); each block is cut at line ends into T
 * chunks parsed by T OpenMP threads into thread-local buffers, then scattered into one dense
 * row-major matrix X (float32 or float64) that grows with the rows (realloc) and, rarely, with
 * the width (a re-layout when a larger feature index, or index 0, appears). Column of an entry:
 * index - shift (shift 1 until an index 0 is seen, unless the caller fixes it).
 *
 * The grammar accepted is a strict subset of what scikit-learn's reader accepts, and every
 * value is what it computes (Python's float(): correctly rounded to double, then cast to
 * float32): anything else (a token it might read differently, a bare \r, a NUL byte, an index
 * out of the caller's bounds) stops the read with a non-zero code and the caller falls back to
 * the Python reader, which reports the file and line. No value here is ever an error message.
 */
#define _GNU_SOURCE
#include <locale.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TRL_ABI 1
#define TRL_MAXT 64
enum { TRL_OK = 0, TRL_SYNTAX = 1, TRL_CR = 2, TRL_NUL = 3, TRL_BOUNDS = 4, TRL_MEM = 5 };

typedef struct {              /* one thread's rows of one block */
    int64_t rows, nnz, cap_r, cap_n, n_qid;
    double *y; int64_t *q; int64_t *rp; int32_t *idx; double *val;
    int32_t min_idx, max_idx; int err;
} trl_tmp;

typedef struct {
    int dbl;                  /* X is float64 (else float32) */
    int fixed_shift;          /* shift may not change (zero_based given) */
    int64_t rows, cap_rows, width, shift, n_qid, max_index, max_bytes;
    int32_t min_idx, max_idx; /* over all entries; max_idx -1: none yet */
    int any_inf, err;
    void *X; double *y; int64_t *q;
    trl_tmp tmp[TRL_MAXT];
} trl_state;

int trl_abi_version(void) { return TRL_ABI; }

static locale_t c_locale(void) {
    static locale_t loc = (locale_t)0;
    if (!loc) loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    return loc;
}

trl_state *trl_new(int dbl, int64_t shift, int fixed_shift, int64_t max_index, int64_t max_bytes) {
    trl_state *s = calloc(1, sizeof(trl_state));
    if (!s) return NULL;
    s->dbl = dbl; s->shift = shift; s->fixed_shift = fixed_shift;
    s->max_index = max_index; s->max_bytes = max_bytes; s->max_idx = -1; s->min_idx = INT32_MAX;
    c_locale();
    return s;
}

static void tmp_free(trl_tmp *t) {
    free(t->y); free(t->q); free(t->rp); free(t->idx); free(t->val);
    memset(t, 0, sizeof(*t));
}

void trl_free(trl_state *s) {
    if (!s) return;
    for (int t = 0; t < TRL_MAXT; t++) tmp_free(&s->tmp[t]);
    free(s->X); free(s->y); free(s->q); free(s);
}

void trl_free_buffer(void *p) { free(p); }

/* ------------------------------------------------------------------ tokens */
static inline int is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }
static inline int is_digit(char c) { return (unsigned)(c - '0') < 10u; }
/* a token ends at a blank, a comment, a line end (\r only as part of \r\n) or the end */
static inline int ends_token(const char *p, const char *e) {
    return p >= e || is_space(*p) || *p == '#' || *p == '\n' || *p == '\r';
}

static const double P10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int word_ci(const char *p, const char *e, const char *w) {  /* length matched, or 0 */
    int n = 0;
    for (; w[n]; n++) {
        if (p + n >= e || (p[n] | 0x20) != w[n]) return 0;
    }
    return n;
}

/* A decimal number as Python's float() reads it ([+-]digits[.digits][e[+-]digits], nan,
 * inf, infinity): 1 and *out, *pp after it; 0 when it is something else. Exact: Clinger's
 * fast path (mantissa <= 2^53, |exponent| <= 22) or strtod_l (correctly rounded, C locale). */
static int parse_num(const char **pp, const char *e, double *out) {
    const char *p = *pp, *start = p;
    int neg = 0;
    if (p < e && (*p == '+' || *p == '-')) { neg = *p == '-'; p++; }
    if (p < e && !is_digit(*p) && *p != '.') {
        int n;
        if ((n = word_ci(p, e, "infinity")) || (n = word_ci(p, e, "inf"))) {
            *out = neg ? -INFINITY : INFINITY;
        } else if ((n = word_ci(p, e, "nan"))) {
            *out = neg ? -NAN : NAN;
        } else {
            return 0;
        }
        *pp = p + n;
        return 1;
    }
    uint64_t m = 0; int nd = 0, any = 0, inexact = 0; int64_t ex = 0;
    for (; p < e && is_digit(*p); p++) {
        any = 1;
        int d = *p - '0';
        if (m == 0 && d == 0) continue;
        if (nd < 19) { m = m * 10 + d; nd++; } else { ex++; inexact |= d != 0; }
    }
    if (p < e && *p == '.') {
        for (p++; p < e && is_digit(*p); p++) {
            any = 1;
            int d = *p - '0';
            if (m == 0 && d == 0) { ex--; continue; }
            if (nd < 19) { m = m * 10 + d; nd++; ex--; } else { inexact |= d != 0; }
        }
    }
    if (!any) return 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0; int64_t x = 0;
        if (p < e && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (!(p < e && is_digit(*p))) return 0;
        for (; p < e && is_digit(*p); p++) if (x < 100000000) x = x * 10 + (*p - '0');
        ex += eneg ? -x : x;
    }
    *pp = p;
    if (m == 0) { *out = neg ? -0.0 : 0.0; return 1; }
    if (!inexact && m <= (1ULL << 53) && ex >= -22 && ex <= 22) {
        double v = (double)m;
        v = ex >= 0 ? v * P10[ex] : v / P10[-ex];
        *out = neg ? -v : v;
        return 1;
    }
    char buf[128];
    size_t len = (size_t)(p - start);
    if (len >= sizeof buf) return 0;
    memcpy(buf, start, len);
    buf[len] = 0;
    *out = strtod_l(buf, NULL, c_locale());
    return 1;
}

/* ------------------------------------------------------------------ one chunk */
static int tmp_grow_rows(trl_tmp *t) {
    int64_t c = t->cap_r ? 2 * t->cap_r : 1024;
    double *y = realloc(t->y, c * sizeof(double)); if (!y) return 0; t->y = y;
    int64_t *q = realloc(t->q, c * sizeof(int64_t)); if (!q) return 0; t->q = q;
    int64_t *rp = realloc(t->rp, (c + 1) * sizeof(int64_t)); if (!rp) return 0; t->rp = rp;
    t->cap_r = c;
    return 1;
}

static int tmp_grow_nnz(trl_tmp *t) {
    int64_t c = t->cap_n ? 2 * t->cap_n : 16384;
    int32_t *i = realloc(t->idx, c * sizeof(int32_t)); if (!i) return 0; t->idx = i;
    double *v = realloc(t->val, c * sizeof(double)); if (!v) return 0; t->val = v;
    t->cap_n = c;
    return 1;
}

/* the blank/comment rest of a line from p: TRL_OK and *pp at the line's end (after \n) */
static int skip_rest(const char **pp, const char *e) {
    const char *p = *pp;
    for (; p < e; p++) {
        char c = *p;
        if (c == '\n') { p++; break; }
        if (c == '\r' && !(p + 1 < e && p[1] == '\n')) return TRL_CR;
        if (c == 0) return TRL_NUL;
    }
    *pp = p;
    return TRL_OK;
}

static int parse_line(trl_tmp *t, const char **pp, const char *e, int64_t max_index) {
    const char *p = *pp;
    while (p < e && is_space(*p)) p++;
    if (p >= e || *p == '#' || *p == '\n' || *p == '\r') { *pp = p; return skip_rest(pp, e); }
    if (t->rows == t->cap_r && !tmp_grow_rows(t)) return TRL_MEM;
    double lab;
    if (!parse_num(&p, e, &lab) || !ends_token(p, e)) return TRL_SYNTAX;
    int64_t r = t->rows;
    t->y[r] = lab;
    t->q[r] = 0;
    while (p < e && is_space(*p)) p++;
    if (p + 4 <= e && memcmp(p, "qid:", 4) == 0) {
        p += 4;
        int neg = 0, nd = 0; int64_t v = 0;
        if (p < e && *p == '-') { neg = 1; p++; }
        for (; p < e && is_digit(*p); p++, nd++) { if (nd >= 18) return TRL_SYNTAX; v = v * 10 + (*p - '0'); }
        if (!nd || !ends_token(p, e)) return TRL_SYNTAX;
        t->q[r] = neg ? -v : v;
        t->n_qid++;
        while (p < e && is_space(*p)) p++;
    }
    int64_t prev = -1;
    while (p < e && is_digit(*p)) {
        int64_t idx = 0; int nd = 0;
        for (; p < e && is_digit(*p); p++, nd++) { if (nd >= 10) return TRL_SYNTAX; idx = idx * 10 + (*p - '0'); }
        if (!(p < e && *p == ':')) return TRL_SYNTAX;
        p++;
        double v;
        if (!parse_num(&p, e, &v) || !ends_token(p, e)) return TRL_SYNTAX;
        if (idx <= prev) return TRL_SYNTAX;
        if (idx > max_index) return TRL_BOUNDS;
        prev = idx;
        if (t->nnz == t->cap_n && !tmp_grow_nnz(t)) return TRL_MEM;
        t->idx[t->nnz] = (int32_t)idx;
        t->val[t->nnz++] = v;
        if (idx < t->min_idx) t->min_idx = (int32_t)idx;
        if (idx > t->max_idx) t->max_idx = (int32_t)idx;
        while (p < e && is_space(*p)) p++;
    }
    if (!(p >= e || *p == '#' || *p == '\n' || *p == '\r')) return TRL_SYNTAX;
    t->rows++;
    t->rp[t->rows] = t->nnz;
    *pp = p;
    return skip_rest(pp, e);
}

static void parse_chunk(trl_tmp *t, const char *p, const char *e, int64_t max_index) {
    t->rows = t->nnz = t->n_qid = 0; t->err = TRL_OK;
    t->min_idx = INT32_MAX; t->max_idx = -1;
    if (!t->cap_r && !tmp_grow_rows(t)) { t->err = TRL_MEM; return; }
    t->rp[0] = 0;
    while (p < e) {
        int err = parse_line(t, &p, e, max_index);
        if (err) { t->err = err; return; }
    }
}

/* ------------------------------------------------------------------ the dense matrix */
/* (re)lay X out for width w and shift sh with room for cap rows, keeping the rows read */
static int relayout(trl_state *s, int64_t w, int64_t sh, int64_t cap) {
    size_t es = s->dbl ? 8 : 4;
    if (w == s->width && sh == s->shift) {
        if (cap > s->cap_rows) {
            void *X = realloc(s->X, (size_t)cap * (w ? w : 1) * es);
            if (!X) return 0;
            s->X = X; s->cap_rows = cap;
        }
        return 1;
    }
    if (cap < s->cap_rows) cap = s->cap_rows;
    char *X = calloc((size_t)cap * (w ? w : 1), es);
    if (!X) return 0;
    int64_t off = s->shift - sh;  /* old column c goes to c + off */
    for (int64_t r = 0; r < s->rows; r++)
        if (s->width) memcpy(X + ((size_t)r * w + off) * es, (char *)s->X + (size_t)r * s->width * es, s->width * es);
    free(s->X);
    s->X = X; s->width = w; s->shift = sh; s->cap_rows = cap;
    return 1;
}

static int grow_rows(trl_state *s, int64_t need) {
    if (need <= s->cap_rows && s->y) return 1;
    int64_t cap = s->cap_rows ? s->cap_rows : 4096;
    while (cap < need) cap *= 2;
    double *y = realloc(s->y, cap * sizeof(double)); if (!y) return 0; s->y = y;
    int64_t *q = realloc(s->q, cap * sizeof(int64_t)); if (!q) return 0; s->q = q;
    return relayout(s, s->width, s->shift, cap);
}

static void scatter(trl_state *s, const trl_tmp *t, int64_t base) {
    int64_t w = s->width, sh = s->shift;
    memcpy(s->y + base, t->y, t->rows * sizeof(double));
    memcpy(s->q + base, t->q, t->rows * sizeof(int64_t));
    int inf = 0;
    for (int64_t r = 0; r < t->rows; r++) {
        if (s->dbl) {
            double *row = (double *)s->X + (base + r) * w;
            memset(row, 0, w * sizeof(double));
            for (int64_t k = t->rp[r]; k < t->rp[r + 1]; k++) {
                row[t->idx[k] - sh] += t->val[k];  /* as scipy's toarray: -0 -> +0 */
                inf |= isinf(t->val[k]);
            }
        } else {
            float *row = (float *)s->X + (base + r) * w;
            memset(row, 0, w * sizeof(float));
            for (int64_t k = t->rp[r]; k < t->rp[r + 1]; k++) {
                float f = (float)t->val[k];
                row[t->idx[k] - sh] += f;
                inf |= isinf(f);
            }
        }
    }
    if (inf) {
        #pragma omp atomic write
        s->any_inf = 1;
    }
}

/* Parse `len` bytes of whole lines (the last one may lack its \n only at the end of the
 * data) with `nthreads` threads and append their rows. Returns 0, or the first error code
 * (then the state is only good for trl_free). */
int trl_block(trl_state *s, const char *buf, int64_t len, int nthreads) {
    if (s->err) return s->err;
    int T = nthreads < 1 ? 1 : (nthreads > TRL_MAXT ? TRL_MAXT : nthreads);
    if (len < ((int64_t)1 << 20)) T = 1;
    const char *cut[TRL_MAXT + 1];
    cut[0] = buf; cut[T] = buf + len;
    for (int i = 1; i < T; i++) {
        const char *c = buf + len * i / T;
        if (c < cut[i - 1]) c = cut[i - 1];
        const char *nl = memchr(c, '\n', (size_t)(buf + len - c));
        cut[i] = nl ? nl + 1 : buf + len;
    }
    #pragma omp parallel for num_threads(T) schedule(static, 1)
    for (int i = 0; i < T; i++) parse_chunk(&s->tmp[i], cut[i], cut[i + 1], s->max_index);
    int64_t rows = s->rows, base[TRL_MAXT];
    int32_t mn = s->min_idx, mx = s->max_idx;
    for (int i = 0; i < T; i++) {
        if (s->tmp[i].err) return s->err = s->tmp[i].err;
        base[i] = rows; rows += s->tmp[i].rows; s->n_qid += s->tmp[i].n_qid;
        if (s->tmp[i].min_idx < mn) mn = s->tmp[i].min_idx;
        if (s->tmp[i].max_idx > mx) mx = s->tmp[i].max_idx;
    }
    int64_t sh = s->shift;
    if (mn == 0 && sh == 1) {
        if (s->fixed_shift) return s->err = TRL_BOUNDS;
        sh = 0;
    }
    int64_t w = mx + 1 - sh; if (w < s->width) w = s->width; if (w < 0) w = 0;
    if ((double)rows * (double)w * (s->dbl ? 8 : 4) > (double)s->max_bytes) return s->err = TRL_BOUNDS;
    if (!grow_rows(s, rows) || !relayout(s, w, sh, s->cap_rows)) return s->err = TRL_MEM;
    s->min_idx = mn; s->max_idx = mx;
    #pragma omp parallel for num_threads(T) schedule(static, 1)
    for (int i = 0; i < T; i++) scatter(s, &s->tmp[i], base[i]);
    s->rows = rows;
    return TRL_OK;
}

/* Feed `len` bytes: the whole lines among them are parsed (all of them when `at_end`: the
 * last line may lack its \n). Returns the bytes consumed (0: no line end yet), or -code. */
int64_t trl_feed(trl_state *s, const char *buf, int64_t len, int nthreads, int at_end) {
    if (!at_end) {
        const char *nl = len ? memrchr(buf, '\n', (size_t)len) : NULL;
        if (!nl) return 0;
        len = nl + 1 - buf;
    }
    int rc = len ? trl_block(s, buf, len, nthreads) : TRL_OK;
    return rc ? -rc : len;
}

/* out: rows, width, shift, n_qid, min_idx (-1: no entry), max_idx (-1: none), any_inf */
void trl_info(const trl_state *s, int64_t *out) {
    out[0] = s->rows; out[1] = s->width; out[2] = s->shift; out[3] = s->n_qid;
    out[4] = s->max_idx < 0 ? -1 : s->min_idx; out[5] = s->max_idx; out[6] = s->any_inf;
}

/* copy the labels and qids out; hand X over (the caller frees it with trl_free_buffer) */
void *trl_take(trl_state *s, double *y, int64_t *q) {
    memcpy(y, s->y, s->rows * sizeof(double));
    memcpy(q, s->q, s->rows * sizeof(int64_t));
    void *X = s->X;
    size_t need = (size_t)s->rows * s->width * (s->dbl ? 8 : 4);
    if (X && need) {
        void *Y = realloc(X, need);
        if (Y) X = Y;
    }
    s->X = NULL; s->cap_rows = 0;
    return X;
}
