/*
 * Compiled event simulator: the same semantics as reference.py, without the
 * trace, so that optimizers can run tens of thousands of evaluations a second.
 *
 * A Kernel is built once per problem from the Compiled arrays, passed by
 * keyword as KERNEL_ARGS lists them (it keeps buffer views on them);
 * run()/run_many() take int32 placements and write
 * [makespan, transfers, busy[nd], peak[nd], ch_bytes[nc], ch_busy[nc]].
 * The GIL is released while simulating; every call allocates its own scratch,
 * so one Kernel may be used from several threads.
 *
 * Pipeline schedules beyond static priorities (schedule_kind, see
 * pipeline_rules.py for the rules in Python):
 *   SCHED_INTERLEAVED  groups are chunks (virtual stages) found per placement;
 *                      priorities follow Megatron's order, computed here;
 *                      a device opens forwards in that order;
 *   SCHED_ZB           a fourth phase, W (weight gradient), split off the
 *                      backward; a W also depends on a gate: its stage's
 *                      B of a later unit (released when that unit's last
 *                      B on the device is done, so no W waits in a queue).
 * Everything else (thesis, gpipe, 1f1b) takes the SCHED_STATIC path, where a
 * group is a device and the results are those of the three-phase kernel.
 *
 * Split ops (docs/sharding.md): with a split table, a gene >= n_dev is a split.
 * Such a placement is expanded (_expand.h) into virtual ops, and the same
 * simulation runs over them with ring all-reduces (AR messages): the last
 * member backward of a ring (per unit, or per step with one update per step)
 * sends its messages; the members' updates wait for all of them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { FWD = 0, BWD = 1, UPD = 2, WGT = 3, AR = 4 };  /* AR: a ring all-reduce message's direction */
enum { ADMIT_THESIS = 0, ADMIT_EAGER = 1 };
enum { SCHED_STATIC = 0, SCHED_INTERLEAVED = 1, SCHED_ZB = 2 };

/* ------------------------------------------------------------------ heaps */

typedef struct { double key; long long seq; int id; } Item;
typedef struct { Item *a; int n; } Heap;

static inline int item_less(const Item *x, const Item *y) {
    return x->key < y->key || (x->key == y->key && x->seq < y->seq);
}

