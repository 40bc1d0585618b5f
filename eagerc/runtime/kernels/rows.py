"""Eager kernels the kernel IR does not express, as short hand-written C: row kernels that read
a per-row class index (cross_entropy and its backward), a leading-dim sum of a normalised
product (layer_norm's and rms_norm's weight gradients), a scatter-add by index (embedding's
backward), an LSTM step's gate math (forward and backward, on the layer's strided reserve) and
uniform draws a Philox block at a time (rand, dropout's mask), a 4-d strided copy of short rows
(a convolution's padded input and its gradient's row-wrapped runs), col2im's adds over such runs
(a convolution's input gradient), and max pooling and its gradient (each window's first argmax
found and its gradient stored in one pass: in a CNN step numpy's window copy, masks and scatter
cost ~15x PyTorch's backward).

Why: in a GPT training step these were numpy's multi-pass kernels -- cross_entropy forward and
backward ~4x PyTorch's, the layer_norm weight gradient twice the cost of the whole input
gradient, embedding_backward's `np.add.at` ~6x PyTorch's scatter-add. Each is one pass per row
(the row in cache) in C.

Numbers. embedding_backward adds the rows in index order into zeros, as `np.add.at` does: the
same bits; so do max pooling (numpy's fold and argmax, its order of additions) and col2im_runs. The
others add row sums (and the weight gradient's column sums) in double where numpy
sums float32 pairwise, and take exp/log from glibc (float32 exp(x - max): render.py's inline
one): within a few ulp of the numpy kernel's
result's scale (tests/test_eager_kernels.py states the bounds); the elementwise steps are the
numpy kernel's, in its order (kernel_cache compiles with -ffp-contract=off).

Built through eager.c_function (the same disk cache, off switch and no-compiler fallback as the
generated row kernels); `kernel(name, dtype)` is None when numpy must run.
"""
import ctypes

from . import philox
from . import eager
from .eager import c_function
from .render import CRenderer

__all__ = ["kernel", "SOURCES"]

_CT = {"float32": "float", "float64": "double"}
# EXP is only ever exp(x - the row's max) here: float32 takes the renderer's inline exp for that
# (render.py NONPOS_EXP: <= 1 ulp, no call per vector)
_MATH = {"float32": (CRenderer.NONPOS_EXP, "logf", "sqrtf", "tanhf"), "float64": ("exp", "log", "sqrt", "tanh")}

# a row's max as the renderer computes it (a vector max plus a NaN flag: NaN propagates as in
# numpy), then sums of float blocks of 256 added in double (render.py's SUM_BLOCK: vectorised
# float partial sums, accumulated in double); MAX_ROW and the block loop are used below
_PRELUDE = """
#define ROW_MAX(mx, xr, C) do { \\
    T m_ = -INFINITY; int n_ = 0; \\
    _Pragma("omp simd reduction(max:m_) reduction(|:n_)") \\
    for (int64_t c = 0; c < C; c++) { const T v_ = xr[c]; m_ = v_ > m_ ? v_ : m_; n_ |= v_ != v_; } \\
    mx = n_ ? (T)NAN : m_; } while (0)
#define BLOCKED_SUM(acc, C, EXPR) do { \\
    acc = 0; \\
    for (int64_t cb = 0; cb < C; cb += 256) { \\
        const int64_t ce = cb + 256 < C ? cb + 256 : C; T f_ = 0; \\
        _Pragma("omp simd reduction(+:f_)") \\
        for (int64_t c = cb; c < ce; c++) f_ += (EXPR); \\
        acc += f_; } } while (0)
"""

_ROW_LSE = """
        const T *xr = x + r * C;
        T mx;
        ROW_MAX(mx, xr, C);
        double s;
        BLOCKED_SUM(s, C, EXP(xr[c] - mx));
        const T lse = LOG((T)s);
"""

