"""The simulator's engine as it was before issue 50 (graphopt commit 69f6a07), kept only so
that ``bench/sim_speed.py`` can time it beside the current engine in one run: a verbatim
copy of ``src/graphopt/sim/engine.py`` at that commit, below this docstring, plus
:func:`evaluate_problem` and :func:`evaluate_batch_problem`. Nothing in the package imports
it.

Its own docstring then:
The simulation engine: an event-driven list scheduler compiled with numba.

Everything here works on plain arrays in node-index space. A *kernel* is identified
by its root node: its highest-index node whose output leaves the fused group (every
node, when nothing is fused). When the fusion pass builds only in-trees (producers
fused into their one consumer), every edge entering a kernel comes from another
kernel's root, and the engine walks the node-level adjacency directly: a kernel waits
for one arrival per external in-edge of its members, and counts references per edge.
Only when it duplicates an op into its consumers or merges siblings into a
multi-output kernel is a kernel-level graph built (:func:`kernel_graph`), in the same
index space, and run by the same loop.
Semantics are those of DESIGN.md "Simulator semantics"; this module adds no policy.

All jitted code lives in this one module on purpose: numba's on-disk cache is keyed
by the file that defines a function, and would not notice a change to a callee in
another module.

Hot path: one call of :func:`evaluate` per plan: :func:`fuse`, :func:`kernel_costs`
(or, where fusion duplicated an op or merged siblings, :func:`kernel_graph`), :func:`run`,
in work arrays from a :func:`workspace` kept per thread (one per chunk of plans in
batches); the engine writes each before reading it, so no result depends on
an earlier call. The engine keeps a FIFO (or a priority heap) of ready kernels per
device, a FIFO per directed link, and the events of what runs now (at most one kernel
per device and one transfer per link) in a list sorted by end time.

The functions compile on first use (tens of seconds) and are kept in numba's on-disk
cache (``NUMBA_CACHE_DIR``, else ``__pycache__`` beside this file, else the user's
cache directory; with none writable, a warning and a compilation in every process);
:func:`ensure_compiled` does it up front.
"""

from __future__ import annotations

import errno
import os
import threading
import warnings

import numba
import numpy as np
from numba import njit, prange

# numba's OpenMP layer leaves its threads spinning after every parallel batch, and torch
# on the same cores then runs many times slower (seen as GO's PPO updates slowing by an
# order of magnitude once the simulator had run); the work-queue layer does not, and
# evaluates batches as fast. It must not be entered from two Python threads at once,
# which graphopt never does.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

#: Validity codes of :func:`evaluate`.
OK, OOM, COLOC = 0, 1, 2


def _jit(**options):
    """``njit`` with numba's on-disk cache, or without it where no cache directory can be
    written (an installed package with an unwritable home): numba raises there rather
    than fall back."""

    def decorate(fn):
        try:
            jitted = njit(cache=True, **options)(fn)
        except RuntimeError:
            # stacklevel 1: one place for every function, so the message shows once
            warnings.warn("numba finds no writable cache directory, so the simulator compiles "
                          "in every process; set NUMBA_CACHE_DIR to keep it", RuntimeWarning,
                          stacklevel=1)
            return njit(**options)(fn)
        cache = getattr(jitted, "_cache", None)
        if cache is not None and hasattr(cache, "save_overload"):
            jitted._cache = _CacheWrites(cache)
        return jitted

    return decorate


#: What a file system answers a write it refuses (as ``graphopt._main`` reads them): a
#: full disk, a quota, ``ulimit -f``, a read-only mount.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


class _CacheWrites:
    """A numba function's on-disk cache whose writes may fail: the code was compiled and
    is in use whether or not its copy on disk is saved, so a full disk (or a quota,
    ``ulimit -f``, a read-only folder) while numba saves it is a warning naming the cache
    folder, not the end of the command (it was ``error: a write failed (No space left
    on device)``, naming nothing). Every other call goes to numba's cache."""

    warned = False

    def __init__(self, cache) -> None:
        self._cache = cache

    def __getattr__(self, name):
        return getattr(self._cache, name)

    def save_overload(self, sig, cres) -> None:
        try:
            self._cache.save_overload(sig, cres)
        except OSError as err:
            if err.errno not in _WRITE_ERRNOS:
                raise
            if _CacheWrites.warned:  # once: numba's compiler resets the warnings registry
                return
            _CacheWrites.warned = True
            warnings.warn(f"numba cannot save the simulator's compiled code in "
                          f"{self._cache.cache_path} ({err.strerror}); it is compiled again "
                          "in the next process (free space there, or set NUMBA_CACHE_DIR)",
                          RuntimeWarning, stacklevel=1)


# -- heaps ---------------------------------------------------------------------------------
@_jit(inline="always")
def _ready_before(a, b, key):
    return key[a] > key[b] or (key[a] == key[b] and a < b)


@_jit(inline="always")
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


@_jit(inline="always")
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


# -- the engine ---------------------------------------------------------------------------
@_jit()
def workspace(n, ndev, nedges):
    """Work arrays for :func:`fuse`, :func:`kernel_costs`, :func:`kernel_graph` and
    :func:`run`, uninitialized: each function writes what it reads before reading it, so a
    result never depends on what an earlier call left behind. ``nedges`` bounds the edges
    of a kernel graph (:attr:`Problem.edge_capacity`), at least the graph's edges."""
    m = nedges + 1
    i32 = np.int32  # the event loop's indices, half the cache footprint of int64
    i64 = np.int32  # the fusion pass's and kernel graph's too: less cache traffic
    return (
        # run: start, end, pending, out_ref, first transfer, references to a transfer's
        # tensor on its destination, ready buffer
        np.empty(n), np.empty(n), np.empty(n, i32), np.empty(n, i32),
        np.empty(n, i32), np.empty(m, i32), np.empty(max(n, 1), i32),
        # run: transfers (kernel, destination, start, end, bytes, next in link FIFO)
        np.empty(m, i32), np.empty(m, i32), np.empty(m), np.empty(m), np.empty(m),
        np.empty(m, i32),
        # kernel_costs: duration, scratch, priority, compute sum, memory sum, launch,
        # member lists (head per kernel, next per node)
        np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
        np.empty(n, i64), np.empty(n, i64),
        # fuse: union-find parent, group size, group
        np.empty(n, i64), np.empty(n, i64), np.empty(n, i64),
        # run, per edge: producer's device (-1 inside a kernel) in pred order; consumer's
        # kernel and device in succ order
        np.empty(m, i32), np.empty(m, i32), np.empty(m, i32),
        # fuse: operands of each group, state (1 duplicated, 2 holds a copy), bytes a
        # sibling no longer reads, exits (members whose output leaves) of each group
        np.empty(n, i64), np.empty(n, i64), np.empty(n), np.empty(n, i64),
        # kernel_graph: output bytes, kernel of each kernel (-1 elsewhere), member lists of
        # one, successor CSR (ptr, kernel, bytes), predecessor CSR (ptr, kernel), per-kernel
        # slot and last producer while merging edges, kernel size, last copy's node
        np.empty(n), np.empty(n, i64), np.empty(n, i64), np.empty(n, i64),
        np.empty(n + 1, i64), np.empty(m, i64), np.empty(m), np.empty(n + 1, i64),
        np.empty(m, i64), np.empty(n, i64), np.empty(n, i64), np.empty(n, i64),
        np.empty(n, i64),
        # run: the tensor a view's output keeps alive (its base, or -2 - a transfer);
        # outputs whose last reference went at this instant
        np.empty(n, i32), np.empty(n, i32),
    )


