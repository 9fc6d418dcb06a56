/*
 * The per-gene loops of the GA's and MAP-Elites' variation, and the archive's
 * niche descriptors, over a whole batch in one pass each.
 *
 * A generation of 45-50 placements of ResNet-50 takes 1.6-2 ms to simulate;
 * the same work as a few dozen numpy calls (draws, masks, where, copyto,
 * bincount, fancy indexing) took half of that again. The draws come from the
 * Generator's own bit generator (its "BitGenerator" capsule) with numpy's own
 * algorithms (numpy/random/src/distributions: Lemire's bounded integers on
 * 32-bit draws, 8-bit ones from a buffered 32-bit draw, float32 uniforms from
 * the top 24 bits), in the order and number numpy's calls in operators.py
 * make them, so a seed gives the same run with or without this module (the
 * numpy code is the fallback and the reference the tests compare with).
 *
 * Arrays come through the buffer protocol, C-contiguous; the Python callers
 * (operators.py, archive.py) build them with the right dtypes, and every size
 * is checked here so that a wrong call raises rather than writes out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* numpy/random/bitgen.h: what a BitGenerator's capsule points to. */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t;

static bitgen_t *bitgen_of(PyObject *capsule) {
    return PyCapsule_GetPointer(capsule, "BitGenerator");  /* sets an exception on anything else */
}

/* An integer in [0, rng], rng < 2^32 - 1 (buffered_bounded_lemire_uint32). */
static uint32_t lemire32(bitgen_t *g, uint32_t rng) {
    const uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)g->next_uint32(g->state) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (left < threshold) {
            m = (uint64_t)g->next_uint32(g->state) * excl;
            left = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* Generator.integers(0, rng + 1, cnt) as int64 (random_bounded_uint64_fill, rng < 2^32 - 1). */
static void fill_int(bitgen_t *g, uint32_t rng, Py_ssize_t cnt, int64_t *out) {
    for (Py_ssize_t i = 0; i < cnt; i++) out[i] = rng ? lemire32(g, rng) : 0;
}

/* Generator.integers(0, rng + 1, cnt, dtype=uint8) (random_bounded_uint8_fill: one 32-bit draw serves four). */
static void fill_u8(bitgen_t *g, uint8_t rng, Py_ssize_t cnt, uint8_t *out) {
    uint32_t buf = 0;
    int left = 0;
#define NEXT8() (left ? (left--, buf >>= 8, (uint8_t)buf) : (left = 3, buf = g->next_uint32(g->state), (uint8_t)buf))
    if (rng == 0) { memset(out, 0, (size_t)cnt); return; }
    for (Py_ssize_t i = 0; i < cnt; i++) {
        if (rng == 0xFF) { out[i] = NEXT8(); continue; }
        const uint8_t excl = (uint8_t)(rng + 1);
        uint16_t m = (uint16_t)(NEXT8() * excl);
        uint8_t low = (uint8_t)m;
        if (low < excl) {
            const uint8_t threshold = (uint8_t)((UINT8_MAX - rng) % excl);
            while (low < threshold) {
                m = (uint16_t)(NEXT8() * excl);
                low = (uint8_t)m;
            }
        }
        out[i] = (uint8_t)(m >> 8);
    }
#undef NEXT8
}

/* Generator.random(cnt, dtype=float32) (random_standard_uniform_fill_f). */
static void fill_f32(bitgen_t *g, Py_ssize_t cnt, float *out) {
    for (Py_ssize_t i = 0; i < cnt; i++) out[i] = (g->next_uint32(g->state) >> 8) * (1.0f / 16777216.0f);
}

/* A C-contiguous view of obj with items of `size` bytes holding at least `count` of them. */
static int view(PyObject *obj, Py_buffer *v, Py_ssize_t size, Py_ssize_t count, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (v->itemsize != size || v->len < count * size) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes", what, count, size);
        return -1;
    }
    return 0;
}

static void release(Py_buffer *vs, int k) {
    for (int i = 0; i < k; i++) PyBuffer_Release(&vs[i]);
}

/* Row indices: every one in [0, rows). */
static int check_rows(const int64_t *idx, Py_ssize_t r, Py_ssize_t rows) {
    for (Py_ssize_t j = 0; j < r; j++)
        if (idx[j] < 0 || idx[j] >= rows) {
            PyErr_SetString(PyExc_IndexError, "row index out of range");
            return -1;
        }
    return 0;
}

/* describe(placements i32[k, n], n, uses u8[g, d] or None, d, src i64[e], dst i64[e], out i64[k, 3]):
 * per placement the most-used device (ties: the lowest index), the number of devices used and the
 * number of edges whose ends sit on different genes. uses[gene] says which devices a gene runs on;
 * None: genes are devices (no splits). */