static inline __attribute__((always_inline)) void heap_push(Heap *h, Item it) {
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (!item_less(&it, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = it;
}

/* The item at index i has a new key: restore the heap order around it. */
static void heap_fix(Heap *h, int i) {
    Item it = h->a[i];
    while (i > 0 && item_less(&it, &h->a[(i - 1) >> 1])) { h->a[i] = h->a[(i - 1) >> 1]; i = (i - 1) >> 1; }
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const Item *best = &it;
        if (l < h->n && item_less(&h->a[l], best)) { m = l; best = &h->a[l]; }
        if (r < h->n && item_less(&h->a[r], best)) { m = r; }
        if (m == i) break;
        h->a[i] = h->a[m];
        i = m;
    }
    h->a[i] = it;
}

static inline __attribute__((always_inline)) Item heap_pop(Heap *h) {
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
/* The bytes an arena needs for count items of item bytes each (TAKE's rounding included). */
static inline size_t room(size_t item, size_t count) { return item * (count > 0 ? count : 1) + 16; }
#define TAKE(ar, type, count) \
    ((type *)arena_take((ar), sizeof(type) * ((size_t)(count) > 0 ? (size_t)(count) : 1)))

#include "_expand.h"

/* Scratch memory of simulations: grown when a placement needs more and kept between the placements of one
 * call, so run_many allocates once per batch, not once per placement. Every call has its own, so threads never
 * share one. */
typedef struct { char *buf[2]; size_t size[2]; } Work;

static char *work_take(Work *w, int i, size_t need) {
    if (need > w->size[i]) {
        free(w->buf[i]);
        const size_t grow = need + need / 4;
        w->buf[i] = malloc(grow);
        w->size[i] = w->buf[i] ? grow : 0;
    }
    return w->buf[i];
}

static void work_free(Work *w) {
    for (int i = 0; i < 2; i++) { free(w->buf[i]); w->buf[i] = NULL; w->size[i] = 0; }
}

/* --------------------------------------------------------------- problem */

typedef struct {
    PyObject_HEAD
    Py_buffer *views;  /* the arrays' buffers, one per array argument given (see KERNEL_ARGS) */
    int nviews;
    int n, nd, nc, n_inputs, n_edges;
    const int *par_ptr, *par_idx, *ch_ptr, *ch_idx, *route, *input_ops, *cap;
    const double *par_bytes, *par_grad, *ch_bytes, *ch_grad;
    const double *fwd, *bwd, *upd, *out_bytes, *static_mem, *ch_lat, *ch_inv, *min_xfer, *prio;
    const double *ovh;  /* per device: seconds of device time per message sent or received */
    const double *bwd_w;  /* [n * nd] the weight-gradient (W) part of bwd; used under SCHED_ZB only */
    const unsigned char *has_update, *has_w;
    const int *cv_ptr;  /* per channel: its transfer curve's points [cv_ptr[j], cv_ptr[j+1]); NULL: none */
    const double *cv_b, *cv_t;
    int U, K;  /* units (batches, or micro-batches under a pipeline schedule), units in flight at most */
    int fwd_only, admission, upd_step, stage_caps, has_ovh;
    int sched, vstages, n_ph;  /* schedule kind, chunks per single-run device, phases per (unit, op) */
    ShardTable sh;             /* the split table (sh.T = 0: none) */
    /* an expanded placement's rings (ring_of NULL: none): ring r's members are the virtual ops
     * ring_first[r] .. + ring_count[r], its messages ring_msg_ptr[r] .. ring_msg_ptr[r + 1] */
    const int *ring_of, *ring_first, *ring_count, *ring_msg_ptr, *ring_src, *ring_dst;
    const double *ring_bytes;
    const double *ring_talone, *ring_tbusy;  /* per ring: measured seconds (alone, a member busy); -1: none */
    int n_rings;
    /* resources devices share (shared_*; sr_ptr NULL: none): resource r's devices sr_dev[sr_ptr[r] ..
     * sr_ptr[r + 1]], their demands sr_dem, its capacity sr_cap[r] */
    const int *sr_ptr, *sr_dev;
    const double *sr_dem, *sr_cap;
    const double *sr_coll;  /* per resource: a measured all-reduce's demand on each member device; NULL: 0 */
    int n_sr;
    /* the objective (set_objective; problem.Problem.objective): per-device capacities, batches per run, penalty */
    double *capacity, batches;
    int penalty;
    Work spare;  /* scratch kept between calls (taken and put back with the GIL held); NULL buffers: none */
    /* per op, placement-independent: the gradient bytes it receives (summed over its child edges) and
     * sends (over its parent edges), summed in edge order once at init (NULL: summed per placement, as for
     * an expanded placement) */
    double *grad_in0, *grad_out0;
} KernelObject;

/* Interleaved 1F1B: a device with vd chunks runs unit u's forward through its local chunk v as number
 * (u / p) p vd + v p + u % p of Megatron's order, its backward as the same with v -> vd - 1 - v. */
typedef struct { int n, n_ph, p; const int *place, *lv, *vper; double off; } IlOrder;

static inline int il_index(const IlOrder *o, int fwd, int u, int op) {
    const int vd = o->vper[o->place[op]], v = fwd ? o->lv[op] : vd - 1 - o->lv[op];
    return (u / o->p) * o->p * vd + v * o->p + u % o->p;
}

/* Forwards first, then backwards, each in Megatron's order; updates last (pipeline_rules.interleaved_priority). */
static inline double il_prio(const IlOrder *o, int u, int ph, int op) {
    if (ph == FWD) return (double)il_index(o, 1, u, op);
    if (ph == BWD) return o->off + (double)il_index(o, 0, u, op);
    return 2.0 * o->off;
}

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

/* ------------------------------------------------------------ one simulation */

/* Everything one simulation of one placement reads and changes: the placement's plan (built once at the
 * start, then read only) and the event loop's state. The step functions below take it by pointer; they
 * are always inlined into simulate_kind, whose SCHED, RINGS and PQ are compile-time constants, so every
 * schedule's copy keeps its own specialised code.
 *
 * Queues: resource r is device r (r < nd) or channel r - nd. Under a priority order (PQ: a schedule's
 * priorities, interleaved 1F1B's order, zb-h1) every queue is a binary heap on (priority, arrival); without
 * one every queue is in arrival order, an array read from its head (fq[fq_head[r] .. fq_tail[r])), so a push
 * and a pop are a store and an increment. Only the resources whose state changed since they were last looked
 * at are dispatched (the dirty set, a bit per resource): an item arrived, their work ended, or a cap that held a forward back
 * moved; nothing scans every device and channel per instant. They are dispatched in index order, devices
 * before channels, as a scan would: the events they start get the same order, so results are identical. */
typedef struct {
    const KernelObject *k;
    const int *place;
    int n, nd, nc, U, E, training;
    /* the plan: fd_* one entry per (op, remote device with a consumer), the tensor sent there; bd_* one
     * entry per (op, remote device holding an input), the summed gradients sent there */
    const int *fd_ptr, *fd_dev, *fd_consumers, *bd_ptr, *bd_dev, *n_local;
    const double *fd_bytes, *bd_bytes, *grad_out, *grad_in;
    const double *dur;                /* [phases << sh]: task (phase, op)'s duration on its device, at (phase << sh) | op */
    const unsigned char *hw;          /* the op runs a W task (zb-h1) */
    /* a group is what the caps count per unit: a device, or under interleaved 1F1B a chunk */
    const int *grp_of, *grp_size, *stage_of, *dev_ptr, *dev_ops, *input_dev;
    int G, R, p_used;                 /* groups, rings, stages (used devices) */
    const double *prio;
    const int *cap;                   /* per device: units it may hold open (NULL: no caps) */
    int track_groups;                 /* count each unit's finished tasks per group (caps, zb-h1's W gates) */
    IlOrder ilo;
    const int *vper, *slot_base;      /* interleaved: chunks per device, its forward slots */
    int *next_f;
    char *opened;
    int sh;                           /* task ids: ((unit * phases + phase) << sh) | op, 2^sh >= n (tid) */
    int ovh_base;                     /* event/queue ids from here: ovh_base + 2 * message + (0 send | 1 recv) */
    /* the loop's state */
    int *dep, *act_refs, *recv_refs, *unit_left, *done_on, *fdone_on, *open_count, *ring_left, *ring_pend;
    char *active;                     /* per resource: running a task, a send/receive or a transfer */
    char *is_open;
    double *busy, *mem, *peak, *ch_bytes_out, *ch_busy_out;
    double *until;                    /* per device: when its current (or last) task ends */
    /* processor sharing (contention.py's Pacer): per resource (devices, then channels) the running item's
     * work left at full pace as of pmark, its pace, its end (channels) and its end event's id */
    int pace_on;                      /* something is shared, or an all-reduce is measured */
    const char *in_sr;                /* per device: in a shared resource */
    int *coll_on;                     /* per device: measured all-reduces (that take time) running over it */
    double *pwork, *pmark, *ppace, *pend;
    int *pev;
    int *pxf;                         /* per channel: its running measured all-reduce, -1: none */
    char *pheld;                      /* per channel: that all-reduce holds a share of its members' devices */
    Heap *q, *events;                 /* PQ: a heap per resource; the events (time, creation order) */
    int *fq, *fq_head, *fq_tail;      /* without PQ: the queues' items in arrival order */
    Item *stash;
    uint64_t *dirty;                  /* resources to dispatch: bit r % 64 of word r / 64 */
    int n_words;
    Xfer *xf;
    int n_xf, admitted, units_in_flight, oldest, step_left;
    int unit_ended;                   /* a unit finished: the oldest may move on */
    long long qseq, seq;              /* arrival order in the heaps; creation order of the events */
    double now;
} Sim;

#define STEP static inline __attribute__((always_inline))

STEP int phases(const int SCHED) { return SCHED == SCHED_ZB ? 4 : 3; }

/* A task's id: ((unit * phases + phase) << sh) | op, so that taking one apart needs no division. (The
 * priorities from Python are laid out by (unit * phases + phase) * n + op.) */
STEP int tid(const Sim *s, const int SCHED, int u, int ph, int op) { return ((u * phases(SCHED) + ph) << s->sh) | op; }

STEP void untid(const Sim *s, const int SCHED, int t, int *u, int *ph, int *op) {
    const int q = t >> s->sh;
    *op = t & ((1 << s->sh) - 1);
    *u = SCHED == SCHED_ZB ? q >> 2 : q / 3;
    *ph = q - *u * phases(SCHED);
}

STEP double task_prio(const Sim *s, const int SCHED, const int PQ, int u, int ph, int op) {
    if (!PQ) return 0.0;
    if (SCHED == SCHED_INTERLEAVED) return il_prio(&s->ilo, u, ph, op);
    return s->prio ? s->prio[(size_t)(u * phases(SCHED) + ph) * s->n + op] : 0.0;
}

STEP double duration(const Sim *s, const int SCHED, int ph, int op) { return s->dur[(ph << s->sh) | op]; }

/* Resource r has something new to consider. */
STEP void mark(Sim *s, int r) {
    s->dirty[r >> 6] |= (uint64_t)1 << (r & 63);
}

STEP int q_len(const Sim *s, const int PQ, int r) { return PQ ? s->q[r].n : s->fq_tail[r] - s->fq_head[r]; }

/* Item id (priority pr) arrives at resource r's queue. */
STEP void q_push(Sim *s, const int PQ, int r, double pr, int id) {
    if (PQ) {
        Item it = {pr, s->qseq++, id};
        heap_push(&s->q[r], it);
    } else {
        s->fq[s->fq_tail[r]++] = id;
    }
    mark(s, r);
}

STEP void new_event(Sim *s, double at, int id) {
    Item ev = {at, s->seq++, id};
    heap_push(s->events, ev);
}

/* Task (u, ph, op) may run: it queues on its op's device. */
STEP void ready(Sim *s, const int SCHED, const int PQ, int u, int ph, int op) {
    q_push(s, PQ, s->place[op], task_prio(s, SCHED, PQ, u, ph, op), tid(s, SCHED, u, ph, op));
}

/* One of task (u, ph, op)'s dependencies is met; the last one makes it ready. */
STEP void satisfy(Sim *s, const int SCHED, const int PQ, int u, int ph, int op) {
    if (--s->dep[tid(s, SCHED, u, ph, op)] == 0) ready(s, SCHED, PQ, u, ph, op);
}

STEP void note_peak(Sim *s, int d) {
    if (s->mem[d] > s->peak[d]) s->peak[d] = s->mem[d];
}

/* Unit u no longer needs op's inputs on device d: activations and received copies whose last reader it was. */
STEP void release_inputs(Sim *s, int u, int op, int d) {
    const KernelObject *k = s->k;
    for (int j = k->par_ptr[op]; j < k->par_ptr[op + 1]; j++) {
        const int p = k->par_idx[j];
        if (s->place[p] == d) {
            if (--s->act_refs[u * s->n + p] == 0) s->mem[d] -= k->out_bytes[p];
        } else {
            int e = s->fd_ptr[p];
            while (s->fd_dev[e] != d) e++;
            if (--s->recv_refs[(size_t)u * s->E + e] == 0) s->mem[d] -= s->fd_bytes[e];
        }
    }
}

/* A new message from src to dst (priority pr, its producing task's): a send task on src first if src has a
 * message overhead, else straight to the channel. */
STEP void new_message(Sim *s, const int PQ, int u, int dir, int op, int src, int dst, int entry, double bytes,
                      double pr) {
    const KernelObject *k = s->k;
    const int xi = s->n_xf++;
    Xfer *x = &s->xf[xi];
    x->u = u; x->dir = dir; x->op = op; x->src = src; x->dst = dst; x->entry = entry; x->bytes = bytes; x->prio = pr;
    if (k->has_ovh && k->ovh[src] > 0.0) q_push(s, PQ, src, pr, s->ovh_base + 2 * xi);
    else q_push(s, PQ, s->nd + k->route[src * s->nd + dst], pr, xi);
}

/* Ring r of ring unit ru is done: its members' updates may run. */
STEP void ring_complete(Sim *s, const int SCHED, const int PQ, int ru, int r) {
    const KernelObject *k = s->k;
    for (int v = k->ring_first[r]; v < k->ring_first[r] + k->ring_count[r]; v++)
        if (k->has_update[v]) satisfy(s, SCHED, PQ, ru, UPD, v);
}

/* Message x is on its destination: its consumers there may run (a ring's last message: its updates). */
STEP void deliver(Sim *s, const int SCHED, const int RINGS, const int PQ, const Xfer *x) {
    const KernelObject *k = s->k;
    if (RINGS && x->dir == AR) {
        if (--s->ring_pend[x->u * s->R + x->entry] == 0) ring_complete(s, SCHED, PQ, x->u, x->entry);
    } else if (x->dir == FWD) {
        for (int j = k->ch_ptr[x->op]; j < k->ch_ptr[x->op + 1]; j++)
            if (s->place[k->ch_idx[j]] == x->dst) satisfy(s, SCHED, PQ, x->u, FWD, k->ch_idx[j]);
    } else {
        for (int j = k->par_ptr[x->op]; j < k->par_ptr[x->op + 1]; j++)
            if (s->place[k->par_idx[j]] == x->dst) satisfy(s, SCHED, PQ, x->u, BWD, k->par_idx[j]);
    }
}

/* Admission: new units while fewer than K are in flight (thesis: only when every input device is idle). */
STEP void admit(Sim *s, const int SCHED, const int PQ) {
    const KernelObject *k = s->k;
    while (s->admitted < s->U && s->units_in_flight < k->K) {
        if (k->admission == ADMIT_THESIS && s->admitted > 0) {
            int all_idle = 1;
            for (int d = 0; d < s->nd; d++)
                if (s->input_dev[d] && (s->active[d] || q_len(s, PQ, d) > 0)) { all_idle = 0; break; }
            if (!all_idle) break;
        }
        for (int j = 0; j < k->n_inputs; j++) ready(s, SCHED, PQ, s->admitted, FWD, k->input_ops[j]);
        s->admitted++;
        s->units_in_flight++;
    }
}

/* A forward held back: it would open a unit on a device that holds its cap, or (interleaved) open one out of
 * Megatron's order, and its unit is not the oldest. */
STEP int capped(const Sim *s, const int SCHED, int d, int uu, int ph, int o) {
    if (ph != FWD || !s->cap || s->is_open[uu * s->G + s->grp_of[o]] || uu == s->oldest) return 0;
    return (s->cap[d] > 0 && s->open_count[d] >= s->cap[d])
           || (SCHED == SCHED_INTERLEAVED && il_index(&s->ilo, 1, uu, o) != s->next_f[d]);
}

/* Shared resources: how many times slower than alone device d computes now: demand / capacity of the most
 * contended resource d shares, counting d, the devices whose task ends after now and, at the resource's
 * collective demand, those a measured all-reduce runs over (contention.py's ``slowdown``, in the same order
 * of operations). */
STEP double slowdown(const Sim *s, int d) {
    const KernelObject *k = s->k;
    double factor = 1.0;
    for (int r = 0; r < k->n_sr; r++) {
        int in = 0;
        for (int j = k->sr_ptr[r]; j < k->sr_ptr[r + 1]; j++) if (k->sr_dev[j] == d) { in = 1; break; }
        if (!in) continue;
        double total = 0.0;
        const double coll = k->sr_coll ? k->sr_coll[r] : 0.0;
        for (int j = k->sr_ptr[r]; j < k->sr_ptr[r + 1]; j++) {
            const int m = k->sr_dev[j];
            if (m == d || s->until[m] > s->now) total += k->sr_dem[j];
            if (coll > 0.0 && s->coll_on[m] > 0) total += coll;
        }
        if (total > k->sr_cap[r] && total / k->sr_cap[r] > factor) factor = total / k->sr_cap[r];
    }
    return factor;
}

/* A task of ``len`` (event id ``id``) starting on device d: its seconds at d's pace now; a device in a shared
 * resource keeps its work and pace for repricing (Pacer.task_length, task_started). */
STEP double paced(Sim *s, int d, double len, int id) {
    if (!s->k->n_sr) return len;
    const double f = slowdown(s, d);
    if (s->in_sr[d]) { s->pev[d] = id; s->pwork[d] = len; s->pmark[d] = s->now; s->ppace[d] = f; }
    return f > 1.0 ? len * f : len;
}

STEP int measured_ar(const KernelObject *k, const Xfer *x) {
    return x->dir == AR && k->ring_talone && k->ring_talone[x->entry] >= 0.0;
}

/* A measured all-reduce's pace now: busy / alone while a member's device runs a task past now, else 1
 * (contention.py's ``collective_pace``); *alone: its work, *len: its seconds at that pace (the busy or the
 * alone curve's time), each at least the minimum transfer. */
STEP double ar_pace(const Sim *s, const Xfer *x, double *alone, double *len) {
    const KernelObject *k = s->k;
    const double floor = k->min_xfer[x->src];
    const double a = k->ring_talone[x->entry] > floor ? k->ring_talone[x->entry] : floor;
    const double b = k->ring_tbusy[x->entry] > floor ? k->ring_tbusy[x->entry] : floor;
    *alone = a;
    for (int v = k->ring_first[x->entry]; v < k->ring_first[x->entry] + k->ring_count[x->entry]; v++)
        if (s->until[s->place[v]] > s->now) { *len = b; return a > 0.0 ? b / a : 1.0; }
    *len = a;
    return 1.0;
}

/* Resource r's running item takes pace f from now: its work left re-timed, its end event moved; returns the
 * new end (Pacer._move). */
STEP double move_end(Sim *s, int r, double f) {
    double left = s->pwork[r] - (s->now - s->pmark[r]) / s->ppace[r];
    left = left > 0.0 ? left : 0.0;
    s->pwork[r] = left; s->pmark[r] = s->now; s->ppace[r] = f;
    const double end = s->now + left * f;
    for (int i = 0; i < s->events->n; i++)
        if (s->events->a[i].id == s->pev[r]) { s->events->a[i].key = end; heap_fix(s->events, i); break; }
    return end;
}

/* End of an instant: every running task and measured all-reduce whose pace changed (Pacer.reprice). */
STEP void reprice(Sim *s) {
    const KernelObject *k = s->k;
    if (k->n_sr)
        for (int d = 0; d < s->nd; d++) {
            if (!s->in_sr[d] || !s->active[d] || !(s->until[d] > s->now)) continue;
            const double f = slowdown(s, d);
            if (f != s->ppace[d]) {
                const double end = move_end(s, d, f);
                s->busy[d] += end - s->until[d];
                s->until[d] = end;
            }
        }
    for (int j = 0; j < s->nc; j++) {
        const int r = s->nd + j;
        if (s->pxf[j] < 0 || !(s->pend[r] > s->now)) continue;
        double alone, len;
        const double f = ar_pace(s, &s->xf[s->pxf[j]], &alone, &len);
        if (f != s->ppace[r]) {
            const double end = move_end(s, r, f);
            s->ch_busy_out[j] += end - s->pend[r];
            s->pend[r] = end;
        }
    }
}

/* Device d starts item ``chosen``, taken off its queue. */
STEP void start_on_device(Sim *s, const int SCHED, int d, int chosen) {
    const KernelObject *k = s->k;
    if (chosen >= s->ovh_base) {
        const double len = paced(s, d, k->ovh[d], chosen);
        s->active[d] = 1;
        s->until[d] = s->now + len;
        s->busy[d] += len;
        new_event(s, s->now + len, chosen);
        return;
    }
    const int G = s->G;
    if (!s->cap) {  /* the duration is all it needs: at (ph << sh) | op, the id itself when u = 0 */
        double len = s->dur[s->U == 1 ? chosen : chosen - (((chosen >> s->sh) / phases(SCHED)) * phases(SCHED) << s->sh)];
        len = paced(s, d, len, chosen);
        s->active[d] = 1;
        s->until[d] = s->now + len;
        s->busy[d] += len;
        new_event(s, s->now + len, chosen);
        return;
    }
    int uu, ph, op;
    untid(s, SCHED, chosen, &uu, &ph, &op);
    if (ph == FWD && !s->is_open[uu * G + s->grp_of[op]]) {
        s->is_open[uu * G + s->grp_of[op]] = 1;
        s->open_count[d]++;
        if (SCHED == SCHED_INTERLEAVED) {  /* this forward slot is taken; the next one to open skips taken and empty slots */
            const int vd = s->vper[d], slots = s->slot_base[d + 1] - s->slot_base[d], p = s->p_used;
            s->opened[s->slot_base[d] + il_index(&s->ilo, 1, uu, op)] = 1;
            while (s->next_f[d] < slots && (s->opened[s->slot_base[d] + s->next_f[d]]
                   || (s->next_f[d] / (p * vd)) * p + s->next_f[d] % p >= s->U)) s->next_f[d]++;
        }
    }
    double len = duration(s, SCHED, ph, op);
    len = paced(s, d, len, chosen);
    s->active[d] = 1;
    s->until[d] = s->now + len;
    s->busy[d] += len;
    new_event(s, s->now + len, chosen);
}

/* Idle device d with a non-empty queue picks its next item: by (priority, arrival), skipping forwards held back
 * by a cap (and, in an instant-only pass, everything that takes time). Returns 1 if it started one. */
STEP int dispatch_device(Sim *s, const int SCHED, const int PQ, int d, int instant_only) {
    int chosen = -1;
    if (PQ) {
        int n_stash = 0;
        while (s->q[d].n > 0) {
            Item it = heap_pop(&s->q[d]);
            if (it.id >= s->ovh_base) {  /* a send or receive task: never capped, never instant */
                if (instant_only) { s->stash[n_stash++] = it; continue; }
            } else {
                int uu, ph, o;
                untid(s, SCHED, it.id, &uu, &ph, &o);
                if (capped(s, SCHED, d, uu, ph, o) || (instant_only && duration(s, SCHED, ph, o) > 0.0)) {
                    s->stash[n_stash++] = it;
                    continue;
                }
            }
            chosen = it.id;
            break;
        }
        for (int j = 0; j < n_stash; j++) heap_push(&s->q[d], s->stash[j]);
    } else {  /* arrival order: the first item not held back (no instant-only passes without priorities) */
        const int head = s->fq_head[d], tail = s->fq_tail[d];
        int at = head;
        if (s->cap) {
            for (; at < tail; at++) {
                const int id = s->fq[at];
                if (id >= s->ovh_base) break;
                int uu, ph, o;
                untid(s, SCHED, id, &uu, &ph, &o);
                if (!capped(s, SCHED, d, uu, ph, o)) break;
            }
            if (at == tail) return 0;
        }
        chosen = s->fq[at];
        if (at > head) memmove(&s->fq[head + 1], &s->fq[head], sizeof(int) * (size_t)(at - head));
        s->fq_head[d] = head + 1;
    }
    if (chosen < 0) return 0;
    start_on_device(s, SCHED, d, chosen);
    return 1;
}

/* Channel j starts its first message unless busy (or, in an instant-only pass, the message takes time).
 * Returns 1 if it started one. */
STEP int dispatch_channel(Sim *s, const int PQ, int j, int instant_only) {
    const KernelObject *k = s->k;
    const int r = s->nd + j;
    if (s->active[r] || q_len(s, PQ, r) == 0) return 0;
    const int xi = PQ ? s->q[r].a[0].id : s->fq[s->fq_head[r]];
    const Xfer *x = &s->xf[xi];
    double len, alone = 0.0, pace = 1.0;
    const int meas = measured_ar(k, x);
    if (meas) {  /* a measured all-reduce: its curve's time at its pace now (busy while a member's device computes) */
        pace = ar_pace(s, x, &alone, &len);
    } else {
        len = k->cv_ptr && k->cv_ptr[j + 1] > k->cv_ptr[j] ? curve_len(k, j, x->bytes)
                                                           : k->ch_lat[j] + x->bytes * k->ch_inv[j];
        if (len < k->min_xfer[x->src]) len = k->min_xfer[x->src];
    }
    if (instant_only && len > 0.0) return 0;
    if (meas) {  /* tracked for its pace; it holds a share of its members' devices while it runs (contention.py) */
        s->pxf[j] = xi; s->pev[r] = -(xi + 1); s->pwork[r] = alone; s->pmark[r] = s->now; s->ppace[r] = pace;
        s->pend[r] = s->now + len;
        s->pheld[j] = len > 0.0;
        if (k->n_sr && len > 0.0)
            for (int v = k->ring_first[x->entry]; v < k->ring_first[x->entry] + k->ring_count[x->entry]; v++)
                s->coll_on[s->place[v]]++;
    }
    if (PQ) heap_pop(&s->q[r]);
    else s->fq_head[r]++;
    s->active[r] = 1;
    s->ch_busy_out[j] += len;
    s->ch_bytes_out[j] += x->bytes;
    new_event(s, s->now + len, -(xi + 1));
    return 1;
}

/* Every dirty resource, by index (devices, then channels), picks its next item. One that did not start
 * stays dirty only in an instant-only pass (the full pass that follows may start it); otherwise it is looked
 * at again when something changes for it. Returns how many started. */
STEP int dispatch(Sim *s, const int SCHED, const int PQ, int instant_only) {
    const int nd = s->nd;
    int started = 0;
    for (int wi = 0; wi < s->n_words; wi++) {
        uint64_t bits = s->dirty[wi], keep = 0;
        while (bits) {  /* dispatching starts events; it queues nothing, so no bit is set meanwhile */
            const int b = __builtin_ctzll(bits), r = (wi << 6) + b;
            bits &= bits - 1;
            if (s->active[r] || q_len(s, PQ, r) == 0) continue;
            const int ok = r < nd ? dispatch_device(s, SCHED, PQ, r, instant_only)
                                  : dispatch_channel(s, PQ, r - nd, instant_only);
            started += ok;
            if (!ok && instant_only) keep |= (uint64_t)1 << b;
        }
        s->dirty[wi] = keep;
    }
    return started;
}

/* Unit uu is done with group g's work on device dv for good: the group no longer counts against the cap.
 * (dv has just finished a task, so it is dispatched again anyway.) */
STEP void close_group(Sim *s, int uu, int g, int dv) {
    if (s->cap && s->is_open[uu * s->G + g]) {
        s->is_open[uu * s->G + g] = 0;
        s->open_count[dv]--;
    }
}

STEP void forward_done(Sim *s, const int SCHED, const int PQ, int uu, int op, int dv, double pr) {
    const KernelObject *k = s->k;
    const int n = s->n;
    const int refs = s->n_local[op] + (s->fd_ptr[op + 1] - s->fd_ptr[op]);
    s->act_refs[uu * n + op] = refs;
    if (refs) s->mem[dv] += k->out_bytes[op];
    if (!s->training) release_inputs(s, uu, op, dv);
    for (int j = k->ch_ptr[op]; j < k->ch_ptr[op + 1]; j++) {
        const int c = k->ch_idx[j];
        if (s->place[c] == dv) satisfy(s, SCHED, PQ, uu, FWD, c);
    }
    for (int j = s->fd_ptr[op]; j < s->fd_ptr[op + 1]; j++)
        new_message(s, PQ, uu, FWD, op, dv, s->fd_dev[j], j, s->fd_bytes[j], pr);
    if (s->training) satisfy(s, SCHED, PQ, uu, BWD, op);
    if (s->track_groups && !s->training) {
        const int g = s->grp_of[op];
        if (++s->fdone_on[uu * s->G + g] == s->grp_size[g]) close_group(s, uu, g, dv);
    }
    s->unit_left[uu]--;
}

/* A ring member's backward is done; the last one of the ring (of the unit, or of the step) starts its
 * all-reduce messages. */
STEP void ring_member_done(Sim *s, const int SCHED, const int PQ, int uu, int op, double pr) {
    const KernelObject *k = s->k;
    const int r = k->ring_of[op], ru = k->upd_step ? 0 : uu, R = s->R;
    if (--s->ring_left[ru * R + r] != 0) return;
    const int m0 = k->ring_msg_ptr[r], m1 = k->ring_msg_ptr[r + 1];
    s->ring_pend[ru * R + r] = m1 - m0;
    if (m1 == m0) ring_complete(s, SCHED, PQ, ru, r);
    for (int mi = m0; mi < m1; mi++)
        new_message(s, PQ, ru, AR, k->ring_first[r], k->ring_src[mi], k->ring_dst[mi], r, k->ring_bytes[mi], pr);
}

/* zb-h1's W gate: stage r's Ws of unit u wait for its B of unit min(u + r, U - 1). Unit uu's last B on
 * device dv is done, so the Ws of uu - r (of U - 1 - r .. U - 1 at the end) are released. */
STEP void release_w_gate(Sim *s, const int SCHED, const int PQ, int uu, int dv) {
    const int r = s->stage_of[dv], U = s->U;
    int lo = uu - r, hi = uu - r;
    if (uu == U - 1) { lo = U - 1 - r; hi = U - 1; }
    if (lo < 0) lo = 0;
    for (int u = lo; u <= hi; u++)
        for (int j = s->dev_ptr[dv]; j < s->dev_ptr[dv + 1]; j++)
            if (s->hw[s->dev_ops[j]]) satisfy(s, SCHED, PQ, u, WGT, s->dev_ops[j]);
}

STEP void backward_done(Sim *s, const int SCHED, const int RINGS, const int PQ, int uu, int op, int dv, double pr) {
    const KernelObject *k = s->k;
    /* zb-h1: the output gradient and the inputs stay for the W task; otherwise the inputs are released here,
     * parent by parent in the loop below (release_inputs' order: memory changes the same way) */
    const int release = !(SCHED == SCHED_ZB && s->hw[op]);
    if (!release) s->mem[dv] += s->grad_out[op];
    else s->mem[dv] += s->grad_out[op] - s->grad_in[op];
    for (int j = k->par_ptr[op]; j < k->par_ptr[op + 1]; j++) {
        const int p = k->par_idx[j], dp = s->place[p];
        if (dp == dv) {
            if (release && --s->act_refs[uu * s->n + p] == 0) s->mem[dv] -= k->out_bytes[p];
            satisfy(s, SCHED, PQ, uu, BWD, p);
            continue;
        }
        if (release) {
            int f = s->fd_ptr[p];
            while (s->fd_dev[f] != dv) f++;
            if (--s->recv_refs[(size_t)uu * s->E + f] == 0) s->mem[dv] -= s->fd_bytes[f];
        }
        int e;
        for (e = s->bd_ptr[op]; e < s->bd_ptr[op + 1]; e++) if (s->bd_dev[e] == dp) break;
        if (s->bd_bytes[e] == 0.0) satisfy(s, SCHED, PQ, uu, BWD, p);
    }
    for (int j = s->bd_ptr[op]; j < s->bd_ptr[op + 1]; j++)
        if (s->bd_bytes[j] > 0.0) new_message(s, PQ, uu, BWD, op, dv, s->bd_dev[j], j, s->bd_bytes[j], pr);
    if (SCHED == SCHED_ZB && s->hw[op]) satisfy(s, SCHED, PQ, uu, WGT, op);
    else if (RINGS && s->R && k->ring_of[op] >= 0) ring_member_done(s, SCHED, PQ, uu, op, pr);
    else if (k->has_update[op]) satisfy(s, SCHED, PQ, k->upd_step ? 0 : uu, UPD, op);
    if (s->track_groups) {
        const int g = s->grp_of[op], last = ++s->done_on[uu * s->G + g] == s->grp_size[g];
        if (last) close_group(s, uu, g, dv);
        if (SCHED == SCHED_ZB && last) release_w_gate(s, SCHED, PQ, uu, dv);
    }
    s->unit_left[uu]--;
}

STEP void wgrad_done(Sim *s, const int SCHED, const int PQ, int uu, int op, int dv) {
    const KernelObject *k = s->k;
    s->mem[dv] -= s->grad_in[op];
    release_inputs(s, uu, op, dv);
    if (k->has_update[op]) satisfy(s, SCHED, PQ, k->upd_step ? 0 : uu, UPD, op);
    s->unit_left[uu]--;
}

/* Task ``task`` has finished on its device. */
STEP void task_done(Sim *s, const int SCHED, const int RINGS, const int PQ, int task) {
    const KernelObject *k = s->k;
    int uu, ph, op;
    untid(s, SCHED, task, &uu, &ph, &op);
    const int dv = s->place[op];
    const double pr = task_prio(s, SCHED, PQ, uu, ph, op);
    s->active[dv] = 0;
    mark(s, dv);
    if (ph == FWD) forward_done(s, SCHED, PQ, uu, op, dv, pr);
    else if (ph == BWD) backward_done(s, SCHED, RINGS, PQ, uu, op, dv, pr);
    else if (SCHED == SCHED_ZB && ph == WGT) wgrad_done(s, SCHED, PQ, uu, op, dv);
    else if (k->upd_step) s->step_left--;
    else s->unit_left[uu]--;
    if ((ph != UPD || !k->upd_step) && s->unit_left[uu] == 0) { s->units_in_flight--; s->unit_ended = 1; }
    note_peak(s, dv);
}

/* Message xi has crossed its channel: memory moves now; its consumers wait for the receive task, if any. */
STEP void transfer_done(Sim *s, const int SCHED, const int RINGS, const int PQ, int xi) {
    const KernelObject *k = s->k;
    const Xfer *x = &s->xf[xi];
    const int j = k->route[x->src * s->nd + x->dst];
    s->active[s->nd + j] = 0;
    mark(s, s->nd + j);
    if (s->pace_on && s->pxf[j] == xi) {  /* a measured all-reduce ends: its share of its members' devices is free */
        s->pxf[j] = -1;
        if (k->n_sr && s->pheld[j])
            for (int v = k->ring_first[x->entry]; v < k->ring_first[x->entry] + k->ring_count[x->entry]; v++)
                s->coll_on[s->place[v]]--;
    }
    if (x->dir == FWD) {
        if (--s->act_refs[x->u * s->n + x->op] == 0) s->mem[x->src] -= k->out_bytes[x->op];
        s->recv_refs[(size_t)x->u * s->E + x->entry] = s->fd_consumers[x->entry];
        s->mem[x->dst] += x->bytes;
    } else if (x->dir == BWD) {
        s->mem[x->src] -= x->bytes;
        s->mem[x->dst] += x->bytes;
    }  /* AR: the gradients are resident (static memory) on both ends */
    if (k->has_ovh && k->ovh[x->dst] > 0.0) q_push(s, PQ, x->dst, x->prio, s->ovh_base + 2 * xi + 1);
    else deliver(s, SCHED, RINGS, PQ, x);
    note_peak(s, x->src);
    note_peak(s, x->dst);
}

/* A send task is done (the message queues on its channel) or a receive task (the consumers may run). */
STEP void overhead_done(Sim *s, const int SCHED, const int RINGS, const int PQ, int id) {
    const int xi = (id - s->ovh_base) >> 1;
    const Xfer *x = &s->xf[xi];
    if ((id - s->ovh_base) & 1) {
        s->active[x->dst] = 0;
        mark(s, x->dst);
        deliver(s, SCHED, RINGS, PQ, x);
    } else {
        s->active[x->src] = 0;
        mark(s, x->src);
        q_push(s, PQ, s->nd + s->k->route[x->src * s->nd + x->dst], x->prio, xi);
    }
}

/* The event loop: admit, start what may start, then handle every event of the next instant. With a
 * priority order, zero-duration work at an instant is settled first (instant_only passes) so that
 * everything ready at that instant competes by priority; see reference.py. */
STEP void run_events(Sim *s, const int SCHED, const int RINGS, const int PQ, const int has_prio) {
    int instant_only = has_prio ? 1 : 0;
    for (;;) {
        if (s->admitted < s->U) admit(s, SCHED, PQ);
        /* the oldest unfinished unit is never blocked by a cap (progress): when it moves on, a forward that a cap
         * held back may start */
        if (s->unit_ended) {
            s->unit_ended = 0;
            while (s->oldest < s->U && s->unit_left[s->oldest] == 0) s->oldest++;
            if (s->cap) for (int d = 0; d < s->nd; d++) mark(s, d);
        }
        const int started = dispatch(s, SCHED, PQ, instant_only);
        if (instant_only) {
            if (!started) { instant_only = 0; continue; }  /* settled: now the full dispatch */
        } else {
            if (s->pace_on) reprice(s);
            if (s->events->n == 0) break;
            s->now = s->events->a[0].key;
        }
        if (has_prio) instant_only = 1;
        while (s->events->n > 0 && s->events->a[0].key == s->now) {
            const Item ev = heap_pop(s->events);
            if (ev.id >= s->ovh_base) overhead_done(s, SCHED, RINGS, PQ, ev.id);
            else if (ev.id >= 0) task_done(s, SCHED, RINGS, PQ, ev.id);
            else transfer_done(s, SCHED, RINGS, PQ, -ev.id - 1);
        }
    }
}

/* One placement: its plan (message tables, durations, chunks, stages, caps) and the loop's state are built
 * here, then run_events runs the step. Returns 0 on success, -1 if the simulation stalled, -2 out of memory,
 * -3 bad placement. SCHED is a compile-time constant at every call (see simulate() below): each schedule kind
 * gets its own copy of this function, and the static one keeps the three-phase kernel's speed. So are RINGS
 * (1 only for an expanded placement with split ops) and PQ (priority queues; 0: queues in arrival order). */
static inline __attribute__((always_inline)) int simulate_kind(const KernelObject *k, const int *place,
                                                               double *out, Work *w, const int SCHED,
                                                               const int RINGS, const int PQ) {
    const int n = k->n, nd = k->nd, nc = k->nc, U = k->U, E = k->n_edges, NR = nd + nc;
    const int training = !k->fwd_only;
    int i, j, d, u;

    for (i = 0; i < n; i++)
        if (place[i] < 0 || place[i] >= nd) return -3;

    const int il = SCHED == SCHED_INTERLEAVED, zb = SCHED == SCHED_ZB, NPH = zb ? 4 : 3;
    /* a group is what the caps count per unit: a device, or under interleaved 1F1B a chunk (at most n) */
    const int G = il ? n : nd;
    const int R = RINGS && k->ring_of ? k->n_rings : 0, RU = k->upd_step ? 1 : U;
    const size_t UN = (size_t)U * n, UE = (size_t)U * (E > 0 ? E : 1), UG = (size_t)U * G;
    const size_t ni = sizeof(int), nf = sizeof(double);
    int sh = 0;  /* task ids (tid): ((unit * phases + phase) << sh) | op */
    while ((1 << sh) < n) sh++;
    const size_t N2 = (size_t)1 << sh, UT = (size_t)U * NPH * N2;  /* task ids 0 .. UT - 1 */
    if (UT > INT_MAX / 4) return -2;  /* ids (and the send/receive ids after them) must fit in an int */

    /* ---- per-placement precomputation (sizes first, then one block of scratch) */
    size_t need = 0;
    need += room(ni, nd) + room(ni, nc);                                                   /* ops, messages per resource */
    need += room(ni, n + 1) + room(ni, E) + room(nf, E) + room(ni, E);                     /* forward destinations */
    need += room(ni, n + 1) + room(ni, E) + room(nf, E);                                   /* backward destinations */
    need += room(ni, n) + room(nf, n) + room(nf, n);                                       /* locals, gradients */
    need += room(nf, NPH * N2);                                                            /* durations */
    need += room(1, n);                                                                    /* has a W task */
    need += room(ni, n) + room(ni, n) + room(ni, n);                       /* chunks: of op, local index, ops */
    need += room(ni, nd) + room(ni, nd) + room(ni, nd) + room(ni, nd + 1); /* chunks, stage, next_f, slot base */
    need += room(nf, nd) + room(nf, nd) + room(ni, nd);                    /* chunk split: work, seen, ops seen */
    need += room(ni, nd + 1) + room(ni, n);                                /* each device's ops (W gates) */
    need += room(ni, UT) + room(ni, UN) + room(ni, UE);                    /* deps, activation/recv refs */
    need += room(ni, U) + room(ni, UG) + room(ni, UG) + room(1, UG);       /* units, open tracking per group */
    need += room(sizeof(Heap), 1) + room(sizeof(Item), NR + 2);           /* events */
    need += room(nf, nd) + room(nf, nd) + room(nf, nd) + room(nf, nd) + room(ni, nd);  /* busy .. coll_on */
    need += 4 * room(nf, NR) + room(ni, NR) + room(ni, nc) + room(1, nc) + room(1, nd);  /* processor sharing */
    need += room(ni, nd) + room(ni, nd) + room(ni, nd) + room(ni, nd);
    need += room(ni, (size_t)RU * R * 2);                                  /* rings */

    Arena ar = {work_take(w, 0, need), 0, need};
    if (!ar.base) return -2;
    int *ops_on = TAKE(&ar, int, nd), *ch_msgs = TAKE(&ar, int, nc);
    /* fd_*: one entry per (op, remote device with a consumer): the tensor sent there. */
    int *fd_ptr = TAKE(&ar, int, n + 1), *fd_dev = TAKE(&ar, int, E);
    double *fd_bytes = TAKE(&ar, double, E);
    int *fd_consumers = TAKE(&ar, int, E);
    /* bd_*: one entry per (op, remote device holding an input): summed gradients sent there. */
    int *bd_ptr = TAKE(&ar, int, n + 1), *bd_dev = TAKE(&ar, int, E);
    double *bd_bytes = TAKE(&ar, double, E);
    int *n_local = TAKE(&ar, int, n);
    double *grad_out = k->grad_out0, *grad_in = k->grad_in0;
    if (!grad_in) { grad_out = TAKE(&ar, double, n); grad_in = TAKE(&ar, double, n); }
    double *dur = TAKE(&ar, double, NPH * N2);
    double *dF = dur, *dB = dur + N2, *dU = dur + 2 * N2, *dW = zb ? dur + 3 * N2 : NULL;
    unsigned char *hw = TAKE(&ar, unsigned char, n);
    int *grp = TAKE(&ar, int, n), *lv = TAKE(&ar, int, n);
    int *grp_ops = TAKE(&ar, int, n);
    int *vper = TAKE(&ar, int, nd), *stage_of = TAKE(&ar, int, nd), *next_f = TAKE(&ar, int, nd);
    int *slot_base = TAKE(&ar, int, nd + 1);
    double *split_work = TAKE(&ar, double, nd), *seen_w = TAKE(&ar, double, nd);
    int *split_seen = TAKE(&ar, int, nd);
    int *dev_ptr = TAKE(&ar, int, nd + 1), *dev_ops = TAKE(&ar, int, n);

    for (d = 0; d < nd; d++) ops_on[d] = 0;
    for (j = 0; j < nc; j++) ch_msgs[j] = 0;
    fd_ptr[0] = bd_ptr[0] = 0;
    for (i = 0; i < n; i++) {
        const int di = place[i];
        int f = fd_ptr[i], b = bd_ptr[i];
        ops_on[di]++;
        n_local[i] = 0;
        if (!k->grad_in0) {
            grad_out[i] = grad_in[i] = 0.0;
            for (j = k->ch_ptr[i]; j < k->ch_ptr[i + 1]; j++) grad_in[i] += k->ch_grad[j];
            for (j = k->par_ptr[i]; j < k->par_ptr[i + 1]; j++) grad_out[i] += k->par_grad[j];
        }
        for (j = k->ch_ptr[i]; j < k->ch_ptr[i + 1]; j++) {
            const int c = k->ch_idx[j], dc = place[c];
            if (dc == di) { n_local[i]++; continue; }
            int e;
            for (e = fd_ptr[i]; e < f; e++) if (fd_dev[e] == dc) break;
            if (e == f) {
                fd_dev[f] = dc; fd_bytes[f] = k->ch_bytes[j]; fd_consumers[f] = 1; f++;
                ch_msgs[k->route[di * nd + dc]]++;
            } else {
                fd_consumers[e]++;
                if (k->ch_bytes[j] > fd_bytes[e]) fd_bytes[e] = k->ch_bytes[j];
            }
        }
        fd_ptr[i + 1] = f;
        for (j = k->par_ptr[i]; j < k->par_ptr[i + 1]; j++) {
            const int p = k->par_idx[j], dp = place[p];
            if (dp == di) continue;
            int e;
            for (e = bd_ptr[i]; e < b; e++) if (bd_dev[e] == dp) break;
            if (e == b) { bd_dev[b] = dp; bd_bytes[b] = k->par_grad[j]; b++; }
            else bd_bytes[e] += k->par_grad[j];
        }
        bd_ptr[i + 1] = b;
        if (training)
            for (j = bd_ptr[i]; j < b; j++)
                if (bd_bytes[j] > 0.0) ch_msgs[k->route[di * nd + bd_dev[j]]]++;
        dF[i] = k->fwd[(size_t)i * nd + di];
        dB[i] = k->bwd[(size_t)i * nd + di];
        dU[i] = k->upd[(size_t)i * nd + di];
    }
    /* zb-h1: an op with a weight-gradient share runs its backward as B (input gradient) then W */
    for (i = 0; zb && i < n; i++) {
        hw[i] = k->has_w[i];
        dW[i] = 0.0;
        if (hw[i]) { dW[i] = k->bwd_w[(size_t)i * nd + place[i]]; dB[i] = k->bwd[(size_t)i * nd + place[i]] - dW[i]; }
    }

    if (zb) {  /* each device's ops in index order, for releasing W gates */
        dev_ptr[0] = 0;
        for (d = 0; d < nd; d++) dev_ptr[d + 1] = dev_ptr[d] + ops_on[d];
        for (d = 0; d < nd; d++) split_seen[d] = 0;
        for (i = 0; i < n; i++) dev_ops[dev_ptr[place[i]] + split_seen[place[i]]++] = i;
    }

    /* ---- stages: used devices in order of their first op */
    int p_used = 0;
    if (k->stage_caps || il || zb) {
        for (d = 0; d < nd; d++) stage_of[d] = -1;
        for (i = 0; i < n; i++) if (stage_of[place[i]] < 0) stage_of[place[i]] = p_used++;
    }

    /* ---- groups: devices, or chunks (pipeline_rules.chunks): every run of a device's ops in topological
     * order is a chunk; a device with a single run is cut into vstages parts of about equal work */
    const int *grp_of = place, *grp_size = ops_on;  /* without chunks a group is a device */
    if (il) {
        grp_of = grp;
        grp_size = grp_ops;
        const int V = k->vstages;
        for (d = 0; d < nd; d++) { vper[d] = 0; split_work[d] = 0.0; split_seen[d] = 0; }
        for (i = 0; i < n; i++) if (i == 0 || place[i] != place[i - 1]) vper[place[i]]++;  /* runs */
        for (i = 0; i < n; i++) split_work[place[i]] += dF[i] + k->bwd[(size_t)i * nd + place[i]];
        for (d = 0; d < nd; d++) seen_w[d] = 0.0;
        for (i = 0; i < n; i++) {  /* lv holds the part first, then the local chunk index */
            const int di = place[i];
            const double wk = dF[i] + k->bwd[(size_t)i * nd + di];
            lv[i] = 0;
            if (vper[di] == 1 && V > 1) {
                int v;
                if (split_work[di] > 0.0) v = (int)((double)V * (seen_w[di] + wk / 2.0) / split_work[di]);
                else v = (int)((double)(V * (2 * split_seen[di] + 1)) / (double)(2 * ops_on[di]));
                lv[i] = v < V - 1 ? v : V - 1;
            }
            seen_w[di] += wk;
            split_seen[di]++;
        }
        int n_grp = 0, prev_part = 0;
        for (d = 0; d < nd; d++) vper[d] = 0;
        for (i = 0; i < n; i++) {
            const int di = place[i], part = lv[i];
            if (i == 0 || place[i - 1] != di || part != prev_part) {
                grp_ops[n_grp] = 0; n_grp++; vper[di]++;
            }
            prev_part = part;
            grp[i] = n_grp - 1;
            grp_ops[n_grp - 1]++;
            lv[i] = vper[di] - 1;
        }
        /* Megatron's forward order per device: slot_base[d] .. slot_base[d + 1] */
        const int groups = (U + p_used - 1) / p_used;
        slot_base[0] = 0;
        for (d = 0; d < nd; d++) { slot_base[d + 1] = slot_base[d] + groups * p_used * vper[d]; next_f[d] = 0; }
    }
    /* rings, ring units; RINGS is a compile-time constant too, so whole-op placements carry no ring code */
    for (j = 0; R && j < k->ring_msg_ptr[R]; j++) ch_msgs[k->route[k->ring_src[j] * nd + k->ring_dst[j]]]++;
    long long total_msgs = 0;
    for (j = 0; j < nc; j++) total_msgs += (long long)ch_msgs[j] * U;

    int *dep = TAKE(&ar, int, UT);  /* per task id; the ids past an op n .. 2^sh - 1 are never used */
    int *act_refs = TAKE(&ar, int, UN);
    int *recv_refs = TAKE(&ar, int, UE);  /* per unit and fd entry: consumers still to read the copy */
    int *unit_left = TAKE(&ar, int, U);
    int *done_on = TAKE(&ar, int, UG);
    int *fdone_on = TAKE(&ar, int, UG);
    char *is_open = TAKE(&ar, char, UG);
    Heap *events_h = TAKE(&ar, Heap, 1);
    Item *ev_items = TAKE(&ar, Item, NR + 2);
    double *busy = TAKE(&ar, double, nd), *mem = TAKE(&ar, double, nd), *peak = TAKE(&ar, double, nd);
    double *until = TAKE(&ar, double, nd);
    int *coll_on = TAKE(&ar, int, nd);
    double *pwork = TAKE(&ar, double, NR), *pmark = TAKE(&ar, double, NR), *ppace = TAKE(&ar, double, NR);
    double *pend = TAKE(&ar, double, NR);
    int *pev = TAKE(&ar, int, NR), *pxf = TAKE(&ar, int, nc);
    char *pheld = TAKE(&ar, char, nc), *in_sr = TAKE(&ar, char, nd);
    int *open_count = TAKE(&ar, int, nd), *input_dev = TAKE(&ar, int, nd);
    int *cap_buf = TAKE(&ar, int, nd);
    int *ovh_msgs = TAKE(&ar, int, nd);  /* per device: send and receive tasks per unit */
    int *ring_left = TAKE(&ar, int, (size_t)RU * R * 2);
    int *ring_pend = ring_left + (size_t)RU * R;
    if (!ring_left) return -2;

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
        for (j = 0; R && j < k->ring_msg_ptr[R]; j++) {
            if (k->ovh[k->ring_src[j]] > 0.0) ovh_msgs[k->ring_src[j]]++;
            if (k->ovh[k->ring_dst[j]] > 0.0) ovh_msgs[k->ring_dst[j]]++;
        }
        for (d = 0; d < nd; d++) total_ovh += (long long)ovh_msgs[d] * U;
    }

    /* queues and transfer records (a block of its own: sizes known only now) */
    const size_t dev_items = UN * NPH + (size_t)total_ovh, chan_items = (size_t)total_msgs;
    size_t need2 = room(sizeof(Xfer), chan_items) + room(nf, nc) + room(nf, nc)
                 + room(1, il ? slot_base[nd] : 0) + room(1, NR) + room(sizeof(uint64_t), (NR + 63) / 64);
    if (PQ) need2 += room(sizeof(Heap), NR) + room(sizeof(Item), dev_items + nd) + room(sizeof(Item), dev_items + 1)
                   + room(sizeof(Item), chan_items + nc);
    else need2 += room(ni, dev_items + chan_items) + room(ni, NR) + room(ni, NR);
    Arena ar2 = {work_take(w, 1, need2), 0, need2};
    if (!ar2.base) return -2;
    Xfer *xf = TAKE(&ar2, Xfer, chan_items);
    double *ch_bytes_out = TAKE(&ar2, double, nc), *ch_busy_out = TAKE(&ar2, double, nc);
    char *active = TAKE(&ar2, char, NR);
    char *opened = TAKE(&ar2, char, il ? slot_base[nd] : 0);  /* interleaved: forward slots opened per device */
    const int n_words = (NR + 63) / 64;
    uint64_t *dirty = TAKE(&ar2, uint64_t, n_words);
    Heap *q = NULL;
    Item *stash = NULL;
    int *fq = NULL, *fq_head = NULL, *fq_tail = NULL;
    if (il) memset(opened, 0, (size_t)(slot_base[nd] > 0 ? slot_base[nd] : 1));

    /* ---- state init */
    if (PQ) {
        q = TAKE(&ar2, Heap, NR);
        Item *dev_mem = TAKE(&ar2, Item, dev_items + nd);
        stash = TAKE(&ar2, Item, dev_items + 1);
        Item *chan_mem = TAKE(&ar2, Item, chan_items + nc);
        for (d = 0; d < nd; d++) {
            q[d].a = dev_mem; q[d].n = 0;
            dev_mem += (size_t)U * NPH * ops_on[d] + (size_t)U * ovh_msgs[d] + 1;
        }
        for (j = 0; j < nc; j++) { q[nd + j].a = chan_mem; q[nd + j].n = 0; chan_mem += (size_t)ch_msgs[j] * U + 1; }
    } else {
        fq = TAKE(&ar2, int, dev_items + chan_items);
        fq_head = TAKE(&ar2, int, NR);
        fq_tail = TAKE(&ar2, int, NR);
        int at = 0;
        for (d = 0; d < nd; d++) { fq_head[d] = fq_tail[d] = at; at += U * NPH * ops_on[d] + U * ovh_msgs[d]; }
        for (j = 0; j < nc; j++) { fq_head[nd + j] = fq_tail[nd + j] = at; at += ch_msgs[j] * U; }
    }
    for (j = 0; j < nc; j++) ch_bytes_out[j] = ch_busy_out[j] = 0.0;
    memset(active, 0, (size_t)NR);
    memset(dirty, 0, sizeof(uint64_t) * (size_t)n_words);
    events_h->a = ev_items; events_h->n = 0;

    int n_upd = 0, n_w = 0;
    for (i = 0; i < n; i++) { n_upd += k->has_update[i] ? 1 : 0; n_w += zb ? hw[i] : 0; }
    for (u = 0; u < U; u++) {
        int *dp = dep + (size_t)u * NPH * N2;
        for (i = 0; i < n; i++) {
            dp[i] = k->par_ptr[i + 1] - k->par_ptr[i];
            dp[N2 + i] = 1 + (k->ch_ptr[i + 1] - k->ch_ptr[i]);
            dp[2 * N2 + i] = k->upd_step ? U : 1;
        }
        for (i = 0; R && i < n; i++) if (k->ring_of[i] >= 0) dp[2 * N2 + i] = 1;  /* released by its ring */
        if (NPH > WGT) for (i = 0; i < n; i++) dp[3 * N2 + i] = 2;  /* W after its own B and its gate */
        unit_left[u] = n + (training ? n + n_w + (k->upd_step ? 0 : n_upd) : 0);
    }
    int step_left = (training && k->upd_step) ? n_upd : 0;
    /* per ring unit and ring: member backwards still to finish, then messages still to arrive */
    for (u = 0; u < RU; u++)
        for (j = 0; j < R; j++) { ring_left[u * R + j] = k->ring_count[j] * (k->upd_step ? U : 1);
                                  ring_pend[u * R + j] = 0; }
    for (d = 0; d < nd; d++) {
        busy[d] = 0.0; until[d] = 0.0; coll_on[d] = 0; mem[d] = 0.0; open_count[d] = 0; input_dev[d] = 0;
    }
    const int pace_on = k->n_sr > 0 || k->ring_talone != NULL;  /* else processor sharing's state is never read */
    if (pace_on) {
        for (d = 0; d < nd; d++) in_sr[d] = 0;
        for (j = 0; j < k->n_sr; j++)
            for (i = k->sr_ptr[j]; i < k->sr_ptr[j + 1]; i++) in_sr[k->sr_dev[i]] = 1;
        for (j = 0; j < nc; j++) { pxf[j] = -1; pheld[j] = 0; }
        for (j = 0; j < NR; j++) { pwork[j] = pmark[j] = pend[j] = 0.0; ppace[j] = 1.0; pev[j] = 0; }
    }
    for (i = 0; i < n; i++) mem[place[i]] += k->static_mem[i];
    for (d = 0; d < nd; d++) peak[d] = mem[d];
    for (j = 0; j < k->n_inputs; j++) input_dev[place[k->input_ops[j]]] = 1;

    const double *prio = k->prio;
    const int *cap = k->cap;
    if (k->stage_caps) {
        /* 1F1B limits: used devices ordered by their first op are stages 0..p-1; stage s holds p - s */
        for (d = 0; d < nd; d++) cap_buf[d] = stage_of[d] >= 0 ? p_used - stage_of[d] : 0;
        cap = cap_buf;
    }
    if (il) {
        /* Megatron's warm-up plus one (micro-batch, chunk) pairs; one chunk: 1F1B's p - s */
        for (d = 0; d < nd; d++) {
            const int r = stage_of[d], vd = vper[d], wu = 2 * (p_used - r - 1) + (vd - 1) * p_used;
            cap_buf[d] = r < 0 ? 0 : vd == 1 ? p_used - r : (wu < U * vd ? wu : U * vd) + 1;
        }
        cap = cap_buf;
    }
    const int track_groups = cap != NULL || zb;
    if (track_groups) {
        memset(done_on, 0, sizeof(int) * UG);
        memset(fdone_on, 0, sizeof(int) * UG);
        memset(is_open, 0, UG);
    }

    Sim S = {
        .k = k, .place = place, .n = n, .nd = nd, .nc = nc, .U = U, .E = E, .training = training,
        .fd_ptr = fd_ptr, .fd_dev = fd_dev, .fd_consumers = fd_consumers, .bd_ptr = bd_ptr, .bd_dev = bd_dev,
        .n_local = n_local, .fd_bytes = fd_bytes, .bd_bytes = bd_bytes, .grad_out = grad_out, .grad_in = grad_in,
        .dur = dur, .hw = hw,
        .grp_of = grp_of, .grp_size = grp_size, .stage_of = stage_of, .dev_ptr = dev_ptr, .dev_ops = dev_ops,
        .input_dev = input_dev, .G = G, .R = R, .p_used = p_used, .prio = prio, .cap = cap,
        .track_groups = track_groups,
        .ilo = {n, NPH, p_used, place, lv, vper, (double)(U + p_used) * (double)(n + 1)},
        .vper = vper, .slot_base = slot_base, .next_f = next_f, .opened = opened,
        .sh = sh, .ovh_base = (int)UT,
        .dep = dep, .act_refs = act_refs, .recv_refs = recv_refs, .unit_left = unit_left, .done_on = done_on,
        .fdone_on = fdone_on, .open_count = open_count, .ring_left = ring_left, .ring_pend = ring_pend,
        .active = active, .is_open = is_open,
        .busy = busy, .until = until, .mem = mem, .peak = peak, .ch_bytes_out = ch_bytes_out, .ch_busy_out = ch_busy_out,
        .q = q, .events = events_h, .fq = fq, .fq_head = fq_head, .fq_tail = fq_tail, .stash = stash,
        .dirty = dirty, .n_words = n_words, .xf = xf,
        .n_xf = 0, .admitted = 0, .units_in_flight = 0, .oldest = 0, .step_left = step_left, .qseq = 0, .seq = 0,
        .now = 0.0,
        .pace_on = pace_on, .in_sr = in_sr, .coll_on = coll_on, .pwork = pwork,
        .pmark = pmark, .ppace = ppace, .pend = pend, .pev = pev, .pxf = pxf, .pheld = pheld,
    };
    run_events(&S, SCHED, RINGS, PQ, PQ && (prio || il));

    int status = 0;
    if (S.admitted < U || S.step_left) status = -1;
    for (u = 0; u < U && status == 0; u++) if (unit_left[u]) status = -1;

    out[0] = S.now;
    out[1] = (double)S.n_xf;
    for (d = 0; d < nd; d++) { out[2 + d] = busy[d]; out[2 + nd + d] = peak[d]; }
    for (j = 0; j < nc; j++) { out[2 + 2 * nd + j] = ch_bytes_out[j]; out[2 + 2 * nd + nc + j] = ch_busy_out[j]; }
    return status;
}

/* Interleaved 1F1B and zb-h1 always queue by priority (their orders, or arrival order among equal keys); the
 * static schedules by priority when they have one (gpipe, 1f1b), else in arrival order (thesis). */
static int simulate_any(const KernelObject *k, const int *place, double *out, Work *w) {
    switch (k->sched) {
    case SCHED_INTERLEAVED: return simulate_kind(k, place, out, w, SCHED_INTERLEAVED, 0, 1);
    case SCHED_ZB: return simulate_kind(k, place, out, w, SCHED_ZB, 0, 1);
    default: return k->prio ? simulate_kind(k, place, out, w, SCHED_STATIC, 0, 1)
                            : simulate_kind(k, place, out, w, SCHED_STATIC, 0, 0);
    }
}

/* A placement with split genes: expanded into virtual ops, simulated as a problem of its own (a copy of
 * the kernel's header pointing at the expansion, priorities taken per virtual op from its op's). Only the
 * static schedules take splits (simulate.Simulator refuses the others first; -4 here). */
static int simulate_sharded(const KernelObject *k, const int *place, double *out, Work *w) {
    const int n = k->n, nd = k->nd, T = k->sh.T;
    for (int i = 0; i < n; i++) {
        const int g = place[i];
        if (g < 0 || g >= nd + T || (g >= nd && k->sh.entry[(size_t)i * T + (g - nd)] < 0)) return -3;
    }
    if (k->sched != SCHED_STATIC) return -4;
    Expanded x;
    int status = expand(n, nd, k->par_ptr, k->par_idx, k->par_bytes, k->par_grad, k->fwd, k->bwd, k->bwd_w,
                        k->upd, k->has_update, k->has_w, k->out_bytes, k->static_mem, place, &k->sh,
                        !k->fwd_only, &x);
    if (status) return status;
    KernelObject v = *k;
    double *prio = NULL;
    if (k->prio) {
        const int rows = k->U * k->n_ph;
        prio = malloc(sizeof(double) * (size_t)rows * (x.m > 0 ? x.m : 1));
        if (!prio) { expanded_free(&x); return -2; }
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < x.m; j++) prio[(size_t)r * x.m + j] = k->prio[(size_t)r * n + x.op[j]];
    }
    v.n = x.m; v.n_edges = x.E; v.n_inputs = x.n_inputs; v.input_ops = x.input_ops;
    v.par_ptr = x.par_ptr; v.par_idx = x.par_idx; v.par_bytes = x.par_bytes; v.par_grad = x.par_grad;
    v.ch_ptr = x.ch_ptr; v.ch_idx = x.ch_idx; v.ch_bytes = x.ch_bytes; v.ch_grad = x.ch_grad;
    v.fwd = x.fwd; v.bwd = x.bwd; v.bwd_w = x.bwdw; v.upd = x.upd; v.has_update = x.has_update; v.has_w = x.has_w;
    v.out_bytes = x.out_bytes; v.static_mem = x.static_mem; v.prio = prio;
    v.ring_of = x.ring_of; v.ring_first = x.ring_first; v.ring_count = x.ring_count;
    v.ring_msg_ptr = x.ring_msg_ptr; v.ring_src = x.ring_src; v.ring_dst = x.ring_dst; v.ring_bytes = x.ring_bytes;
    v.ring_talone = x.ring_talone; v.ring_tbusy = x.ring_tbusy;
    v.n_rings = x.n_rings;
    v.grad_in0 = v.grad_out0 = NULL;  /* the expansion's edges: summed per placement */
    v.sh.T = 0;
    status = v.prio ? simulate_kind(&v, x.place, out, w, SCHED_STATIC, 1, 1)
                    : simulate_kind(&v, x.place, out, w, SCHED_STATIC, 1, 0);
    free(prio);
    expanded_free(&x);
    return status;
}

