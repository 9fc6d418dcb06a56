/*
 * The per-gene loops of the GA's and MAP-Elites' variation, and the archive's
 * niche descriptors, over a whole batch in one pass each.
 *
 * A generation of 45-50 placements of ResNet-50 takes 1.6-2 ms to simulate;
 * the same work as a dozen numpy calls (masks, where, copyto, bincount, fancy
 * indexing) took half of that again. These functions do only what follows the
 * random draws: the draws themselves stay with numpy's Generator in
 * operators.py, in the same order and shapes, so a seed gives the same run
 * with or without this module (the numpy code is the fallback and the
 * reference the tests compare with).
 *
 * Arrays come through the buffer protocol, C-contiguous; the Python callers
 * (operators.py, archive.py) build them with the right dtypes, and every size
 * is checked here so that a wrong call raises rather than writes out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
    int64_t *counts = PyMem_Calloc((size_t)d, sizeof(int64_t));
    if (!counts) { release(v, 5); return PyErr_NoMemory(); }
    int bad = 0;
    for (Py_ssize_t r = 0; r < k && !bad; r++) {
        const int32_t *x = pl + r * n;
        memset(counts, 0, sizeof(int64_t) * (size_t)d);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (x[i] < 0 || x[i] >= g) { bad = 1; break; }
            if (identity) { counts[x[i]]++; continue; }
            const uint8_t *u = uses + (Py_ssize_t)x[i] * d;
            for (Py_ssize_t q = 0; q < d; q++) counts[q] += u[q];
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

/* cross(a i32[k, n], b i32[k, n], cut i64[k], out i32[k or 2k, n], pair): child i is a[i] before cut[i]
 * and b[i] from it; with pair, rows 2i and 2i + 1 are that child and its complement. */
static PyObject *cross(PyObject *self, PyObject *args) {
    PyObject *ao, *bo, *co, *oo;
    Py_ssize_t n;
    int pair;
    if (!PyArg_ParseTuple(args, "OOOOnp", &ao, &bo, &co, &oo, &n, &pair)) return NULL;
    if (n <= 0) { PyErr_SetString(PyExc_ValueError, "cross: n must be positive"); return NULL; }
    Py_buffer v[4];
    if (view(co, &v[0], 8, 0, 0, "cut") < 0) return NULL;
    Py_ssize_t k = v[0].len / 8;
    if (view(ao, &v[1], 4, k * n, 0, "a") < 0) { release(v, 1); return NULL; }
    if (view(bo, &v[2], 4, k * n, 0, "b") < 0) { release(v, 2); return NULL; }
    if (view(oo, &v[3], 4, (pair ? 2 : 1) * k * n, 1, "out") < 0) { release(v, 3); return NULL; }
    const int64_t *cut = v[0].buf;
    const int32_t *a = v[1].buf, *b = v[2].buf;
    int32_t *out = v[3].buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t c = cut[i] < 0 ? 0 : (cut[i] > n ? n : (Py_ssize_t)cut[i]);
        const int32_t *x = a + i * n, *y = b + i * n;
        int32_t *o = out + (pair ? 2 * i : i) * n;
        memcpy(o, x, sizeof(int32_t) * (size_t)c);
        memcpy(o + c, y + c, sizeof(int32_t) * (size_t)(n - c));
        if (pair) {
            memcpy(o + n, y, sizeof(int32_t) * (size_t)c);
            memcpy(o + n + c, x + c, sizeof(int32_t) * (size_t)(n - c));
        }
    }
    release(v, 4);
    Py_RETURN_NONE;
}

/* point(kids i32[K, n], rows i64[r], u f32[r, n], rate f32[r], genes u8[r, n]): in row rows[j] of kids,
 * gene i becomes genes[j, i] where u[j, i] < rate[j] (the GA's point mutation, after its draws). */