@_jit(inline="always")
def _find(parent, x):
    while parent[x] != x:
        x = parent[x]
    return x


@_jit()
def fuse(dev, fprio, use_default, cand_consumer, fflags, level, succ_ptr, succ_idx, succ_bytes,
         pred_ptr, spb, cls, max_size, max_ops, ws):
    """The fusion pass: returns ``(group[N], any duplicated, any multi-output)``.

    ``group[i]`` is the kernel (its root: its highest-index exit) of node i; a duplicated
    node has no kernel of its own and gets its first consumer's. Nodes are taken in
    order of fusion priority (higher first; ties: later node first, as XLA walks
    consumers before producers); a priority <= 0 never fuses; ``use_default`` ignores
    ``fprio`` and takes every node in reverse topological order (XLA's greedy pass). A
    node u taken:

    1. with one consumer v (``cand_consumer[u] = v``: the classes allow it): fuses into
       v's kernel when both are on one device, u's kernel has u as its only exit, v is
       not duplicated, and the merged kernel keeps to ``max_size`` ops and ``max_ops``
       operands plus outputs;
    2. else, cheap with several consumers (``fflags & 1``): is duplicated into every
       consumer's kernel, or into none: all on u's device, none duplicated, u alone in
       its kernel and holding no copy, each kernel within the limits;
    3. else, read by several sibling-fusible consumers (``fflags & 2``): the kernels of
       those consumers (``fflags & 4``) on one device whose exits have one level
       (longest path from a source) merge into one multi-output kernel, which then
       reads u's output once (the bytes saved are kept in ``sav``).

    Why no fusion can create a cycle: every kernel's exits share one level, and an edge
    between two kernels leaves an exit of the first at a level below that of every exit
    it reaches in the second, so levels rise strictly along any path of kernels.
    """
    n = dev.shape[0]
    parent, size, group = ws[21:24]
    nops, state, sav, exits = ws[27:31]
    for i in range(n):
        parent[i] = i
        size[i] = 1
        nops[i] = pred_ptr[i + 1] - pred_ptr[i] + 1
        state[i] = 0
        sav[i] = 0.0
        exits[i] = 1
    if not use_default:
        # stable sort by descending priority, ties by descending index
        order = n - 1 - np.argsort(-fprio[::-1], kind="mergesort")
    anydup = False
    multi = False
    for q in range(n):
        u = n - 1 - q if use_default else order[q]
        if not use_default and fprio[u] <= 0.0:
            break  # sorted: every later one is <= 0 too
        if state[u] & 1:
            continue
        d = dev[u]
        v = cand_consumer[u]
        if v >= 0:
            if dev[v] != d or state[v] & 1 or parent[u] != u or exits[u] != 1:
                continue
            rv = _find(parent, v)
            if size[u] + size[rv] > max_size or nops[u] + nops[rv] - 1 > max_ops:
                continue
            parent[u] = rv
            size[rv] += size[u]
            nops[rv] += nops[u] - 1
            continue
        lo, hi = succ_ptr[u], succ_ptr[u + 1]
        if fflags[u] & 1 and parent[u] == u and size[u] == 1 and exits[u] == 1 and state[u] == 0:
            ok = True
            for j in range(lo, hi):
                c = succ_idx[j]
                rc = _find(parent, c)
                if (dev[c] != d or state[c] & 1 or size[rc] + 1 > max_size
                        or nops[rc] + nops[u] - 2 > max_ops):
                    ok = False
                    break
            if ok:
                state[u] = 1
                anydup = True
                for j in range(lo, hi):
                    c = succ_idx[j]
                    state[c] |= 2
                    rc = _find(parent, c)
                    size[rc] += 1
                    nops[rc] += nops[u] - 2
                continue
        if fflags[u] & 2:
            for j in range(lo + 1, hi):
                c = succ_idx[j]
                if not fflags[c] & 4 or state[c] & 1:
                    continue
                rc = _find(parent, c)
                for j2 in range(lo, j):
                    c2 = succ_idx[j2]
                    if not fflags[c2] & 4 or state[c2] & 1 or dev[c2] != dev[c]:
                        continue
                    r2 = _find(parent, c2)
                    if r2 == rc:
                        break  # already together: u's output is read once already
                    if (level[r2] != level[rc] or size[r2] + size[rc] > max_size
                            or nops[r2] + nops[rc] - 1 > max_ops):
                        continue
                    a, b = min(r2, rc), max(r2, rc)
                    parent[a] = b
                    size[b] += size[a]
                    nops[b] += nops[a] - 1
                    exits[b] += exits[a]
                    sav[c] += succ_bytes[j] * spb[cls[c], dev[c]]
                    multi = True
                    break
    for i in range(n - 1, -1, -1):  # parents have higher indices: resolve from the end
        p = parent[i]
        group[i] = i if p == i else group[p]
        if state[i] & 1:  # consumers come later: theirs is resolved
            group[i] = group[succ_idx[succ_ptr[i]]]
    return group, anydup, multi


@_jit(inline="always")
def _slowdown(size, large_ops, large_slope):
    """How much slower than the sum of its parts a kernel of ``size`` ops runs."""
    return 1.0 + large_slope * max(size - large_ops, 0)


