"""The cached launcher (fused.kernels.launch): same results as Triton's own launch path, and a new
compilation whenever Triton would specialize differently (alignment, ints equal to 1 or divisible by 16)."""
import pytest
import torch

from fused.kernels import launch
from fused.reference import gated_ref, linear_ref
from lowbit import quantize_weight, sqnr


def test_key_separates_what_triton_specializes_on():
    a = torch.empty(64, dtype=torch.int8)
    k = launch._key
    assert k([a[0:]]) != k([a[1:]])  # 16-byte aligned vs not
    assert k([a]) != k([a.view(torch.uint8)])
    assert k([1]) != k([2]) != k([16]) != k([17])
    assert k([2 ** 31]) != k([2 ** 31 - 16])  # i64 vs i32
    assert k([True]) != k([1])
    assert k([None]) != k([0])
    assert k([a, 3]) == k([a[0:], 3])  # same alignment, same value: same launcher


def test_hook_detection():
    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not launch._installed(None) and not launch._installed(Chain([]))
    assert launch._installed(Chain([print])) and launch._installed(print)


def _case(M, N, K, fmt="int8", device="cuda"):
    w = torch.randn(N, K, device=device)
    q, s = quantize_weight(w, fmt)
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    return x, q, s


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_cached_launch_matches_jit_launch(fmt, monkeypatch):
    from fused.kernels.w8_gemm import w8_gemm
    from fused.kernels.w8a16_gemv import w8a16_gemv

    assert launch.ENABLED
    for M, fn in ((1, w8a16_gemv), (5, w8a16_gemv), (300, w8_gemm)):
        x, q, s = _case(M, 2 * 96, 272, fmt)
        first = fn(x, q, s, None, "silu", True)  # compiles, or a cache hit from an earlier test
        second = fn(x, q, s, None, "silu", True)  # the cached launcher
        monkeypatch.setattr(launch, "ENABLED", False)
        slow = fn(x, q, s, None, "silu", True)  # Triton's own launch path
        monkeypatch.setattr(launch, "ENABLED", True)
        assert torch.equal(first, second) and torch.equal(second, slow), M
        assert sqnr(gated_ref(x, q, s, None, "silu"), second) > 40


@pytest.mark.cuda
def test_cached_launch_respects_alignment_and_unit_strides():
    from fused.kernels.w8a16_gemv import w8a16_gemv

    x, q, s = _case(1, 80, 272)
    base = torch.randn(3, 274, device="cuda", dtype=torch.bfloat16)
    views = [x, base[:1, 1:273], base[:, 2:].t().contiguous().t()[:1, :272], base[1:2, :272]]
    for v in views * 2:  # twice: the second round runs from the cache
        y = w8a16_gemv(v, q, s, None, "gelu")
        assert sqnr(linear_ref(v, q, s, None, "gelu"), y) > 40, (v.stride(), v.data_ptr() % 16)


def test_unhashable_argument_takes_tritons_path_and_is_not_recorded(monkeypatch):
    """A host TMA descriptor (unhashable) cannot key the cache: the launch goes through ``fn[grid]`` every time,
    and a recording in progress is refused (the descriptor holds a tensor's address)."""
    class Desc:  # unhashable, as triton.tools.tensor_descriptor.TensorDescriptor
        __hash__ = None

    calls = []

    class Fn:
        params = []

        def __getitem__(self, grid):
            return lambda *a, **kw: calls.append((grid, a, kw))

    monkeypatch.setattr(launch, "ENABLED", True)
    x, d = torch.randn(4, 8), Desc()
    rec = launch.start_recording(x, [])
    try:
        for _ in range(2):
            launch.launch_kernel(Fn(), (3,), x, d, 5, BLOCK=16)
    finally:
        launch.stop_recording()
    assert [c[0] for c in calls] == [(3,), (3,)] and all(c[1][1] is d and c[2] == {"BLOCK": 16} for c in calls)
    assert not rec.ok and not any(k[0].__class__ is Fn for k in launch._cache)