static PyObject *describe(PyObject *self, PyObject *args) {
    PyObject *po, *uo, *so, *dto, *oo;
    Py_ssize_t n, d;
    if (!PyArg_ParseTuple(args, "OnOnOOO", &po, &n, &uo, &d, &so, &dto, &oo)) return NULL;
    Py_buffer v[5];
    if (n <= 0 || d <= 0) { PyErr_SetString(PyExc_ValueError, "describe: n and d must be positive"); return NULL; }
    if (view(po, &v[0], 4, 0, 0, "placements") < 0) return NULL;
    Py_ssize_t k = v[0].len / (4 * n), g;
    int identity = uo == Py_None;
    if (identity) uo = PyBytes_FromStringAndSize(NULL, 0);  /* an empty view, released like the others */
    else Py_INCREF(uo);
    if (!uo) { release(v, 1); return NULL; }
    int got = view(uo, &v[1], 1, 0, 0, "uses");
    Py_DECREF(uo);
    if (got < 0) { release(v, 1); return NULL; }
    g = identity ? d : v[1].len / d;
    if (view(so, &v[2], 8, 0, 0, "src") < 0) { release(v, 2); return NULL; }
    Py_ssize_t e = v[2].len / 8;
    if (view(dto, &v[3], 8, e, 0, "dst") < 0) { release(v, 3); return NULL; }
    if (view(oo, &v[4], 8, 3 * k, 1, "out") < 0) { release(v, 4); return NULL; }
    const int32_t *pl = v[0].buf;
    const uint8_t *uses = v[1].buf;
    const int64_t *src = v[2].buf, *dst = v[3].buf;
    int64_t *out = v[4].buf;
    for (Py_ssize_t j = 0; j < e; j++)
        if (src[j] < 0 || src[j] >= n || dst[j] < 0 || dst[j] >= n) {
            release(v, 5);
            PyErr_SetString(PyExc_IndexError, "describe: an edge names an op out of range");
            return NULL;
        }
    /* four partial counts: a placement's genes come in runs on one device, and one count would make each
     * increment wait for the one before */
    int64_t *counts = PyMem_Calloc((size_t)(4 * d), sizeof(int64_t));
    if (!counts) { release(v, 5); return PyErr_NoMemory(); }
    int bad = 0;
    for (Py_ssize_t r = 0; r < k && !bad; r++) {
        const int32_t *x = pl + r * n;
        memset(counts, 0, sizeof(int64_t) * (size_t)(4 * d));
        for (Py_ssize_t i = 0; i < n; i++)
            if ((uint32_t)x[i] >= (uint32_t)g) { bad = 1; break; }
        if (bad) break;
        if (identity) {
            Py_ssize_t i = 0;
            for (; i + 4 <= n; i += 4) {
                counts[x[i]]++;
                counts[d + x[i + 1]]++;
                counts[2 * d + x[i + 2]]++;
                counts[3 * d + x[i + 3]]++;
            }
            for (; i < n; i++) counts[x[i]]++;
            for (Py_ssize_t q = 0; q < d; q++) counts[q] += counts[d + q] + counts[2 * d + q] + counts[3 * d + q];
        } else {
            for (Py_ssize_t i = 0; i < n; i++) {
                const uint8_t *u = uses + (Py_ssize_t)x[i] * d;
                for (Py_ssize_t q = 0; q < d; q++) counts[q] += u[q];
            }
        }
        int64_t most = 0, used = 0, cross = 0;
        for (Py_ssize_t q = 0; q < d; q++) {
            if (counts[q] > counts[most]) most = q;
            used += counts[q] > 0;
        }
        for (Py_ssize_t j = 0; j < e; j++) cross += x[src[j]] != x[dst[j]];
        out[3 * r] = most;
        out[3 * r + 1] = used;
        out[3 * r + 2] = cross;
    }
    PyMem_Free(counts);
    release(v, 5);
    if (bad) { PyErr_SetString(PyExc_ValueError, "describe: a gene out of range"); return NULL; }
    Py_RETURN_NONE;
}

/* niches(placements i32[k, n], n, stats i64[k, 3], kinds u8[m], divisor f64[m], steps f64[m], n_devices,
 * bins i64[k, m], raw f64[k, m]): the archive's raw values and bins from describe's counts, as the built-in
 * descriptors' numpy computes them (the same double operations in the same order, rint rounding half to even).
 * kind 0: the most-used device; 1: devices used (bin: minus one); 2: cross-device edges, bin rint(v / divisor *
 * steps); 3: the share of genes >= n_devices (split ops), bin rint(share * steps). */