@_jit()
def kernel_graph(group, dev, prio, time, flop_t, mem_t, launch, spb, cls, temp_bytes, out_bytes,
                 succ_ptr, succ_idx, succ_bytes, large_ops, large_slope, ws):
    """Kernels and the graph between them, where fusion duplicated ops or merged siblings.

    A kernel's members are the nodes of its group and a copy of each duplicated node
    read by one of them. It takes ``max(launch) + max(Σ flop time, Σ memory time −
    savings) × slowdown``: a copy recomputes its FLOPs and reads its inputs again; an
    edge inside the kernel is neither written nor read back (a copy's output is written
    nowhere); siblings read a shared input once (``sav``). Its output bytes are those of
    its exits (members read outside it, or by no one), freed together. Between kernels,
    one edge per pair, carrying the sum of the distinct tensors. Returns ``(group2,
    kdur, kout, ktemp, kprio, mhead, mnext, pred_ptr, pred_idx, succ_ptr, succ_idx,
    succ_bytes)`` for :func:`run`: kernels are their own group, every other node has
    group -1 and no edges; member lists hold the kernel alone. Views into ``ws``."""
    n = group.shape[0]
    kdur, ktemp, kprio, fsum, msum, lmax, mhead, mnext = ws[13:21]
    state, sav = ws[28], ws[29]
    (kout, g2, mh2, mn2, cptr, cidx, cbytes, pptr, pidx, slot, lastp, ksize,
     mark) = ws[31:44]
    for i in range(n):
        kout[i] = 0.0
        ktemp[i] = 0.0
        kprio[i] = -np.inf
        fsum[i] = 0.0
        msum[i] = 0.0
        lmax[i] = 0.0
        mhead[i] = -1
        ksize[i] = 0
        slot[i] = -1
        mark[i] = -1
        g2[i] = -1
    for i in range(n - 1, -1, -1):
        d = dev[i]
        if state[i] & 1:  # a copy in each kernel of its consumers
            wrote = succ_bytes[succ_ptr[i]] * spb[cls[i], d]
            for j in range(succ_ptr[i], succ_ptr[i + 1]):
                c = succ_idx[j]
                k = group[c]
                msum[k] -= succ_bytes[j] * spb[cls[c], d]
                if mark[k] == i:
                    continue
                mark[k] = i
                ksize[k] += 1
                fsum[k] += flop_t[i, d]
                msum[k] += mem_t[i, d] - wrote
                if launch[i, d] > lmax[k]:
                    lmax[k] = launch[i, d]
                ktemp[k] += temp_bytes[i]
                if prio[i] > kprio[k]:
                    kprio[k] = prio[i]
            continue
        # written out like the copy's sums above and kernel_costs' rather than in an inlined
        # helper: numba counts references to every array handed to one, which made this
        # function half as slow again
        g = group[i]
        ksize[g] += 1
        fsum[g] += flop_t[i, d]
        msum[g] += mem_t[i, d] - sav[i]
        if launch[i, d] > lmax[g]:
            lmax[g] = launch[i, d]
        ktemp[g] += temp_bytes[i]
        if prio[i] > kprio[g]:
            kprio[g] = prio[i]
        mnext[i] = mhead[g]
        mhead[g] = i
    # edges between kernels, merged per pair, in one walk of each kernel's members'
    # out-edges; on the way, edges inside the kernel (neither written nor read back) and
    # exits (members read outside it, or by no one: their output is the kernel's)
    ne = 0
    cptr[0] = 0
    for a in range(n):
        if group[a] == a and not state[a] & 1:
            g2[a] = a
            mh2[a] = a
            mn2[a] = -1
            d = dev[a]
            first = ne
            m = mhead[a]
            while m >= 0:
                lo, hi = succ_ptr[m], succ_ptr[m + 1]
                exit_ = lo == hi
                for j in range(lo, hi):
                    v = succ_idx[j]
                    jlo, jhi = j, j + 1
                    if state[v] & 1:  # read by copies: leaves unless every copy is here
                        jlo, jhi = succ_ptr[v], succ_ptr[v + 1]
                    elif group[v] == a:
                        msum[a] -= succ_bytes[j] * (spb[cls[m], d] + spb[cls[v], d])
                        continue
                    for j2 in range(jlo, jhi):
                        b = group[v] if jhi == j + 1 else group[succ_idx[j2]]
                        if b == a:
                            continue
                        exit_ = True
                        if slot[b] < 0:
                            slot[b] = ne
                            lastp[b] = m
                            cidx[ne] = b
                            cbytes[ne] = succ_bytes[j]
                            ne += 1
                        elif lastp[b] != m:
                            lastp[b] = m
                            cbytes[slot[b]] += succ_bytes[j]
                if exit_:
                    kout[a] += out_bytes[m]
                m = mnext[m]
            for e in range(first, ne):
                slot[cidx[e]] = -1
            if ksize[a] == 1:
                kdur[a] = time[a, d]
            else:
                kdur[a] = lmax[a] + max(fsum[a], max(msum[a], 0.0)) * _slowdown(
                    ksize[a], large_ops, large_slope)
        cptr[a + 1] = ne
    # predecessors: a counting sort of the edges by destination
    for i in range(n + 1):
        pptr[i] = 0
    for e in range(ne):
        pptr[cidx[e] + 1] += 1
    for i in range(n):
        pptr[i + 1] += pptr[i]
        slot[i] = pptr[i]
    for a in range(n):
        for e in range(cptr[a], cptr[a + 1]):
            b = cidx[e]
            pidx[slot[b]] = a
            slot[b] += 1
    return g2, kdur, kout, ktemp, kprio, mh2, mn2, pptr, pidx, cptr, cidx[:ne], cbytes[:ne]