# ------------------------------------------------------------------------------------------- replay
class _FakeCompiled:
    run = function = packed_metadata = None


def test_recording_places_every_tensor_or_refuses():
    x = torch.randn(4, 8)
    w = torch.randn(8, 8)
    rec = launch.Recording(x, [w])
    launch._rec = rec
    try:
        y = launch.empty((4, 8), device="cpu", dtype=torch.float32)
    finally:
        launch.stop_recording()
    rec.add(_FakeCompiled(), ("TAIL",), (2,), (x, w, y.view(torch.int32), 4, 8))
    (_, g0, g1, g2, _, _, template, subs), = rec.launches
    assert rec.ok and (g0, g1, g2) == (2, 1, 1)
    # x and the output are filled in per replay (and not kept alive); the weight is a constant
    assert template[0] is None and template[1] is w and template[2] is None and template[3:] == [4, 8, "TAIL"]
    assert subs == ((0, -1), (2, 0))  # the launcher takes only the address: a dtype view changes nothing
    rec.add(_FakeCompiled(), (), (1,), (x * 2,))  # made by a torch op on the way: cannot be replayed
    assert not rec.ok


def test_recording_keeps_its_outputs_alive_so_no_foreign_tensor_takes_their_address():
    # an intermediate freed during the recording call must not lend its address to a tensor made by a torch
    # op (a cuBLAS product, a graph's output): that tensor would pass for the intermediate, and a replay would
    # skip the op and read stale memory
    x = torch.randn(4, 8)
    rec = launch.start_recording(x, [])
    try:
        for _ in range(8):
            t = launch.empty((4096,), device="cpu", dtype=torch.float32)
            ptr = t.data_ptr()
            del t
            u = torch.empty(4096)  # made outside the kernels
            assert u.data_ptr() != ptr
            rec.add(_FakeCompiled(), (), (1,), (u,))
    finally:
        launch.stop_recording()
    assert not rec.ok


def test_replay_carves_intermediates_from_one_buffer():
    # outputs of a 3-launch call: two intermediates and the call's output (index 1); the intermediates share
    # one allocation at 512-byte offsets (16-byte alignment as specialised), the output gets its own
    rec = launch.Recording(torch.zeros(1), [])
    rec.allocs = [((3, 5), torch.bfloat16), ((2, 4), torch.float32), ((7,), torch.float32), ((600,), torch.uint8)]
    r = launch.Replay(rec, 1, None, ())
    assert r.out_alloc == ((2, 4), torch.float32)
    assert r.offsets == (0, 512, 512, 1024) and r.total == 2048


def test_grown_split_k_workspace_keeps_the_old_one_allocated(monkeypatch):
    """A larger split-K workspace replaces the device's, and the old one stays allocated: a CUDA graph captured before
    keeps its addresses (else the caching allocator could hand them on while the graph still writes partials there).
    A buffer that grows at least doubles, so the retired ones hold less than the current one."""
    from fused.kernels import splitk

    monkeypatch.setattr(splitk, "_workspace", {})
    monkeypatch.setattr(splitk, "_retired", [])
    old = splitk.buffers("cpu", 16, 8)
    assert splitk.buffers("cpu", 16, 8) is old  # big enough: the same
    new = splitk.buffers("cpu", (1 << 20) + 1, 8)
    assert len(splitk._retired) == 1 and splitk._retired[0] is old
    assert new[0].numel() == 2 * old[0].numel() and new[1] is old[1]  # doubled (retired < current); counters kept
    assert all(t.data_ptr() in launch._persistent for t in new)
    for t in old + new:
        launch._persistent.discard(t.data_ptr())