static PyObject *niches(PyObject *self, PyObject *args) {
    PyObject *po, *so, *ko, *dvo, *sto, *bo, *ro;
    Py_ssize_t n, nd;
    if (!PyArg_ParseTuple(args, "OnOOOOnOO", &po, &n, &so, &ko, &dvo, &sto, &nd, &bo, &ro)) return NULL;
    if (n <= 0) { PyErr_SetString(PyExc_ValueError, "niches: n must be positive"); return NULL; }
    Py_buffer v[7];
    if (view(po, &v[0], 4, 0, 0, "placements") < 0) return NULL;
    Py_ssize_t k = v[0].len / (4 * n);
    if (view(so, &v[1], 8, 3 * k, 0, "stats") < 0) { release(v, 1); return NULL; }
    if (view(ko, &v[2], 1, 1, 0, "kinds") < 0) { release(v, 2); return NULL; }
    Py_ssize_t m = v[2].len;
    if (view(dvo, &v[3], 8, m, 0, "divisor") < 0) { release(v, 3); return NULL; }
    if (view(sto, &v[4], 8, m, 0, "steps") < 0) { release(v, 4); return NULL; }
    if (view(bo, &v[5], 8, k * m, 1, "bins") < 0) { release(v, 5); return NULL; }
    if (view(ro, &v[6], 8, k * m, 1, "raw") < 0) { release(v, 6); return NULL; }
    const int32_t *pl = v[0].buf;
    const int64_t *stats = v[1].buf;
    const uint8_t *kind = v[2].buf;
    const double *div = v[3].buf, *steps = v[4].buf;
    int64_t *bins = v[5].buf;
    double *raw = v[6].buf;
    for (Py_ssize_t j = 0; j < m; j++)
        if (kind[j] > 3) { release(v, 7); PyErr_SetString(PyExc_ValueError, "niches: kinds are 0 to 3"); return NULL; }
    for (Py_ssize_t i = 0; i < k; i++)
        for (Py_ssize_t j = 0; j < m; j++) {
            double r;
            int64_t b;
            if (kind[j] == 0) { b = stats[3 * i]; r = (double)b; }
            else if (kind[j] == 1) { r = (double)stats[3 * i + 1]; b = stats[3 * i + 1] - 1; }
            else if (kind[j] == 2) { r = (double)stats[3 * i + 2]; b = (int64_t)rint(r / div[j] * steps[j]); }
            else {
                Py_ssize_t split = 0;
                for (Py_ssize_t q = 0; q < n; q++) split += pl[i * n + q] >= nd;
                r = (double)split / (double)n;
                b = (int64_t)rint(r * steps[j]);
            }
            raw[i * m + j] = r;
            bins[i * m + j] = b;
        }
    release(v, 7);
    Py_RETURN_NONE;
}

/* tournament(capsule, objectives f64[m], size, k, out i64[k]): operators.tournament, k winners each the best
 * of `size` indices drawn uniformly (rows of Generator.integers(0, m, (k, size))), the first drawn on a tie
 * and a NaN first of all, as numpy's argmin. */
static PyObject *tournament(PyObject *self, PyObject *args) {
    PyObject *cap, *fo, *oo;
    Py_ssize_t size, k;
    if (!PyArg_ParseTuple(args, "OOnnO", &cap, &fo, &size, &k, &oo)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    Py_buffer v[2];
    if (view(fo, &v[0], 8, 1, 0, "objectives") < 0) return NULL;
    if (view(oo, &v[1], 8, k, 1, "out") < 0) { release(v, 1); return NULL; }
    Py_ssize_t m = v[0].len / 8;
    if (size < 1 || k < 0 || m > 0x7FFFFFFF) {
        release(v, 2);
        PyErr_SetString(PyExc_ValueError, "tournament: size >= 1, k >= 0 and fewer than 2^31 objectives");
        return NULL;
    }
    int64_t *draws = PyMem_Malloc(sizeof(int64_t) * (size_t)(size * k + 1));
    if (!draws) { release(v, 2); return PyErr_NoMemory(); }
    fill_int(g, (uint32_t)(m - 1), size * k, draws);
    const double *f = v[0].buf;
    int64_t *out = v[1].buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        const int64_t *d = draws + i * size;
        int64_t best = d[0];
        for (Py_ssize_t j = 1; j < size && f[best] == f[best]; j++)
            if (f[d[j]] < f[best] || f[d[j]] != f[d[j]]) best = d[j];
        out[i] = best;
    }
    PyMem_Free(draws);
    release(v, 2);
    Py_RETURN_NONE;
}

/* cross(capsule, a i32[*, n], b i32[*, n], rate, out i32[k or 2k, n], n, pair[, ia i64[k], ib i64[k]]):
 * variation.crossed with one cut. Pair i (parents a[i] and b[i], or a[ia[i]] and b[ib[i]] when the rows are
 * given: no gather of the parents first) crosses with probability rate (Generator.random(k) < rate), then each
 * crossed pair in order draws its cut in [1, n - 1] (one Generator.integers(1, n, (c, 1))); child i is the first
 * parent before the cut and the second from it (the first whole if not crossed); with pair, rows 2i and 2i + 1
 * are that child and its complement. */