@_jit()
def kernel_costs(group, dev, prio, fused, time, flop_t, mem_t, launch, spb, cls, temp_bytes,
                 single_eb, cand_consumer, large_ops, large_slope, ws):
    """Duration, scratch bytes and priority of every kernel, and its member lists.

    For groups that are in-trees (no duplicated op, no sibling merged): a fused kernel on
    device d takes ``max(launch) + max(sum flop_t, sum mem_t - bytes of internal edges
    priced at both ends) * slowdown`` (:func:`_slowdown`): tensors inside the group are
    neither written nor read back. Its scratch is the members' sum, its priority their highest.
    A kernel of one node, fused or not, takes ``time[i, dev[i]]``: the same figure, and
    the only cost array it reads. Returns views into ``ws``: kdur, ktemp, kprio (N,), mhead (N,), mnext (N,).
    """
    n = group.shape[0]
    kdur, ktemp, kprio, fsum, msum, lmax, mhead, mnext = ws[13:21]
    if not fused:
        for i in range(n):
            kdur[i] = time[i, dev[i]]
            ktemp[i] = temp_bytes[i]
            kprio[i] = prio[i]
            mhead[i] = i
            mnext[i] = -1
        return kdur, ktemp, kprio, mhead, mnext
    for i in range(n):
        ktemp[i] = 0.0
        kprio[i] = -np.inf
        fsum[i] = 0.0
        msum[i] = 0.0
        lmax[i] = 0.0
        mhead[i] = -1
    for i in range(n):
        g = group[i]
        d = dev[i]
        if g == i and mhead[i] < 0:  # alone (members precede their root): skip the sums
            kdur[i] = time[i, d]
            ktemp[i] = temp_bytes[i]
            kprio[i] = prio[i]
            mhead[i] = i
            mnext[i] = -1
            continue
        fsum[g] += flop_t[i, d]
        msum[g] += mem_t[i, d]
        if g != i:  # internal edge i -> its consumer: never written nor read back
            msum[g] -= single_eb[i] * (spb[cls[i], d] + spb[cls[cand_consumer[i]], d])
        if launch[i, d] > lmax[g]:
            lmax[g] = launch[i, d]
        ktemp[g] += temp_bytes[i]
        if prio[i] > kprio[g]:
            kprio[g] = prio[i]
        mnext[i] = mhead[g]
        mhead[g] = i
    size = ws[22]
    for k in range(n):
        if group[k] == k and mnext[k] >= 0:
            kdur[k] = lmax[k] + max(fsum[k], max(msum[k], 0.0)) * _slowdown(
                size[k], large_ops, large_slope)
    return kdur, ktemp, kprio, mhead, mnext


@_jit()
def _share_host(t, host, slope, dev_busy, cur, rem, ref, fac, fresh, newpos, nbusy, end, new_t,
                new_id, nnew, run_t, run_id, nrun):
    """Processor sharing among devices of one host, at time ``t`` once every kernel that
    starts at ``t`` has started: each busy device runs its kernel ``fac = 1 + slope *
    (busy devices of its host - 1)`` times slower than alone. A kernel that started now
    gets its end time; one whose factor changed has its remaining work (``rem``,
    full-speed seconds as of ``ref``) advanced at the old factor, and its event moved
    from the list of what runs to the list of what starts. Returns ``(nnew, nrun)``."""
    D = host.shape[0]
    for h in range(D):
        nbusy[h] = 0
    for d in range(D):
        if dev_busy[d]:
            nbusy[host[d]] += 1
    for d in range(D):
        if not dev_busy[d]:
            continue
        f = 1.0 + slope[d] * (nbusy[host[d]] - 1)
        k = cur[d]
        if fresh[d]:
            fresh[d] = False
            fac[d] = f
            end[k] = t + rem[d] * f
            new_t[newpos[d]] = end[k]
        elif f != fac[d]:
            rem[d] = max(rem[d] - (t - ref[d]) / fac[d], 0.0)
            ref[d] = t
            fac[d] = f
            end[k] = t + rem[d] * f
            found = 0
            while run_id[found] != k:
                found += 1
            for q in range(found, nrun - 1):
                run_t[q] = run_t[q + 1]
                run_id[q] = run_id[q + 1]
            nrun -= 1
            new_t[nnew] = end[k]
            new_id[nnew] = k
            nnew += 1
    return nnew, nrun


@_jit()
def _with_transfer_work(group, dev, kdur, succ_ptr, succ_idx, out_kernel, out_dev, per_message, D):
    """``kdur`` plus the per-message host work of every transfer at both of its ends (see
    :func:`run`'s ``hostw``): each kernel's output goes once to each other device that
    reads it; the producer posts it, the first kernel there that reads it takes it over."""
    kd = kdur.copy()
    sent = np.zeros(D, np.bool_)
    first = np.full(D, -1, np.int64)
    for i in range(group.shape[0]):
        if group[i] != i:
            continue
        for j in range(succ_ptr[i], succ_ptr[i + 1]):
            dc = out_dev[j]
            if dc != dev[i]:
                sent[dc] = True
                if first[dc] < 0 or out_kernel[j] < first[dc]:
                    first[dc] = out_kernel[j]
        for dd in range(D):
            if sent[dd]:
                kd[i] += per_message[dev[i]]
                kd[first[dd]] += per_message[dd]
                sent[dd] = False
                first[dd] = -1
    return kd