# the kernel positions of window (a, b) in plane xp inside the plane, row-major, as v at (h, w):
# the bounds computed once per window, no branch per element (positions in the padding read -inf,
# which changes no maximum: skipped)
_POOL_WINDOW = """
#define FOR_WINDOW(BODY) { \\
    const int64_t h0_ = a * sh - ph, w0_ = b * sw - pw; \\
    const int64_t i0_ = h0_ >= 0 ? 0 : (-h0_ + dh - 1) / dh, j0_ = w0_ >= 0 ? 0 : (-w0_ + dw - 1) / dw; \\
    int64_t i1_ = (H - 1 - h0_) / dh + 1, j1_ = (W - 1 - w0_) / dw + 1; \\
    if (i1_ > kh) i1_ = kh; \\
    if (j1_ > kw) j1_ = kw; \\
    for (int64_t i = i0_; i < i1_; i++) { \\
        const int64_t h = h0_ + i * dh; \\
        const T *xr_ = xp + h * sh_; \\
        for (int64_t j = j0_; j < j1_; j++) { \\
            const int64_t w = w0_ + j * dw; \\
            const T v = xr_[w * sw_]; \\
            BODY } } }
"""

# a row of ow >= 4 2x2 windows, WINDOWS(S, pragma) run on windows bs .. bs + S - 1: L = 8 or 4 at a
# time, the last L overlapping the ones before them (plain stores: a window written twice gets the
# same values), so that every window runs in vector code (a row is a few vectors long: a scalar
# remainder loop would cost as much as the rest); `odd` sums v - v over the row
_TILE2_ROW = """
#define TILE2_ROW(WINDOWS) { \\
    const int64_t L = ow >= 8 ? 8 : 4; \\
    for (int64_t b0 = 0; b0 < ow; b0 += L) { \\
        const int64_t bs = b0 + L <= ow ? b0 : ow - L; \\
        if (L == 8) WINDOWS(8, "omp simd simdlen(8) reduction(+:odd)") \\
        else WINDOWS(4, "omp simd simdlen(4) reduction(+:odd)") } }
"""

