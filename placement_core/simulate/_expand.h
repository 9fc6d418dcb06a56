/*
 * A placement with split genes expanded into the task graph it runs (included by _kernel.c).
 *
 * The same construction as shards.expand() in Python, in the same order, with the same floating-point
 * operations: virtual ops (an unsharded op, a split op's shards, gathers before the op that reads them),
 * their parents and children, their costs on their own devices, and the all-reduce rings of batch-split
 * ops with weights. docs/sharding.md explains the semantics.
 */

typedef struct {
    int T;                       /* splits in the table */
    const int *opt_dim, *opt_ptr, *opt_dev, *entry;
    const double *blo, *bhi, *cf, *fwd, *bwd, *bwdw, *upd, *stat, *ar_bytes, *gather_rate;
    /* [n * T] an op's measured all-reduce seconds under a batch split (alone, while a member computes), -1:
     * none, the ring of messages; NULL: no split has a measured curve (shards.allreduce_times) */
    const double *ar_alone, *ar_busy;
} ShardTable;

typedef struct {
    int m, n_inputs, n_rings, n_ring_msgs, E;
    int *place, *op, *par_ptr, *par_idx, *ch_ptr, *ch_idx, *input_ops;
    double *par_bytes, *par_grad, *ch_bytes, *ch_grad;
    double *fwd, *bwd, *bwdw, *upd;                 /* [m * nd], the placed device's entry set */
    double *out_bytes, *static_mem;
    unsigned char *has_update, *has_w;
    int *ring_of;                                   /* [m] the ring of a shard, -1 */
    int *ring_first, *ring_count, *ring_msg_ptr;    /* per ring: its shards, its messages */
    int *ring_src, *ring_dst;
    double *ring_bytes;
    double *ring_talone, *ring_tbusy;               /* per ring: its measured seconds, -1: a ring of messages */
    char *mem;                                      /* one allocation holding everything */
} Expanded;

static void expanded_free(Expanded *x) { free(x->mem); x->mem = NULL; }

/* Virtual ops and edges an expansion may need at most: each op k shards, each (shard, parent edge) a gather. */
static int expand_sizes(int n, int nd, const int *par_ptr, const int *place, const ShardTable *s,
                        int *max_v, int *max_e) {
    long long v = 0, e = 0;
    for (int i = 0; i < n; i++) {
        const int g = place[i];
        const long long k = g < nd ? 1 : s->opt_ptr[g - nd + 1] - s->opt_ptr[g - nd];
        const long long p = par_ptr[i + 1] - par_ptr[i];
        v += k + k * p;
        e += k * p;  /* each shard's entry per parent */
    }
    /* a gather's parents: at most every shard of its producer */
    long long kmax = 1;
    for (int t = 0; t < s->T; t++) if (s->opt_ptr[t + 1] - s->opt_ptr[t] > kmax) kmax = s->opt_ptr[t + 1] - s->opt_ptr[t];
    e += e * kmax;
    if (v > 0x3fffffff || e > 0x3fffffff) return -1;
    *max_v = (int)v;
    *max_e = (int)e;
    return 0;
}

