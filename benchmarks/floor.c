/*
 * The floor: a minimal list scheduler over the kernel's task graph, for benchmarks/simulator.py.
 *
 * What any event simulator of a training step must do at least: per placement, build the message tables
 * (one message per op and remote device with a consumer, the largest edge tensor; one per op and remote
 * device holding an input, the summed gradients), then run the forward, backward and update tasks of one
 * batch on FIFO device queues and the messages on FIFO channel queues, starting work only where something
 * changed. Nothing else: no memory, no units in flight, no priorities or caps, no message overhead, no
 * transfer curves, no statistics. On what both cover (one batch, the thesis scheme, no overhead, no curves)
 * it follows the kernel's semantics and order (docs/design.md §5: events of one instant in creation order,
 * then idle devices by index, then channels), so its makespans equal the kernel's, which the benchmark checks.
 *
 * Built at run time with the system cc (-O2, as the kernel) and called through ctypes.
 */
#include <stdlib.h>
#include <string.h>

typedef struct { double t; long long seq; int id; } Ev;

static void ev_push(Ev *h, int *n, Ev e) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (h[p].t < e.t || (h[p].t == e.t && h[p].seq < e.seq)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static Ev ev_pop(Ev *h, int *n) {
    Ev top = h[0], last = h[--*n];
    int i = 0, m = *n;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, b = i;
        const Ev *best = &last;
        if (l < m && (h[l].t < best->t || (h[l].t == best->t && h[l].seq < best->seq))) { b = l; best = &h[l]; }
        if (r < m && (h[r].t < best->t || (h[r].t == best->t && h[r].seq < best->seq))) b = r;
        if (b == i) break;
        h[i] = h[b];
        i = b;
    }
    if (m > 0) h[i] = last;
    return top;
}

typedef struct { int op, dir, src, dst; double bytes; } Msg;

typedef struct {
    int n, nd, nc;
    const int *par_ptr, *par_idx, *ch_ptr, *ch_idx, *route, *place;
    const double *par_grad, *ch_bytes, *ch_lat, *ch_inv, *min_xfer;
    int *fd_ptr, *fd_dev, *bd_ptr, *bd_dev, *dep;
    double *fd_bytes, *bd_bytes, *dur;
    const unsigned char *has_update;
    int *qbuf, *qhead, *qtail, *qbase;  /* FIFO per resource: devices 0..nd-1, channels nd..nd+nc-1 */
    int *running, *dirty, n_dirty;
    char *is_dirty;
    Msg *msg;
    int n_msg;
    Ev *ev;
    int n_ev;
    long long seq;
    double now;
} F;

static inline void mark(F *f, int r) {
    if (!f->is_dirty[r]) { f->is_dirty[r] = 1; f->dirty[f->n_dirty++] = r; }
}

static inline void enqueue(F *f, int r, int id) {
    f->qbuf[f->qbase[r] + f->qtail[r]++] = id;
    mark(f, r);
}

static inline void satisfy(F *f, int t) {
    if (--f->dep[t] == 0) enqueue(f, f->place[t % f->n], t);
}

static inline void send(F *f, int op, int dir, int src, int dst, double bytes) {
    Msg *m = &f->msg[f->n_msg];
    m->op = op; m->dir = dir; m->src = src; m->dst = dst; m->bytes = bytes;
    enqueue(f, f->nd + f->route[src * f->nd + dst], f->n_msg++);
}

static void task_done(F *f, int t) {
    const int n = f->n, ph = t / n, op = t - ph * n, d = f->place[op];
    f->running[d] = 0;
    mark(f, d);
    if (ph == 0) {
        for (int j = f->ch_ptr[op]; j < f->ch_ptr[op + 1]; j++)
            if (f->place[f->ch_idx[j]] == d) satisfy(f, f->ch_idx[j]);
        for (int e = f->fd_ptr[op]; e < f->fd_ptr[op + 1]; e++) send(f, op, 0, d, f->fd_dev[e], f->fd_bytes[e]);
        satisfy(f, n + op);
    } else if (ph == 1) {
        for (int j = f->par_ptr[op]; j < f->par_ptr[op + 1]; j++) {
            const int p = f->par_idx[j], dp = f->place[p];
            if (dp == d) { satisfy(f, n + p); continue; }
            int e = f->bd_ptr[op];
            while (f->bd_dev[e] != dp) e++;
            if (f->bd_bytes[e] == 0.0) satisfy(f, n + p);
        }
        for (int e = f->bd_ptr[op]; e < f->bd_ptr[op + 1]; e++)
            if (f->bd_bytes[e] > 0.0) send(f, op, 1, d, f->bd_dev[e], f->bd_bytes[e]);
        if (f->has_update[op]) satisfy(f, 2 * n + op);
    }
}