static int simulate(const KernelObject *k, const int *place, double *out, Work *w) {
    if (k->sh.T > 0)
        for (int i = 0; i < k->n; i++)
            if (place[i] >= k->nd) return simulate_sharded(k, place, out, w);
    return simulate_any(k, place, out, w);
}

/* ------------------------------------------------------------ Python glue */

/* Kernel(**arguments): every argument by keyword, described by one row of KERNEL_ARGS below. A row names
 * the argument, says what it is (a C int, or a contiguous array of int32, float64 or uint8 items), when it
 * is needed, how many items an array must have at least, and where in the KernelObject it goes. Adding an
 * argument is adding a field and a row; Kernel_init checks names, presence, types and lengths from the
 * table, then the relations between arguments that no single row can state. */

typedef enum { ARG_INT, ARG_I32, ARG_F64, ARG_U8 } ArgType;

typedef enum {
    NEED_ALWAYS,  /* must be given (an array: not None) */
    NEED_NEVER,   /* may be left out or None */
    NEED_CURVES,  /* the transfer curves: needed with curve_ptr, refused without it */
    NEED_SPLITS,  /* the split table: needed when n_splits > 0, refused otherwise */
} ArgNeed;

typedef enum {  /* an array's least number of items */
    LEN_ANY, LEN_N, LEN_N1, LEN_N_ND, LEN_ND_ND, LEN_ND, LEN_NC, LEN_NC1, LEN_PRIO,
    LEN_POINTS,   /* curve points: curve_ptr[n_ch] */
    LEN_T, LEN_T1, LEN_N_T,
    LEN_ROWS,     /* shard rows: past the largest split_entry's shards */
} ArgLen;