@_jit()
def run(group, dev, kdur, kout, ktemp, kprio, use_fifo, mhead, mnext,
        pred_ptr, pred_idx, succ_ptr, succ_idx, succ_bytes, bw, lat, ndev, shared, host, slope,
        hostw, olat, alias, sbuf, ws):
    """Simulate one plan. Kernels are the nodes with ``group[i] == i``.

    Parameters (N nodes, E edges, D devices)
    ----------
    group : int64 (N,)           root of each node's kernel (from :func:`fuse`)
    dev : int64 (N,)             device of each node
    kdur, ktemp, kprio : (N,)    per kernel, from :func:`kernel_costs`
    kout : float64 (N,)          bytes of each node's output tensor
    use_fifo : bool              ignore ``kprio``: run kernels in the order they became
                                 ready (TensorFlow's executor), an O(1) queue; else the
                                 highest priority first, ties to the lower index
    mhead, mnext : int64 (N,)    members of each kernel as linked lists
    pred_ptr, pred_idx : CSR     node predecessors
    succ_ptr, succ_idx, succ_bytes : CSR   node successors and the bytes each edge carries
    bw, lat : float64 (D, D)     link bandwidth (bytes/s) and latency (s)
    shared : bool                some devices share a host and slow each other down
                                 (:func:`_share_host`); False skips all of that
    host : int64 (D,)            each device's host
    slope : float64 (D,)         how much longer a kernel takes per other busy device of
                                 its host: ``(shared_slowdown - 1) / (host's devices - 1)``
    hostw : float64 (2 + 2K, D)  seconds of each device's own time per byte (row 0) and
                                 per message (row 1) it sends or receives (its core
                                 handles them); 0: transfers are free to both ends. A
                                 message's posting lengthens its producer, its hand-over
                                 the first kernel there that reads it. Its bytes are
                                 copied while it is in flight (the link's time, measured
                                 end to end, includes the copies): they cost a device
                                 only the part of the copy it was not idle for, paid by
                                 the next kernel it starts (less any idle time since).
                                 Rows 2 to K + 1: seconds a kernel takes beyond its own
                                 after the device sat idle for the seconds in rows K + 2
                                 to 2K + 1 (non-decreasing; linear in between, from 0 at
                                 no idle, and the last beyond); all 0: idling is free.
    olat : bool                  links busy for ``bytes / bandwidth`` only, the tensor
                                 arriving ``latency`` later (Cluster.overlap_latency);
                                 else busy for the whole ``latency + bytes / bandwidth``
    alias : int64 (N,)           the input a kernel's output is a view of (-1: none,
                                 :attr:`Problem.alias`): that input's memory (its
                                 producer's output, or its received copy) stays until
                                 the view's own readers are done, as a tensor's storage
                                 outlives its base's last reader while a view of it lives
    sbuf : float64 (N,) or (0,)  empty: the simulator's own transfer rule; else every
                                 transfer's tensors held all step
                                 (:meth:`Problem.with_step_buffers`): a sent output
                                 until the step ends, with the copy ``sbuf[k]`` its
                                 sender makes per destination, a received one from the
                                 step's start (added to ``peak`` as each device's
                                 received bytes)
    ws : :func:`workspace`

    Returns
    -------
    step, peak (D,), busy (D,), bytes_moved, start (N,), end (N,), and the transfers:
    count, kernel (T,), destination (T,), start (T,), end (T,), bytes (T,). All but
    ``peak``, ``busy`` and the transfers' kernel and destination are views into ``ws``:
    copy them before the next call.
    ``start`` and ``end`` are meaningful for kernels only.

    Notes
    -----
    O(N + E + (K + T) * (D + D*D)) for K kernels and T transfers; the last term inserts
    each into the list of what runs, sorted latest first: at most one kernel per device
    and one transfer per link, and a new one ends after most of them, so the walk is
    short and the next event is always last (measured: faster than a binary heap or a
    scan for the minimum, on random placements). The hot loop is written out by hand:
    numba counts references to every array handed to an inlined helper, and those counts
    took a sixth of the engine's time.
    """
    n = group.shape[0]
    D = ndev
    (start, end, pending, out_ref, tr_first, recv_ref, hbuf,
     tr_k, tr_dst, tr_start, tr_end, tr_bytes, tr_next) = ws[:13]
    in_dev, out_kernel, out_dev = ws[24:27]
    held, freed = ws[44], ws[45]
    nfreed = 0
    hold = sbuf.shape[0] > 0
    # A kernel waits for one arrival per edge entering its group. Fusion builds in-trees,
    # so the edges leaving a kernel are exactly its root's out-edges. The kernel and
    # device at the far end of every edge are looked up here once, so that the event
    # loop reads them in sequence.
    count = np.zeros(D, np.int64)
    for i in range(n):
        pending[i] = 0
        held[i] = -1
    for i in range(n):
        g = group[i]
        if g == i:
            count[dev[i]] += 1
            for j in range(succ_ptr[i], succ_ptr[i + 1]):
                c = group[succ_idx[j]]
                out_kernel[j] = c
                out_dev[j] = dev[c]
                pending[c] += 1
        for j in range(pred_ptr[i], pred_ptr[i + 1]):
            p = pred_idx[j]
            in_dev[j] = -1 if group[p] == g else dev[p]
    base = np.zeros(D, np.int64)
    for d in range(1, D):
        base[d] = base[d - 1] + count[d - 1]
    if hostw[1].max() > 0.0:
        kdur = _with_transfer_work(group, dev, kdur, succ_ptr, succ_idx, out_kernel, out_dev,
                                   hostw[1], D)
    # the bytes' host work as each device's debt: see hostw above
    copies = hostw[0].max() > 0.0
    debt = np.zeros(D)
    debt_at = np.zeros(D)
    idle_since = np.zeros(D)
    nwake = (hostw.shape[0] - 2) // 2
    waking = nwake > 0 and hostw[2:2 + nwake].max() > 0.0
    extra = np.zeros(D)  # what the kernel each device runs now takes beyond its own time
    hsize = np.zeros(D, np.int64)
    qhead = np.zeros(D, np.int64)
    ntr = 0
    head = np.full(D * D, -1, np.int64)
    tail = np.full(D * D, -1, np.int64)
    # What runs now: at most one kernel per device and one transfer per link, each an
    # event (end time, id) with id = kernel, or N + transfer, kept sorted latest first.
    # Events at one time are handled in id order: kernel ends first, each kind in index
    # order.
    dev_busy = np.zeros(D, np.bool_)
    link_busy = np.zeros(D * D, np.bool_)
    # with overlapped latencies, transfers whose link is free again are still in flight:
    # each is an event of its own (id N + T + transfer for the link's release)
    ncap = tr_k.shape[0]
    nslots = D + D * D + (ncap if olat else 0)
    run_t = np.empty(nslots)
    run_id = np.empty(nslots, np.int64)
    nrun = 0
    new_t = np.empty(D + 2 * D * D)
    new_id = np.empty(D + 2 * D * D, np.int64)
    ended = np.empty(nslots, np.int64)
    mem = np.zeros(D)
    peak = np.zeros(D)
    busy = np.zeros(D)
    moved = 0.0
    tmpb = np.full(D, -1.0)
    nrecv = np.zeros(D, np.int64)
    dirty_dev = np.zeros(D, np.bool_)
    dirty_link = np.zeros(D * D, np.bool_)
    dev_list = np.empty(D, np.int64)
    link_list = np.empty(D * D, np.int64)
    ndl = 0
    nll = 0
    nnew = 0
    # per device, for hosts shared: its kernel, full-speed seconds of work left as of a
    # time, the factor it runs slower by, whether it started at this instant, and where
    cur = np.empty(D, np.int64)
    rem = np.empty(D)
    ref = np.empty(D)
    fac = np.ones(D)
    fresh = np.zeros(D, np.bool_)
    newpos = np.empty(D, np.int64)
    nbusy = np.empty(D, np.int64)

    for k in range(n):
        if group[k] == k and pending[k] == 0:
            d = dev[k]
            if use_fifo:
                hbuf[base[d] + hsize[d]] = k
            else:
                _ready_push(hbuf, base[d], hsize[d], k, kprio)
            hsize[d] += 1
    for d in range(D):
        dirty_dev[d] = True
        dev_list[ndl] = d
        ndl += 1

    t = 0.0
    step = 0.0
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
                extra[d] = 0.0
                if copies:
                    pay = debt[d] - (t - max(idle_since[d], debt_at[d]))
                    if pay > 0.0:
                        extra[d] = pay
                    debt[d] = 0.0
                if waking and t > idle_since[d]:
                    idle = t - idle_since[d]
                    w = 0
                    while w < nwake - 1 and hostw[2 + nwake + w, d] < idle:
                        w += 1
                    hi = hostw[2 + nwake + w, d]
                    if idle >= hi:
                        extra[d] += hostw[2 + w, d]
                    else:
                        lo = hostw[1 + nwake + w, d] if w > 0 else 0.0
                        clo = hostw[1 + w, d] if w > 0 else 0.0
                        extra[d] += clo + (hostw[2 + w, d] - clo) * (idle - lo) / (hi - lo)
                dk = kdur[k] + extra[d]
                end[k] = t + dk
                dev_busy[d] = True
                new_t[nnew] = end[k]
                new_id[nnew] = k
                if shared:
                    cur[d] = k
                    rem[d] = dk
                    ref[d] = t
                    fresh[d] = True
                    newpos[d] = nnew
                nnew += 1
                mem[d] += kout[k] + ktemp[k]
                if mem[d] > peak[d]:
                    peak[d] = mem[d]
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
                # Problem.transfer_time's formula, inline: numba cannot call the method
                wire = tr_bytes[tr] / bw[a, b]
                tr_end[tr] = t + lat[a, b] + wire
                link_busy[li] = True
                new_t[nnew] = tr_end[tr]
                new_id[nnew] = n + tr
                nnew += 1
                if olat:
                    new_t[nnew] = t + wire
                    new_id[nnew] = n + ncap + tr
                    nnew += 1
                if not hold:
                    mem[b] += tr_bytes[tr]
                    if mem[b] > peak[b]:
                        peak[b] = mem[b]
                moved += tr_bytes[tr]
        nll = 0
        if shared:
            nnew, nrun = _share_host(t, host, slope, dev_busy, cur, rem, ref, fac, fresh, newpos,
                                     nbusy, end, new_t, new_id, nnew, run_t, run_id, nrun)
        # insert what started (it ends after most of what runs: a short walk and no
        # search for the next event, which is last)
        for e in range(nnew):
            tt = new_t[e]
            x = new_id[e]
            q = nrun
            while q > 0 and (run_t[q - 1] < tt or (run_t[q - 1] == tt and run_id[q - 1] < x)):
                run_t[q] = run_t[q - 1]
                run_id[q] = run_id[q - 1]
                q -= 1
            run_t[q] = tt
            run_id[q] = x
            nrun += 1
        nnew = 0
        if nrun == 0:
            break
        t = run_t[nrun - 1]
        step = t
        # take every event at time t off the end, in id order
        nev = 0
        while nrun > 0 and run_t[nrun - 1] == t:
            nrun -= 1
            ended[nev] = run_id[nrun]
            nev += 1
        # handle them all before dispatching again, so that memory freed at t is free for
        # kernels that start at t
        for e in range(nev):
            x = ended[e]
            if x < n:  # a kernel ends
                k = x
                d = dev[k]
                dev_busy[d] = False
                busy[d] += end[k] - start[k] if shared else kdur[k] + extra[d]
                idle_since[d] = t
                mem[d] -= ktemp[k]
                if not dirty_dev[d]:
                    dirty_dev[d] = True
                    dev_list[ndl] = d
                    ndl += 1
                # release the inputs: one reference per edge entering the group
                m = mhead[k]
                while m >= 0:
                    for j in range(pred_ptr[m], pred_ptr[m + 1]):
                        pd = in_dev[j]
                        if pd < 0:
                            continue
                        p = pred_idx[j]
                        if pd == d:
                            if m == k and alias[k] == p:  # kept while the view is read
                                held[k] = p
                                continue
                            out_ref[p] -= 1
                            if out_ref[p] == 0:
                                freed[nfreed] = p
                                nfreed += 1
                        else:  # p's transfers to each device were made in a row
                            tr = tr_first[p]
                            while tr_dst[tr] != d:
                                tr += 1
                            if m == k and alias[k] == p:
                                held[k] = -2 - tr
                                continue
                            recv_ref[tr] -= 1
                            if recv_ref[tr] == 0:
                                mem[d] -= tr_bytes[tr]
                    m = mnext[m]
                # deliver the output: locally per edge, remotely once per device
                nref = 0
                remote = False
                for j in range(succ_ptr[k], succ_ptr[k + 1]):
                    c = out_kernel[j]
                    dc = out_dev[j]
                    if dc == d:
                        nref += 1
                        pending[c] -= 1
                        if pending[c] == 0:
                            if use_fifo:
                                hbuf[base[d] + qhead[d] + hsize[d]] = c
                            else:
                                _ready_push(hbuf, base[d], hsize[d], c, kprio)
                            hsize[d] += 1
                    else:
                        remote = True
                        if succ_bytes[j] > tmpb[dc]:
                            tmpb[dc] = succ_bytes[j]
                        nrecv[dc] += 1
                tr_first[k] = ntr
                for dd in range(D if remote else 0):
                    if tmpb[dd] >= 0.0:
                        nref += 1
                        tr = ntr
                        ntr += 1
                        tr_k[tr] = k
                        tr_dst[tr] = dd
                        tr_bytes[tr] = tmpb[dd]
                        tr_next[tr] = -1
                        # held: a count that never runs out (freed when the step ends)
                        recv_ref[tr] = nrecv[dd] + (1 << 30 if hold else 0)
                        tmpb[dd] = -1.0
                        nrecv[dd] = 0
                        if hold and sbuf[k] > 0.0:  # the sender's packed copy, to the end
                            mem[d] += sbuf[k]
                            if mem[d] > peak[d]:
                                peak[d] = mem[d]
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
                out_ref[k] = nref + (1 << 30 if hold and remote else 0)
                if out_ref[k] == 0:
                    freed[nfreed] = k
                    nfreed += 1
            elif x >= n + ncap:  # a link is free again; its transfer is still in flight
                tr = x - n - ncap
                li = dev[tr_k[tr]] * D + tr_dst[tr]
                link_busy[li] = False
                if not dirty_link[li]:
                    dirty_link[li] = True
                    link_list[nll] = li
                    nll += 1
            else:  # a transfer ends
                tr = x - n
                k = tr_k[tr]
                b = tr_dst[tr]
                a = dev[k]
                li = a * D + b
                if copies:  # each end copied the bytes while they were in flight
                    for e2 in range(2):
                        de = a if e2 == 0 else b
                        w = tr_bytes[tr] * hostw[0, de]
                        if not dev_busy[de]:
                            w -= t - max(tr_start[tr], idle_since[de])
                        if w > 0.0:
                            debt[de] += w
                            debt_at[de] = t
                if not olat:
                    link_busy[li] = False
                    if not dirty_link[li]:
                        dirty_link[li] = True
                        link_list[nll] = li
                        nll += 1
                out_ref[k] -= 1
                if out_ref[k] == 0:
                    freed[nfreed] = k
                    nfreed += 1
                for j in range(succ_ptr[k], succ_ptr[k + 1]):
                    if out_dev[j] == b:
                        c = out_kernel[j]
                        pending[c] -= 1
                        if pending[c] == 0:
                            if use_fifo:
                                hbuf[base[b] + qhead[b] + hsize[b]] = c
                            else:
                                _ready_push(hbuf, base[b], hsize[b], c, kprio)
                            hsize[b] += 1
                if not dirty_dev[b]:
                    dirty_dev[b] = True
                    dev_list[ndl] = b
                    ndl += 1
        # free the outputs nobody needs any more, and what each kept alive as a view
        # (before anything starts at t, as every release at t is)
        while nfreed > 0:
            nfreed -= 1
            x = freed[nfreed]
            dx = dev[x]
            mem[dx] -= kout[x]
            y = held[x]
            if y < -1:
                recv_ref[-2 - y] -= 1
                if recv_ref[-2 - y] == 0:
                    mem[dx] -= tr_bytes[-2 - y]
            elif y >= 0:
                out_ref[y] -= 1
                if out_ref[y] == 0:
                    freed[nfreed] = y
                    nfreed += 1
    if hold:  # received tensors: allocated before the step, all at once
        for tr in range(ntr):
            peak[tr_dst[tr]] += tr_bytes[tr]
    return (step, peak, busy, moved, start, end, ntr, tr_k[:ntr].astype(np.int64),
            tr_dst[:ntr].astype(np.int64), tr_start[:ntr], tr_end[:ntr], tr_bytes[:ntr])