def test_persistent_workspace_replacement_forgets_the_old_address():
    a, b = torch.empty(4), torch.empty(4)
    launch.persistent((a,))
    assert a.data_ptr() in launch._persistent
    launch.persistent((b,), old=(a,))
    assert a.data_ptr() not in launch._persistent and b.data_ptr() in launch._persistent
    launch._persistent.discard(b.data_ptr())


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", ["int8", "int8_w8a8", "fp8", "int8_24"])
@pytest.mark.parametrize("blocks", [True, False])
def test_eager_replay_matches_the_python_path(cfg, blocks):
    import copy

    import fused
    from fused import dispatch
    from fused.bench import make_block

    config = {"int8": fused.FusedInt8MLP(), "int8_w8a8": fused.FusedInt8MLP(weight_only=False),
              "fp8": fused.FusedFloat8MLP(), "int8_24": fused.FusedInt8MLP(sparsity="2:4")}[cfg]
    base = make_block("llama", 64, 176, "cuda")
    model = fused.quantize(copy.deepcopy(base), config, blocks=blocks)
    for shape in ((1, 64), (3, 64), (2, 17, 64), (300, 64)):
        xs = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        with torch.no_grad():
            r0 = launch.counts["replayed"]
            outs = [model(x) for x in xs]  # tune, record, replay, replay
            assert launch.counts["replayed"] > r0, shape
            with dispatch.force_path("triton"):  # the Python path, never replayed
                refs = [model(x) for x in xs]
        for o, r in zip(outs, refs):
            assert o.shape == r.shape and torch.equal(o, r), shape
    # a non-contiguous view and new weights after load_state_dict: still the Python path's results
    v = torch.randn(5, 128, device="cuda", dtype=torch.bfloat16)[:, ::2]
    other = fused.quantize(make_block("llama", 64, 176, "cuda"), config, blocks=blocks)
    with torch.no_grad():
        for _ in range(3):
            model(v)
        model.load_state_dict(other.state_dict())
        got = model(v)
        with dispatch.force_path("triton"):
            want = other(v)
    assert torch.equal(got, want)


@pytest.mark.cuda
@pytest.mark.parametrize("route", ["cublas", "cslt"])
def test_eager_calls_through_library_routes_match_the_python_path(route, monkeypatch):
    """Eager calls whose route runs a library product (cuBLAS, cuSPARSELt) are not replayable (the product is
    no kernel's output): every call gives what the Python path gives. On the H200 (2026-12-01) such calls were recorded as replayable once the product took a freed
    intermediate's address, and later calls read stale memory (bench: -1.8 dB and NaN against the reference)."""
    import copy

    import fused
    from fused import dispatch
    from fused.bench import make_block

    if route == "cublas":
        config = fused.FusedFloat8MLP(weight_only=False)
        monkeypatch.setattr(dispatch, "CUBLAS_W8A8", True)
        monkeypatch.setattr(dispatch, "_dense_routes", {})
        real = dispatch.measure_route
        monkeypatch.setattr(dispatch, "measure_route", lambda kind, key, cands, **kw:
                            ("cublas", "cublas") if "cublas" in cands else real(kind, key, cands, **kw))
    else:
        config = fused.FusedInt8MLP(sparsity="2:4")
        monkeypatch.setattr(dispatch, "SPARSE_ROUTE", "cslt")
    base = make_block("llama", 64, 192, "cuda")
    for blocks in (True, False):
        model = fused.quantize(copy.deepcopy(base), config, blocks=blocks)
        for shape in ((1, 64), (3, 64), (2, 17, 64), (300, 64)):
            xs = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(5)]
            with torch.no_grad():
                outs = [model(x) for x in xs]  # tune, record (or refuse), replay, replay
                monkeypatch.setattr(launch, "ENABLED", False)  # the Python path, never replayed
                refs = [model(x) for x in xs]
                monkeypatch.setattr(launch, "ENABLED", True)
            for i, (o, r) in enumerate(zip(outs, refs)):
                assert o.shape == r.shape and torch.equal(o, r), (blocks, shape, i)