typedef struct {
    const char *name;
    ArgType type;
    ArgNeed need;
    ArgLen len;
    size_t offset;  /* of the int, or of the const pointer to the items, in KernelObject */
} ArgSpec;

#define AT(field) offsetof(KernelObject, field)

/* Scalars come first (the arrays' lengths depend on them); arrays are taken in this order, so a row may
 * depend on the rows before it (LEN_POINTS on curve_ptr, LEN_ROWS on split_ptr and split_entry). */
static const ArgSpec KERNEL_ARGS[] = {
    {"n_ops", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(n)},
    {"n_dev", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(nd)},
    {"n_ch", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(nc)},
    {"units", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(U)},
    {"units_in_flight", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(K)},
    {"forward_only", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(fwd_only)},
    {"admission", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(admission)},
    {"update_per_step", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(upd_step)},
    {"stage_caps", ARG_INT, NEED_ALWAYS, LEN_ANY, AT(stage_caps)},
    {"schedule_kind", ARG_INT, NEED_NEVER, LEN_ANY, AT(sched)},          /* default SCHED_STATIC */
    {"virtual_stages", ARG_INT, NEED_NEVER, LEN_ANY, AT(vstages)},       /* default 1 */
    {"n_splits", ARG_INT, NEED_NEVER, LEN_ANY, AT(sh.T)},                /* default 0: no split table */
    {"par_ptr", ARG_I32, NEED_ALWAYS, LEN_N1, AT(par_ptr)},
    {"par_idx", ARG_I32, NEED_ALWAYS, LEN_ANY, AT(par_idx)},
    {"par_bytes", ARG_F64, NEED_ALWAYS, LEN_ANY, AT(par_bytes)},
    {"par_grad", ARG_F64, NEED_ALWAYS, LEN_ANY, AT(par_grad)},
    {"ch_ptr", ARG_I32, NEED_ALWAYS, LEN_N1, AT(ch_ptr)},
    {"ch_idx", ARG_I32, NEED_ALWAYS, LEN_ANY, AT(ch_idx)},
    {"ch_bytes", ARG_F64, NEED_ALWAYS, LEN_ANY, AT(ch_bytes)},
    {"ch_grad", ARG_F64, NEED_ALWAYS, LEN_ANY, AT(ch_grad)},
    {"fwd", ARG_F64, NEED_ALWAYS, LEN_N_ND, AT(fwd)},
    {"bwd", ARG_F64, NEED_ALWAYS, LEN_N_ND, AT(bwd)},
    {"upd", ARG_F64, NEED_ALWAYS, LEN_N_ND, AT(upd)},
    {"has_update", ARG_U8, NEED_ALWAYS, LEN_N, AT(has_update)},
    {"out_bytes", ARG_F64, NEED_ALWAYS, LEN_N, AT(out_bytes)},
    {"static_mem", ARG_F64, NEED_ALWAYS, LEN_N, AT(static_mem)},
    {"route", ARG_I32, NEED_ALWAYS, LEN_ND_ND, AT(route)},
    {"ch_latency", ARG_F64, NEED_ALWAYS, LEN_NC, AT(ch_lat)},
    {"ch_inv_rate", ARG_F64, NEED_ALWAYS, LEN_NC, AT(ch_inv)},
    {"min_transfer", ARG_F64, NEED_ALWAYS, LEN_ND, AT(min_xfer)},
    {"input_ops", ARG_I32, NEED_ALWAYS, LEN_ANY, AT(input_ops)},
    {"msg_overhead", ARG_F64, NEED_ALWAYS, LEN_ND, AT(ovh)},
    {"priority", ARG_F64, NEED_NEVER, LEN_PRIO, AT(prio)},               /* None: FIFO */
    {"device_cap", ARG_I32, NEED_NEVER, LEN_ND, AT(cap)},                /* None: no caps */
    {"bwd_w", ARG_F64, NEED_NEVER, LEN_N_ND, AT(bwd_w)},                 /* needed under zb-h1 */
    {"has_w", ARG_U8, NEED_NEVER, LEN_N, AT(has_w)},                     /* needed under zb-h1 */
    {"curve_ptr", ARG_I32, NEED_NEVER, LEN_NC1, AT(cv_ptr)},             /* None: no transfer curves */
    {"curve_bytes", ARG_F64, NEED_CURVES, LEN_POINTS, AT(cv_b)},
    {"curve_time", ARG_F64, NEED_CURVES, LEN_POINTS, AT(cv_t)},
    {"split_dim", ARG_I32, NEED_SPLITS, LEN_T, AT(sh.opt_dim)},
    {"split_ptr", ARG_I32, NEED_SPLITS, LEN_T1, AT(sh.opt_ptr)},
    {"split_dev", ARG_I32, NEED_SPLITS, LEN_ANY, AT(sh.opt_dev)},
    {"split_entry", ARG_I32, NEED_SPLITS, LEN_N_T, AT(sh.entry)},
    {"shard_blo", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.blo)},
    {"shard_bhi", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.bhi)},
    {"shard_cf", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.cf)},
    {"shard_fwd", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.fwd)},
    {"shard_bwd", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.bwd)},
    {"shard_upd", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.upd)},
    {"shard_static", ARG_F64, NEED_SPLITS, LEN_ROWS, AT(sh.stat)},
    {"allreduce_bytes", ARG_F64, NEED_SPLITS, LEN_N, AT(sh.ar_bytes)},
    {"gather_rate", ARG_F64, NEED_SPLITS, LEN_ND, AT(sh.gather_rate)},
    {"allreduce_alone", ARG_F64, NEED_NEVER, LEN_N_T, AT(sh.ar_alone)},   /* None: no measured all-reduce */
    {"allreduce_busy", ARG_F64, NEED_NEVER, LEN_N_T, AT(sh.ar_busy)},
    {"shared_ptr", ARG_I32, NEED_NEVER, LEN_ANY, AT(sr_ptr)},             /* None: nothing shared */
    {"shared_dev", ARG_I32, NEED_NEVER, LEN_ANY, AT(sr_dev)},
    {"shared_demand", ARG_F64, NEED_NEVER, LEN_ANY, AT(sr_dem)},
    {"shared_cap", ARG_F64, NEED_NEVER, LEN_ANY, AT(sr_cap)},
    {"shared_collective", ARG_F64, NEED_NEVER, LEN_ANY, AT(sr_coll)},  /* None: collectives take no share */
};
#undef AT
#define N_ARGS ((int)(sizeof(KERNEL_ARGS) / sizeof(KERNEL_ARGS[0])))