@_jit()
def critical_path(ptr_p, idx_p, t):
    """Length of the longest path where node i takes ``t[i]`` (no communication)."""
    n = t.shape[0]
    fin = np.zeros(n)
    best = 0.0
    for v in range(n):
        s = 0.0
        for j in range(ptr_p[v], ptr_p[v + 1]):
            if fin[idx_p[j]] > s:
                s = fin[idx_p[j]]
        fin[v] = s + t[v]
        if fin[v] > best:
            best = fin[v]
    return best


# -- one plan and a batch of plans -----------------------------------------------------
# One workspace per thread, for the last size simulated there. A fresh one per call would
# cost 0 to 50% of a simulation, depending on whether the C allocator returns its pages
# to the system in between (measured on a 10,000-op graph).
_scratch = threading.local()


def evaluate(place, prio, use_fifo, fprio, fusion_mode, pred_ptr, pred_idx, succ_ptr, succ_idx,
             succ_bytes, time, flop_t, mem_t, launch, spb, cls, out_bytes, temp_bytes,
             persistent, coloc, capacity, bw, lat, cand, single_eb, fflags, level, max_fuse,
             max_ops, large_ops, large_slope, shared, host, slope, hostw, olat, alias, sbuf, ecap):
    """:func:`evaluate_in` in this thread's work arrays.

    Its result depends on its arguments alone (the engine writes every work array before
    reading it) and threads never share work arrays; but arrays in the result are views
    into them, valid until this thread's next call.
    """
    key = (place.shape[0], capacity.shape[0], ecap)
    if getattr(_scratch, "key", None) != key:
        _scratch.ws = workspace(*key)
        _scratch.key = key
    return evaluate_in(place, prio, use_fifo, fprio, fusion_mode, pred_ptr, pred_idx, succ_ptr,
                       succ_idx, succ_bytes, time, flop_t, mem_t, launch, spb, cls, out_bytes,
                       temp_bytes, persistent, coloc, capacity, bw, lat, cand, single_eb, fflags,
                       level, max_fuse, max_ops, large_ops, large_slope, shared, host, slope,
                       hostw, olat, alias, sbuf, _scratch.ws)