static void message_done(F *f, int x) {
    const Msg *m = &f->msg[x];
    const int r = f->nd + f->route[m->src * f->nd + m->dst];
    f->running[r] = 0;
    mark(f, r);
    if (m->dir == 0) {
        for (int j = f->ch_ptr[m->op]; j < f->ch_ptr[m->op + 1]; j++)
            if (f->place[f->ch_idx[j]] == m->dst) satisfy(f, f->ch_idx[j]);
    } else {
        for (int j = f->par_ptr[m->op]; j < f->par_ptr[m->op + 1]; j++)
            if (f->place[f->par_idx[j]] == m->dst) satisfy(f, f->n + f->par_idx[j]);
    }
}

static void dispatch(F *f) {
    /* the resources that changed, by index: devices first, then channels (the kernel's order) */
    for (int i = 1; i < f->n_dirty; i++) {
        const int v = f->dirty[i];
        int j = i;
        while (j > 0 && f->dirty[j - 1] > v) { f->dirty[j] = f->dirty[j - 1]; j--; }
        f->dirty[j] = v;
    }
    for (int i = 0; i < f->n_dirty; i++) {
        const int r = f->dirty[i];
        f->is_dirty[r] = 0;
        if (f->running[r] || f->qhead[r] == f->qtail[r]) continue;
        const int id = f->qbuf[f->qbase[r] + f->qhead[r]++];
        double len;
        if (r < f->nd) {
            len = f->dur[id];
        } else {
            const Msg *m = &f->msg[id];
            const int c = r - f->nd;
            len = f->ch_lat[c] + m->bytes * f->ch_inv[c];
            if (len < f->min_xfer[m->src]) len = f->min_xfer[m->src];
        }
        f->running[r] = 1;
        Ev e = {f->now + len, f->seq++, r < f->nd ? id : -(id + 1)};
        ev_push(f->ev, &f->n_ev, e);
    }
    f->n_dirty = 0;
}

/* Makespans of ``count`` placements (one batch each, forward, backward and update). Returns 0, or -1 when out
 * of memory. */