static int arg_index(const char *name) {
    for (int a = 0; a < N_ARGS; a++)
        if (strcmp(KERNEL_ARGS[a].name, name) == 0) return a;
    return -1;
}

static int *arg_int(KernelObject *self, const ArgSpec *a) { return (int *)((char *)self + a->offset); }
static const void **arg_ptr(KernelObject *self, const ArgSpec *a) { return (const void **)((char *)self + a->offset); }

/* What the table's relations need beyond the scalars: found while the arrays are taken. */
typedef struct { Py_ssize_t points, rows; Py_ssize_t count[sizeof(KERNEL_ARGS) / sizeof(KERNEL_ARGS[0])]; } ArgSizes;

static Py_ssize_t arg_min_len(const KernelObject *self, ArgLen len, const ArgSizes *z) {
    const Py_ssize_t n = self->n, nd = self->nd, nc = self->nc, T = self->sh.T;
    switch (len) {
    case LEN_N: return n;
    case LEN_N1: return n + 1;
    case LEN_N_ND: return n * nd;
    case LEN_ND_ND: return nd * nd;
    case LEN_ND: return nd;
    case LEN_NC: return nc;
    case LEN_NC1: return nc + 1;
    case LEN_PRIO: return (Py_ssize_t)self->U * self->n_ph * n;
    case LEN_POINTS: return z->points;
    case LEN_T: return T;
    case LEN_T1: return T + 1;
    case LEN_N_T: return n * T;
    case LEN_ROWS: return z->rows;
    default: return 0;
    }
}