def test_replay_status_reports_recorded_and_refused_signatures():
    from fused import dispatch

    class Owner(torch.nn.Module):
        pass

    model = torch.nn.Sequential(Owner(), Owner())
    model[0].__dict__["_replays"] = {"a": launch.Replay(launch.Recording(torch.zeros(1), []), 0, None, ())}
    model[1].__dict__["_replays"] = {"b": "no replay: no kernel launch", "c": False}
    assert dispatch.replay_status(model) == (1, [("1", "no replay: no kernel launch")], 0)
    model[1].__dict__["_replays"]["d"] = dispatch.GraphedCall.__new__(dispatch.GraphedCall)
    assert dispatch.replay_status(model)[2] == 1


def test_scratch_kernels_get_an_allocator_in_every_thread():
    """A kernel with global scratch (a device-made TMA descriptor) needs Triton's allocator, a per-thread
    ContextVar: recordings note such launches and replays set ours first, in whatever thread they run; an
    allocator the caller set is kept."""
    import threading
    import types

    import triton
    from triton.runtime import _allocation

    class Scratch(_FakeCompiled):
        metadata = types.SimpleNamespace(global_scratch_size=128)

    x = torch.randn(4, 8)
    rec = launch.Recording(x, [])
    rec.add(_FakeCompiled(), (), (1,), (x,))
    assert not rec.scratch and not launch._needs_scratch(_FakeCompiled())
    rec.add(Scratch(), (), (1,), (x,))
    assert rec.scratch and launch._needs_scratch(Scratch())
    seen = {}

    def fresh_thread():
        seen["before"] = _allocation._allocator.get()
        launch.ensure_scratch_allocator()
        seen["after"] = _allocation._allocator.get()
        mine = lambda size, align, stream: None  # noqa: E731
        triton.set_allocator(mine)
        launch.ensure_scratch_allocator()
        seen["kept"] = _allocation._allocator.get() is mine

    t = threading.Thread(target=fresh_thread)
    t.start()
    t.join()
    assert isinstance(seen["before"], _allocation.NullAllocator)
    assert seen["after"] is launch._scratch and seen["kept"]


@pytest.mark.parametrize("enabled", [True, False])
def test_first_launch_finds_an_allocator(enabled, monkeypatch):
    """Whether a kernel needs global scratch is known only once Triton has compiled it, inside the launch that
    needs it: every launch through Triton's own path (a first launch, the cache off) sets the allocator first.
    (The seventeenth session's device-made TMA descriptors failed on the H200 with "no allocator was set".)"""
    import threading

    from triton.runtime import _allocation

    seen = []

    class Fn:
        params = []

        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append(_allocation._allocator.get())

    monkeypatch.setattr(launch, "ENABLED", enabled)
    t = threading.Thread(target=lambda: launch.launch_kernel(Fn(), (1,), torch.randn(2), 3))
    t.start()
    t.join()
    assert seen == [launch._scratch]


def test_note_gain_adds_what_the_graph_pick_saves(monkeypatch):
    """A recording's gain is the route timings' graph-time difference between the eager and the graph pick."""
    from fused import dispatch
    from fused.kernels import tuning

    monkeypatch.setitem(tuning.timings, ("k_graph", 1), [(90.0, "packed"), (30.0, "cslt")])
    monkeypatch.setattr(dispatch, "_graph_gain", None)
    dispatch._note_gain("k", (1,), "packed", "cslt")  # no recording: nothing noted
    assert dispatch._graph_gain is None
    monkeypatch.setattr(dispatch, "_graph_gain", 0.0)
    dispatch._note_gain("k", (1,), "packed", "cslt")
    dispatch._note_gain("k", (1,), "cslt", "cslt")
    dispatch._note_gain("k", (2,), "packed", "cslt")  # never timed: no gain
    assert dispatch._graph_gain == 60.0