int floor_run(int n, int nd, int nc, const int *par_ptr, const int *par_idx, const double *par_grad,
              const int *ch_ptr, const int *ch_idx, const double *ch_bytes, const double *fwd, const double *bwd,
              const double *upd, const unsigned char *has_update, const int *route, const double *ch_lat,
              const double *ch_inv, const double *min_xfer, const int *input_ops, int n_inputs,
              const int *placements, int count, double *makespans) {
    const int E = par_ptr[n] > 0 ? par_ptr[n] : 1, R = nd + nc;
    F f;
    memset(&f, 0, sizeof(f));
    f.n = n; f.nd = nd; f.nc = nc; f.par_ptr = par_ptr; f.par_idx = par_idx; f.ch_ptr = ch_ptr; f.ch_idx = ch_idx;
    f.route = route; f.par_grad = par_grad; f.ch_bytes = ch_bytes; f.ch_lat = ch_lat; f.ch_inv = ch_inv;
    f.min_xfer = min_xfer; f.has_update = has_update;
    f.fd_ptr = malloc(sizeof(int) * (n + 1)); f.fd_dev = malloc(sizeof(int) * E);
    f.bd_ptr = malloc(sizeof(int) * (n + 1)); f.bd_dev = malloc(sizeof(int) * E);
    f.fd_bytes = malloc(sizeof(double) * E); f.bd_bytes = malloc(sizeof(double) * E);
    f.dep = malloc(sizeof(int) * 3 * n); f.dur = malloc(sizeof(double) * 3 * n);
    f.qbuf = malloc(sizeof(int) * (3 * n + 2 * E + R)); f.qhead = malloc(sizeof(int) * R);
    f.qtail = malloc(sizeof(int) * R); f.qbase = malloc(sizeof(int) * (R + 1));
    f.running = malloc(sizeof(int) * R); f.dirty = malloc(sizeof(int) * R); f.is_dirty = malloc(R);
    f.msg = malloc(sizeof(Msg) * 2 * E); f.ev = malloc(sizeof(Ev) * (R + 1));
    int *count_on = malloc(sizeof(int) * R);
    int status = 0;
    if (!f.fd_ptr || !f.fd_dev || !f.bd_ptr || !f.bd_dev || !f.fd_bytes || !f.bd_bytes || !f.dep || !f.dur
        || !f.qbuf || !f.qhead || !f.qtail || !f.qbase || !f.running || !f.dirty || !f.is_dirty || !f.msg || !f.ev
        || !count_on) status = -1;
    for (int r0 = 0; r0 < count && status == 0; r0++) {
        const int *place = placements + (size_t)r0 * n;
        f.place = place;
        memset(count_on, 0, sizeof(int) * R);
        f.fd_ptr[0] = f.bd_ptr[0] = 0;
        for (int i = 0; i < n; i++) {
            const int di = place[i];
            int a = f.fd_ptr[i], b = f.bd_ptr[i];
            for (int j = ch_ptr[i]; j < ch_ptr[i + 1]; j++) {
                const int dc = place[ch_idx[j]];
                if (dc == di) continue;
                int e = f.fd_ptr[i];
                while (e < a && f.fd_dev[e] != dc) e++;
                if (e == a) { f.fd_dev[a] = dc; f.fd_bytes[a] = ch_bytes[j]; a++; count_on[nd + route[di * nd + dc]]++; }
                else if (ch_bytes[j] > f.fd_bytes[e]) f.fd_bytes[e] = ch_bytes[j];
            }
            f.fd_ptr[i + 1] = a;
            for (int j = par_ptr[i]; j < par_ptr[i + 1]; j++) {
                const int dp = place[par_idx[j]];
                if (dp == di) continue;
                int e = f.bd_ptr[i];
                while (e < b && f.bd_dev[e] != dp) e++;
                if (e == b) { f.bd_dev[b] = dp; f.bd_bytes[b] = par_grad[j]; b++; }
                else f.bd_bytes[e] += par_grad[j];
            }
            f.bd_ptr[i + 1] = b;
            for (int e = f.bd_ptr[i]; e < b; e++) if (f.bd_bytes[e] > 0.0) count_on[nd + route[di * nd + f.bd_dev[e]]]++;
            count_on[di] += 3;
            f.dep[i] = par_ptr[i + 1] - par_ptr[i];
            f.dep[n + i] = 1 + ch_ptr[i + 1] - ch_ptr[i];
            f.dep[2 * n + i] = 1;
            f.dur[i] = fwd[(size_t)i * nd + di];
            f.dur[n + i] = bwd[(size_t)i * nd + di];
            f.dur[2 * n + i] = upd[(size_t)i * nd + di];
        }
        f.qbase[0] = 0;
        for (int r = 0; r < R; r++) {
            f.qbase[r + 1] = f.qbase[r] + count_on[r];
            f.qhead[r] = f.qtail[r] = 0; f.running[r] = 0; f.is_dirty[r] = 0;
        }
        f.n_dirty = 0; f.n_msg = 0; f.n_ev = 0; f.seq = 0; f.now = 0.0;
        for (int j = 0; j < n_inputs; j++) enqueue(&f, place[input_ops[j]], input_ops[j]);
        for (;;) {
            dispatch(&f);
            if (f.n_ev == 0) break;
            f.now = f.ev[0].t;
            while (f.n_ev > 0 && f.ev[0].t == f.now) {
                const Ev e = ev_pop(f.ev, &f.n_ev);
                if (e.id >= 0) task_done(&f, e.id);
                else message_done(&f, -e.id - 1);
            }
        }
        makespans[r0] = f.now;
    }
    free(f.fd_ptr); free(f.fd_dev); free(f.bd_ptr); free(f.bd_dev); free(f.fd_bytes); free(f.bd_bytes);
    free(f.dep); free(f.dur); free(f.qbuf); free(f.qhead); free(f.qtail); free(f.qbase); free(f.running);
    free(f.dirty); free(f.is_dirty); free(f.msg); free(f.ev); free(count_on);
    return status;
}