/* A contiguous array of ``type`` items with at least ``min_len`` of them, kept as a view until dealloc. */
static int take_view(KernelObject *self, PyObject *obj, ArgType type, Py_ssize_t min_len, const void **ptr,
                     Py_ssize_t *count, const char *name) {
    const char fmt = type == ARG_F64 ? 'd' : type == ARG_I32 ? 'i' : 'B';
    Py_buffer *v = &self->views[self->nviews];
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    self->nviews++;
    char got = v->format ? v->format[strlen(v->format) - 1] : 'B';
    Py_ssize_t item = fmt == 'd' ? 8 : fmt == 'i' ? 4 : 1;
    int ok = v->itemsize == item && (got == fmt || (fmt == 'i' && (got == 'l' && item == sizeof(long)))
                                      || (fmt == 'B' && (got == 'b' || got == '?')));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "Kernel(): %s: expected a contiguous array of '%c' items, got '%s'", name,
                     fmt, v->format ? v->format : "?");
        return -1;
    }
    if (v->len / item < min_len) {
        PyErr_Format(PyExc_ValueError, "Kernel(): %s: expected at least %zd items, got %zd", name, min_len,
                     v->len / item);
        return -1;
    }
    *ptr = v->buf;
    *count = v->len / item;
    return 0;
}

