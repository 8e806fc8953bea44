/* Interval nesting for nsbridge.model.host.nesting, in C: the stack sweep that
 * nesting._parents vectorises with numpy (several passes over the arrays) in one pass,
 * and the innermost interval around each point (HostTree.enclosing_codes: a binary
 * search and a climb per point). Optional: without a C compiler nsbridge uses the numpy
 * versions, which give the same answers (tests/test_model_nesting.py holds both to plain
 * Python loops).
 *
 * parents(codes, start, end, top_level, out): the intervals sorted by (thread code,
 * start, longest first); out[k] = the latest earlier interval of k's thread still open
 * at k's start (end > start), -1 for none or where top_level[k]. Buffers: int64, float64,
 * float64, bool (1 byte), int64 (written), all of one length, C-contiguous; times without
 * NaN (the caller checks). Runs without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static int sweep(const int64_t *codes, const double *start, const double *end,
                 const unsigned char *top_level, int64_t *out, Py_ssize_t n) {
    int64_t *stack = malloc((size_t)(n > 0 ? n : 1) * sizeof *stack);
    if (!stack) return -1;
    Py_ssize_t depth = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k == 0 || codes[k] != codes[k - 1]) depth = 0;   /* a new thread */
        while (depth > 0 && end[stack[depth - 1]] <= start[k]) depth--;
        out[k] = (depth > 0 && !top_level[k]) ? stack[depth - 1] : -1;
        stack[depth++] = k;
    }
    free(stack);
    return 0;
}

/* The first position in [lo, hi) whose start is after t (hi: none), given ``near``, the
   answer for the thread's previous point (-1: none yet). Points come nearly in time order
   per thread, so the answer is usually at or just after ``near``: a search that doubles
   its step from there reads a few neighbouring starts instead of a binary search's
   cache misses across the whole thread. Any order of points gives the same answers. */
static int64_t first_after(const double *start, int64_t lo, int64_t hi, double t,
                           int64_t near) {
    int64_t a = lo, b = hi;
    if (near >= lo && near <= hi) {
        if (near < hi && start[near] <= t) {          /* later: gallop forward */
            int64_t step = 1;
            a = near + 1;
            b = a;
            while (b < hi && start[b] <= t) {
                a = b + 1;
                b = a + step;
                step *= 2;
            }
            if (b > hi) b = hi;
        } else if (near == lo || start[near - 1] <= t) {
            return near;                              /* the same answer */
        } else {
            b = near;                                 /* earlier: search before it */
        }
    }
    while (a < b) {                 /* the first start after t in [a, b) */
        int64_t mid = a + (b - a) / 2;
        if (start[mid] <= t) a = mid + 1;
        else b = mid;
    }
    return a;
}

/* For each point (thread code, time): the innermost interval of that thread holding it,
 * as nesting.HostTree.enclosing_codes finds it: the last interval of the thread starting
 * at or before the time (first_after, less one), then up the parents while that one
 * ended before the time. -1: none, or a code outside the tree. ``near``: one slot per
 * thread. */
static void innermost(const int64_t *codes, const double *times, Py_ssize_t m,
                      const double *start, const double *end, const int64_t *parent,
                      const int64_t *bounds, Py_ssize_t threads, int64_t *near,
                      int64_t *out) {
    for (Py_ssize_t k = 0; k < threads; k++) near[k] = -1;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t code = codes[i];
        int64_t j = -1;
        if (code >= 0 && code < threads) {
            int64_t lo = bounds[2 * code];
            double t = times[i];
            int64_t a = first_after(start, lo, bounds[2 * code + 1], t, near[code]);
            near[code] = a;
            j = a - 1 >= lo ? a - 1 : -1;
            while (j >= 0 && end[j] < t) j = parent[j];
        }
        out[i] = j;
    }
}

static int length_is(Py_buffer *view, Py_ssize_t n, Py_ssize_t item) {
    if (view->len != n * item) {
        PyErr_SetString(PyExc_ValueError, "_nest: buffers of different lengths or item sizes");
        return 0;
    }
    return 1;
}

static PyObject *parents(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer codes, start, end, top, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*:parents", &codes, &start, &end, &top, &out))
        return NULL;
    Py_ssize_t n = codes.len / 8;
    int status = -2;
    if (length_is(&codes, n, 8) && length_is(&start, n, 8) && length_is(&end, n, 8) &&
        length_is(&top, n, 1) && length_is(&out, n, 8)) {
        Py_BEGIN_ALLOW_THREADS
        status = sweep(codes.buf, start.buf, end.buf, top.buf, out.buf, n);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&codes);
    PyBuffer_Release(&start);
    PyBuffer_Release(&end);
    PyBuffer_Release(&top);
    PyBuffer_Release(&out);
    if (status == -1) return PyErr_NoMemory();
    if (status == -2) return NULL;
    Py_RETURN_NONE;
}

static PyObject *enclosing(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer codes, times, start, end, parent, bounds, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*w*:enclosing", &codes, &times, &start, &end,
                          &parent, &bounds, &out))
        return NULL;
    Py_ssize_t m = codes.len / 8, n = start.len / 8, threads = bounds.len / 16;
    int ok = length_is(&codes, m, 8) && length_is(&times, m, 8) && length_is(&out, m, 8) &&
             length_is(&start, n, 8) && length_is(&end, n, 8) && length_is(&parent, n, 8) &&
             length_is(&bounds, threads, 16);
    int64_t *near = ok ? malloc((size_t)(threads > 0 ? threads : 1) * sizeof *near) : NULL;
    if (ok && near) {
        Py_BEGIN_ALLOW_THREADS
        innermost(codes.buf, times.buf, m, start.buf, end.buf, parent.buf, bounds.buf, threads,
                  near, out.buf);
        Py_END_ALLOW_THREADS
    }
    free(near);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&times);
    PyBuffer_Release(&start);
    PyBuffer_Release(&end);
    PyBuffer_Release(&parent);
    PyBuffer_Release(&bounds);
    PyBuffer_Release(&out);
    if (!ok) return NULL;
    if (!near) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* depths(parent, out): out[k] = the number of k's ancestors, parents before children
   (parent[k] < k, as parents() gives them); False, with out unfinished, where that does
   not hold. Without the GIL. */
static PyObject *depths(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer parent, out;
    if (!PyArg_ParseTuple(args, "y*w*:depths", &parent, &out)) return NULL;
    Py_ssize_t n = parent.len / 8;
    int ok = length_is(&parent, n, 8) && length_is(&out, n, 8), ordered = 1;
    if (ok) {
        const int64_t *up = parent.buf;
        int64_t *depth = out.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n && ordered; k++) {
            int64_t p = up[k];
            if (p < 0) depth[k] = 0;
            else if (p < k) depth[k] = depth[p] + 1;
            else ordered = 0;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&parent);
    PyBuffer_Release(&out);
    if (!ok) return NULL;
    return PyBool_FromLong(ordered);
}

static PyMethodDef methods[] = {
    {"parents", parents, METH_VARARGS,
     "parents(codes, start, end, top_level, out): each interval's parent (see the module)."},
    {"enclosing", enclosing, METH_VARARGS,
     "enclosing(codes, times, start, end, parent, bounds, out): each point's innermost "
     "interval (see the module)."},
    {"depths", depths, METH_VARARGS,
     "depths(parent, out) -> bool: each interval's number of ancestors (see depths)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nest",
                                    "Interval nesting in one pass (see _nest.c).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nest(void) { return PyModule_Create(&module); }