SOURCES = {
    # per-row loss: lse - z[t]; with label smoothing (1 - eps) loss + eps / C (lse C - sum z)
    "cross_entropy": """
void {name}(const T *x, const int64_t *t, T *loss, int64_t rows, int64_t C, T keep, T eps_c)
{
    for (int64_t r = 0; r < rows; r++) {""" + _ROW_LSE + """
        T l = lse - (xr[t[r]] - mx);
        if (eps_c != 0) {
            double zs;
            BLOCKED_SUM(zs, C, xr[c] - mx);
            T smooth = lse * (T)C;
            smooth = smooth - (T)zs;
            l = keep * l;
            smooth = eps_c * smooth;
            l = l + smooth;
        }
        loss[r] = l;
    }
}
""",
    # d x = (softmax(x) - onehot(t) (1 - eps) - eps / C) * scale[r * scale_step]
    "cross_entropy_backward": """
void {name}(const T *x, const int64_t *t, const T *scale, T *gx, int64_t rows, int64_t C, int64_t scale_step,
            T keep, T eps_c)
{
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * C;
        T *o = gx + r * C;
        T mx;
        ROW_MAX(mx, xr, C);
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = EXP(xr[c] - mx);
        double s;
        BLOCKED_SUM(s, C, o[c]);
        const T sum = (T)s;
        const T k = scale[r * scale_step];
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = o[c] / sum;
        o[t[r]] = o[t[r]] - keep;
        if (eps_c != 0) {
            #pragma omp simd
            for (int64_t c = 0; c < C; c++) o[c] = o[c] - eps_c;
        }
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = o[c] * k;
    }
}
""",
    # gw = sum over rows of g * xhat (xhat: the row normalised as layer_norm normalises it, or with
    # center = 0 as rms_norm does: no mean subtracted, x - 0 being x exactly)
    "norm_weight_backward": """
void {name}(const T *g, const T *x, T *gw, int64_t rows, int64_t C, int64_t center, T eps)
{
    double *acc = calloc(C, sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * C, *gr = g + r * C;
        double s, q;
        BLOCKED_SUM(s, C, xr[c]);
        const T mean = center ? (T)(s / (double)C) : (T)0;
        BLOCKED_SUM(q, C, (xr[c] - mean) * (xr[c] - mean));
        T var = (T)(q / (double)C);
        var = var + eps;
        const T rstd = (T)1 / SQRT(var);
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) { T xh = (xr[c] - mean) * rstd; acc[c] += (double)(xh * gr[c]); }
    }
    for (int64_t c = 0; c < C; c++) gw[c] = (T)acc[c];
    free(acc);
}
""",
    # out (zeros) [idx[i]] += g[i], in index order (np.add.at's order); rows equal to `skip` skipped
    "embedding_backward": """
void {name}(const T *g, const int64_t *idx, T *out, int64_t n, int64_t D, int64_t skip)
{
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] == skip) continue;
        T *o = out + idx[i] * D;
        const T *gi = g + i * D;
        #pragma omp simd
        for (int64_t c = 0; c < D; c++) o[c] = o[c] + gi[c];
    }
}
""",
    # one LSTM step's gate math (runtime/ops/nn.py lstm_layer), rows b of (B, 4H) projections
    # (gates: four (B, H) blocks BH elements apart, the layer's (6, T, B, H) reserve);
    # gates [i, f, g, o] = act(hw + xg) (sigmoid as 0.5 tanh(0.5 a) + 0.5, g's tanh as tanh(a) * 1 + 0:
    # the numpy kernel's steps); c = f c_prev + i g; h = o tanh(c)
    "lstm_step": """
void {name}(const T *hw, const T *xg, const T *c_prev, T *h, T *c, T *gates, int64_t B, int64_t H, int64_t BH)
{
    for (int64_t b = 0; b < B; b++) {
        const T *hr = hw + b * 4 * H, *xr = xg + b * 4 * H;
        #pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const int64_t e = b * H + j;
            T ai = hr[j] + xr[j], af = hr[H + j] + xr[H + j], ag = hr[2 * H + j] + xr[2 * H + j];
            T ao = hr[3 * H + j] + xr[3 * H + j];
            T i = TANH(ai * (T)0.5) * (T)0.5 + (T)0.5, f = TANH(af * (T)0.5) * (T)0.5 + (T)0.5;
            T g = TANH(ag) + (T)0, o = TANH(ao * (T)0.5) * (T)0.5 + (T)0.5;
            gates[e] = i; gates[BH + e] = f; gates[2 * BH + e] = g; gates[3 * BH + e] = o;
            T cc = f * c_prev[e];
            T ig = i * g;
            cc = cc + ig;
            c[e] = cc;
            h[e] = TANH(cc) * o;
        }
    }
}
""",
    # its backward at one step (lstm_layer_backward): from d h (dhw + gh: the next step's product
    # and the output's own gradient) and d c (dc, updated in place: through c_{t+1} = f_{t+1} c + ...,
    # f_next NULL at the last step), the gates' gradients before activation into res (B, 4H)
    "lstm_step_backward": """
void {name}(const T *dhw, const T *gh, const T *gc, const T *f_next, const T *c, const T *h, const T *gates,
            const T *ggates, const T *c_prev, T *dc, T *res, int64_t B, int64_t H, int64_t BH)
{
    for (int64_t b = 0; b < B; b++) {
        T *rr = res + b * 4 * H;
        #pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const int64_t e = b * H + j;
            T dh = gh[e], dce = dc[e];
            if (f_next) { dh = dhw[e] + dh; dce = dce * f_next[e]; dce = dce + gc[e]; }
            const T i = gates[e], f = gates[BH + e], g = gates[2 * BH + e], o = gates[3 * BH + e];
            const T tc = TANH(c[e]);
            T d_o = dh * tc;
            T tmp = h[e] * tc;
            tmp = o - tmp;
            tmp = tmp * dh;
            dce = dce + tmp;
            dc[e] = dce;
            T d_i = dce * g, d_f = dce * c_prev[e], d_g = dce * i;
            d_i = d_i + ggates[e]; d_f = d_f + ggates[BH + e]; d_g = d_g + ggates[2 * BH + e];
            d_o = d_o + ggates[3 * BH + e];
            rr[j] = (d_i * ((T)1 - i)) * (i + (T)0);
            rr[H + j] = (d_f * ((T)1 - f)) * (f + (T)0);
            rr[2 * H + j] = (d_g * ((T)1 - g)) * (g + (T)1);
            rr[3 * H + j] = (d_o * ((T)1 - o)) * (o + (T)0);
        }
    }
}
""",
    # dst[a, b, r, c] = src[a, b, r, c] for 4-d views (element strides): a convolution's padded input
    # and its gradient's row-wrapped runs (runtime/ops/conv.py), whose rows are a few dozen elements --
    # numpy's strided copy pays a loop call per row (~10 ns), 3-4x the copy itself
    "copy4d": """
void {name}(const T *src, T *dst, int64_t A, int64_t B, int64_t R, int64_t C, int64_t sa, int64_t sb, int64_t sr,
            int64_t sc, int64_t da, int64_t db, int64_t dr, int64_t dc)
{
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < R; r++) {
                const T *s = src + a * sa + b * sb + r * sr;
                T *d = dst + a * da + b * db + r * dr;
                if (sc == 1 && dc == 1) {
                    __builtin_memcpy(d, s, C * sizeof(T));
                } else {
                    for (int64_t c = 0; c < C; c++) d[c * dc] = s[c * sc];
                }
            }
}
""",
    # col2im over row-wrapped runs (runtime/ops/conv.py _col2im_add, a transposed convolution's or
    # an input gradient's columns added back): out (C, N, L) += cols (C, K, N, P) at offset off[k]
    # of each (c, n) plane, kernel position k by k -- each element adds its terms in the numpy
    # kernel's order (one strided add per kernel position): the same bits. A channel's planes stay
    # in cache over its K passes where numpy streams the whole buffer K times
    "col2im_runs": """
void {name}(const T *cols, T *out, const int64_t *off, int64_t C, int64_t K, int64_t N, int64_t P, int64_t L)
{
    for (int64_t c = 0; c < C; c++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                const T *s = cols + ((c * K + k) * N + n) * P;
                T *d = out + (c * N + n) * L + off[k];
                #pragma omp simd
                for (int64_t p = 0; p < P; p++) d[p] = d[p] + s[p];
            }
}
""",
    # max pooling's 2x2 / stride 2 windows (no padding or dilation) over (N, C, H, W) planes of x
    # (strides sn, sc, sh_ and 1), into y C-contiguous (N, C, oh, ow), ow >= 4: each window folded
    # as the numpy kernel folds the kernel positions' slices with `maximum` (maximum(m, v) = m if
    # m > v or m is NaN, else v: NaN propagates, of equal values -- signed zeros -- the later one):
    # the same bits. Vector code across a row (TILE2_ROW); other windows stay numpy's (kh*kw
    # vectorised strided passes)
    "max_pool2d_2x2": _TILE2_ROW + """
#define MAXIMUM(a, b) ((a) != (a) ? (a) : (a) > (b) ? (a) : (b))
/* without NaNs maximum(m, v) is m > v ? m : v (vector code; GCC does not vectorise a != a, so a
   row's NaN or infinity shows as a NaN of the sum of v - v, and that row runs MAXIMUM, scalar) */
#define TILE2_MAX(S, SIMD) { \\
    _Pragma(SIMD) \\
    for (int64_t b = bs; b < bs + S; b++) { \\
        const T v0 = r0[2 * b], v1 = r0[2 * b + 1], v2 = r1[2 * b], v3 = r1[2 * b + 1]; \\
        const T m01 = v0 > v1 ? v0 : v1, m012 = m01 > v2 ? m01 : v2; \\
        yr[b] = m012 > v3 ? m012 : v3; \\
        odd += (v0 - v0) + (v1 - v1) + (v2 - v2) + (v3 - v3); } }
void {name}(const T *x, T *y, int64_t N, int64_t C, int64_t sn, int64_t sc, int64_t sh_, int64_t oh, int64_t ow)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t a = 0; a < oh; a++) {
                const T *r0 = x + n * sn + c * sc + 2 * a * sh_, *r1 = r0 + sh_;
                T *yr = y + ((n * C + c) * oh + a) * ow;
                T odd = 0;
                TILE2_ROW(TILE2_MAX)
                if (odd == 0) continue;
                for (int64_t b = 0; b < ow; b++) {
                    const T v0 = r0[2 * b], v1 = r0[2 * b + 1], v2 = r1[2 * b], v3 = r1[2 * b + 1];
                    const T m01 = MAXIMUM(v0, v1), m012 = MAXIMUM(m01, v2);
                    yr[b] = MAXIMUM(m012, v3);
                }
            }
}
""",
    # max pooling's gradient (runtime/ops/conv.py) over (N, C, H, W) planes of x of any element
    # strides (sn, sc, sh_, sw_), windows kh x kw at stride (sh, sw), padding (ph, pw) read as -inf,
    # dilation (dh, dw): gy (N, C, oh, ow; strides gn, gc, gh, gw) added into dx (zeros, C-contiguous
    # (N, C, H, W)) at each window's first maximum in x (kernel positions in row-major order, a NaN
    # counting as the maximum: PyTorch's rule, the numpy kernel's mask). Branch-free over the data
    # (a data-dependent branch per element mispredicts: 2x slower); a window holding a NaN is read
    # again for its first NaN. A window of -inf only picks its first position, dropped if that is
    # padding, as the numpy kernel drops it. Windows are added last to first, so each element adds
    # its gradients in kernel-position order, as the numpy kernel's one strided add per kernel
    # position does: the same bits. The common 2x2 / stride 2 window (no padding, rows of unit
    # stride) has its own loop, vector code across a row of windows (4x faster than the scalar
    # chain of compares): each window's four elements written once, the gradient or +0.0 (what
    # the numpy kernel's select writes)
    "max_pool2d_backward": _POOL_WINDOW + _TILE2_ROW + """
/* windows bs .. bs + S - 1 of a 2x2 / stride 2 row: selects of floats only (GCC vectorises
   these, not int/float mixes): the gradient goes to the last position that beats all before it */
#define TILE2_WINDOWS(S, SIMD) { \\
    _Pragma(SIMD) \\
    for (int64_t b = bs; b < bs + S; b++) { \\
        const T v0 = r0[2 * b], v1 = r0[2 * b + 1], v2 = r1[2 * b], v3 = r1[2 * b + 1]; \\
        const T g = gr[b], z = 0; \\
        const T m01 = v1 > v0 ? v1 : v0, m = v2 > m01 ? v2 : m01; \\
        const T s3 = v3 > m ? g : z, l3 = v3 > m ? z : g; \\
        const T s2 = v2 > m01 ? l3 : z, l2 = v2 > m01 ? z : l3; \\
        d0[2 * b] = v1 > v0 ? z : l2; d0[2 * b + 1] = v1 > v0 ? l2 : z; \\
        d1[2 * b] = s2; d1[2 * b + 1] = s3; \\
        odd += (v0 - v0) + (v1 - v1) + (v2 - v2) + (v3 - v3); } }
void {name}(const T *gy, const T *x, T *dx, int64_t N, int64_t C, int64_t H, int64_t W, int64_t sn, int64_t sc,
            int64_t sh_, int64_t sw_, int64_t gn, int64_t gc, int64_t gh, int64_t gw, int64_t oh, int64_t ow,
            int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw)
{
    const int tile2 = kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1 && sw_ == 1
                      && gw == 1 && ow >= 4;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const T *xp = x + n * sn + c * sc, *gp = gy + n * gn + c * gc;
            T *dp = dx + (n * C + c) * H * W;
            if (tile2) {
                for (int64_t a = 0; a < oh; a++) {
                    const T *r0 = xp + 2 * a * sh_, *r1 = r0 + sh_, *gr = gp + a * gh;
                    T *d0 = dp + 2 * a * W, *d1 = d0 + W;
                    T odd = 0;      /* NaN when the row holds a NaN or an infinity */
                    TILE2_ROW(TILE2_WINDOWS)
                    if (odd == 0) continue;
                    for (int64_t b = 0; b < ow; b++) {
                        T m = -INFINITY;
                        int nan = 0;
                        int64_t at = 2 * a * W + 2 * b;
                        FOR_WINDOW(const int gt = v > m; m = gt ? v : m; at = gt ? h * W + w : at; nan |= v != v;)
                        if (nan) FOR_WINDOW(if (v != v) { at = h * W + w; goto found; })
                    found:
                        d0[2 * b] = d0[2 * b + 1] = d1[2 * b] = d1[2 * b + 1] = 0;
                        dp[at] = gr[b];
                    }
                }
                continue;
            }
            for (int64_t a = oh - 1; a >= 0; a--)
                for (int64_t b = ow - 1; b >= 0; b--) {
                    const int64_t h0 = a * sh - ph, w0 = b * sw - pw;
                    T m = -INFINITY;
                    int nan = 0;
                    int64_t at = h0 >= 0 && w0 >= 0 ? h0 * W + w0 : -1;
                    FOR_WINDOW(const int gt = v > m; m = gt ? v : m; at = gt ? h * W + w : at; nan |= v != v;)
                    if (nan) FOR_WINDOW(if (v != v) { at = h * W + w; goto done; })
                done:
                    if (at >= 0) dp[at] += gp[a * gh + b * gw];
                }
        }
}
""",
    # uniform floats in [0, 1): element i from word offset + i of the Philox stream (random.py), a
    # whole block of 4 words at a time (numpy's generator also computes each block once; the
    # kernels' eagerc_philox_word computes one per element); the unaligned ends word by word
    "uniform": """
void {name}(T *out, int64_t n, uint64_t seed, uint64_t offset)
{
    int64_t i = 0;
    for (; i < n && ((offset + (uint64_t)i) & 3); i++) out[i] = UNIFORM(eagerc_philox_word(seed, offset + i));
    const int64_t blocks = (n - i) / 4;
    const uint64_t b0 = (offset + (uint64_t)i) >> 2;
    T *o = out + i;
    /* scalar on purpose: GCC's vector form of the 64-bit products is ~3x slower here (4096x1024:
       30 ms against 11 ms scalar, numpy's generator and conversion 26 ms) */
    for (int64_t b = 0; b < blocks; b++) {
        uint64_t w[4];
        eagerc_philox_block(seed, b0 + b, w);
        o[4 * b] = UNIFORM(w[0]); o[4 * b + 1] = UNIFORM(w[1]);
        o[4 * b + 2] = UNIFORM(w[2]); o[4 * b + 3] = UNIFORM(w[3]);
    }
    for (i += 4 * blocks; i < n; i++) out[i] = UNIFORM(eagerc_philox_word(seed, offset + i));
}
""",
}