/* Whether a row's group is in use: the curves with curve_ptr, the split table with n_splits > 0. */
static int arg_group_on(const KernelObject *self, ArgNeed need) {
    return need == NEED_CURVES ? self->cv_ptr != NULL : need == NEED_SPLITS ? self->sh.T > 0 : 1;
}

/* Takes the arrays of rows [from, to) of the table. */
static int take_rows(KernelObject *self, PyObject *const *given, int from, int to, ArgSizes *z) {
    for (int a = from; a < to; a++) {
        const ArgSpec *s = &KERNEL_ARGS[a];
        PyObject *obj = given[a];
        if (s->type == ARG_INT) continue;
        if (!arg_group_on(self, s->need)) {
            if (obj && obj != Py_None) {
                PyErr_Format(PyExc_TypeError, "Kernel(): %s is given without %s", s->name,
                             s->need == NEED_CURVES ? "curve_ptr" : "n_splits > 0");
                return -1;
            }
            continue;
        }
        if (!obj || obj == Py_None) {
            if (s->need == NEED_NEVER) continue;
            PyErr_Format(PyExc_TypeError, "Kernel(): missing required argument '%s'%s", s->name,
                         s->need == NEED_CURVES ? " (curve_ptr needs it)" : s->need == NEED_SPLITS
                         ? " (n_splits > 0 needs it)" : "");
            return -1;
        }
        if (take_view(self, obj, s->type, arg_min_len(self, s->len, z), arg_ptr(self, s), &z->count[a], s->name))
            return -1;
    }
    return 0;
}

static void Kernel_dealloc(KernelObject *self) {
    for (int i = 0; i < self->nviews; i++) PyBuffer_Release(&self->views[i]);
    PyMem_Free(self->views);
    work_free(&self->spare);
    PyMem_Free(self->capacity);
    PyMem_Free(self->grad_in0);
    PyMem_Free(self->grad_out0);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The keywords into ``given`` (borrowed, NULL where absent) and the scalars into the object. */
static int parse_keywords(KernelObject *self, PyObject *args, PyObject *kwds, PyObject **given) {
    if (args && PyTuple_GET_SIZE(args) > 0) {
        PyErr_SetString(PyExc_TypeError, "Kernel() takes keyword arguments only");
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwds && PyDict_Next(kwds, &pos, &key, &value)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!name) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Kernel(): keywords must be strings");
            return -1;
        }
        const int a = arg_index(name);
        if (a < 0) {
            PyErr_Format(PyExc_TypeError, "Kernel() got an unexpected keyword argument '%s'", name);
            return -1;
        }
        given[a] = value;
    }
    for (int a = 0; a < N_ARGS; a++) {
        const ArgSpec *s = &KERNEL_ARGS[a];
        if (s->type != ARG_INT) continue;
        if (!given[a]) {
            if (s->need == NEED_NEVER) continue;  /* the default set by Kernel_init stays */
            PyErr_Format(PyExc_TypeError, "Kernel(): missing required argument '%s'", s->name);
            return -1;
        }
        const long v = PyLong_AsLong(given[a]);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Kernel(): %s must be an int that fits in 32 bits", s->name);
            return -1;
        }
        if (v < INT_MIN || v > INT_MAX) {
            PyErr_Format(PyExc_OverflowError, "Kernel(): %s is out of range", s->name);
            return -1;
        }
        *arg_int(self, s) = (int)v;
    }
    return 0;
}

