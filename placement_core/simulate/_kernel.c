/*
 * Compiled event simulator: the same semantics as reference.py, without the
 * trace, so that optimizers can run tens of thousands of evaluations a second.
 *
 * A Kernel is built once per problem from the Compiled arrays (it keeps
 * buffer views on them); run()/run_many() take int32 placements and write
 * [makespan, transfers, busy[nd], peak[nd], ch_bytes[nc], ch_busy[nc]].
 * The GIL is released while simulating; every call allocates its own scratch,
 * so one Kernel may be used from several threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

enum { FWD = 0, BWD = 1, UPD = 2 };
enum { ADMIT_THESIS = 0, ADMIT_EAGER = 1 };

/* ------------------------------------------------------------------ heaps */

typedef struct { double key; long long seq; int id; } Item;
typedef struct { Item *a; int n; } Heap;

static inline int item_less(const Item *x, const Item *y) {
    return x->key < y->key || (x->key == y->key && x->seq < y->seq);
}

static void heap_push(Heap *h, Item it) {
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (!item_less(&it, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = it;
}

static Item heap_pop(Heap *h) {
    Item top = h->a[0];
    Item last = h->a[--h->n];
    int i = 0, n = h->n;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const Item *best = &last;
        if (l < n && item_less(&h->a[l], best)) { m = l; best = &h->a[l]; }
        if (r < n && item_less(&h->a[r], best)) { m = r; }
        if (m == i) break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (n > 0) h->a[i] = last;
    return top;
}

/* ---------------------------------------------------------- bump arena */

typedef struct { char *base; size_t used, size; } Arena;

static void *arena_take(Arena *ar, size_t bytes) {
    size_t at = (ar->used + 15) & ~(size_t)15;
    if (at + bytes > ar->size) return NULL;
    ar->used = at + bytes;
    return ar->base + at;
}
#define TAKE(ar, type, count) \
    ((type *)arena_take((ar), sizeof(type) * ((size_t)(count) > 0 ? (size_t)(count) : 1)))

/* --------------------------------------------------------------- problem */

#define NBUF 26

typedef struct {
    PyObject_HEAD
    Py_buffer views[NBUF + 2];
    int nviews;
    int n, nd, nc, n_inputs, n_edges;
    const int *par_ptr, *par_idx, *ch_ptr, *ch_idx, *route, *input_ops, *cap;
    const double *par_bytes, *par_grad, *ch_bytes, *ch_grad;
    const double *fwd, *bwd, *upd, *out_bytes, *static_mem, *ch_lat, *ch_inv, *min_xfer, *prio;
    const double *ovh;  /* per device: seconds of device time per message sent or received */
    const int *cv_ptr;  /* per channel: its transfer curve's points [cv_ptr[j], cv_ptr[j+1]); NULL: none */
    const double *cv_b, *cv_t;
    const unsigned char *has_update;
    int U, K, fwd_only, admission, upd_step, stage_caps, has_ovh;
} KernelObject;

/* A message; prio is its producing task's, used by its channel queue and its send/receive tasks. */
typedef struct { int u, dir, op, src, dst, entry; double bytes, prio; } Xfer;

/* A channel's transfer curve at b bytes: flat below the first point, linear between points, the last
   segment's slope beyond (devices.curve_time, in the same order of operations). */
static double curve_len(const KernelObject *k, int j, double b) {
    const int lo = k->cv_ptr[j], last = k->cv_ptr[j + 1] - 1;
    int i = lo + 1;
    if (b <= k->cv_b[lo]) return k->cv_t[lo];
    while (i < last && b > k->cv_b[i]) i++;
    return k->cv_t[i - 1] + (b - k->cv_b[i - 1]) * (k->cv_t[i] - k->cv_t[i - 1]) / (k->cv_b[i] - k->cv_b[i - 1]);
}

/* Returns 0 on success, -1 if the simulation stalled, -2 out of memory, -3 bad placement. */
static int simulate(const KernelObject *k, const int *place, double *out) {
    const int n = k->n, nd = k->nd, nc = k->nc, U = k->U, E = k->n_edges;
    const int training = !k->fwd_only;
    int i, j, d, u;

    for (i = 0; i < n; i++)
        if (place[i] < 0 || place[i] >= nd) return -3;

    /* ---- per-placement precomputation (sizes first, then one allocation) */
    int *ops_on = calloc((size_t)nd, sizeof(int));
    int *ch_msgs = calloc((size_t)(nc > 0 ? nc : 1), sizeof(int));
    if (!ops_on || !ch_msgs) { free(ops_on); free(ch_msgs); return -2; }
    for (i = 0; i < n; i++) ops_on[place[i]]++;

    const size_t UN = (size_t)U * n, UE = (size_t)U * (E > 0 ? E : 1), UND = (size_t)U * nd;
    size_t need = 0;
#define ADD(type, count) (need += sizeof(type) * ((size_t)(count) > 0 ? (size_t)(count) : 1) + 16)
    ADD(int, n + 1); ADD(int, E); ADD(double, E); ADD(int, E);           /* forward destinations */
    ADD(int, n + 1); ADD(int, E); ADD(double, E);                         /* backward destinations */
    ADD(int, n); ADD(double, n); ADD(double, n);                          /* locals, gradients */
    ADD(double, n); ADD(double, n); ADD(double, n);                       /* durations */
    ADD(int, UN * 3); ADD(int, UN); ADD(int, UE);                         /* deps, activation/recv refs */
    ADD(int, U); ADD(int, UND); ADD(int, UND); ADD(char, UND);            /* units, open tracking */
    ADD(Heap, nd); ADD(Heap, 1); ADD(Item, nd + nc + 2);
    ADD(double, nd); ADD(double, nd); ADD(double, nd);
    ADD(int, nd); ADD(int, nd); ADD(int, nd); ADD(int, nd); ADD(int, nd);
#undef ADD

    Arena ar = {NULL, 0, 0};
    ar.base = malloc(need);
    if (!ar.base) { free(ops_on); free(ch_msgs); return -2; }
    ar.size = need;

    /* fd_*: one entry per (op, remote device with a consumer): the tensor sent there. */
    int *fd_ptr = TAKE(&ar, int, n + 1), *fd_dev = TAKE(&ar, int, E);
    double *fd_bytes = TAKE(&ar, double, E);
    int *fd_consumers = TAKE(&ar, int, E);
    /* bd_*: one entry per (op, remote device holding an input): summed gradients sent there. */
    int *bd_ptr = TAKE(&ar, int, n + 1), *bd_dev = TAKE(&ar, int, E);
    double *bd_bytes = TAKE(&ar, double, E);
    int *n_local = TAKE(&ar, int, n);
    double *grad_out = TAKE(&ar, double, n), *grad_in = TAKE(&ar, double, n);
    double *dF = TAKE(&ar, double, n), *dB = TAKE(&ar, double, n), *dU = TAKE(&ar, double, n);

    fd_ptr[0] = bd_ptr[0] = 0;
    for (i = 0; i < n; i++) {
        const int di = place[i];
        int f = fd_ptr[i], b = bd_ptr[i];
        n_local[i] = 0;
        grad_out[i] = grad_in[i] = 0.0;
        for (j = k->ch_ptr[i]; j < k->ch_ptr[i + 1]; j++) {
            const int c = k->ch_idx[j], dc = place[c];
            grad_in[i] += k->ch_grad[j];
            if (dc == di) { n_local[i]++; continue; }
            int e;
            for (e = fd_ptr[i]; e < f; e++) if (fd_dev[e] == dc) break;
            if (e == f) { fd_dev[f] = dc; fd_bytes[f] = k->ch_bytes[j]; fd_consumers[f] = 1; f++; }
            else { fd_consumers[e]++; if (k->ch_bytes[j] > fd_bytes[e]) fd_bytes[e] = k->ch_bytes[j]; }
        }
        fd_ptr[i + 1] = f;
        for (j = k->par_ptr[i]; j < k->par_ptr[i + 1]; j++) {
            const int p = k->par_idx[j], dp = place[p];
            grad_out[i] += k->par_grad[j];
            if (dp == di) continue;
            int e;
            for (e = bd_ptr[i]; e < b; e++) if (bd_dev[e] == dp) break;
            if (e == b) { bd_dev[b] = dp; bd_bytes[b] = k->par_grad[j]; b++; }
            else bd_bytes[e] += k->par_grad[j];
        }
        bd_ptr[i + 1] = b;
        dF[i] = k->fwd[(size_t)i * nd + di];
        dB[i] = k->bwd[(size_t)i * nd + di];
        dU[i] = k->upd[(size_t)i * nd + di];
    }
    for (i = 0; i < n; i++) {
        for (j = fd_ptr[i]; j < fd_ptr[i + 1]; j++) ch_msgs[k->route[place[i] * nd + fd_dev[j]]]++;
        if (training)
            for (j = bd_ptr[i]; j < bd_ptr[i + 1]; j++)
                if (bd_bytes[j] > 0.0) ch_msgs[k->route[place[i] * nd + bd_dev[j]]]++;
    }
    long long total_msgs = 0;
    for (j = 0; j < nc; j++) total_msgs += (long long)ch_msgs[j] * U;

    int *dep = TAKE(&ar, int, UN * 3);
    int *act_refs = TAKE(&ar, int, UN);
    int *recv_refs = TAKE(&ar, int, UE);  /* per unit and fd entry: consumers still to read the copy */
    int *unit_left = TAKE(&ar, int, U);
    int *done_on = TAKE(&ar, int, UND);
    int *fdone_on = TAKE(&ar, int, UND);
    char *is_open = TAKE(&ar, char, UND);
    Heap *dev_q = TAKE(&ar, Heap, nd);
    Heap *events_h = TAKE(&ar, Heap, 1);
    Item *ev_items = TAKE(&ar, Item, nd + nc + 2);
    double *busy = TAKE(&ar, double, nd), *mem = TAKE(&ar, double, nd), *peak = TAKE(&ar, double, nd);
    int *running = TAKE(&ar, int, nd), *open_count = TAKE(&ar, int, nd), *input_dev = TAKE(&ar, int, nd);
    int *cap_buf = TAKE(&ar, int, nd);
    int *ovh_msgs = TAKE(&ar, int, nd);  /* per device: send and receive tasks per unit */
    if (!ovh_msgs) { free(ar.base); free(ops_on); free(ch_msgs); return -2; }

    /* Message overhead: a send task on the sender, a receive task on the receiver, per message. */
    long long total_ovh = 0;
    for (d = 0; d < nd; d++) ovh_msgs[d] = 0;
    if (k->has_ovh) {
        for (i = 0; i < n; i++) {
            const int di = place[i];
            for (j = fd_ptr[i]; j < fd_ptr[i + 1]; j++) {
                if (k->ovh[di] > 0.0) ovh_msgs[di]++;
                if (k->ovh[fd_dev[j]] > 0.0) ovh_msgs[fd_dev[j]]++;
            }
            if (training)
                for (j = bd_ptr[i]; j < bd_ptr[i + 1]; j++) {
                    if (!(bd_bytes[j] > 0.0)) continue;
                    if (k->ovh[di] > 0.0) ovh_msgs[di]++;
                    if (k->ovh[bd_dev[j]] > 0.0) ovh_msgs[bd_dev[j]]++;
                }
        }
        for (d = 0; d < nd; d++) total_ovh += (long long)ovh_msgs[d] * U;
    }

    /* device queue storage, channel queues + transfer records (own allocation: sizes known only now) */
    size_t need2 = sizeof(Heap) * (size_t)(nc + 1) + sizeof(Item) * (size_t)(total_msgs + nc + 1)
                 + sizeof(Xfer) * (size_t)(total_msgs + 1) + sizeof(double) * (size_t)(2 * nc + 2)
                 + sizeof(char) * (size_t)(nc + 1)
                 + sizeof(Item) * (size_t)(UN * 3 + nd + total_ovh) + sizeof(Item) * (size_t)(UN * 3 + 1 + total_ovh)
                 + 16 * 8;
    Arena ar2 = {malloc(need2), 0, need2};
    if (!ar2.base) { free(ar.base); free(ops_on); free(ch_msgs); return -2; }
    Item *dev_items = TAKE(&ar2, Item, UN * 3 + nd + total_ovh);
    Item *stash = TAKE(&ar2, Item, UN * 3 + 1 + total_ovh);
    Heap *chan_q = TAKE(&ar2, Heap, nc);
    Item *chan_items = TAKE(&ar2, Item, total_msgs + nc);
    Xfer *xf = TAKE(&ar2, Xfer, total_msgs);
    double *ch_bytes_out = TAKE(&ar2, double, nc), *ch_busy_out = TAKE(&ar2, double, nc);
    char *chan_running = TAKE(&ar2, char, nc);

    /* ---- state init */
    {
        Item *p = dev_items;
        for (d = 0; d < nd; d++) {
            dev_q[d].a = p; dev_q[d].n = 0;
            p += (size_t)U * 3 * ops_on[d] + (size_t)U * ovh_msgs[d] + 1;
        }
        Item *q = chan_items;
        for (j = 0; j < nc; j++) { chan_q[j].a = q; chan_q[j].n = 0; q += (size_t)ch_msgs[j] * U + 1;
                                   ch_bytes_out[j] = ch_busy_out[j] = 0.0; chan_running[j] = 0; }
        events_h->a = ev_items; events_h->n = 0;
    }
    int n_upd = 0;
    for (i = 0; i < n; i++) n_upd += k->has_update[i] ? 1 : 0;
    for (u = 0; u < U; u++) {
        int *dp = dep + (size_t)u * 3 * n;
        for (i = 0; i < n; i++) {
            dp[i] = k->par_ptr[i + 1] - k->par_ptr[i];
            dp[n + i] = 1 + (k->ch_ptr[i + 1] - k->ch_ptr[i]);
            dp[2 * n + i] = k->upd_step ? U : 1;
        }
        unit_left[u] = n + (training ? n + (k->upd_step ? 0 : n_upd) : 0);
    }
    int step_left = (training && k->upd_step) ? n_upd : 0;
    memset(done_on, 0, sizeof(int) * (size_t)U * nd);
    memset(fdone_on, 0, sizeof(int) * (size_t)U * nd);
    memset(is_open, 0, (size_t)U * nd);
    for (d = 0; d < nd; d++) {
        busy[d] = 0.0; mem[d] = 0.0; running[d] = -1; open_count[d] = 0; input_dev[d] = 0;
    }
    for (i = 0; i < n; i++) mem[place[i]] += k->static_mem[i];
    for (d = 0; d < nd; d++) peak[d] = mem[d];
    for (j = 0; j < k->n_inputs; j++) input_dev[place[k->input_ops[j]]] = 1;

    long long seq = 0;
    int n_xf = 0, admitted = 0, in_flight = 0, oldest = 0;
    double now = 0.0;
    const double *prio = k->prio;
    const int *cap = k->cap;
    const int ovh_base = U * 3 * n;  /* event/queue ids from here: ovh_base + 2 * message + (0 send | 1 recv) */
    if (k->stage_caps) {
        /* 1F1B limits: used devices ordered by their first op are stages 0..p-1; stage s holds p - s */
        int p_used = 0;
        for (d = 0; d < nd; d++) { cap_buf[d] = 0; open_count[d] = -1; }
        for (i = 0; i < n; i++) if (open_count[place[i]] < 0) open_count[place[i]] = p_used++;
        for (d = 0; d < nd; d++) { if (open_count[d] >= 0) cap_buf[d] = p_used - open_count[d]; open_count[d] = 0; }
        cap = cap_buf;
    }

#define TID(u_, ph_, op_) (((u_) * 3 + (ph_)) * n + (op_))
#define PRIO(t_) (prio ? prio[(t_)] : 0.0)
#define READY(t_) do { int t__ = (t_); Item it__ = {PRIO(t__), seq++, t__}; \
        heap_push(&dev_q[place[t__ % n]], it__); } while (0)
#define SATISFY(t_) do { int t2__ = (t_); if (--dep[t2__] == 0) READY(t2__); } while (0)
#define NOTE(d_) do { if (mem[(d_)] > peak[(d_)]) peak[(d_)] = mem[(d_)]; } while (0)
/* A new message xi from s_ to d_: a send task on s_ first if it has a message overhead, else to the channel. */
#define SEND(xi_, s_, d_) do { \
        if (k->has_ovh && k->ovh[(s_)] > 0.0) { Item it__ = {pr, seq++, ovh_base + 2 * (xi_)}; \
                                                 heap_push(&dev_q[(s_)], it__); } \
        else { Item it__ = {pr, seq++, (xi_)}; heap_push(&chan_q[k->route[(s_) * nd + (d_)]], it__); } \
    } while (0)
/* Message x is on its destination: its consumers there may run. */
#define DELIVER(x_) do { const Xfer *xd__ = (x_); int jj__; \
        if (xd__->dir == FWD) { \
            for (jj__ = k->ch_ptr[xd__->op]; jj__ < k->ch_ptr[xd__->op + 1]; jj__++) \
                if (place[k->ch_idx[jj__]] == xd__->dst) SATISFY(TID(xd__->u, FWD, k->ch_idx[jj__])); \
        } else { \
            for (jj__ = k->par_ptr[xd__->op]; jj__ < k->par_ptr[xd__->op + 1]; jj__++) \
                if (place[k->par_idx[jj__]] == xd__->dst) SATISFY(TID(xd__->u, BWD, k->par_idx[jj__])); \
        } \
    } while (0)

    int status = 0;
    /* With a priority order, zero-duration work at an instant is settled first (instant_only
     * passes) so that everything ready at that instant competes by priority; see reference.py. */
    int instant_only = prio ? 1 : 0, started;
    for (;;) {
        /* admission */
        while (admitted < U && in_flight < k->K) {
            if (k->admission == ADMIT_THESIS && admitted > 0) {
                int all_idle = 1;
                for (d = 0; d < nd; d++)
                    if (input_dev[d] && (running[d] >= 0 || dev_q[d].n > 0)) { all_idle = 0; break; }
                if (!all_idle) break;
            }
            for (j = 0; j < k->n_inputs; j++) READY(TID(admitted, FWD, k->input_ops[j]));
            admitted++;
            in_flight++;
        }
        /* dispatch devices; the oldest unfinished unit is never blocked by a cap (progress) */
        while (oldest < U && unit_left[oldest] == 0) oldest++;
        started = 0;
        for (d = 0; d < nd; d++) {
            if (running[d] >= 0 || dev_q[d].n == 0) continue;
            int n_stash = 0, chosen = -1;
            while (dev_q[d].n > 0) {
                Item it = heap_pop(&dev_q[d]);
                if (it.id >= ovh_base) {  /* a send or receive task: never capped, never instant */
                    if (instant_only) { stash[n_stash++] = it; continue; }
                } else {
                    int t = it.id, uu = t / (3 * n), ph = (t / n) % 3, o = t % n;
                    int capped = cap && cap[d] > 0 && ph == FWD && !is_open[uu * nd + d] && open_count[d] >= cap[d]
                                 && uu != oldest;
                    double len0 = ph == FWD ? dF[o] : ph == BWD ? dB[o] : dU[o];
                    if (capped || (instant_only && len0 > 0.0)) {
                        stash[n_stash++] = it;
                        continue;
                    }
                }
                chosen = it.id;
                break;
            }
            for (j = 0; j < n_stash; j++) heap_push(&dev_q[d], stash[j]);
            if (chosen < 0) continue;
            if (chosen >= ovh_base) {
                running[d] = chosen;
                busy[d] += k->ovh[d];
                Item ev = {now + k->ovh[d], seq++, chosen};
                heap_push(events_h, ev);
                started++;
                continue;
            }
            int uu = chosen / (3 * n), ph = (chosen / n) % 3, op = chosen % n;
            if (cap && ph == FWD && !is_open[uu * nd + d]) { is_open[uu * nd + d] = 1; open_count[d]++; }
            double len = ph == FWD ? dF[op] : ph == BWD ? dB[op] : dU[op];
            running[d] = chosen;
            busy[d] += len;
            Item ev = {now + len, seq++, chosen};
            heap_push(events_h, ev);
            started++;
        }
        /* dispatch channels */
        for (j = 0; j < nc; j++) {
            if (chan_running[j] || chan_q[j].n == 0) continue;
            const Xfer *x = &xf[chan_q[j].a[0].id];
            double len = k->cv_ptr && k->cv_ptr[j + 1] > k->cv_ptr[j] ? curve_len(k, j, x->bytes)
                                                                      : k->ch_lat[j] + x->bytes * k->ch_inv[j];
            if (len < k->min_xfer[x->src]) len = k->min_xfer[x->src];
            if (instant_only && len > 0.0) continue;
            Item it = heap_pop(&chan_q[j]);
            started++;
            chan_running[j] = 1;
            ch_busy_out[j] += len;
            ch_bytes_out[j] += x->bytes;
            Item ev = {now + len, seq++, -(it.id + 1)};
            heap_push(events_h, ev);
        }
        if (instant_only) {
            if (!started) { instant_only = 0; continue; }  /* settled: now the full dispatch */
        } else {
            if (events_h->n == 0) break;
            now = events_h->a[0].key;
        }
        if (prio) instant_only = 1;
        while (events_h->n > 0 && events_h->a[0].key == now) {
            Item ev = heap_pop(events_h);
            if (ev.id >= ovh_base) {
                const int xi = (ev.id - ovh_base) >> 1;
                const Xfer *x = &xf[xi];
                if ((ev.id - ovh_base) & 1) {  /* received: the consumers may run */
                    running[x->dst] = -1;
                    DELIVER(x);
                } else {  /* sent: the message queues on its channel */
                    running[x->src] = -1;
                    Item it = {x->prio, seq++, xi};
                    heap_push(&chan_q[k->route[x->src * nd + x->dst]], it);
                }
            } else if (ev.id >= 0) {
                const int task = ev.id, uu = task / (3 * n), ph = (task / n) % 3, op = task % n;
                const int dv = place[op];
                const double pr = PRIO(task);
                running[dv] = -1;
                if (ph == FWD) {
                    int refs = n_local[op] + (fd_ptr[op + 1] - fd_ptr[op]);
                    act_refs[uu * n + op] = refs;
                    if (refs) mem[dv] += k->out_bytes[op];
                    if (!training) {
                        for (j = k->par_ptr[op]; j < k->par_ptr[op + 1]; j++) {
                            const int p = k->par_idx[j];
                            if (place[p] == dv) {
                                if (--act_refs[uu * n + p] == 0) mem[dv] -= k->out_bytes[p];
                            } else {
                                int e = fd_ptr[p];
                                while (fd_dev[e] != dv) e++;
                                if (--recv_refs[(size_t)uu * E + e] == 0) mem[dv] -= fd_bytes[e];
                            }
                        }
                    }
                    for (j = k->ch_ptr[op]; j < k->ch_ptr[op + 1]; j++) {
                        const int c = k->ch_idx[j];
                        if (place[c] == dv) SATISFY(TID(uu, FWD, c));
                    }
                    for (j = fd_ptr[op]; j < fd_ptr[op + 1]; j++) {
                        Xfer *x = &xf[n_xf];
                        x->u = uu; x->dir = FWD; x->op = op; x->src = dv; x->dst = fd_dev[j]; x->entry = j;
                        x->bytes = fd_bytes[j]; x->prio = pr;
                        SEND(n_xf, dv, fd_dev[j]);
                        n_xf++;
                    }
                    if (training) SATISFY(TID(uu, BWD, op));
                    if (!training && ++fdone_on[uu * nd + dv] == ops_on[dv] && cap && is_open[uu * nd + dv]) {
                        is_open[uu * nd + dv] = 0; open_count[dv]--;
                    }
                    unit_left[uu]--;
                } else if (ph == BWD) {
                    mem[dv] += grad_out[op] - grad_in[op];
                    for (j = k->par_ptr[op]; j < k->par_ptr[op + 1]; j++) {
                        const int p = k->par_idx[j];
                        if (place[p] == dv) {
                            if (--act_refs[uu * n + p] == 0) mem[dv] -= k->out_bytes[p];
                        } else {
                            int e = fd_ptr[p];
                            while (fd_dev[e] != dv) e++;
                            if (--recv_refs[(size_t)uu * E + e] == 0) mem[dv] -= fd_bytes[e];
                        }
                    }
                    for (j = k->par_ptr[op]; j < k->par_ptr[op + 1]; j++) {
                        const int p = k->par_idx[j], dp = place[p];
                        if (dp == dv) { SATISFY(TID(uu, BWD, p)); continue; }
                        int e;
                        for (e = bd_ptr[op]; e < bd_ptr[op + 1]; e++) if (bd_dev[e] == dp) break;
                        if (bd_bytes[e] == 0.0) SATISFY(TID(uu, BWD, p));
                    }
                    for (j = bd_ptr[op]; j < bd_ptr[op + 1]; j++) {
                        if (!(bd_bytes[j] > 0.0)) continue;
                        Xfer *x = &xf[n_xf];
                        x->u = uu; x->dir = BWD; x->op = op; x->src = dv; x->dst = bd_dev[j]; x->entry = j;
                        x->bytes = bd_bytes[j]; x->prio = pr;
                        SEND(n_xf, dv, bd_dev[j]);
                        n_xf++;
                    }
                    if (k->has_update[op]) SATISFY(k->upd_step ? TID(0, UPD, op) : TID(uu, UPD, op));
                    if (++done_on[uu * nd + dv] == ops_on[dv] && cap && is_open[uu * nd + dv]) {
                        is_open[uu * nd + dv] = 0; open_count[dv]--;
                    }
                    unit_left[uu]--;
                } else {
                    if (k->upd_step) step_left--;
                    else unit_left[uu]--;
                }
                if (ph != UPD || !k->upd_step) {
                    if (unit_left[uu] == 0) in_flight--;
                }
                NOTE(dv);
            } else {
                const int xi = -ev.id - 1;
                const Xfer *x = &xf[xi];
                chan_running[k->route[x->src * nd + x->dst]] = 0;
                if (x->dir == FWD) {
                    if (--act_refs[x->u * n + x->op] == 0) mem[x->src] -= k->out_bytes[x->op];
                    recv_refs[(size_t)x->u * E + x->entry] = fd_consumers[x->entry];
                    mem[x->dst] += x->bytes;
                } else {
                    mem[x->src] -= x->bytes;
                    mem[x->dst] += x->bytes;
                }
                /* memory moves on arrival; the consumers wait for the receive task, if any */
                if (k->has_ovh && k->ovh[x->dst] > 0.0) {
                    Item it = {x->prio, seq++, ovh_base + 2 * xi + 1};
                    heap_push(&dev_q[x->dst], it);
                } else {
                    DELIVER(x);
                }
                NOTE(x->src);
                NOTE(x->dst);
            }
        }
    }
    if (admitted < U || step_left) status = -1;
    for (u = 0; u < U && status == 0; u++) if (unit_left[u]) status = -1;

    out[0] = now;
    out[1] = (double)n_xf;
    for (d = 0; d < nd; d++) { out[2 + d] = busy[d]; out[2 + nd + d] = peak[d]; }
    for (j = 0; j < nc; j++) { out[2 + 2 * nd + j] = ch_bytes_out[j]; out[2 + 2 * nd + nc + j] = ch_busy_out[j]; }
    free(ar2.base);
    free(ar.base);
    free(ops_on);
    free(ch_msgs);
    return status;