static PyObject *point(PyObject *self, PyObject *args) {
    PyObject *ko, *ro, *uo, *to, *go;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOOOn", &ko, &ro, &uo, &to, &go, &n)) return NULL;
    if (n <= 0) { PyErr_SetString(PyExc_ValueError, "point: n must be positive"); return NULL; }
    Py_buffer v[5];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    if (view(ro, &v[1], 8, 0, 0, "rows") < 0) { release(v, 1); return NULL; }
    Py_ssize_t r = v[1].len / 8;
    if (view(uo, &v[2], 4, r * n, 0, "u") < 0) { release(v, 2); return NULL; }
    if (view(to, &v[3], 4, r, 0, "rate") < 0) { release(v, 3); return NULL; }
    if (view(go, &v[4], 1, r * n, 0, "genes") < 0) { release(v, 4); return NULL; }
    const int64_t *rows = v[1].buf;
    if (check_rows(rows, r, v[0].len / (4 * n)) < 0) { release(v, 5); return NULL; }
    int32_t *kids = v[0].buf;
    const float *u = v[2].buf, *rate = v[3].buf;
    const uint8_t *genes = v[4].buf;
    for (Py_ssize_t j = 0; j < r; j++) {
        int32_t *x = kids + rows[j] * n;
        const float *uj = u + j * n, t = rate[j];
        const uint8_t *gj = genes + j * n;
        for (Py_ssize_t i = 0; i < n; i++) {  /* masks, not branches: the draws are random */
            int32_t m = -(int32_t)(uj[i] < t);
            x[i] = ((int32_t)gj[i] & m) | (x[i] & ~m);
        }
    }
    release(v, 5);
    Py_RETURN_NONE;
}

/* copy_point(kids i32[K, n], rows i64[r], up f32[r, n], uc f32[r, n], genes u8[r, n], point_rate, copy_rate):
 * MAP-Elites' gene mutation of row rows[j]: gene i becomes genes[j, i] where up < point_rate, and then, for
 * i >= 1 where uc < copy_rate, the row's gene i - 1 as it was before (rates compared as float32). */
static PyObject *copy_point(PyObject *self, PyObject *args) {
    PyObject *ko, *ro, *po, *co, *go;
    Py_ssize_t n;
    float pr, cr;
    if (!PyArg_ParseTuple(args, "OOOOOffn", &ko, &ro, &po, &co, &go, &pr, &cr, &n)) return NULL;
    if (n <= 0) { PyErr_SetString(PyExc_ValueError, "copy_point: n must be positive"); return NULL; }
    Py_buffer v[5];
    if (view(ko, &v[0], 4, 0, 1, "kids") < 0) return NULL;
    if (view(ro, &v[1], 8, 0, 0, "rows") < 0) { release(v, 1); return NULL; }
    Py_ssize_t r = v[1].len / 8;
    if (view(po, &v[2], 4, r * n, 0, "up") < 0) { release(v, 2); return NULL; }
    if (view(co, &v[3], 4, r * n, 0, "uc") < 0) { release(v, 3); return NULL; }
    if (view(go, &v[4], 1, r * n, 0, "genes") < 0) { release(v, 4); return NULL; }
    const int64_t *rows = v[1].buf;
    if (check_rows(rows, r, v[0].len / (4 * n)) < 0) { release(v, 5); return NULL; }
    int32_t *kids = v[0].buf;
    const float *up = v[2].buf, *uc = v[3].buf;
    const uint8_t *genes = v[4].buf;
    for (Py_ssize_t j = 0; j < r; j++) {
        int32_t *x = kids + rows[j] * n;
        const float *pj = up + j * n, *cj = uc + j * n;
        const uint8_t *gj = genes + j * n;
        int32_t before = x[0];  /* gene i - 1 as it was */
        x[0] = pj[0] < pr ? (int32_t)gj[0] : x[0];
        for (Py_ssize_t i = 1; i < n; i++) {  /* selects, not branches: the masks are random */
            int32_t was = x[i], mp = -(int32_t)(pj[i] < pr), mc = -(int32_t)(cj[i] < cr);
            int32_t y = ((int32_t)gj[i] & mp) | (was & ~mp);
            x[i] = (before & mc) | (y & ~mc);
            before = was;
        }
    }
    release(v, 5);
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

static PyMethodDef methods[] = {
    {"describe", describe, METH_VARARGS, "describe(placements, n, uses, d, src, dst, out int64[k, 3])"},
    {"cross", cross, METH_VARARGS, "cross(a, b, cut int64[k], out, n, pair)"},
    {"point", point, METH_VARARGS, "point(kids, rows, u, rate, genes, n)"},
    {"copy_point", copy_point, METH_VARARGS, "copy_point(kids, rows, up, uc, genes, point_rate, copy_rate, n)"},
    {"zone", zone, METH_VARARGS, "zone(kids, rows, start, end, gene, n)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef batch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_batch",
    .m_doc = "Batch variation and niche descriptors after numpy's draws (see operators.py for the semantics).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&batch_module); }