static int Kernel_init(KernelObject *self, PyObject *args, PyObject *kwds) {
    PyObject *given[sizeof(KERNEL_ARGS) / sizeof(KERNEL_ARGS[0])] = {NULL};
    ArgSizes z;
    memset(&z, 0, sizeof(z));
    if (self->views) { PyErr_SetString(PyExc_RuntimeError, "Kernel is already initialised"); return -1; }
    self->views = PyMem_Calloc((size_t)N_ARGS, sizeof(Py_buffer));
    if (!self->views) { PyErr_NoMemory(); return -1; }
    self->sched = SCHED_STATIC;
    self->vstages = 1;
    memset(&self->sh, 0, sizeof(self->sh));
    self->cv_ptr = NULL;
    self->ring_of = NULL;
    self->ring_talone = self->ring_tbusy = NULL;
    self->n_rings = 0;
    self->sr_ptr = self->sr_dev = NULL;
    self->sr_dem = self->sr_cap = self->sr_coll = NULL;
    self->n_sr = 0;
    if (parse_keywords(self, args, kwds, given)) return -1;
    if (self->sched < SCHED_STATIC || self->sched > SCHED_ZB || self->vstages < 1) {
        PyErr_SetString(PyExc_ValueError, "Kernel(): invalid schedule_kind or virtual_stages");
        return -1;
    }
    self->n_ph = self->sched == SCHED_ZB ? 4 : 3;
    const int n = self->n, nd = self->nd, nc = self->nc;
    if (n < 1 || nd < 1 || nc < 0 || self->U < 1 || self->K < 1) {
        PyErr_SetString(PyExc_ValueError, "Kernel(): invalid sizes (n_ops, n_dev, units and units_in_flight must be "
                                          "at least 1, n_ch at least 0)");
        return -1;
    }
    if (self->sh.T < 0) { PyErr_SetString(PyExc_ValueError, "Kernel(): n_splits must be >= 0"); return -1; }

    /* the arrays in table order, in three steps: each step's lengths follow from the checks before it */
    const int points_from = arg_index("curve_bytes"), rows_from = arg_index("shard_blo");
    if (take_rows(self, given, 0, points_from, &z)) return -1;
    if (self->sched == SCHED_ZB && (!self->bwd_w || !self->has_w)) {
        PyErr_SetString(PyExc_ValueError, "Kernel(): schedule_kind zb needs bwd_w and has_w");
        return -1;
    }
    if (self->cv_ptr) {  /* every channel: no points, or at least two inside the point arrays */
        z.points = self->cv_ptr[nc];
        for (int j = 0; j < nc; j++) {
            int m = self->cv_ptr[j + 1] - self->cv_ptr[j];
            if (self->cv_ptr[j] < 0 || m < 0 || m == 1 || self->cv_ptr[j + 1] > z.points || self->cv_ptr[0] != 0) {
                PyErr_SetString(PyExc_ValueError, "Kernel(): curve_ptr: bad offsets");
                return -1;
            }
        }
    }
    if (take_rows(self, given, points_from, rows_from, &z)) return -1;
    if (self->sh.T > 0) {
        ShardTable *t = &self->sh;
        const int T = t->T;
        const Py_ssize_t devs = z.count[arg_index("split_dev")];
        for (int j = 0; j < T; j++) {
            const int kk = t->opt_ptr[j + 1] - t->opt_ptr[j];
            if (t->opt_ptr[0] != 0 || kk < 1 || kk > 64 || t->opt_ptr[j + 1] > devs) {
                PyErr_SetString(PyExc_ValueError, "Kernel(): split_ptr: bad offsets (1 to 64 devices per split)");
                return -1;
            }
        }
        for (Py_ssize_t j = 0; j < devs; j++)
            if (t->opt_dev[j] < 0 || t->opt_dev[j] >= nd) {
                PyErr_SetString(PyExc_ValueError, "Kernel(): split_dev: a device index out of range");
                return -1;
            }
        for (Py_ssize_t j = 0; j < (Py_ssize_t)n * T; j++) {
            const int kk = t->opt_ptr[j % T + 1] - t->opt_ptr[j % T];
            if (t->entry[j] >= 0 && t->entry[j] + kk > z.rows) z.rows = t->entry[j] + kk;
        }
        t->bwdw = NULL;
    }
    if (take_rows(self, given, rows_from, N_ARGS, &z)) return -1;
    if (!self->sh.ar_alone != !self->sh.ar_busy) {
        PyErr_SetString(PyExc_ValueError, "Kernel(): allreduce_alone and allreduce_busy go together");
        return -1;
    }
    if (self->sr_ptr || self->sr_dev || self->sr_dem || self->sr_cap) {  /* all four, consistent */
        if (!self->sr_ptr || !self->sr_dev || !self->sr_dem || !self->sr_cap) {
            PyErr_SetString(PyExc_ValueError, "Kernel(): shared_ptr, shared_dev, shared_demand and shared_cap go together");
            return -1;
        }
        const Py_ssize_t np1 = z.count[arg_index("shared_ptr")], nm = z.count[arg_index("shared_dev")];
        const int ns = (int)np1 - 1;
        if (ns < 1 || z.count[arg_index("shared_cap")] < ns || z.count[arg_index("shared_demand")] < nm
            || self->sr_ptr[0] != 0) {
            PyErr_SetString(PyExc_ValueError, "Kernel(): shared_*: bad sizes");
            return -1;
        }
        for (int r = 0; r < ns; r++) {
            if (self->sr_ptr[r + 1] < self->sr_ptr[r] || self->sr_ptr[r + 1] > nm || !(self->sr_cap[r] > 0.0)) {
                PyErr_SetString(PyExc_ValueError, "Kernel(): shared_ptr: bad offsets, or a capacity <= 0");
                return -1;
            }
        }
        if (self->sr_coll) {
            if (z.count[arg_index("shared_collective")] < ns) {
                PyErr_SetString(PyExc_ValueError, "Kernel(): shared_collective: one demand per resource");
                return -1;
            }
            for (int r = 0; r < ns; r++)
                if (!(self->sr_coll[r] >= 0.0)) {
                    PyErr_SetString(PyExc_ValueError, "Kernel(): shared_collective: a demand < 0");
                    return -1;
                }
        }
        for (Py_ssize_t j = 0; j < nm; j++)
            if (self->sr_dev[j] < 0 || self->sr_dev[j] >= nd || !(self->sr_dem[j] > 0.0)) {
                PyErr_SetString(PyExc_ValueError, "Kernel(): shared_dev: a device index out of range, or a demand <= 0");
                return -1;
            }
        self->n_sr = ns;
    }

    self->has_ovh = 0;
    for (int d = 0; d < nd; d++) {
        if (!(self->ovh[d] >= 0.0)) {
            PyErr_SetString(PyExc_ValueError, "Kernel(): msg_overhead must be >= 0");
            return -1;
        }
        if (self->ovh[d] > 0.0) self->has_ovh = 1;
    }
    self->n_edges = self->par_ptr[n];
    if (self->ch_ptr[n] != self->n_edges) {
        PyErr_SetString(PyExc_ValueError, "Kernel(): parent and child edge counts differ");
        return -1;
    }
    self->n_inputs = (int)z.count[arg_index("input_ops")];
    self->grad_in0 = PyMem_Malloc(sizeof(double) * (size_t)n);
    self->grad_out0 = PyMem_Malloc(sizeof(double) * (size_t)n);
    if (!self->grad_in0 || !self->grad_out0) { PyErr_NoMemory(); return -1; }
    for (int i = 0; i < n; i++) {  /* the same sums, in the same order, as simulate_kind's without them */
        self->grad_in0[i] = self->grad_out0[i] = 0.0;
        for (int j = self->ch_ptr[i]; j < self->ch_ptr[i + 1]; j++) self->grad_in0[i] += self->ch_grad[j];
        for (int j = self->par_ptr[i]; j < self->par_ptr[i + 1]; j++) self->grad_out0[i] += self->par_grad[j];
    }
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
    else if (status == -4) PyErr_SetString(PyExc_ValueError, "split ops run under the static schedules only");
    else PyErr_SetString(PyExc_ValueError, "placement names a device index out of range");
    return NULL;
}

/* The kernel's kept scratch for one call (or none, if another thread holds it), and back after the call: a
 * call on one placement then allocates nothing. Both run with the GIL held, so no two calls hold it at once. */
static Work take_spare(KernelObject *self) {
    Work w = self->spare;
    memset(&self->spare, 0, sizeof(Work));
    return w;
}

static void put_spare(KernelObject *self, Work *w) {
    if (self->spare.buf[0] || self->spare.buf[1]) work_free(w);
    else self->spare = *w;
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
    Work w = take_spare(self);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < count && status == 0; r++)
        status = simulate(self, (const int *)pv.buf + r * self->n, (double *)ov.buf + r * width, &w);
    Py_END_ALLOW_THREADS
    put_spare(self, &w);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&ov);
    if (status != 0) return raise_status(status);
    Py_RETURN_NONE;
}

static PyObject *Kernel_run(KernelObject *self, PyObject *args) { return run_impl(self, args, 0); }
static PyObject *Kernel_run_many(KernelObject *self, PyObject *args) { return run_impl(self, args, 1); }

/* ------------------------------------------------------------ the objective */

enum { PENALTY_THESIS = 0, PENALTY_PLACETO = 1, PENALTY_INFEASIBLE = 2 };

/* numpy's sum of a float64 vector (pairwise summation, eight accumulators per block of up to 128 items; what
 * np.add.reduce does on a contiguous array), so that the objective here equals problem.Problem.objective's bit
 * for bit; tests/test_floor.py checks it against numpy on overflows of up to 300 devices. */
static double np_sum(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double res = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8], res;
        Py_ssize_t i;
        for (int j = 0; j < 8; j++) r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return np_sum(a, n2) + np_sum(a + n2, n - n2);
}

/* Problem.objective of a result row [makespan, transfers, busy[nd], peak[nd], ...]: seconds per batch, plus the
 * memory penalty where a device's peak passes its capacity (the same operations in the same order). */
static double objective_of(const KernelObject *k, const double *row, double *over) {
    const int nd = k->nd;
    const double *peak = row + 2 + nd;
    const double t = row[0] / k->batches;
    int any = 0;
    double top = 0.0;
    for (int d = 0; d < nd; d++) {
        const double x = peak[d] - k->capacity[d];
        over[d] = x > 0.0 ? x : 0.0;
        if (over[d] != 0.0) any = 1;
        if (d == 0 || over[d] > top) top = over[d];
    }
    if (!any) return t;
    if (k->penalty == PENALTY_THESIS) return t + np_sum(over, nd) * (1e-3 / 1e6);
    if (k->penalty == PENALTY_PLACETO) return t + top * (2.0 / 1e9);
    return 1e6 + t + np_sum(over, nd) / 1e9;
}

/* set_objective(capacity float64[nd], batches, penalty): what objective() and objectives() compute. */
static PyObject *Kernel_set_objective(KernelObject *self, PyObject *args) {
    PyObject *capobj;
    int batches, penalty;
    if (!PyArg_ParseTuple(args, "Oii", &capobj, &batches, &penalty)) return NULL;
    if (batches < 1 || penalty < PENALTY_THESIS || penalty > PENALTY_INFEASIBLE) {
        PyErr_SetString(PyExc_ValueError, "set_objective: batches must be >= 1 and penalty 0 (thesis), 1 (placeto) "
                                          "or 2 (infeasible)");
        return NULL;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(capobj, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    const char got = v.format ? v.format[strlen(v.format) - 1] : 'B';
    if (v.itemsize != 8 || got != 'd' || v.len != (Py_ssize_t)self->nd * 8) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "set_objective: capacity must be %d float64 values", self->nd);
        return NULL;
    }
    double *cap = PyMem_Malloc(sizeof(double) * (size_t)self->nd);
    if (!cap) { PyBuffer_Release(&v); return PyErr_NoMemory(); }
    memcpy(cap, v.buf, sizeof(double) * (size_t)self->nd);
    PyBuffer_Release(&v);
    PyMem_Free(self->capacity);
    self->capacity = cap;
    self->batches = (double)batches;
    self->penalty = penalty;
    Py_RETURN_NONE;
}

/* objective(placement int32[n]) -> float: one placement's objective, nothing else built. The placement is
 * checked as run() checks it (an int32 vector of n device indices, else ValueError or TypeError). */
static PyObject *Kernel_objective(KernelObject *self, PyObject *pl) {
    if (!self->capacity) { PyErr_SetString(PyExc_RuntimeError, "objective: call set_objective first"); return NULL; }
    Py_buffer pv;
    Py_ssize_t count;
    if (view_placements(pl, &pv, self->n, &count) < 0) return NULL;
    if (count != 1) {
        PyBuffer_Release(&pv);
        PyErr_SetString(PyExc_ValueError, "objective() takes exactly one placement");
        return NULL;
    }
    const Py_ssize_t width = 2 + 2 * (Py_ssize_t)self->nd + 2 * (Py_ssize_t)self->nc;
    double local[256], *row = local;
    if (width + self->nd > 256 && !(row = PyMem_Malloc(sizeof(double) * (size_t)(width + self->nd)))) {
        PyBuffer_Release(&pv);
        return PyErr_NoMemory();
    }
    int status;
    double obj = 0.0;
    Work w = take_spare(self);
    Py_BEGIN_ALLOW_THREADS
    status = simulate(self, (const int *)pv.buf, row, &w);
    if (status == 0) obj = objective_of(self, row, row + width);
    Py_END_ALLOW_THREADS
    put_spare(self, &w);
    PyBuffer_Release(&pv);
    if (row != local) PyMem_Free(row);
    if (status != 0) return raise_status(status);
    return PyFloat_FromDouble(obj);
}

/* objectives(placements int32[m, n], out float64[m]): each placement's objective. */
static PyObject *Kernel_objectives(KernelObject *self, PyObject *args) {
    PyObject *pl, *outobj;
    if (!PyArg_ParseTuple(args, "OO", &pl, &outobj)) return NULL;
    if (!self->capacity) { PyErr_SetString(PyExc_RuntimeError, "objectives: call set_objective first"); return NULL; }
    Py_buffer pv, ov;
    Py_ssize_t count;
    if (view_placements(pl, &pv, self->n, &count) < 0) return NULL;
    if (PyObject_GetBuffer(outobj, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&pv);
        return NULL;
    }
    if (ov.itemsize != 8 || ov.len < count * 8) {
        PyBuffer_Release(&pv);
        PyBuffer_Release(&ov);
        PyErr_SetString(PyExc_ValueError, "output buffer must be float64 with room for every objective");
        return NULL;
    }
    const Py_ssize_t width = 2 + 2 * (Py_ssize_t)self->nd + 2 * (Py_ssize_t)self->nc;
    double *row = PyMem_Malloc(sizeof(double) * (size_t)(width + self->nd));
    if (!row) { PyBuffer_Release(&pv); PyBuffer_Release(&ov); return PyErr_NoMemory(); }
    int status = 0;
    Work w = take_spare(self);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < count && status == 0; r++) {
        status = simulate(self, (const int *)pv.buf + r * self->n, row, &w);
        if (status == 0) ((double *)ov.buf)[r] = objective_of(self, row, row + width);
    }
    Py_END_ALLOW_THREADS
    put_spare(self, &w);
    PyMem_Free(row);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&ov);
    if (status != 0) return raise_status(status);
    Py_RETURN_NONE;
}

static PyMethodDef Kernel_methods[] = {
    {"run", (PyCFunction)Kernel_run, METH_VARARGS, "run(placement int32[n], out float64[w])"},
    {"run_many", (PyCFunction)Kernel_run_many, METH_VARARGS, "run_many(placements int32[m, n], out float64[m, w])"},
    {"set_objective", (PyCFunction)Kernel_set_objective, METH_VARARGS,
     "set_objective(capacity float64[nd], batches, penalty 0 thesis | 1 placeto | 2 infeasible)"},
    {"objective", (PyCFunction)Kernel_objective, METH_O, "objective(placement int32[n]) -> float"},
    {"objectives", (PyCFunction)Kernel_objectives, METH_VARARGS, "objectives(placements int32[m, n], out float64[m])"},
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