static PyObject *cross(PyObject *self, PyObject *args) {
    PyObject *cap, *ao, *bo, *oo, *iao = Py_None, *ibo = Py_None;
    Py_ssize_t n;
    double rate;
    int pair;
    if (!PyArg_ParseTuple(args, "OOOdOnp|OO", &cap, &ao, &bo, &rate, &oo, &n, &pair, &iao, &ibo)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    if (n <= 0 || n > 0x7FFFFFFF) { PyErr_SetString(PyExc_ValueError, "cross: 0 < n < 2^31"); return NULL; }
    if ((iao == Py_None) != (ibo == Py_None)) { PyErr_SetString(PyExc_ValueError, "cross: both rows or neither"); return NULL; }
    Py_buffer v[5];
    int got = 0, rows = iao != Py_None;
    if (view(ao, &v[got], 4, 0, 0, "a") < 0) return NULL;
    got++;
    Py_ssize_t ra = v[0].len / (4 * n), k = ra;
    if (view(bo, &v[got], 4, rows ? 0 : k * n, 0, "b") < 0) goto fail;
    got++;
    Py_ssize_t rb = v[1].len / (4 * n);
    if (rows) {
        if (view(iao, &v[got], 8, 0, 0, "ia") < 0) goto fail;
        got++;
        k = v[2].len / 8;
        if (view(ibo, &v[got], 8, k, 0, "ib") < 0) goto fail;
        got++;
        if (check_rows(v[2].buf, k, ra) < 0 || check_rows(v[3].buf, k, rb) < 0) goto fail;
    }
    if (view(oo, &v[got], 4, (pair ? 2 : 1) * k * n, 1, "out") < 0) goto fail;
    got++;
    int64_t *cut = PyMem_Malloc(sizeof(int64_t) * (size_t)(k + 1));
    if (!cut) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < k; i++) cut[i] = g->next_double(g->state) < rate ? -1 : n;  /* -1: to draw */
    for (Py_ssize_t i = 0; i < k; i++)
        if (cut[i] < 0) cut[i] = n >= 2 ? 1 + (n > 2 ? lemire32(g, (uint32_t)(n - 2)) : 0) : n;
    const int32_t *a = v[0].buf, *b = v[1].buf;
    const int64_t *ia = rows ? v[2].buf : NULL, *ib = rows ? v[3].buf : NULL;
    int32_t *out = v[got - 1].buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        const Py_ssize_t c = (Py_ssize_t)cut[i];
        const int32_t *x = a + (rows ? ia[i] : i) * n, *y = b + (rows ? ib[i] : i) * n;
        int32_t *o = out + (pair ? 2 * i : i) * n;
        memcpy(o, x, sizeof(int32_t) * (size_t)c);
        memcpy(o + c, y + c, sizeof(int32_t) * (size_t)(n - c));
        if (pair) {
            memcpy(o + n, y, sizeof(int32_t) * (size_t)c);
            memcpy(o + n + c, x + c, sizeof(int32_t) * (size_t)(n - c));
        }
    }
    PyMem_Free(cut);
    release(v, got);
    Py_RETURN_NONE;
fail:
    release(v, got);
    return NULL;
}

/* Draws for r rows of n genes: `nf` float32 blocks of r * n, then r * n genes in [0, d) as uint8. */
static int draw_blocks(bitgen_t *g, Py_ssize_t r, Py_ssize_t n, int nf, Py_ssize_t d, float **u, uint8_t **genes) {
    *u = PyMem_Malloc(sizeof(float) * (size_t)(nf * r * n + 1));
    *genes = PyMem_Malloc((size_t)(r * n + 1));
    if (!*u || !*genes) { PyMem_Free(*u); PyMem_Free(*genes); PyErr_NoMemory(); return -1; }
    fill_f32(g, nf * r * n, *u);
    fill_u8(g, (uint8_t)(d - 1), r * n, *genes);
    return 0;
}

/* point(capsule, kids i32[K, n], rate f32[K], d): operators.batch_point_mutation in place, genes devices
 * (d <= 256): u = Generator.random((K, n), float32), fresh = Generator.integers(0, d, (K, n), uint8); gene i
 * of row j becomes fresh where u < rate[j]. */