def _graph_picks_cslt(monkeypatch):
    """2:4 routes measured as usual, then made to pick packed per eager call and cuSPARSELt in graphs, with
    graph timings that make the eager graph pay."""
    from fused import dispatch
    from fused.kernels import tuning

    monkeypatch.setattr(dispatch, "_sparse_routes", {})
    real = dispatch.measure_route

    def fake(kind, key, cands, **kw):
        r = real(kind, key, cands, **kw)
        if kind == "sparse24_route" and "cslt" in cands:
            tuning.timings[(kind + "_graph",) + key] = [(100.0, "packed"), (90.0, "unpacked"), (30.0, "cslt")]
            return "packed", "cslt"
        return r

    monkeypatch.setattr(dispatch, "measure_route", fake)


@pytest.mark.cuda
def test_eager_graph_cuda(monkeypatch):
    """Eager calls whose graph picks save GPU time are replayed from a CUDA graph of the module's forward: bit-equal
    to the same model captured by the user (the same routes), on fresh inputs (no stale rows), 3-D and strided x;
    M above EAGER_GRAPH_MAX_M is recorded as before; a buffer changed in place drops the graph; past
    EAGER_GRAPH_MB nothing is captured (and stats says so)."""
    import copy

    import fused
    from fused import dispatch
    from fused.bench import make_block

    _graph_picks_cslt(monkeypatch)
    base = make_block("llama", 128, 256, "cuda")

    def captured(model, x):  # the user's own CUDA graph of the model (routes picked for capture)
        xs, ys = x.clone(), []
        g = dispatch._graph_replay(lambda: ys.append(model(xs)))
        return lambda v: (xs.copy_(v), g.replay(), ys[-1].clone())[2]

    for config in (fused.FusedInt8MLP(sparsity="2:4", weight_only=False), fused.FusedInt8MLP(sparsity="2:4")):
        for blocks in (True, False):
            model = fused.quantize(copy.deepcopy(base), config, blocks=blocks)
            for shape in ((1, 128), (3, 128), (2, 17, 128), (5, 160), (300, 128), (1100, 128)):
                with torch.no_grad():
                    xs = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16)[..., :128] for _ in range(6)]
                    before = launch.counts["graph_replayed"]
                    outs = []
                    for x in xs:
                        y = model(x)
                        outs.append(y.clone())
                        y.fill_(float("nan"))  # a clone: the graph's own output is not handed out
                    graphed = launch.counts["graph_replayed"] - before
                    ref = captured(model, xs[0])
                    want = [ref(x) for x in xs]
                M = xs[0].numel() // 128
                if M > dispatch.EAGER_GRAPH_MAX_M:
                    assert graphed == 0, (config, blocks, shape)
                    continue
                assert graphed >= 4, (config, blocks, shape, graphed)  # calls 3..6, per graphed module
                for i in range(2, 6):
                    assert torch.equal(outs[i], want[i]), (config, blocks, shape, i)
            # a buffer changed in place: the graph is dropped and made again from the new state
            x = torch.randn(4, 128, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                for _ in range(3):
                    old = model(x)
                scale = next(t for t in model.buffers() if t.dtype == torch.float32 and t.dim() == 1)
                scale.mul_(2)
                new = [model(x) for _ in range(4)]
                want = captured(model, x)(x)
            assert not torch.equal(old, new[-1]) and torch.equal(new[-1], want)
    # captured under torch.inference_mode, called outside it (and back)
    model = fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(sparsity="2:4", weight_only=False))
    x = torch.randn(4, 128, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        first = [model(x) for _ in range(3)]
    before = launch.counts["graph_replayed"]
    with torch.no_grad():
        y = model(x)
    with torch.inference_mode():
        y2 = model(x)
    assert launch.counts["graph_replayed"] == before + 2
    assert torch.equal(y, first[-1]) and torch.equal(y2, first[-1])
    # past the memory cap: no graph, said in stats, the recording replays as before
    monkeypatch.setattr(dispatch, "EAGER_GRAPH_MB", 0)
    model = fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(sparsity="2:4", weight_only=False))
    x = torch.randn(4, 128, device="cuda", dtype=torch.bfloat16)
    dispatch.stats.clear()
    before = launch.counts["graph_replayed"]
    with torch.no_grad():
        for _ in range(4):
            model(x)
    assert launch.counts["graph_replayed"] == before
    assert any(k[0] == "eager graph" and "EAGER_GRAPH_MB" in k[1] for k in dispatch.stats), dispatch.stats


