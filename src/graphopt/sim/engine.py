"""The simulation engine: an event-driven list scheduler compiled with numba.

Everything here works on plain arrays in node-index space. A *kernel* is identified
by its root node (the node whose output leaves the fused group; every node when
nothing is fused). Kernel-level adjacency lists hold distinct producer and consumer
kernels. Semantics are those of DESIGN.md "Simulator semantics"; this module adds no
policy of its own.

All jitted code lives in this one module on purpose: numba's on-disk cache is keyed
by the file that defines a function, and would not notice a change to a callee in
another module.

Hot path: one call of :func:`run_kernels` per evaluated plan. It allocates its work
arrays once, keeps one ready heap per device, a FIFO per directed link and one event
heap whose size is bounded by D + D*D (one running kernel per device and one running
transfer per link), so each event costs O(log D + degree).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_KERNEL_END = 0
_TRANSFER_END = 1
#: Validity codes of :func:`evaluate`.
OK, OOM, COLOC = 0, 1, 2


# -- heaps ---------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _ready_before(a, b, key):
    return key[a] > key[b] or (key[a] == key[b] and a < b)


@njit(cache=True, inline="always")
def _ready_push(buf, base, size, k, key):
    i = size
    buf[base + i] = k
    while i > 0:
        parent = (i - 1) >> 1
        if _ready_before(buf[base + i], buf[base + parent], key):
            buf[base + i], buf[base + parent] = buf[base + parent], buf[base + i]
            i = parent
        else:
            break


@njit(cache=True, inline="always")
def _ready_pop(buf, base, size, key):
    top = buf[base]
    size -= 1
    buf[base] = buf[base + size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        best = left
        if left + 1 < size and _ready_before(buf[base + left + 1], buf[base + left], key):
            best = left + 1
        if _ready_before(buf[base + best], buf[base + i], key):
            buf[base + i], buf[base + best] = buf[base + best], buf[base + i]
            i = best
        else:
            break
    return top


@njit(cache=True, inline="always")
def _ev_before(t, ty, ix, i, j):
    if t[i] != t[j]:
        return t[i] < t[j]
    if ty[i] != ty[j]:
        return ty[i] < ty[j]
    return ix[i] < ix[j]


@njit(cache=True, inline="always")
def _ev_push(t, ty, ix, size, time, typ, idx):
    i = size
    t[i], ty[i], ix[i] = time, typ, idx
    while i > 0:
        p = (i - 1) >> 1
        if _ev_before(t, ty, ix, i, p):
            t[i], t[p] = t[p], t[i]
            ty[i], ty[p] = ty[p], ty[i]
            ix[i], ix[p] = ix[p], ix[i]
            i = p
        else:
            break


@njit(cache=True, inline="always")
def _ev_pop(t, ty, ix, size):
    """Remove the earliest event; the caller reads it from slot 0 first."""
    size -= 1
    t[0], ty[0], ix[0] = t[size], ty[size], ix[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        b = left
        if left + 1 < size and _ev_before(t, ty, ix, left + 1, left):
            b = left + 1
        if _ev_before(t, ty, ix, b, i):
            t[i], t[b] = t[b], t[i]
            ty[i], ty[b] = ty[b], ty[i]
            ix[i], ix[b] = ix[b], ix[i]
            i = b
        else:
            break


@njit(cache=True, inline="always")
def _ready_add(buf, base, head, size, k, prio, use_fifo):
    """Make kernel k ready: append to the device's FIFO (each kernel enters its device's
    queue once, so a plain array segment suffices), or push on its priority heap."""
    if use_fifo:
        buf[base + head + size] = k
    else:
        _ready_push(buf, base, size, k, prio)


# -- the engine ---------------------------------------------------------------------------
@njit(cache=True)
def workspace(n, ndev, nedges):
    """Work arrays for :func:`run_kernels` and :func:`build_kernels`, allocated once per
    problem (per thread in batches): fresh arrays on every call cost more than the
    simulation itself on large graphs (page faults). Both functions leave the arrays in
    a state the next call accepts, so nothing is cleared between calls."""
    m = nedges + 1
    run = (np.empty(n), np.empty(n), np.zeros(n, np.int64), np.zeros(n, np.int64), np.empty(n),
           np.zeros(n * ndev, np.int64), np.zeros(n * ndev), np.empty(max(n, 1), np.int64),
           np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m), np.empty(m), np.empty(m),
           np.empty(m, np.int64))
    build = (np.zeros(n, np.bool_), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n),
             np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, np.int64),
             np.zeros(n + 1, np.int64), np.zeros(n, np.int64), np.zeros(n + 1, np.int64),
             np.zeros(m, np.int64), np.zeros(n + 1, np.int64), np.zeros(m, np.int64),
             np.zeros(m), np.zeros(n, np.int64))
    return run, build


@njit(cache=True)
def run_kernels(kmask, dev, kdur, kout, ktemp, kprio, use_fifo,
                pptr, pidx, sptr, sidx, sbytes, bw, lat, ndev, ws):
    """Simulate one plan at kernel level.

    Parameters (N nodes, D devices; kernels are the nodes where ``kmask`` is true)
    ----------
    kmask : bool (N,)            kernel roots
    dev : int64 (N,)             device of each kernel
    kdur, kout, ktemp : float64 (N,)   duration, materialized output bytes, scratch bytes
    kprio : float64 (N,)         priority (higher first, ties: lower index first)
    use_fifo : bool              ignore ``kprio``: run kernels in the order they became
                                 ready (TensorFlow's executor), an O(1) queue
    pptr, pidx : CSR (N+1,), (P,)      distinct producer kernels of each kernel
    sptr, sidx, sbytes : CSR            distinct consumer kernels and the bytes each needs
    bw, lat : float64 (D, D)     link bandwidth (bytes/s) and latency (s)
    ws : the ``run`` part of :func:`workspace`

    Returns
    -------
    step, peak (D,), busy (D,), bytes_moved, start (N,), end (N,), and the transfers:
    count, kernel (T,), destination (T,), start (T,), end (T,), bytes (T,). All but
    ``peak`` and ``busy`` are views into ``ws``: copy them before the next call. Entries
    of ``start`` and ``end`` are meaningful for kernels only.
    """
    n = kmask.shape[0]
    D = ndev
    # recv_ref returns to all zeros by the end of every run (each increment is matched
    # by a consumer's decrement); every other array is written before it is read.
    (start, end, pending, out_ref, _, recv_ref, recv_bytes, hbuf,
     tr_k, tr_dst, tr_start, tr_end, tr_bytes, tr_next) = ws
    # ready heaps, one segment per device
    count = np.zeros(D, np.int64)
    for k in range(n):
        if kmask[k]:
            count[dev[k]] += 1
            pending[k] = pptr[k + 1] - pptr[k]
    base = np.zeros(D, np.int64)
    for d in range(1, D):
        base[d] = base[d - 1] + count[d - 1]
    hsize = np.zeros(D, np.int64)
    qhead = np.zeros(D, np.int64)
    ntr = 0
    head = np.full(D * D, -1, np.int64)
    tail = np.full(D * D, -1, np.int64)
    link_busy = np.zeros(D * D, np.bool_)
    dev_busy = np.zeros(D, np.bool_)
    # events
    cap = D + D * D + 1
    ev_t = np.zeros(cap)
    ev_ty = np.zeros(cap, np.int64)
    ev_ix = np.zeros(cap, np.int64)
    nev = 0
    # memory
    mem = np.zeros(D)
    peak = np.zeros(D)
    busy = np.zeros(D)
    moved = 0.0
    tmpb = np.full(D, -1.0)
    dirty_dev = np.zeros(D, np.bool_)
    dirty_link = np.zeros(D * D, np.bool_)
    dev_list = np.empty(D, np.int64)
    link_list = np.empty(D * D, np.int64)
    ndl = 0
    nll = 0

    for k in range(n):
        if kmask[k] and pending[k] == 0:
            d = dev[k]
            _ready_add(hbuf, base[d], qhead[d], hsize[d], k, kprio, use_fifo)
            hsize[d] += 1
    for d in range(D):
        dirty_dev[d] = True
        dev_list[ndl] = d
        ndl += 1

    t = 0.0
    step = 0.0
    done = 0
    while True:
        # dispatch: start what can start at time t on every touched device and link
        for q in range(ndl):
            d = dev_list[q]
            dirty_dev[d] = False
            if not dev_busy[d] and hsize[d] > 0:
                if use_fifo:
                    k = hbuf[base[d] + qhead[d]]
                    qhead[d] += 1
                else:
                    k = _ready_pop(hbuf, base[d], hsize[d], kprio)
                hsize[d] -= 1
                start[k] = t
                end[k] = t + kdur[k]
                dev_busy[d] = True
                mem[d] += kout[k] + ktemp[k]
                peak[d] = max(peak[d], mem[d])
                _ev_push(ev_t, ev_ty, ev_ix, nev, end[k], _KERNEL_END, k)
                nev += 1
        ndl = 0
        for q in range(nll):
            li = link_list[q]
            dirty_link[li] = False
            if not link_busy[li] and head[li] >= 0:
                tr = head[li]
                head[li] = tr_next[tr]
                if head[li] < 0:
                    tail[li] = -1
                a = li // D
                b = li - a * D
                tr_start[tr] = t
                tr_end[tr] = t + lat[a, b] + tr_bytes[tr] / bw[a, b]
                link_busy[li] = True
                mem[b] += tr_bytes[tr]
                peak[b] = max(peak[b], mem[b])
                moved += tr_bytes[tr]
                _ev_push(ev_t, ev_ty, ev_ix, nev, tr_end[tr], _TRANSFER_END, tr)
                nev += 1
        nll = 0
        if nev == 0:
            break
        # handle every event at the next time stamp before dispatching again, so that
        # memory freed at t is free for kernels that start at t
        t = ev_t[0]
        while nev > 0 and ev_t[0] == t:
            typ = ev_ty[0]
            idx = ev_ix[0]
            _ev_pop(ev_t, ev_ty, ev_ix, nev)
            nev -= 1
            step = t
            if typ == _KERNEL_END:
                k = idx
                d = dev[k]
                done += 1
                dev_busy[d] = False
                busy[d] += kdur[k]
                mem[d] -= ktemp[k]
                if not dirty_dev[d]:
                    dirty_dev[d] = True
                    dev_list[ndl] = d
                    ndl += 1
                for j in range(pptr[k], pptr[k + 1]):
                    p = pidx[j]
                    if dev[p] == d:
                        out_ref[p] -= 1
                        if out_ref[p] == 0:
                            mem[d] -= kout[p]
                    else:
                        r = p * D + d
                        recv_ref[r] -= 1
                        if recv_ref[r] == 0:
                            mem[d] -= recv_bytes[r]
                nref = 0
                for j in range(sptr[k], sptr[k + 1]):
                    c = sidx[j]
                    dc = dev[c]
                    if dc == d:
                        nref += 1
                        pending[c] -= 1
                        if pending[c] == 0:
                            _ready_add(hbuf, base[d], qhead[d], hsize[d], c, kprio, use_fifo)
                            hsize[d] += 1
                    else:
                        tmpb[dc] = max(tmpb[dc], sbytes[j])
                        recv_ref[k * D + dc] += 1
                for dd in range(D):
                    if tmpb[dd] >= 0.0:
                        nref += 1
                        tr = ntr
                        ntr += 1
                        tr_k[tr] = k
                        tr_dst[tr] = dd
                        tr_bytes[tr] = tmpb[dd]
                        tr_next[tr] = -1
                        recv_bytes[k * D + dd] = tmpb[dd]
                        tmpb[dd] = -1.0
                        li = d * D + dd
                        if tail[li] >= 0:
                            tr_next[tail[li]] = tr
                        else:
                            head[li] = tr
                        tail[li] = tr
                        if not dirty_link[li]:
                            dirty_link[li] = True
                            link_list[nll] = li
                            nll += 1
                out_ref[k] = nref
                if nref == 0:
                    mem[d] -= kout[k]
            else:
                tr = idx
                k = tr_k[tr]
                b = tr_dst[tr]
                a = dev[k]
                li = a * D + b
                link_busy[li] = False
                if not dirty_link[li]:
                    dirty_link[li] = True
                    link_list[nll] = li
                    nll += 1
                out_ref[k] -= 1
                if out_ref[k] == 0:
                    mem[a] -= kout[k]
                for j in range(sptr[k], sptr[k + 1]):
                    c = sidx[j]
                    if dev[c] == b:
                        pending[c] -= 1
                        if pending[c] == 0:
                            _ready_add(hbuf, base[b], qhead[b], hsize[b], c, kprio, use_fifo)
                            hsize[b] += 1
                if not dirty_dev[b]:
                    dirty_dev[b] = True
                    dev_list[ndl] = b
                    ndl += 1
    return (step, peak, busy, moved, start, end, ntr, tr_k[:ntr], tr_dst[:ntr],
            tr_start[:ntr], tr_end[:ntr], tr_bytes[:ntr])


# -- fusion ---------------------------------------------------------------------------------
@njit(cache=True)
def fuse(dev, fprio, use_default, cand_consumer, max_size):
    """The fusion pass: returns ``group[N]``, the root node of each node's kernel.

    A producer u may fuse into its consumer v only when v is u's only consumer
    (``cand_consumer[u] = v``, else -1: the op classes allow it and u has one consumer)
    and both run on one device. Groups are then in-trees whose only external output
    is the root's, so no fusion can create a cycle between kernels. Candidates are
    taken in order of fusion priority (higher first; ties: later node first, as XLA
    walks consumers before producers); a priority <= 0 never fuses; a group never
    exceeds ``max_size`` nodes. ``use_default`` ignores ``fprio`` and takes every
    candidate in reverse topological order (the compiler's greedy pass).
    """
    n = dev.shape[0]
    parent = np.arange(n)
    size = np.ones(n, np.int64)
    if use_default:
        order = np.arange(n - 1, -1, -1)
    else:
        # stable sort by descending priority, ties by descending index
        order = np.argsort(-fprio[::-1], kind="mergesort")
        order = n - 1 - order
    for q in range(n):
        u = order[q]
        v = cand_consumer[u]
        if v < 0 or dev[u] != dev[v]:
            continue
        if not use_default and fprio[u] <= 0.0:
            continue
        rv = v
        while parent[rv] != rv:
            rv = parent[rv]
        if size[u] + size[rv] > max_size:
            continue
        parent[u] = rv
        size[rv] += size[u]
    group = np.empty(n, np.int64)
    for i in range(n - 1, -1, -1):  # parents have higher indices: resolve from the end
        p = parent[i]
        group[i] = i if p == i else group[p]
    return group


@njit(cache=True)
def build_kernels(group, dev, prio, ptr_p, idx_p, ptr_s, idx_s, eb_s,
                  flop_t, mem_t, launch, spb, cls, out_bytes, temp_bytes, single_eb, cand_consumer,
                  ws):
    """Kernel-level arrays for a fusion ``group`` map (see :func:`run_kernels`).

    A fused kernel on device d takes ``max(launch) + max(sum flop_t,
    sum mem_t - bytes of internal edges priced at both ends)``; its output is the
    root's; its scratch is the members' sum; its priority the members' highest.
    ``ws`` is the ``build`` part of :func:`workspace`; the results are views into it.
    """
    n = group.shape[0]
    (kmask, kdur, kout, ktemp, kprio, fsum, msum, lmax, mark, gcount, members, pptr,
     pidx, sptr, sidx, sb, pos) = ws
    for i in range(n):
        ktemp[i] = 0.0
        kprio[i] = -np.inf
        fsum[i] = 0.0
        msum[i] = 0.0
        lmax[i] = 0.0
        mark[i] = -1
        gcount[i + 1] = 0
    for i in range(n):
        g = group[i]
        d = dev[i]
        fsum[g] += flop_t[i, d]
        msum[g] += mem_t[i, d]
        if g != i:  # internal edge i -> its consumer: never written nor read back
            v = cand_consumer[i]
            msum[g] -= single_eb[i] * (spb[cls[i], d] + spb[cls[v], d])
        lmax[g] = max(lmax[g], launch[i, d])
        ktemp[g] += temp_bytes[i]
        kprio[g] = max(kprio[g], prio[i])
        gcount[g + 1] += 1
    for k in range(n):
        kmask[k] = group[k] == k
        if kmask[k]:
            kdur[k] = lmax[k] + max(fsum[k], max(msum[k], 0.0))
            kout[k] = out_bytes[k]
    # list the members of each group (counting sort), then collect distinct producers
    for i in range(n):
        gcount[i + 1] += gcount[i]
    for i in range(n):  # pos[] as the fill pointer per group
        pos[i] = gcount[i]
    for i in range(n):
        members[pos[group[i]]] = i
        pos[group[i]] += 1
    ntmp = 0
    pptr[0] = 0
    for k in range(n):
        if kmask[k]:
            for q in range(gcount[k], gcount[k + 1]):
                m = members[q]
                for j in range(ptr_p[m], ptr_p[m + 1]):
                    pk = group[idx_p[j]]
                    if pk != k and mark[pk] != k:
                        mark[pk] = k
                        pidx[ntmp] = pk
                        ntmp += 1
        pptr[k + 1] = ntmp
    # consumers: only the root has external consumers
    ns = 0
    sptr[0] = 0
    for i in range(n):
        mark[i] = -1
    for k in range(n):
        if kmask[k]:
            for j in range(ptr_s[k], ptr_s[k + 1]):
                ck = group[idx_s[j]]
                if ck == k:
                    continue
                if mark[ck] != k:
                    mark[ck] = k
                    pos[ck] = ns
                    sidx[ns] = ck
                    sb[ns] = eb_s[j]
                    ns += 1
                elif eb_s[j] > sb[pos[ck]]:
                    sb[pos[ck]] = eb_s[j]
        sptr[k + 1] = ns
    return kmask, kdur, kout, ktemp, kprio, pptr, pidx[:ntmp], sptr, sidx[:ns], sb[:ns]


@njit(cache=True)
def critical_path(ptr_p, idx_p, t):
    """Length of the longest path where node i takes ``t[i]`` (no communication)."""
    n = t.shape[0]
    fin = np.zeros(n)
    best = 0.0
    for v in range(n):
        s = 0.0
        for j in range(ptr_p[v], ptr_p[v + 1]):
            s = max(s, fin[idx_p[j]])
        fin[v] = s + t[v]
        best = max(best, fin[v])
    return best


# -- one plan and a batch of plans -----------------------------------------------------
@njit(cache=True)
def evaluate(place, prio, use_fifo, fprio, fusion_mode, pred_ptr, pred_idx, succ_ptr, succ_idx,
              succ_bytes, time, flop_t, mem_t, launch, spb, cls, out_bytes, temp_bytes,
              persistent, coloc, capacity, bw, lat, cand, single_eb, max_fuse, ws):
    """Fuse, build kernels, run. ``fusion_mode``: 0 none, 1 compiler default, 2 by ``fprio``.
    ``ws`` is an :func:`workspace` for this problem."""
    n = place.shape[0]
    ndev = capacity.shape[0]
    # One call site of run_kernels for both paths: two inlined copies of the engine made
    # LLVM's code for the fused path twice as slow.
    if fusion_mode == 0:
        group = np.arange(n)
        kmask, kdur = ws[1][0], ws[1][1]
        for i in range(n):
            kmask[i] = True
            kdur[i] = time[i, place[i]]
        kout, ktemp, kprio = out_bytes, temp_bytes, prio
        pptr, pidx, sptr, sidx, sb = pred_ptr, pred_idx, succ_ptr, succ_idx, succ_bytes
        nk = n
    else:
        group = fuse(place, fprio, fusion_mode == 1, cand, max_fuse)
        (kmask, kdur, kout, ktemp, kprio, pptr, pidx, sptr, sidx,
         sb) = build_kernels(group, place, prio, pred_ptr, pred_idx, succ_ptr, succ_idx,
                             succ_bytes, flop_t, mem_t, launch, spb, cls, out_bytes,
                             temp_bytes, single_eb, cand, ws[1])
        nk = 0
        for i in range(n):
            if kmask[i]:
                nk += 1
    res = run_kernels(kmask, place, kdur, kout, ktemp, kprio, use_fifo,
                      pptr, pidx, sptr, sidx, sb, bw, lat, ndev, ws[0])
    peak = res[1]
    for i in range(n):
        peak[place[i]] += persistent[i]
    code, arg = OK, -1
    ngroups = 0
    for i in range(n):
        ngroups = max(ngroups, coloc[i] + 1)
    gdev = np.full(ngroups, -1, np.int64)
    for i in range(n):
        g = coloc[i]
        if g >= 0:
            if gdev[g] < 0:
                gdev[g] = place[i]
            elif gdev[g] != place[i]:
                code, arg = COLOC, g
                break
    if code == OK:
        for d in range(ndev):
            if peak[d] > capacity[d]:
                code, arg = OOM, d
                break
    return res, group, nk, code, arg


@njit(cache=True, parallel=True)
def evaluate_batch(places, prios, fifo, fprios, mode, pred_ptr, pred_idx, succ_ptr, succ_idx, succ_bytes,
           time, flop_t, mem_t, launch, spb, cls, out_bytes, temp_bytes, persistent, coloc,
           capacity, bw, lat, cand, single_eb, max_fuse, nthreads):
    """:func:`evaluate` for B plans, one chunk of plans per thread."""
    b = places.shape[0]
    n = places.shape[1]
    step = np.zeros(b)
    peak = np.zeros((b, capacity.shape[0]))
    code = np.zeros(b, np.int64)
    arg = np.zeros(b, np.int64)
    # one workspace per chunk of plans, one chunk per thread
    nchunks = max(1, min(b, nthreads))
    for c in prange(nchunks):
        ws = workspace(n, capacity.shape[0], succ_idx.shape[0])
        for i in range(c * b // nchunks, (c + 1) * b // nchunks):
            res, _, _, cd, a = evaluate(places[i], prios[i], fifo, fprios[i], mode, pred_ptr,
                                         pred_idx, succ_ptr, succ_idx, succ_bytes, time, flop_t,
                                         mem_t, launch, spb, cls, out_bytes, temp_bytes,
                                         persistent, coloc, capacity, bw, lat, cand, single_eb,
                                         max_fuse, ws)
            step[i] = res[0]
            peak[i, :] = res[1]
            code[i] = cd
            arg[i] = a
    return step, peak, code, arg


