"""Out-of-bounds checks for kernels run under TRITON_INTERPRET=1.

On the GPU a masked-off lane touches no memory, but an active lane outside every allocation is an illegal
address (or, inside a neighbour's allocation, silent corruption). The interpreter reads and writes host
memory and reports neither. Inside ``checked_bounds()`` every active lane of every load, store and atomic
must fall inside the storage of one of the launch's tensor arguments, else ``OutOfBounds`` is raised before
the access (the interpreter wraps it in an InterpreterError carrying the message).
"""
from __future__ import annotations

import contextlib

import numpy as np


class OutOfBounds(AssertionError):
    pass


def _storages(args, out):
    for a in args:
        if isinstance(a, (tuple, list)):
            _storages(a, out)
        elif hasattr(a, "untyped_storage"):
            st = a.untyped_storage()
            out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))


@contextlib.contextmanager
def checked_bounds():
    from triton.runtime import interpreter as interp

    ranges: list = []  # [lo, hi) byte ranges of the running launch's tensor arguments
    executor, builder = interp.GridExecutor, interp.InterpreterBuilder
    saved = {name: getattr(builder, name) for name in
             ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")}
    init = executor._init_args_hst

    def init_args(self, args_dev, kwargs):
        hst, khst = init(self, args_dev, kwargs)
        ranges.clear()
        _storages(list(hst) + list(khst.values()), ranges)
        return hst, khst

    def check(op, ptrs, mask):
        addr = np.asarray(ptrs.data).astype(np.uint64)
        if mask is not None:
            addr = addr[np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)]
        size = np.dtype(interp._get_np_dtype(ptrs.get_element_ty())).itemsize
        ok = np.zeros(addr.shape, dtype=bool)
        for lo, hi in ranges:
            ok |= (addr >= lo) & (addr + size <= hi)
        if not ok.all():
            bad = addr[~ok]
            near = min(ranges, key=lambda r: min(abs(int(bad[0]) - r[0]), abs(int(bad[0]) - r[1])), default=None)
            raise OutOfBounds(f"{op}: {bad.size} active lane(s) outside every tensor argument, first at "
                              f"{int(bad[0]):#x} (nearest argument storage [{near[0]:#x}, {near[1]:#x}))"
                              if near else f"{op}: a launch without tensor arguments touched memory")

    def masked_load(self, ptrs, mask, other, *a, **kw):  # kw: TMA descriptor loads pass cache_policy etc.
        check("load", ptrs, mask)
        return saved["create_masked_load"](self, ptrs, mask, other, *a, **kw)

    def masked_store(self, ptrs, value, mask, *a, **kw):
        check("store", ptrs, mask)
        return saved["create_masked_store"](self, ptrs, value, mask, *a, **kw)

    def atomic_rmw(self, op, ptr, val, mask, *a):
        check("atomic", ptr, mask)
        return saved["create_atomic_rmw"](self, op, ptr, val, mask, *a)

    def atomic_cas(self, ptr, cmp, val, *a):
        check("atomic_cas", ptr, None)
        return saved["create_atomic_cas"](self, ptr, cmp, val, *a)

    executor._init_args_hst = init_args
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    try:
        yield
    finally:
        executor._init_args_hst = init
        for name, fn in saved.items():
            setattr(builder, name, fn)