static PyObject *point(PyObject *self, PyObject *args) {
    PyObject *cap, *ko, *to;
    Py_ssize_t n, d;
    if (!PyArg_ParseTuple(args, "OOOnn", &cap, &ko, &to, &n, &d)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    if (n <= 0 || d < 1 || d > 256) { PyErr_SetString(PyExc_ValueError, "point: n > 0, 1 <= d <= 256"); return NULL; }
    Py_buffer v[2];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    Py_ssize_t r = v[0].len / (4 * n);
    if (view(to, &v[1], 4, r, 0, "rate") < 0) { release(v, 1); return NULL; }
    float *u;
    uint8_t *genes;
    if (draw_blocks(g, r, n, 1, d, &u, &genes) < 0) { release(v, 2); return NULL; }
    int32_t *kids = v[0].buf;
    const float *rate = v[1].buf;
    for (Py_ssize_t j = 0; j < r; j++) {
        int32_t *x = kids + j * n;
        const float *uj = u + j * n, t = rate[j];
        const uint8_t *gj = genes + j * n;
        for (Py_ssize_t i = 0; i < n; i++) {  /* masks, not branches: the draws are random */
            int32_t m = -(int32_t)(uj[i] < t);
            x[i] = ((int32_t)gj[i] & m) | (x[i] & ~m);
        }
    }
    PyMem_Free(u);
    PyMem_Free(genes);
    release(v, 2);
    Py_RETURN_NONE;
}

/* kids[rows[j]] for j < r, in place: operators.batch_copy_point_mutation's draws and changes (see copy_point). */
static int copy_point_rows(bitgen_t *g, int32_t *kids, const int64_t *rows, Py_ssize_t r, Py_ssize_t n, Py_ssize_t d,
                           float pr, float cr) {
    float *u;
    uint8_t *genes;
    if (draw_blocks(g, r, n, 2, d, &u, &genes) < 0) return -1;
    for (Py_ssize_t j = 0; j < r; j++) {
        int32_t *x = kids + rows[j] * n;
        const float *pj = u + j * n, *cj = u + (r + j) * n;
        const uint8_t *gj = genes + j * n;
        int32_t before = x[0];  /* gene i - 1 as it was */
        x[0] = pj[0] < pr ? (int32_t)gj[0] : x[0];
        for (Py_ssize_t i = 1; i < n; i++) {  /* selects, not branches: the draws are random */
            int32_t was = x[i], mp = -(int32_t)(pj[i] < pr), mc = -(int32_t)(cj[i] < cr);
            int32_t y = ((int32_t)gj[i] & mp) | (was & ~mp);
            x[i] = (before & mc) | (y & ~mc);
            before = was;
        }
    }
    PyMem_Free(u);
    PyMem_Free(genes);
    return 0;
}

/* copy_point(capsule, kids i32[K, n], rows i64[r], point_rate, copy_rate, d): operators.batch_copy_point_mutation
 * of kids[rows] in place, genes devices (d <= 256): up and uc = two Generator.random((r, n), float32), fresh =
 * Generator.integers(0, d, (r, n), uint8); gene i becomes fresh where up < point_rate, and then, for i >= 1 where
 * uc < copy_rate, the row's gene i - 1 as it was before (rates compared as float32). */
static PyObject *copy_point(PyObject *self, PyObject *args) {
    PyObject *cap, *ko, *ro;
    Py_ssize_t n, d;
    float pr, cr;
    if (!PyArg_ParseTuple(args, "OOOffnn", &cap, &ko, &ro, &pr, &cr, &n, &d)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    if (n <= 0 || d < 1 || d > 256) { PyErr_SetString(PyExc_ValueError, "copy_point: n > 0, 1 <= d <= 256"); return NULL; }
    Py_buffer v[2];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    if (view(ro, &v[1], 8, 0, 0, "rows") < 0) { release(v, 1); return NULL; }
    Py_ssize_t r = v[1].len / 8;
    const int64_t *rows = v[1].buf;
    int bad = check_rows(rows, r, v[0].len / (4 * n)) < 0 || copy_point_rows(g, v[0].buf, rows, r, n, d, pr, cr) < 0;
    release(v, 2);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* zone(kids i32[K, n], rows i64[r], start i64[r], end i64[r], gene i64[r]): genes start..end - 1 of row
 * rows[j] become gene[j] (the zone mutation, after its draws). */
static PyObject *zone(PyObject *self, PyObject *args) {
    PyObject *ko, *ro, *so, *eo, *go;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOOOn", &ko, &ro, &so, &eo, &go, &n)) return NULL;
    if (n <= 0) { PyErr_SetString(PyExc_ValueError, "zone: n must be positive"); return NULL; }
    Py_buffer v[5];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    if (view(ro, &v[1], 8, 0, 0, "rows") < 0) { release(v, 1); return NULL; }
    Py_ssize_t r = v[1].len / 8;
    if (view(so, &v[2], 8, r, 0, "start") < 0) { release(v, 2); return NULL; }
    if (view(eo, &v[3], 8, r, 0, "end") < 0) { release(v, 3); return NULL; }
    if (view(go, &v[4], 8, r, 0, "gene") < 0) { release(v, 4); return NULL; }
    const int64_t *rows = v[1].buf, *start = v[2].buf, *end = v[3].buf, *gene = v[4].buf;
    if (check_rows(rows, r, v[0].len / (4 * n)) < 0) { release(v, 5); return NULL; }
    int32_t *kids = v[0].buf;
    for (Py_ssize_t j = 0; j < r; j++) {
        int64_t s = start[j] < 0 ? 0 : start[j], t = end[j] > n ? n : end[j];
        for (int64_t i = s; i < t; i++) kids[rows[j] * n + i] = (int32_t)gene[j];
    }
    release(v, 5);
    Py_RETURN_NONE;
}

/* MAP-Elites' mutation of a batch (variation.map_elites_children after its crossover), genes devices (d <= 256),
 * in two calls around numpy's geometric draw (its ziggurat stays numpy's):
 * me_head(capsule, kids i32[k, n], n, replace_rate, zone_rate, d, kinds u8[k], starts i64[k]) -> z: u and w = two
 * Generator.random(k); row i is replaced (kinds 1) where u < replace_rate, else zoned (2) where w < zone_rate, else
 * mutated per gene (0). The replaced rows then draw Generator.random((r, d)) and Generator.integers(0, d, r): every
 * gene on the used device with the largest draw (the first on a tie) moves to the drawn device. The z zoned rows
 * draw their starts, Generator.integers(0, n, z), into starts[:z].
 * me_tail(capsule, kids, n, kinds, starts, lengths i64[z], d, point_rate, copy_rate): the zoned rows draw their
 * devices, Generator.integers(0, d, z), and genes start .. min(start + length, n) - 1 take them; then the rows of
 * kind 0 mutate as copy_point does. */
static PyObject *me_head(PyObject *self, PyObject *args) {
    PyObject *cap, *ko, *to, *so;
    Py_ssize_t n, d;
    double rr, zr;
    if (!PyArg_ParseTuple(args, "OOnddnOO", &cap, &ko, &n, &rr, &zr, &d, &to, &so)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    if (n <= 0 || n > 0x7FFFFFFF || d < 1 || d > 256) {
        PyErr_SetString(PyExc_ValueError, "me_head: 0 < n < 2^31, 1 <= d <= 256");
        return NULL;
    }
    Py_buffer v[3];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    Py_ssize_t k = v[0].len / (4 * n), r = 0, z = 0;
    if (view(to, &v[1], 1, k, 1, "kinds") < 0) { release(v, 1); return NULL; }
    if (view(so, &v[2], 8, k, 1, "starts") < 0) { release(v, 2); return NULL; }
    int32_t *kids = v[0].buf;
    uint8_t *kind = v[1].buf;
    int64_t *starts = v[2].buf;
    for (Py_ssize_t i = 0; i < k * n; i++)
        if (kids[i] < 0 || kids[i] >= d) {
            release(v, 3);
            PyErr_SetString(PyExc_ValueError, "me_head: a gene out of range");
            return NULL;
        }
    for (Py_ssize_t i = 0; i < k; i++) {
        kind[i] = g->next_double(g->state) < rr;
        r += kind[i];
    }
    for (Py_ssize_t i = 0; i < k; i++)
        if (g->next_double(g->state) < zr && !kind[i]) kind[i] = 2;
    double *w = PyMem_Malloc(sizeof(double) * (size_t)(r * d + 1));
    int64_t *to_dev = PyMem_Malloc(sizeof(int64_t) * (size_t)(r + 1));
    if (!w || !to_dev) { PyMem_Free(w); PyMem_Free(to_dev); release(v, 3); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < r * d; i++) w[i] = g->next_double(g->state);
    fill_int(g, (uint32_t)(d - 1), r, to_dev);
    for (Py_ssize_t i = 0, j = 0; i < k; i++) {
        if (kind[i] != 1) continue;
        int32_t *x = kids + i * n;
        uint8_t used[256] = {0};
        for (Py_ssize_t q = 0; q < n; q++) used[x[q]] = 1;
        const double *wj = w + j * d;
        int32_t from = 0;
        double top = used[0] ? wj[0] : 0.0;
        for (Py_ssize_t q = 1; q < d; q++)
            if ((used[q] ? wj[q] : 0.0) > top) { top = wj[q]; from = (int32_t)q; }
        for (Py_ssize_t q = 0; q < n; q++)
            if (x[q] == from) x[q] = (int32_t)to_dev[j];
        j++;
    }
    PyMem_Free(w);
    PyMem_Free(to_dev);
    for (Py_ssize_t i = 0; i < k; i++) z += kind[i] == 2;
    fill_int(g, (uint32_t)(n - 1), z, starts);
    release(v, 3);
    return PyLong_FromSsize_t(z);
}

static PyObject *me_tail(PyObject *self, PyObject *args) {
    PyObject *cap, *ko, *to, *so, *lo;
    Py_ssize_t n, d;
    float pr, cr;
    if (!PyArg_ParseTuple(args, "OOnOOOnff", &cap, &ko, &n, &to, &so, &lo, &d, &pr, &cr)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    if (n <= 0 || d < 1 || d > 256) { PyErr_SetString(PyExc_ValueError, "me_tail: n > 0, 1 <= d <= 256"); return NULL; }
    Py_buffer v[4];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    Py_ssize_t k = v[0].len / (4 * n), z = 0, r = 0;
    if (view(to, &v[1], 1, k, 0, "kinds") < 0) { release(v, 1); return NULL; }
    const uint8_t *kind = v[1].buf;
    for (Py_ssize_t i = 0; i < k; i++) z += kind[i] == 2;
    if (view(so, &v[2], 8, z, 0, "starts") < 0) { release(v, 2); return NULL; }
    if (view(lo, &v[3], 8, z, 0, "lengths") < 0) { release(v, 3); return NULL; }
    int32_t *kids = v[0].buf;
    const int64_t *start = v[2].buf, *len = v[3].buf;
    int64_t *rows = PyMem_Malloc(sizeof(int64_t) * (size_t)(k + z + 1));
    if (!rows) { release(v, 4); return PyErr_NoMemory(); }
    int64_t *dev = rows + k;
    fill_int(g, (uint32_t)(d - 1), z, dev);
    for (Py_ssize_t i = 0, j = 0; i < k; i++) {
        if (kind[i] == 0) rows[r++] = i;
        if (kind[i] != 2) continue;
        int64_t s = start[j] < 0 ? 0 : start[j], t = len[j] >= n - s ? n : s + len[j];
        for (int64_t q = s; q < t; q++) kids[i * n + q] = (int32_t)dev[j];
        j++;
    }
    int bad = copy_point_rows(g, kids, rows, r, n, d, pr, cr) < 0;
    PyMem_Free(rows);
    release(v, 4);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* pcg64_seed(words: tuple of ints in [0, 2^32)) -> (state_high, state_low, inc_high, inc_low), or None where the
 * compiler has no 128-bit integers: the state of numpy's PCG64(SeedSequence(words)), as default_rng(words) makes it.
 * SeedSequence hashes the words into a pool of four (mix_entropy), draws eight 32-bit words from it
 * (generate_state(4, uint64)): the first two 64-bit ones the initial state (high, low), the last two the stream;
 * PCG64 then seeds as pcg_setseq_128_srandom_r does. */
static uint32_t seq_hash(uint32_t value, uint32_t *h) {
    value ^= *h;
    *h *= 0x931e8875u;
    value *= *h;
    return value ^ (value >> 16);
}

static uint32_t seq_mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}

static PyObject *pcg64_seed(PyObject *self, PyObject *args) {
    PyObject *tuple;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &tuple)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    uint32_t *w = PyMem_Malloc(sizeof(uint32_t) * (size_t)(n + 1)), pool[4], h = 0x43b0d7e5u, out[8];
    if (!w) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tuple, i));
        if (PyErr_Occurred() || v > 0xFFFFFFFFull) {
            PyMem_Free(w);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "pcg64_seed: words must be below 2^32");
            return NULL;
        }
        w[i] = (uint32_t)v;
    }
    for (int i = 0; i < 4; i++) pool[i] = seq_hash(i < n ? w[i] : 0, &h);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) pool[d] = seq_mix(pool[d], seq_hash(pool[s], &h));
    for (Py_ssize_t s = 4; s < n; s++)
        for (int d = 0; d < 4; d++) pool[d] = seq_mix(pool[d], seq_hash(w[s], &h));
    PyMem_Free(w);
    h = 0x8b51f9ddu;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4] ^ h;
        h *= 0x58f38dedu;
        v *= h;
        out[i] = v ^ (v >> 16);
    }