#undef TID
#undef PRIO
#undef READY
#undef SATISFY
#undef NOTE
#undef SEND
#undef DELIVER
}

/* ------------------------------------------------------------ Python glue */

static int take_view(KernelObject *self, PyObject *obj, char fmt, Py_ssize_t min_len, const void **ptr,
                     const char *name) {
    if (obj == Py_None) { *ptr = NULL; return 0; }
    Py_buffer *v = &self->views[self->nviews];
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    self->nviews++;
    char got = v->format ? v->format[strlen(v->format) - 1] : 'B';
    Py_ssize_t item = fmt == 'd' ? 8 : fmt == 'i' ? 4 : 1;
    int ok = v->itemsize == item && (got == fmt || (fmt == 'i' && (got == 'l' && item == sizeof(long)))
                                      || (fmt == 'B' && (got == 'b' || got == '?')));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous array of '%c' items, got '%s'", name, fmt,
                     v->format ? v->format : "?");
        return -1;
    }
    if (v->len / item < min_len) {
        PyErr_Format(PyExc_ValueError, "%s: expected at least %zd items", name, min_len);
        return -1;
    }
    *ptr = v->buf;
    return 0;
}

static void Kernel_dealloc(KernelObject *self) {
    for (int i = 0; i < self->nviews; i++) PyBuffer_Release(&self->views[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Kernel_init(KernelObject *self, PyObject *args, PyObject *kwds) {
    PyObject *o[NBUF];
    /* By name (Python passes keywords): the order below is checked against the caller's names. */
    static char *kwlist[] = {"n_ops", "n_dev", "n_ch", "par_ptr", "par_idx", "par_bytes", "par_grad", "ch_ptr",
                             "ch_idx", "ch_bytes", "ch_grad", "fwd", "bwd", "upd", "has_update", "out_bytes",
                             "static_mem", "route", "ch_latency", "ch_inv_rate", "min_transfer", "input_ops",
                             "batches", "in_flight", "forward_only", "admission", "update_per_step", "stage_caps",
                             "priority", "device_cap", "msg_overhead", "curve_ptr", "curve_bytes", "curve_time",
                             NULL};
    if (self->nviews) { PyErr_SetString(PyExc_RuntimeError, "Kernel is already initialised"); return -1; }
    o[22] = o[23] = o[24] = Py_None;  /* the transfer curves are optional */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiiOOOOOOOOOOOOOOOOOOOiiiiiiOOO|OOO", kwlist, &self->n, &self->nd,
                          &self->nc,
                          &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
                          &o[12], &o[13], &o[14], &o[15], &o[16], &o[17], &o[18],
                          &self->U, &self->K, &self->fwd_only, &self->admission, &self->upd_step,
                          &self->stage_caps, &o[19], &o[20], &o[21], &o[22], &o[23], &o[24]))
        return -1;
    const int n = self->n, nd = self->nd, nc = self->nc;
    if (n < 1 || nd < 1 || nc < 0 || self->U < 1 || self->K < 1) {
        PyErr_SetString(PyExc_ValueError, "invalid sizes");
        return -1;
    }
    if (take_view(self, o[0], 'i', n + 1, (const void **)&self->par_ptr, "par_ptr") ||
        take_view(self, o[1], 'i', 0, (const void **)&self->par_idx, "par_idx") ||
        take_view(self, o[2], 'd', 0, (const void **)&self->par_bytes, "par_bytes") ||
        take_view(self, o[3], 'd', 0, (const void **)&self->par_grad, "par_grad") ||
        take_view(self, o[4], 'i', n + 1, (const void **)&self->ch_ptr, "ch_ptr") ||
        take_view(self, o[5], 'i', 0, (const void **)&self->ch_idx, "ch_idx") ||
        take_view(self, o[6], 'd', 0, (const void **)&self->ch_bytes, "ch_bytes") ||
        take_view(self, o[7], 'd', 0, (const void **)&self->ch_grad, "ch_grad") ||
        take_view(self, o[8], 'd', (Py_ssize_t)n * nd, (const void **)&self->fwd, "fwd") ||
        take_view(self, o[9], 'd', (Py_ssize_t)n * nd, (const void **)&self->bwd, "bwd") ||
        take_view(self, o[10], 'd', (Py_ssize_t)n * nd, (const void **)&self->upd, "upd") ||
        take_view(self, o[11], 'B', n, (const void **)&self->has_update, "has_update") ||
        take_view(self, o[12], 'd', n, (const void **)&self->out_bytes, "out_bytes") ||
        take_view(self, o[13], 'd', n, (const void **)&self->static_mem, "static_mem") ||
        take_view(self, o[14], 'i', (Py_ssize_t)nd * nd, (const void **)&self->route, "route") ||
        take_view(self, o[15], 'd', nc, (const void **)&self->ch_lat, "ch_latency") ||
        take_view(self, o[16], 'd', nc, (const void **)&self->ch_inv, "ch_inv_rate") ||
        take_view(self, o[17], 'd', nd, (const void **)&self->min_xfer, "min_transfer") ||
        take_view(self, o[18], 'i', 0, (const void **)&self->input_ops, "input_ops") ||
        take_view(self, o[19], 'd', (Py_ssize_t)self->U * 3 * n, (const void **)&self->prio, "priority") ||
        take_view(self, o[20], 'i', nd, (const void **)&self->cap, "device_cap") ||
        take_view(self, o[21], 'd', nd, (const void **)&self->ovh, "msg_overhead"))
        return -1;
    if (!self->ovh) { PyErr_SetString(PyExc_ValueError, "msg_overhead is required"); return -1; }
    if (take_view(self, o[22], 'i', nc + 1, (const void **)&self->cv_ptr, "curve_ptr")) return -1;
    if (self->cv_ptr) {  /* every channel: no points, or at least two inside the point arrays */
        Py_ssize_t points = self->cv_ptr[nc];
        for (int j = 0; j < nc; j++) {
            int m = self->cv_ptr[j + 1] - self->cv_ptr[j];
            if (self->cv_ptr[j] < 0 || m < 0 || m == 1 || self->cv_ptr[j + 1] > points || self->cv_ptr[0] != 0) {
                PyErr_SetString(PyExc_ValueError, "curve_ptr: bad offsets");
                return -1;
            }
        }
        if (take_view(self, o[23], 'd', points, (const void **)&self->cv_b, "curve_bytes") ||
            take_view(self, o[24], 'd', points, (const void **)&self->cv_t, "curve_time"))
            return -1;
        if (!self->cv_b || !self->cv_t) {
            PyErr_SetString(PyExc_ValueError, "curve_ptr needs curve_bytes and curve_time");
            return -1;
        }
    }
    self->has_ovh = 0;
    for (int d = 0; d < nd; d++) {
        if (!(self->ovh[d] >= 0.0)) { PyErr_SetString(PyExc_ValueError, "msg_overhead must be >= 0"); return -1; }
        if (self->ovh[d] > 0.0) self->has_ovh = 1;
    }
    self->n_edges = self->par_ptr[n];
    if (self->ch_ptr[n] != self->n_edges) {
        PyErr_SetString(PyExc_ValueError, "parent and child edge counts differ");
        return -1;
    }
    self->n_inputs = (int)(self->views[18].len / 4);
    return 0;
}

static int view_placements(PyObject *obj, Py_buffer *v, int n, Py_ssize_t *count) {
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    char got = v->format ? v->format[strlen(v->format) - 1] : 'B';
    if (v->itemsize != 4 || !(got == 'i' || got == 'l')) {
        PyBuffer_Release(v);
        PyErr_SetString(PyExc_TypeError, "placements must be a contiguous int32 array");
        return -1;
    }
    if (v->len % ((Py_ssize_t)n * 4) != 0) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "placement length must be a multiple of %d ops", n);
        return -1;
    }
    *count = v->len / ((Py_ssize_t)n * 4);
    return 0;
}