# argument types after the pointers: the int64 sizes and the dtype's scalars
_ARGS = {"cross_entropy": "ppp" "ii" "ff", "cross_entropy_backward": "pppp" "iii" "ff",
         "norm_weight_backward": "ppp" "iii" "f", "embedding_backward": "ppp" "iii",
         "lstm_step": "pppppp" "iii", "lstm_step_backward": "ppppppppppp" "iii", "uniform": "p" "i" "uu",
         "copy4d": "pp" + "i" * 12, "max_pool2d_backward": "ppp" + "i" * 22,
         "max_pool2d_2x2": "pp" + "i" * 7, "col2im_runs": "ppp" + "i" * 5}

_kernels = {}


def source(op, dtype):
    exp, log, sqrt, tanh = _MATH[dtype]
    name = f"eager_{op}_{dtype}"
    body = SOURCES[op].replace("{name}", name)
    rng = "" if op != "uniform" else philox.C_SOURCE + f"#define UNIFORM eagerc_uniform_f{dtype[-2:]}\n"
    nonpos = CRenderer.NONPOS_EXP_SOURCE if exp == CRenderer.NONPOS_EXP else ""
    return name, (CRenderer.PRELUDE + nonpos + _PRELUDE + rng + f"#define T {_CT[dtype]}\n#define EXP {exp}\n#define LOG {log}\n"
                  f"#define SQRT {sqrt}\n#define TANH {tanh}\n" + body)


def kernel(op, dtype):
    """The ctypes function of `op` for float32 / float64 arrays (pointers as integers, sizes as
    ints, scalars as Python floats); None when the C kernels are off or no compiler works."""
    key = (op, dtype)
    fn = _kernels.get(key, False)
    if fn is False:
        eager.prefetch(op, dtype)          # its backward's kernel compiles beside it
        name, src = source(op, dtype)
        build = eager.building(op)
        fn = c_function(name, src, build)
        if fn is not None:
            real = ctypes.c_float if dtype == "float32" else ctypes.c_double
            fn.argtypes = [{"p": ctypes.c_void_p, "i": ctypes.c_int64, "u": ctypes.c_uint64, "f": real}[a]
                           for a in _ARGS[op]]
            fn.restype = None
        if fn is not None or build:
            _kernels[key] = fn
    return fn