@_jit()
def evaluate_in(place, prio, use_fifo, fprio, fusion_mode, pred_ptr, pred_idx, succ_ptr,
                succ_idx, succ_bytes, time, flop_t, mem_t, launch, spb, cls, out_bytes,
                temp_bytes, persistent, coloc, capacity, bw, lat, cand, single_eb, fflags, level,
                max_fuse, max_ops, large_ops, large_slope, shared, host, slope, hostw, olat, alias,
                sbuf, ws):
    """Fuse, cost the kernels, run, check validity, in the work arrays ``ws``.
    ``fusion_mode``: 0 none, 1 the compiler's default, 2 by ``fprio``. Returns ``(run's
    result, group, state (bit 1: duplicated), number of kernels, validity code, device or
    colocation group at fault)``; arrays in it may be views into ``ws``. Groups that are in-trees run on the
    node graph itself; with a duplicated op or merged siblings, on the kernel graph of
    :func:`kernel_graph`."""
    n = place.shape[0]
    ndev = capacity.shape[0]
    fused = fusion_mode != 0
    general = False
    if fused:
        group, anydup, multi = fuse(place, fprio, fusion_mode == 1, cand, fflags, level,
                                    succ_ptr, succ_idx, succ_bytes, pred_ptr, spb, cls, max_fuse,
                                    max_ops, ws)
        general = anydup or multi
    else:
        group = ws[23]
        state = ws[28]
        for i in range(n):
            group[i] = i
            state[i] = 0
    if general:
        g2, kdur, kout, ktemp, kprio, mh, mn, kpp, kpi, ksp, ksi, ksb = kernel_graph(
            group, place, prio, time, flop_t, mem_t, launch, spb, cls, temp_bytes, out_bytes,
            succ_ptr, succ_idx, succ_bytes, large_ops, large_slope, ws)
        # a kernel graph's nodes are kernels and copies: no view is a kernel of its own there
        res = run(g2, place, kdur, kout, ktemp, kprio, use_fifo, mh, mn, kpp, kpi, ksp, ksi,
                  ksb, bw, lat, ndev, shared, host, slope, hostw, olat,
                  np.full(g2.shape[0], -1, np.int64),
                  np.zeros(g2.shape[0] if sbuf.shape[0] > 0 else 0), ws)
    else:
        kdur, ktemp, kprio, mhead, mnext = kernel_costs(group, place, prio, fused, time, flop_t,
                                                        mem_t, launch, spb, cls, temp_bytes,
                                                        single_eb, cand, large_ops, large_slope,
                                                        ws)
        res = run(group, place, kdur, out_bytes, ktemp, kprio, use_fifo, mhead, mnext, pred_ptr,
                  pred_idx, succ_ptr, succ_idx, succ_bytes, bw, lat, ndev, shared, host, slope,
                  hostw, olat, alias, sbuf, ws)
    nk = 0
    ngroups = 0
    peak = res[1]
    for i in range(n):
        if group[i] == i:
            nk += 1
        peak[place[i]] += persistent[i]
        if coloc[i] + 1 > ngroups:
            ngroups = coloc[i] + 1
    code, arg = OK, -1
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
    return res, group, ws[28], nk, code, arg