static PyObject *raise_status(int status) {
    if (status == -1) PyErr_SetString(PyExc_RuntimeError, "simulation stalled: a task never became ready");
    else if (status == -2) PyErr_NoMemory();
    else PyErr_SetString(PyExc_ValueError, "placement names a device index out of range");
    return NULL;
}

static PyObject *run_impl(KernelObject *self, PyObject *args, int many) {
    PyObject *pl, *outobj;
    if (!PyArg_ParseTuple(args, "OO", &pl, &outobj)) return NULL;
    Py_buffer pv, ov;
    Py_ssize_t count;
    if (view_placements(pl, &pv, self->n, &count) < 0) return NULL;
    if (!many && count != 1) {
        PyBuffer_Release(&pv);
        PyErr_SetString(PyExc_ValueError, "run() takes exactly one placement");
        return NULL;
    }
    if (PyObject_GetBuffer(outobj, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&pv);
        return NULL;
    }
    const Py_ssize_t width = 2 + 2 * (Py_ssize_t)self->nd + 2 * (Py_ssize_t)self->nc;
    if (ov.itemsize != 8 || ov.len < count * width * 8) {
        PyBuffer_Release(&pv);
        PyBuffer_Release(&ov);
        PyErr_SetString(PyExc_ValueError, "output buffer must be float64 with room for every result");
        return NULL;
    }
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < count && status == 0; r++)
        status = simulate(self, (const int *)pv.buf + r * self->n, (double *)ov.buf + r * width);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&pv);
    PyBuffer_Release(&ov);
    if (status != 0) return raise_status(status);
    Py_RETURN_NONE;
}

static PyObject *Kernel_run(KernelObject *self, PyObject *args) { return run_impl(self, args, 0); }
static PyObject *Kernel_run_many(KernelObject *self, PyObject *args) { return run_impl(self, args, 1); }

static PyMethodDef Kernel_methods[] = {
    {"run", (PyCFunction)Kernel_run, METH_VARARGS, "run(placement int32[n], out float64[w])"},
    {"run_many", (PyCFunction)Kernel_run_many, METH_VARARGS, "run_many(placements int32[m, n], out float64[m, w])"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "placement_core.simulate._kernel.Kernel",
    .tp_basicsize = sizeof(KernelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Compiled event simulator bound to one problem's arrays.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kernel",
    .m_doc = "Compiled event simulator (see reference.py for the semantics).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__kernel(void) {
    if (PyType_Ready(&KernelType) < 0) return NULL;
    PyObject *m = PyModule_Create(&kernel_module);
    if (!m) return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