#ifdef __SIZEOF_INT128__
    typedef unsigned __int128 u128;
    u128 word[4];
    for (int i = 0; i < 4; i++) word[i] = (u128)out[2 * i] | (u128)out[2 * i + 1] << 32;
    const u128 mult = (u128)0x2360ED051FC65DA4ull << 64 | 0x4385DF649FCCF645ull;
    u128 inc = (word[2] << 64 | word[3]) << 1 | 1, state = inc;  /* state 0, one step */
    state = (state + (word[0] << 64 | word[1])) * mult + inc;
    return Py_BuildValue("(KKKK)", (unsigned long long)(state >> 64), (unsigned long long)state,
                         (unsigned long long)(inc >> 64), (unsigned long long)inc);
#else
    Py_RETURN_NONE;
#endif
}

/* integers(capsule, bound, out i64[k]): Generator.integers(0, bound, k) for 1 <= bound <= 2^32 - 1, without the
 * Python around numpy's call (a few microseconds each, several calls per batch). */
static PyObject *integers(PyObject *self, PyObject *args) {
    PyObject *cap, *oo;
    unsigned long long bound;
    if (!PyArg_ParseTuple(args, "OKO", &cap, &bound, &oo)) return NULL;
    bitgen_t *g = bitgen_of(cap);
    if (!g) return NULL;
    if (bound < 1 || bound > 0xFFFFFFFEull) { PyErr_SetString(PyExc_ValueError, "integers: 1 <= bound < 2^32 - 1"); return NULL; }
    Py_buffer v;
    if (view(oo, &v, 8, 0, 1, "out") < 0) return NULL;
    fill_int(g, (uint32_t)(bound - 1), v.len / 8, v.buf);
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

/* A batch row for best_per_niche's sort: by niche code, then objective (NaN last), then batch order. */
typedef struct { int64_t code; double f; Py_ssize_t i; } Entry;

static int by_niche(const void *pa, const void *pb) {
    const Entry *a = pa, *b = pb;
    if (a->code != b->code) return a->code < b->code ? -1 : 1;
    int an = a->f != a->f, bn = b->f != b->f;
    if (an != bn) return an - bn;
    if (!an && a->f != b->f) return a->f < b->f ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

/* best_per_niche(bins i64[k, m], sizes i64[m], fs f64[k], codes i64[e] sorted, kept f64[e], rows i64[k],
 * fresh u8[k], code_out i64[k]) -> count, or -1 if a bin lies outside its size: Archive.add's choice of winners.
 * Each niche's best row of the batch (the lowest objective, NaN last, the earliest on a tie) wins if the niche
 * (its row-major code) is not among `codes` or the row beats `kept` there; winners in niche order. */
static PyObject *best_per_niche(PyObject *self, PyObject *args) {
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
    Py_buffer v[8];
    if (view(o[1], &v[1], 8, 1, 0, "sizes") < 0) return NULL;
    Py_ssize_t m = v[1].len / 8;
    if (view(o[2], &v[2], 8, 0, 0, "fs") < 0) { PyBuffer_Release(&v[1]); return NULL; }
    Py_ssize_t k = v[2].len / 8;
    if (view(o[0], &v[0], 8, k * m, 0, "bins") < 0) { PyBuffer_Release(&v[1]); PyBuffer_Release(&v[2]); return NULL; }
    int got = 3;
    if (view(o[3], &v[3], 8, 0, 0, "codes") < 0) goto fail;
    got = 4;
    Py_ssize_t e = v[3].len / 8;
    if (view(o[4], &v[4], 8, e, 0, "kept") < 0) goto fail;
    got = 5;
    if (view(o[5], &v[5], 8, k, 1, "rows") < 0) goto fail;
    got = 6;
    if (view(o[6], &v[6], 1, k, 1, "fresh") < 0) goto fail;
    got = 7;
    if (view(o[7], &v[7], 8, k, 1, "code_out") < 0) goto fail;
    got = 8;
    const int64_t *bins = v[0].buf, *sizes = v[1].buf, *codes = v[3].buf;
    const double *fs = v[2].buf, *kept = v[4].buf;
    Entry *es = PyMem_Malloc(sizeof(Entry) * (size_t)(k + 1));
    if (!es) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t code = 0;
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t b = bins[i * m + j];
            if (b < 0 || b >= sizes[j]) { PyMem_Free(es); release(v, 8); return PyLong_FromLong(-1); }
            code = code * sizes[j] + b;
        }
        es[i].code = code;
        es[i].f = fs[i];
        es[i].i = i;
    }
    qsort(es, (size_t)k, sizeof(Entry), by_niche);
    int64_t *rows = v[5].buf, *code_out = v[7].buf;
    uint8_t *fresh = v[6].buf;
    Py_ssize_t won = 0;
    for (Py_ssize_t t = 0; t < k; t++) {
        if (t && es[t].code == es[t - 1].code) continue;  /* not the niche's best in the batch */
        Py_ssize_t lo = 0, hi = e;  /* the niche among the kept codes */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (codes[mid] < es[t].code) lo = mid + 1; else hi = mid;
        }
        int had = lo < e && codes[lo] == es[t].code;
        if (had && !(es[t].f < kept[lo])) continue;
        rows[won] = es[t].i;
        fresh[won] = (uint8_t)!had;
        code_out[won++] = es[t].code;
    }
    PyMem_Free(es);
    release(v, 8);
    return PyLong_FromSsize_t(won);