def test_graphed_call_inputs_and_buffers_across_inference_mode():
    """An eager graph made under torch.inference_mode serves calls outside it and the other way round: its static
    input is a normal tensor (an inference tensor refuses in-place copies outside that mode), and buffers made
    under inference mode (no version counter) do not break the staleness check. Run on the CPU with a stand-in
    for the CUDA graph (the replay computes 2·x into the static output)."""
    from fused import dispatch

    class FakeGraph:  # a CUDA graph's replay writes its output's memory whatever the mode
        def replay(self):
            with torch.inference_mode(False):
                c.y.copy_(c.x * 2)

    for make_mode, call_mode in ((True, False), (False, True), (True, True)):
        with torch.inference_mode(make_mode):
            x0 = torch.randn(3, 8)[:, :5]  # strided
            buf = torch.ones(4)
            c = dispatch.GraphedCall()
            c.graph, c.x, c.y, c.stats, c.keep, c.dev = FakeGraph(), dispatch._static_like(x0), None, (), (), -1
            with torch.inference_mode(False):
                c.y = torch.empty(3, 5)
            c.versions = ((buf, dispatch._version(buf)),)
            c.nbytes = 0
        assert not c.x.is_inference() and c.x.stride() == x0.stride() and torch.equal(c.x, x0)
        with torch.inference_mode(call_mode):
            x = torch.randn(3, 5)
            y = c(x)
        assert torch.equal(y, 2 * x)
        if not buf.is_inference():
            buf.add_(1)  # changed in place: the graph is stale
            assert c(x) is None


@pytest.mark.cuda
def test_eager_graph_of_refused_signatures_cuda(monkeypatch):
    """dispatch.EAGER_GRAPH_REFUSED: a smoothed W8A8 block (a torch op between the kernels: never recorded) is replayed
    from a CUDA graph from its third call, bit-equal to the user's own capture; off, it stays refused."""
    import copy

    import fused
    from fused import dispatch
    from fused.bench import make_block

    base = make_block("llama", 128, 256, "cuda")
    calib = [torch.randn(8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    s = fused.calibrate_smoothing(base, calib)
    for on in (False, True):
        monkeypatch.setattr(dispatch, "EAGER_GRAPH_REFUSED", on)
        model = fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(weight_only=False, smoothing=s))
        for shape in ((1, 128), (2, 17, 128)):
            xs = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(5)]
            before = launch.counts["graph_replayed"]
            with torch.no_grad():
                outs = [model(x).clone() for x in xs]
                x0, ys = xs[0].clone(), []
                g = dispatch._graph_replay(lambda: ys.append(model(x0)))
                want = []
                for x in xs:
                    x0.copy_(x)
                    g.replay()
                    want.append(ys[-1].clone())
            graphed = launch.counts["graph_replayed"] - before
            replayed, refused, n_graphs = dispatch.replay_status(model)
            if on:
                assert graphed >= 3 and n_graphs >= 1, (shape, graphed)
                assert all(torch.equal(outs[i], want[i]) for i in range(2, 5)), shape
            else:
                assert graphed == 0 and refused, shape


def test_eval_and_train_keep_recordings():
    """model.eval() / .train() set `training` on every module: no forward here depends on it, so recordings (and
    eager graphs, costly to capture again) survive them; any other attribute change drops them (dispatch.epoch)."""
    import fused
    from fused import dispatch
    from fused.bench import make_block

    model = fused.quantize(make_block("llama", 64, 96, "cpu"), fused.FusedInt8MLP())
    e = dispatch.epoch
    model.eval()
    model.train()
    model.eval()
    assert dispatch.epoch == e
    next(m for m in model.modules() if isinstance(m, fused.modules._Replayable)).act = "silu"
    assert dispatch.epoch > e