@_jit(parallel=True)
def evaluate_batch(places, prios, fifo, fprios, mode, pred_ptr, pred_idx, succ_ptr, succ_idx,
                   succ_bytes, time, flop_t, mem_t, launch, spb, cls, out_bytes, temp_bytes,
                   persistent, coloc, capacity, bw, lat, cand, single_eb, fflags, level, max_fuse,
                   max_ops, large_ops, large_slope, shared, host, slope, hostw, olat, alias, sbuf,
                   ecap, nthreads):
    """:func:`evaluate_in` for B plans in chunks of plans, one workspace per chunk.

    There are a few chunks per thread, handed out one at a time (the caller sets numba's
    parallel chunk size to 1), so a core slowed by another process does not hold the
    whole batch back; a workspace per chunk keeps allocations to a handful per batch.
    """
    b = places.shape[0]
    n = places.shape[1]
    step = np.zeros(b)
    peak = np.zeros((b, capacity.shape[0]))
    code = np.zeros(b, np.int64)
    arg = np.zeros(b, np.int64)
    nchunks = max(1, min(b, 4 * nthreads))
    for c in prange(nchunks):
        ws = workspace(n, capacity.shape[0], ecap)
        for i in range(c * b // nchunks, (c + 1) * b // nchunks):
            res, _, _, _, cd, a = evaluate_in(places[i], prios[i], fifo, fprios[i], mode, pred_ptr,
                                           pred_idx, succ_ptr, succ_idx, succ_bytes, time,
                                           flop_t, mem_t, launch, spb, cls, out_bytes,
                                           temp_bytes, persistent, coloc, capacity, bw, lat,
                                           cand, single_eb, fflags, level, max_fuse, max_ops,
                                           large_ops, large_slope, shared, host, slope, hostw, olat,
                                           alias, sbuf, ws)
            step[i] = res[0]
            peak[i, :] = res[1]
            code[i] = cd
            arg[i] = a
    return step, peak, code, arg


@_jit()
def levels(pred_ptr, pred_idx):
    """Longest path (in edges) from a source to each node, nodes in topological order."""
    n = pred_ptr.shape[0] - 1
    lev = np.zeros(n, np.int64)
    for v in range(n):
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            if lev[pred_idx[j]] + 1 > lev[v]:
                lev[v] = lev[pred_idx[j]] + 1
    return lev


def ensure_compiled() -> bool:
    """Compile the engine for :func:`~graphopt.sim.simulate` and
    :func:`~graphopt.sim.simulate_batch`, or load it from numba's cache, by simulating a
    tiny problem; afterwards, neither compiles on first use.

    Returns
    -------
    bool
        True when this call compiled (tens of seconds); False when the engine was
        already loaded in this process or came from the on-disk cache.

    Examples
    --------
    >>> from graphopt.sim import ensure_compiled
    >>> isinstance(ensure_compiled(), bool)
    True
    """
    from graphopt.hardware import load_cluster  # the sim package imports this module
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.sim.plan import Plan
    from graphopt.sim.problem import Problem, simulate, simulate_batch

    fns = (evaluate_in, evaluate_batch, critical_path, levels)

    def misses() -> int:
        return sum(sum(f.stats.cache_misses.values()) for f in fns)

    before = misses()
    prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    simulate(prob, Plan())  # the lower bound too
    simulate_batch(prob, np.zeros((1, prob.num_nodes), np.int64))
    return misses() > before


def evaluate_problem(problem, place, prio, use_fifo, fprio, fusion_mode):
    """:func:`evaluate` on a current :class:`graphopt.sim.Problem`, whose ``arrays()`` may
    have changed since: the arrays this engine reads, by name."""
    p, c = problem, problem.costs
    return evaluate(place, prio, use_fifo, fprio, fusion_mode, p.pred_ptr, p.pred_idx,
                    p.succ_ptr, p.succ_idx, p.succ_bytes, c.time, c.flop_time, c.mem_time,
                    c.launch, c.sec_per_byte, c.class_id, p.out_bytes, p.temp_bytes,
                    p.persistent, p.coloc, p.capacity, p.bandwidth, p.latency, p.cand_consumer,
                    p.single_edge_bytes, p.fusion_flags, p.level, p.max_fusion_size,
                    p.max_fusion_operands, p.fusion_efficient_ops, p.fusion_slowdown_per_op,
                    p.shared, p.host, p.slope, p.host_work, p.overlap_latency, p.alias,
                    p.step_buffers, p.edge_capacity)


def evaluate_batch_problem(problem, places, prios, fifo, fprios, mode, nthreads):
    """:func:`evaluate_batch` on a current :class:`graphopt.sim.Problem` (see
    :func:`evaluate_problem`)."""
    p, c = problem, problem.costs
    return evaluate_batch(places, prios, fifo, fprios, mode, p.pred_ptr, p.pred_idx,
                          p.succ_ptr, p.succ_idx, p.succ_bytes, c.time, c.flop_time, c.mem_time,
                          c.launch, c.sec_per_byte, c.class_id, p.out_bytes, p.temp_bytes,
                          p.persistent, p.coloc, p.capacity, p.bandwidth, p.latency,
                          p.cand_consumer, p.single_edge_bytes, p.fusion_flags, p.level,
                          p.max_fusion_size, p.max_fusion_operands, p.fusion_efficient_ops,
                          p.fusion_slowdown_per_op, p.shared, p.host, p.slope, p.host_work,
                          p.overlap_latency, p.alias, p.step_buffers, p.edge_capacity, nthreads)