fail:
    release(v, got);
    return NULL;
}

static PyMethodDef methods[] = {
    {"describe", describe, METH_VARARGS, "describe(placements, n, uses, d, src, dst, out int64[k, 3])"},
    {"tournament", tournament, METH_VARARGS, "tournament(capsule, objectives, size, k, out int64[k])"},
    {"cross", cross, METH_VARARGS, "cross(capsule, a, b, rate, out, n, pair[, ia, ib])"},
    {"point", point, METH_VARARGS, "point(capsule, kids, rate float32[k], d)"},
    {"copy_point", copy_point, METH_VARARGS, "copy_point(capsule, kids, rows, point_rate, copy_rate, d)"},
    {"me_head", me_head, METH_VARARGS, "me_head(capsule, kids, n, replace_rate, zone_rate, d, kinds, starts) -> z"},
    {"me_tail", me_tail, METH_VARARGS, "me_tail(capsule, kids, n, kinds, starts, lengths, d, point_rate, copy_rate)"},
    {"pcg64_seed", pcg64_seed, METH_VARARGS, "pcg64_seed(words) -> (state_high, state_low, inc_high, inc_low)"},
    {"integers", integers, METH_VARARGS, "integers(capsule, bound, out int64[k])"},
    {"niches", niches, METH_VARARGS, "niches(placements, n, stats, kinds, divisor, steps, n_devices, bins, raw)"},
    {"zone", zone, METH_VARARGS, "zone(kids, rows, start, end, gene, n)"},
    {"best_per_niche", best_per_niche, METH_VARARGS,
     "best_per_niche(bins, sizes, fs, codes, kept, rows, fresh, code_out) -> count or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef batch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_batch",
    .m_doc = "Batch variation with numpy's draws, and niche descriptors (see operators.py for the semantics).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&batch_module); }