/* Returns 0, -2 when out of memory. ``training`` decides the rings. */
static int expand(int n, int nd, const int *par_ptr, const int *par_idx, const double *par_bytes,
                  const double *par_grad, const double *fwd, const double *bwd, const double *bwdw,
                  const double *upd, const unsigned char *has_update, const unsigned char *has_w,
                  const double *out_bytes, const double *static_mem, const int *place, const ShardTable *s,
                  int training, Expanded *x) {
    int MV, ME;
    memset(x, 0, sizeof(*x));
    if (expand_sizes(n, nd, par_ptr, place, s, &MV, &ME) < 0) return -2;
    if (ME < 1) ME = 1;
    size_t need = 0;
    const size_t ni = sizeof(int), nf = sizeof(double), nu = sizeof(unsigned char), mv_nd = (size_t)MV * nd;
    need += room(ni, MV) + room(ni, MV) + room(ni, MV + 1) + room(ni, ME) + room(ni, MV + 1) + room(ni, ME);
    need += room(ni, MV) + room(nf, ME) + room(nf, ME) + room(nf, ME) + room(nf, ME);
    need += room(nf, mv_nd) + room(nf, mv_nd) + room(nf, mv_nd);
    need += room(nf, mv_nd) + room(nf, MV) + room(nf, MV) + room(nu, MV);
    need += room(nu, MV) + room(ni, MV) + room(ni, n) + room(ni, n) + room(ni, n + 1);
    need += room(ni, (size_t)n * 64) + room(ni, (size_t)n * 64) + room(nf, (size_t)n * 64);
    need += room(nf, n) + room(nf, n);
    need += room(nf, MV) + room(nf, MV) + room(nf, MV) + room(ni, n) + room(ni, n) + room(ni, MV + 1);
    Arena ar = {malloc(need), 0, need};
    if (!ar.base) return -2;
    memset(ar.base, 0, need);
    x->mem = ar.base;
    x->place = TAKE(&ar, int, MV);
    x->op = TAKE(&ar, int, MV);
    x->par_ptr = TAKE(&ar, int, MV + 1);
    x->par_idx = TAKE(&ar, int, ME);
    x->ch_ptr = TAKE(&ar, int, MV + 1);
    x->ch_idx = TAKE(&ar, int, ME);
    x->input_ops = TAKE(&ar, int, MV);
    x->par_bytes = TAKE(&ar, double, ME);
    x->par_grad = TAKE(&ar, double, ME);
    x->ch_bytes = TAKE(&ar, double, ME);
    x->ch_grad = TAKE(&ar, double, ME);
    x->fwd = TAKE(&ar, double, (size_t)MV * nd);
    x->bwd = TAKE(&ar, double, (size_t)MV * nd);
    x->bwdw = TAKE(&ar, double, (size_t)MV * nd);
    x->upd = TAKE(&ar, double, (size_t)MV * nd);
    x->out_bytes = TAKE(&ar, double, MV);
    x->static_mem = TAKE(&ar, double, MV);
    x->has_update = TAKE(&ar, unsigned char, MV);
    x->has_w = TAKE(&ar, unsigned char, MV);
    x->ring_of = TAKE(&ar, int, MV);
    x->ring_first = TAKE(&ar, int, n);
    x->ring_count = TAKE(&ar, int, n);
    x->ring_msg_ptr = TAKE(&ar, int, n + 1);
    x->ring_src = TAKE(&ar, int, (size_t)n * 64);
    x->ring_dst = TAKE(&ar, int, (size_t)n * 64);
    x->ring_bytes = TAKE(&ar, double, (size_t)n * 64);
    x->ring_talone = TAKE(&ar, double, n);
    x->ring_tbusy = TAKE(&ar, double, n);
    double *vblo = TAKE(&ar, double, MV), *vbhi = TAKE(&ar, double, MV), *vcf = TAKE(&ar, double, MV);
    int *first = TAKE(&ar, int, n), *count = TAKE(&ar, int, n);
    int *pcount = TAKE(&ar, int, MV + 1);  /* parents per virtual op, then children's fill positions */
    if (!pcount) { expanded_free(x); return -2; }

    int m = 0, e_used = 0, n_rings = 0, n_msgs = 0;
    x->ring_msg_ptr[0] = 0;
    /* parents are written straight into par_* (CSR in virtual-op order): gathers of op i come before its
     * shards, and a shard's entries are known before its gathers are added, so they are staged per shard */
    int *stage_idx = malloc(sizeof(int) * (size_t)(par_ptr[n] > 0 ? par_ptr[n] : 1) * 64);
    double *stage_b = malloc(sizeof(double) * (size_t)(par_ptr[n] > 0 ? par_ptr[n] : 1) * 64 * 2);
    if (!stage_idx || !stage_b) { free(stage_idx); free(stage_b); expanded_free(x); return -2; }
    for (int i = 0; i < n; i++) {
        const int g = place[i], sharded = g >= nd, t = g - nd;
        const int k = sharded ? s->opt_ptr[t + 1] - s->opt_ptr[t] : 1;
        const int row = sharded ? s->entry[(size_t)i * s->T + t] : -1;
        const int batch = sharded && s->opt_dim[t] == 1;
        const int np_ = par_ptr[i + 1] - par_ptr[i];
        /* entries of shard j: stage_idx[j * np_ + e], stage_b[2 * (j * np_ + e)] (bytes, grad) */
        for (int j = 0; j < k; j++) {
            const int dev = sharded ? s->opt_dev[s->opt_ptr[t] + j] : g;
            const double nlo = batch ? s->blo[row + j] : 0.0, nhi = batch ? s->bhi[row + j] : 1.0;
            for (int e = par_ptr[i]; e < par_ptr[i + 1]; e++) {
                const int p = par_idx[e], slot = j * np_ + (e - par_ptr[i]);
                const double b = par_bytes[e], gr = par_grad[e];
                int hits = 0, last = -1;
                double tb = 0.0, tg = 0.0;
                for (int q = first[p]; q < first[p] + count[p]; q++) {
                    const double hi = vbhi[q] < nhi ? vbhi[q] : nhi, lo = vblo[q] > nlo ? vblo[q] : nlo;
                    const double ov = (hi - lo) * vcf[q];
                    if (ov > 0.0) { hits++; last = q; }
                }
                if (hits == 1) {
                    const double hi = vbhi[last] < nhi ? vbhi[last] : nhi, lo = vblo[last] > nlo ? vblo[last] : nlo;
                    const double ov = (hi - lo) * vcf[last];
                    stage_idx[slot] = last;
                    stage_b[2 * slot] = b * ov;
                    stage_b[2 * slot + 1] = gr * ov;
                    continue;
                }
                /* a gather on the shard's device: its parents are the overlapping pieces, in shard order */
                const int gv = m++;
                x->par_ptr[gv] = e_used;
                for (int q = first[p]; q < first[p] + count[p]; q++) {
                    const double hi = vbhi[q] < nhi ? vbhi[q] : nhi, lo = vblo[q] > nlo ? vblo[q] : nlo;
                    const double ov = (hi - lo) * vcf[q];
                    if (!(ov > 0.0)) continue;
                    x->par_idx[e_used] = q;
                    x->par_bytes[e_used] = b * ov;
                    x->par_grad[e_used] = gr * ov;
                    tb += b * ov;
                    tg += gr * ov;
                    e_used++;
                }
                x->par_ptr[gv + 1] = e_used;
                const double dur = tb * s->gather_rate[dev];
                x->place[gv] = dev; x->op[gv] = i; x->ring_of[gv] = -1;
                x->fwd[(size_t)gv * nd + dev] = dur; x->bwd[(size_t)gv * nd + dev] = dur;
                x->out_bytes[gv] = tb;
                vblo[gv] = 0.0; vbhi[gv] = 1.0; vcf[gv] = 1.0;
                stage_idx[slot] = gv;
                stage_b[2 * slot] = tb;
                stage_b[2 * slot + 1] = tg;
            }
        }
        first[i] = m;
        count[i] = k;
        for (int j = 0; j < k; j++) {
            const int v = m++, dev = sharded ? s->opt_dev[s->opt_ptr[t] + j] : g;
            x->par_ptr[v] = e_used;
            for (int e = 0; e < np_; e++) {
                const int slot = j * np_ + e;
                x->par_idx[e_used] = stage_idx[slot];
                x->par_bytes[e_used] = stage_b[2 * slot];
                x->par_grad[e_used] = stage_b[2 * slot + 1];
                e_used++;
            }
            x->par_ptr[v + 1] = e_used;
            x->place[v] = dev; x->op[v] = i; x->ring_of[v] = -1;
            x->has_update[v] = has_update[i];
            if (sharded) {
                const int r = row + j;
                vblo[v] = s->blo[r]; vbhi[v] = s->bhi[r]; vcf[v] = s->cf[r];
                x->fwd[(size_t)v * nd + dev] = s->fwd[r];
                x->bwd[(size_t)v * nd + dev] = s->bwd[r];
                x->bwdw[(size_t)v * nd + dev] = s->bwdw ? s->bwdw[r] : 0.0;
                x->upd[(size_t)v * nd + dev] = s->upd[r];
                x->out_bytes[v] = out_bytes[i] * ((vbhi[v] - vblo[v]) * vcf[v]);
                x->static_mem[v] = s->stat[r];
            } else {
                vblo[v] = 0.0; vbhi[v] = 1.0; vcf[v] = 1.0;
                x->fwd[(size_t)v * nd + dev] = fwd[(size_t)i * nd + dev];
                x->bwd[(size_t)v * nd + dev] = bwd[(size_t)i * nd + dev];
                x->bwdw[(size_t)v * nd + dev] = bwdw ? bwdw[(size_t)i * nd + dev] : 0.0;
                x->upd[(size_t)v * nd + dev] = upd[(size_t)i * nd + dev];
                x->out_bytes[v] = out_bytes[i];
                x->static_mem[v] = static_mem[i];
            }
            x->has_w[v] = has_w ? has_w[i] : 0;
        }
        if (batch && training && s->ar_bytes[i] > 0.0) {
            const double nbytes = 2.0 * (k - 1) / k * s->ar_bytes[i];
            const size_t at = (size_t)i * s->T + t;
            x->ring_first[n_rings] = first[i];
            x->ring_count[n_rings] = k;
            x->ring_talone[n_rings] = x->ring_tbusy[n_rings] = -1.0;
            if (s->ar_alone && s->ar_alone[at] >= 0.0) {
                /* a measured all-reduce: one message of the weights' bytes from the first device to the next
                 * different one, lasting the measured time (shards.expand) */
                const int a = s->opt_dev[s->opt_ptr[t]];
                int b = a;
                for (int j = 1; j < k && b == a; j++) b = s->opt_dev[s->opt_ptr[t] + j];
                for (int j = 0; j < k; j++) x->ring_of[first[i] + j] = n_rings;
                x->ring_talone[n_rings] = s->ar_alone[at];
                x->ring_tbusy[n_rings] = s->ar_busy[at];
                x->ring_src[n_msgs] = a; x->ring_dst[n_msgs] = b; x->ring_bytes[n_msgs] = s->ar_bytes[i];
                n_msgs++;
                n_rings++;
                x->ring_msg_ptr[n_rings] = n_msgs;
                continue;
            }
            for (int j = 0; j < k; j++) {
                const int a = s->opt_dev[s->opt_ptr[t] + j], b = s->opt_dev[s->opt_ptr[t] + (j + 1) % k];
                x->ring_of[first[i] + j] = n_rings;
                if (a == b) continue;
                x->ring_src[n_msgs] = a; x->ring_dst[n_msgs] = b; x->ring_bytes[n_msgs] = nbytes;
                n_msgs++;
            }
            n_rings++;
            x->ring_msg_ptr[n_rings] = n_msgs;
        }
    }
    free(stage_idx);
    free(stage_b);
    x->m = m;
    x->E = e_used;
    x->n_rings = n_rings;
    x->n_ring_msgs = n_msgs;
    /* children in virtual-op order of the consumers */
    for (int v = 0; v <= m; v++) pcount[v] = 0;
    for (int e = 0; e < e_used; e++) pcount[x->par_idx[e] + 1]++;
    x->ch_ptr[0] = 0;
    for (int v = 0; v < m; v++) x->ch_ptr[v + 1] = x->ch_ptr[v] + pcount[v + 1];
    for (int v = 0; v < m; v++) pcount[v] = x->ch_ptr[v];
    for (int v = 0; v < m; v++)
        for (int e = x->par_ptr[v]; e < x->par_ptr[v + 1]; e++) {
            const int p = x->par_idx[e], at = pcount[p]++;
            x->ch_idx[at] = v; x->ch_bytes[at] = x->par_bytes[e]; x->ch_grad[at] = x->par_grad[e];
        }
    x->n_inputs = 0;
    for (int v = 0; v < m; v++)
        if (x->par_ptr[v + 1] == x->par_ptr[v] && par_ptr[x->op[v] + 1] == par_ptr[x->op[v]])
            x->input_ops[x->n_inputs++] = v;
    return 0;
}
