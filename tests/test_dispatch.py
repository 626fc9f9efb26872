"""fused.dispatch: which path each (op, format, mode, device) takes, and that fallbacks are visible."""
import os

import pytest
import torch

from fused import dispatch
from lowbit import quantize_weight


@pytest.mark.parametrize("op,fmt,dynamic", [
    ("linear", "int8", False), ("linear", "int8", True), ("linear", "float8_e4m3", False),
    ("linear", "float8_e4m3", True), ("gated", "int8", False), ("gated", "float8_e4m3", True),
])
def test_plan(op, fmt, dynamic):
    assert dispatch.plan(op, fmt, dynamic, "cpu")[0].startswith("cpu:")
    large = "w8_gemm_w8a8" if dynamic else "w8_gemm_w8a16"
    assert dispatch.plan(op, fmt, dynamic, "cuda")[0] == f"triton:w8a16_gemv|{large}"
    # by M: decode takes the weight-only GEMV (W8A8 configs too), larger M the tiled GEMM
    assert dispatch.plan(op, fmt, dynamic, "cuda", M=1)[0] == "triton:w8a16_gemv"
    assert dispatch.plan(op, fmt, dynamic, "cuda", M=dispatch.GEMV_MAX_M)[0] == "triton:w8a16_gemv"
    # W8A16 above the GEMV: split activations (SPLIT_MIN_M = GEMV_MAX_M + 1), W8A8 the tiled GEMM
    above = f"triton:{large}" if dynamic else "triton:act_split+w8_gemm_split"
    assert dispatch.plan(op, fmt, dynamic, "cuda", M=dispatch.GEMV_MAX_M + 1)[0] == above
    with dispatch.force_path("reference"):
        assert dispatch.plan(op, fmt, dynamic, "cuda") == ("reference", "forced")
    with dispatch.force_path("triton"):
        assert dispatch.plan(op, fmt, dynamic, "cpu", M=1)[0] == "triton:w8a16_gemv"
    assert dispatch._forced is None  # the context restores


def test_stats_count_every_call():
    q, s = quantize_weight(torch.randn(8, 16), "int8")
    with dispatch.force_path("reference"):
        key = ("gated", "reference")
        before = dispatch.stats[key]
        dispatch.gated(torch.randn(2, 16), q, s)
        dispatch.gated(torch.randn(0, 16), q, s)
    assert dispatch.stats[key] == before + 2


@pytest.mark.cuda
def test_strict_mode_on_cuda():
    """Every dense format has kernels on CUDA: strict mode lets them run, and raises the moment a call
    would take the pure-torch path there."""
    q, s = quantize_weight(torch.randn(8, 16, device="cuda"), "float8_e4m3")
    x = torch.randn(2, 16, device="cuda", dtype=torch.bfloat16)
    dispatch.set_strict(True)
    try:
        dispatch.stats.clear()
        dispatch.linear(x, q, s)
        assert dispatch.stats[("linear", "triton:w8a16_gemv")] == 1
        with dispatch.force_path("reference"), pytest.raises(RuntimeError, match="strict mode: forced"):
            dispatch.linear(x, q, s)
    finally:
        dispatch.set_strict(False)


def test_cuda_size_classes_name_the_kernels_plan_names(monkeypatch):
    """The eager hot path caches a path per M class: each class's name must be plan()'s for every M in it."""
    import torch

    for a8_bound, split, split_min in ((16, 0, 17), (0, 16, 1), (0, 1024, 1), (0, 1024, 17), (16, 300, 17)):
        monkeypatch.setattr(dispatch, "A8_GEMV_MAX_M", a8_bound)
        monkeypatch.setattr(dispatch, "SPLIT_MAX_M", split)
        monkeypatch.setattr(dispatch, "SPLIT_MIN_M", split_min)
        for dynamic in (False, True):
            for M in (1, 5, 16, 17, 300, 1024, 5000):
                size = dispatch._size_class(M, dynamic, torch.int8, torch.bfloat16)
                fmt = "int8" if size in (3, 5) else "any"  # as the hot path asks
                named = dispatch.triton_kernel_for("gated", fmt, dynamic, dispatch._class_m(size, dynamic))
                assert named == dispatch.triton_kernel_for("gated", "int8", dynamic, M), (a8_bound, split, split_min, dynamic, M)


def test_pick_uses_the_shipped_table_and_retune_times_it(monkeypatch):
    """tuning.pick: a key in the shipped H200 table takes its config untimed; with FUSED_RETUNE the shipped
    config is timed with the candidates (added when it is not one of them) and the fastest wins."""
    import triton.testing

    from fused.kernels import tuning

    key = ("128", "4096", "14336", "False", "True", "torch.int8")
    shipped = tuning.TUNED[("w8_gemm",) + key]
    cands = [dict(BLOCK_M=16), dict(BLOCK_M=32)]
    speed = {16: 3.0, 32: 2.0, shipped["BLOCK_M"]: 1.0}
    timed = []

    def fake_bench(fn, **kw):
        return fn()

    def launch(cfg):
        timed.append(cfg)
        return speed[cfg["BLOCK_M"]]

    monkeypatch.setattr(tuning, "INTERPRET", False)
    monkeypatch.delenv("FUSED_TUNE", raising=False)
    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(tuning, "picks", {})
    monkeypatch.setattr(tuning, "timings", {})
    monkeypatch.setattr(tuning, "_cache", {})
    assert tuning.pick("w8_gemm", key, lambda: list(cands), launch) is shipped and timed == []
    monkeypatch.setattr(tuning, "_cache", {})
    monkeypatch.setattr(tuning, "RETUNE", True)
    assert tuning.pick("w8_gemm", key, lambda: list(cands), launch) == shipped
    assert len(timed) == 3 + 3 * tuning.RETIME_ROUNDS and timed[2] == shipped  # first pass, then the 3 fastest again
    monkeypatch.setattr(tuning, "_cache", {})
    speed[16] = 0.5  # a candidate beats the shipped pick
    timed.clear()
    assert tuning.pick("w8_gemm", key, lambda: list(cands), launch) == cands[0]


def test_tuner_retimes_the_fastest_and_takes_the_median(monkeypatch):
    """One lucky first timing does not win the pick: the three fastest of the first pass are timed twice more in
    alternating order and ranked by their median (a one-pass tuner would take A here)."""
    import triton

    from fused.kernels import tuning

    script = {"A": [0.9, 1.5, 1.5], "B": [1.0, 1.0, 1.0], "C": [1.2, 1.1, 1.3], "D": [2.0]}
    order = []

    def launch(cfg):
        order.append(cfg["name"])
        return script[cfg["name"]].pop(0)

    monkeypatch.setattr(tuning, "INTERPRET", False)
    monkeypatch.delenv("FUSED_TUNE", raising=False)
    monkeypatch.setattr(tuning, "RETIME_ROUNDS", 2)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: fn())
    for name in ("picks", "timings", "failures", "_cache"):
        monkeypatch.setattr(tuning, name, {})
    cands = [dict(name=n) for n in "DABC"]
    assert tuning.pick("k", (7, "retime"), lambda: list(cands), launch) == dict(name="B")
    assert order == list("DABC") + list("CBA") + list("ABC")  # D (slowest) is not timed again
    assert dict((c["name"], t) for t, c in tuning.timings[("k", 7, "retime")]) == {"A": 1500.0, "B": 1000.0,
                                                                                 "C": 1200.0, "D": 2000.0}
    monkeypatch.setattr(tuning, "RETIME_ROUNDS", 0)  # tuning.RETIME_ROUNDS = 0: one pass
    script.update(A=[0.9], B=[1.0], C=[1.2], D=[2.0])
    assert tuning.pick("k", (8, "retime"), lambda: list(cands), launch) == dict(name="A")


def test_tuner_records_candidates_that_fail(monkeypatch):
    """A candidate that fails while timed is skipped AND recorded (tuning.failures, shown by explain and the bench
    JSON); when every one fails the error names the first failure (the nineteenth session's M=16 2:4 tiles stopped
    compiling on Triton 3.6 and the tuner said only "no candidate config runs")."""
    import triton

    from fused.kernels import tuning

    def launch(cfg):
        if cfg["BLOCK_M"] == 16:
            raise AttributeError("'str' object has no attribute 'type'")
        return float(cfg["BLOCK_M"])

    monkeypatch.setattr(tuning, "INTERPRET", False)
    monkeypatch.delenv("FUSED_TUNE", raising=False)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: fn())
    for name in ("picks", "timings", "failures", "_cache"):
        monkeypatch.setattr(tuning, name, {})
    key = (1, 100, 200, "not shipped")
    assert tuning.pick("k", key, lambda: [dict(BLOCK_M=16), dict(BLOCK_M=32)], launch) == dict(BLOCK_M=32)
    (cfg, err), = tuning.failures[("k",) + key]
    assert cfg == dict(BLOCK_M=16) and err.startswith("AttributeError: 'str' object")
    with pytest.raises(RuntimeError, match=r"no candidate config runs .* failed with AttributeError"):
        tuning.pick("k", (2,) + key, lambda: [dict(BLOCK_M=16), dict(BLOCK_M=16, num_warps=8)], launch)


def test_cublas_w8a16_route_matches_reference_on_cpu():
    # the W8A16 cuBLAS route's steps (widen, a 16-bit mm, scale_epilogue) on CPU tensors under the interpreter:
    # the same product as the reference, to bf16 rounding of the raw product (scales applied after it)
    import os

    from fused.dispatch import _cublas_w8a16
    from fused.reference import gated_ref, linear_ref
    from lowbit import quantize_weight, sqnr

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs the Triton launchers under the interpreter")
    torch.manual_seed(0)
    for fmt in ("int8", "float8_e4m3"):
        for gated in (False, True):
            q, s = quantize_weight(torch.randn(2 * 24, 40), fmt)
            b = torch.randn(2 * 24)
            x = torch.randn(17, 40, dtype=torch.bfloat16)
            y = _cublas_w8a16(x, q, s, b, "silu", gated)
            ref = (gated_ref if gated else linear_ref)(x, q, s, b, "silu", False)
            assert y.shape == ref.shape and y.dtype == torch.bfloat16
            assert sqnr(ref.float(), y.float()) > 40, (fmt, gated)


@pytest.mark.parametrize("w8a16", [False, True])
def test_graph_pick_eager_calls_take_cublas_only_at_large_m(w8a16, monkeypatch):
    """_graph_pick with cuBLAS the faster route in eager and in graphs: a W8A8 eager call keeps a (replayable) Triton
    route below CUBLAS_EAGER_MIN_M and takes cuBLAS from it; W8A16 (from WIDEN_MIN_M) always takes the eager pick;
    a capture takes the graph pick."""
    import torch

    monkeypatch.setattr(dispatch, "_dense_routes", {})
    monkeypatch.setattr(dispatch, "measure_route", lambda kind, key, cands, untimed=None, graph=False:
                        ("cublas", "cublas"))
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    for bucket in (512, 1024, 2048, 8192):
        key = ("gated", bucket, (64, 32), torch.int8, torch.bfloat16, True, "silu")
        pick = dispatch._graph_pick(key, lambda: None, lambda: None, "gated", w8a16=w8a16)
        want = "cublas" if (w8a16 or bucket >= dispatch.CUBLAS_EAGER_MIN_M) else "triton"
        assert pick == want, bucket
        capturing[0] = True
        assert dispatch._graph_pick(key, lambda: None, lambda: None, "gated", w8a16=w8a16) == "cublas"
        capturing[0] = False
    assert dispatch.CUBLAS_EAGER_MIN_M == 2048  # M >= 1025 (the M buckets are powers of two)


def test_graph_pick_eager_fallback_skips_gluon_forms(monkeypatch):
    """Where cuBLAS wins a W8A8 shape's graph timing below CUBLAS_EAGER_MIN_M, eager calls take the fastest route a
    recording can replay: a Triton one, not a faster Gluon form (whose launch the recorder does not see: on an H100
    the fp8 W8A8 block's plain call at M=128 took 438-542 µs against 96 in a graph with gluon_t64_sk picked there)."""
    import torch

    from fused.kernels import tuning

    key = ("linear", 128, (64, 32), torch.float8_e4m3fn, torch.bfloat16, True, "none", "h in")
    monkeypatch.setattr(dispatch, "_dense_routes", {key: ("cublas", "cublas")})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setitem(tuning.timings, ("dense_w8a8_route_graph",) + key,
                        [[37.3, "cublas"], [42.2, "gluon_t64_sk"], [43.1, "triton"], [44.9, "gluon_t64"]])
    assert dispatch._graph_pick(key, lambda: None, lambda: None, "linear") == "triton"
    monkeypatch.setitem(tuning.timings, ("dense_w8a8_route_graph",) + key, [[37.3, "cublas"], [42.2, "gluon"]])
    assert dispatch._graph_pick(key, lambda: None, lambda: None, "linear") == "triton"  # none timed: Triton


def test_block_first_layer_route_times_each_route_forced_and_keeps_the_blocks_pick(monkeypatch):
    """BLOCK_ROUTE_MIN_M's plumbing: the block's first call runs the layers once (their own route timings), then
    one block per first-layer route that ran, each with that route forced while it runs (and the layer's own picks
    back after), the layer's own graph pick first (the incumbent); the block's picks replace the layer's."""
    from fused.kernels import tuning

    hkey = dispatch._h_out_key("gated", 4096, torch.zeros(64, 32, dtype=torch.int8), torch.bfloat16, None, "silu")
    bkey = hkey + ((32, 32), True)
    monkeypatch.setattr(dispatch, "_dense_routes", {})
    monkeypatch.setattr(dispatch, "_block_first_routes", {})
    monkeypatch.setattr(tuning, "timings", {("dense_w8a8_route",) + hkey: [(1700.0, "triton"), (1718.0, "cublas")]})
    seen = []

    def per_layer():  # the first call measures the layer's own routes; later calls see what is forced
        dispatch._dense_routes.setdefault(hkey, ("triton", "cublas"))
        seen.append(dispatch._dense_routes[hkey])
        return torch.zeros(1)

    def fake_measure(kind, key, cands, untimed=None, graph=False):
        assert (kind, key, graph, untimed) == ("w8a8_block_first_layer", bkey, True, "cublas")
        assert list(cands) == ["cublas", "triton"]  # the layer's graph pick first
        for fn in cands.values():
            fn()
            assert dispatch._dense_routes[hkey] == ("triton", "cublas")  # restored after each forced run
        return "triton", "triton"

    monkeypatch.setattr(dispatch, "measure_route", fake_measure)
    dispatch._block_first_layer_route(bkey, hkey, per_layer)
    assert seen == [("triton", "cublas"), ("cublas", "cublas"), ("triton", "triton")]
    assert dispatch._dense_routes[hkey] == dispatch._block_first_routes[bkey] == ("triton", "triton")
    dispatch._block_first_layer_route(bkey, hkey, per_layer)  # once per block shape
    assert len(seen) == 3


def test_block_first_layer_route_needs_two_timed_routes(monkeypatch):
    """With one route timed (cuBLAS refused, or FUSED_TUNE=0: nothing timed) the block keeps the layer's pick and
    times nothing more."""
    from fused.kernels import tuning

    hkey = dispatch._h_out_key("linear", 64, torch.zeros(64, 32, dtype=torch.int8), torch.bfloat16, None, "relu")
    monkeypatch.setattr(dispatch, "_dense_routes", {hkey: ("triton", "triton")})
    monkeypatch.setattr(dispatch, "_block_first_routes", {})
    monkeypatch.setattr(tuning, "timings", {("dense_w8a8_route",) + hkey: [(10.0, "triton")]})
    monkeypatch.setattr(dispatch, "measure_route", lambda *a, **k: pytest.fail("timed"))
    calls = []
    dispatch._block_first_layer_route(hkey + ("b",), hkey, lambda: calls.append(1))
    assert calls == [1] and dispatch._block_first_routes[hkey + ("b",)] == ("triton", "triton")


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_block_first_layer_route_cuda(fmt, monkeypatch):
    """On the GPU with BLOCK_ROUTE_MIN_M on: a W8A8 block times its first layer's routes as blocks, records the
    picks (tuning.picks), and its output, eager and replayed from a CUDA graph, matches the reference."""
    import copy

    import fused
    from fused.bench import make_block
    from fused.kernels import tuning
    from lowbit.metrics import sqnr

    if not torch.cuda.is_available():
        pytest.skip("CUDA")
    if fmt == "fp8" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89+")
    monkeypatch.setattr(dispatch, "BLOCK_ROUTE_MIN_M", 17)
    base = make_block("llama", 256, 512, "cuda")
    cfg = fused.FusedFloat8MLP(weight_only=False) if fmt == "fp8" else fused.FusedInt8MLP(weight_only=False)
    model = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
    with torch.no_grad():  # the kernels' configs picked untimed first (the tests' FUSED_TUNE=0) and cached
        for M in (32, 300):
            model(torch.randn(M, 256, device="cuda", dtype=torch.bfloat16))
    monkeypatch.setenv("FUSED_TUNE", "1")  # the routes are timed: the block-level timing needs two timed routes
    monkeypatch.setattr(dispatch, "_dense_routes", {})
    monkeypatch.setattr(dispatch, "_block_first_routes", {})
    dispatch.epoch += 1  # recorded calls dropped: the next calls run the Python path
    for M in (32, 300):
        x = torch.randn(M, 256, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            with dispatch.force_path("reference"):
                ref = model(x)
            out = torch.full_like(ref, float("nan"))
            out.copy_(model(x))
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                model(x)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                y = model(x)
            g.replay()
        assert sqnr(ref, out) > 30 and sqnr(ref, y) > 30, (M, sqnr(ref, out), sqnr(ref, y))
    wdtype = torch.float8_e4m3fn if fmt == "fp8" else torch.int8
    timed = [k for k in tuning.picks if k[0] == "w8a8_block_first_layer" and k[4] == wdtype]
    assert len(timed) == 2, timed  # one per M bucket


@pytest.mark.parametrize("long", [False, True])
def test_measure_route_sustained_times_graphs_only_and_shares_the_pick(long, monkeypatch):
    """Long routes (graph replay over LONG_ROUTE_US): every window ROUTE_REP_MS, no eager timing of a
    capturable candidate, and the eager pick is the graph pick; short ones as before (eager and graph apart)."""
    import triton.testing

    from fused import kernels

    monkeypatch.setattr(kernels, "INTERPRET", False)
    monkeypatch.setenv("FUSED_TUNE", "1")

    class Graph:
        def __init__(self, name):
            self.name = name

        def replay(self):
            pass

    def a():
        pass

    def b():
        pass

    eager_ms, graph_ms = {"a": 1.5, "b": 2.2}, {"a": 2.0, "b": 1.8}  # eagerly a wins, replayed b (by > 3%)
    calls = []

    def fake_bench(fn, warmup=None, rep=None, return_mode=None):
        g = getattr(fn, "__self__", None)
        calls.append(("graph" if g is not None else "eager", rep))
        return graph_ms[g.name] if g is not None else eager_ms[fn.__name__]

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(dispatch, "_graph_replay", lambda fn: Graph(fn.__name__))
    monkeypatch.setattr(dispatch, "_sustained", lambda graphs: long)
    eager, graph = dispatch.measure_route("test_sustained", ("k", long), {"a": a, "b": b}, graph=True)
    if long:
        assert (eager, graph) == ("b", "b")
        assert calls == [("graph", dispatch.ROUTE_REP_MS)] * 6
    else:
        assert (eager, graph) == ("a", "b")
        assert sorted(set(calls)) == [("eager", 20), ("graph", 20)] and len(calls) == 12


@pytest.mark.cuda
def test_sustained_measures_a_replay_cuda():
    """_sustained on real graphs: a replay of a few ms is long, one elementwise op is not, no graph is not."""
    if not torch.cuda.is_available():
        pytest.skip("CUDA")
    a = torch.randn(4096, 4096, device="cuda")

    def heavy():  # 137 GFLOP per fp32 matmul: milliseconds on any GPU
        return a @ a @ a @ a

    assert dispatch._sustained({"x": None, "heavy": dispatch._graph_replay(heavy)})
    assert not dispatch._sustained({"light": dispatch._graph_replay(lambda: a + 1)})
    assert not dispatch._sustained({"x": None})


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_w8a16_route_offers_split_up_to_its_bound(fmt, monkeypatch):
    """SPLIT_ROUTE_MAX_M: the W8A16 route from WIDEN_MIN_M offers split activations as a third candidate up to the
    bound (by M bucket; not for fp32 x), maps its pick to SPLIT_PATH, and offers nothing more when it is 0."""
    offered = []

    def fake_pick(key, triton, cublas, op, w8a16=False, others=None):
        assert w8a16
        offered.append(sorted(others or {}))
        return "split" if others else "cublas"

    monkeypatch.setattr(dispatch, "_graph_pick", fake_pick)
    monkeypatch.setattr(dispatch, "_triton_dense", lambda path, *a: torch.zeros(1))  # the offer's trial run
    monkeypatch.setenv("FUSED_TUNE", "1")  # with FUSED_TUNE=0 nothing is timed, and nothing more is offered
    q, s = quantize_weight(torch.randn(48, 40), fmt)  # N, K not multiples of 16
    # by M bucket (tuning.m_bucket: ..., 4096, then 8192 for every larger M): the default 8192 (forty-fourth session)
    # offers split at every M; a lower bound cuts at its bucket
    assert dispatch.SPLIT_ROUTE_MAX_M >= 8192
    monkeypatch.setattr(dispatch, "SPLIT_ROUTE_MAX_M", 2048)
    for M, dtype, want in ((1024, torch.bfloat16, dispatch.SPLIT_PATH), (2048, torch.bfloat16, dispatch.SPLIT_PATH),
                           (2049, torch.bfloat16, dispatch.CUBLAS_W8A16_PATH),
                           (1024, torch.float32, dispatch.CUBLAS_W8A16_PATH)):
        x = torch.randn(M, 40, dtype=dtype)
        assert dispatch._cublas_w8a16_route("linear", x, q, s, None, "none", "triton:w") == want, (M, dtype)
    x = torch.randn(1024, 40, dtype=torch.bfloat16)
    monkeypatch.setenv("FUSED_TUNE", "0")
    assert dispatch._cublas_w8a16_route("linear", x, q, s, None, "none", "triton:w") == dispatch.CUBLAS_W8A16_PATH
    monkeypatch.setenv("FUSED_TUNE", "1")
    monkeypatch.setattr(dispatch, "SPLIT_ROUTE_MAX_M", 0)
    assert dispatch._cublas_w8a16_route("linear", x, q, s, None, "none", "triton:w") == dispatch.CUBLAS_W8A16_PATH
    assert offered == [["split"], ["split"], [], [], [], []]


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3"])
def test_w8a16_split_candidate_matches_reference(fmt, monkeypatch):
    """The split candidate at M = WIDEN_MIN_M against the W8A16 reference (fresh x, poisoned output)."""
    from fused.reference import linear_ref
    from lowbit.metrics import sqnr

    got = {}
    monkeypatch.setenv("FUSED_TUNE", "1")
    monkeypatch.setattr(dispatch, "_graph_pick",
                        lambda key, triton, cublas, op, w8a16=False, others=None: got.update(others) or "split")
    torch.manual_seed(0)
    q, s = quantize_weight(torch.randn(48, 40), fmt)
    b = torch.randn(48)
    x = torch.randn(dispatch.WIDEN_MIN_M, 40, dtype=torch.bfloat16)
    assert dispatch._cublas_w8a16_route("linear", x, q, s, b, "gelu", "triton:w") == dispatch.SPLIT_PATH
    out = torch.full((x.shape[0], 48), float("nan"), dtype=torch.bfloat16)
    out.copy_(got["split"]())
    ref = linear_ref(x, q, s, b, "gelu", dynamic=False)
    assert sqnr(ref.float(), out.float()) > (40 if fmt == "int8" else 30)


@pytest.mark.parametrize("pair", [False, True])
def test_w8a16_route_offers_the_gluon_gemm(pair, monkeypatch):
    """W8A16_WS / W8A16_WS_PAIR: from WIDEN_MIN_M the W8A16 route (stacked and gated_pair) offers the Gluon GEMM where
    w8a16_ws.supports() takes the operands, maps its pick to WS_PATH, and offers nothing when off or unsupported."""
    from fused.kernels import w8a16_ws

    offered = []

    def fake_pick(key, triton, cublas, op, w8a16=False, others=None):
        offered.append(sorted(others or {}))
        return "ws" if "ws" in (others or {}) else "cublas"

    ran = []
    monkeypatch.setattr(dispatch, "_graph_pick", fake_pick)
    monkeypatch.setattr(dispatch, "_triton_dense", lambda path, *a: torch.zeros(1))
    monkeypatch.setattr(dispatch, "_w8a16_ws", lambda *a: ran.append("ws"))
    monkeypatch.setattr(dispatch, "_w8a16_ws_pair", lambda *a: ran.append("ws pair"))
    monkeypatch.setattr(dispatch, "SPLIT_ROUTE_MAX_M", 0)
    monkeypatch.setattr(dispatch, "W8A16_WS_PAIR", True)
    monkeypatch.setenv("FUSED_TUNE", "1")
    q, s = quantize_weight(torch.randn(64, 32), "int8")
    x = torch.randn(1024, 32, dtype=torch.bfloat16)

    def route():
        if pair:
            return dispatch._pair_w8a16_route(x, q, s, None, q, s, None, "silu", "triton:w")
        return dispatch._cublas_w8a16_route("gated", x, q, s, None, "silu", "triton:w")

    assert route() == dispatch.CUBLAS_W8A16_PATH  # a CPU tensor: not supported
    monkeypatch.setattr(w8a16_ws, "supports", lambda x, w, gated=False: None)
    assert route() == dispatch.WS_PATH and ran == ["ws pair" if pair else "ws"]  # the offer's trial ran it
    x = torch.randn(8192, 32, dtype=torch.bfloat16)  # above W8A16_WS_MAX_M: not offered
    assert route() == dispatch.CUBLAS_W8A16_PATH
    x = torch.randn(1024, 32, dtype=torch.bfloat16)
    monkeypatch.setattr(dispatch, "W8A16_WS_PAIR" if pair else "W8A16_WS", False)
    assert route() == dispatch.CUBLAS_W8A16_PATH
    assert offered == [[], ["ws"], [], []]


def test_w8a8_ws_forms_by_m(monkeypatch):
    """The Gluon W8A8 forms a route offers: 64-token tiles only to W8A8_WS_T64_MAX_M, COOP only with W8A8_WS_COOP, none
    per layer without W8A8_WS_LAYER; every form names a config and the block's paths."""
    monkeypatch.setattr(dispatch, "W8A8_WS_LAYER", True)
    monkeypatch.setattr(dispatch, "W8A8_WS_COOP", True)
    names = lambda M: [n for n, _ in dispatch._layer_ws_paths(M)]  # noqa: E731
    assert names(128) == ["gluon", "gluon_coop", "gluon_t64", "gluon_coop_t64"]
    assert names(dispatch.W8A8_WS_T64_MAX_M + 1) == ["gluon", "gluon_coop"]
    monkeypatch.setattr(dispatch, "W8A8_WS_COOP", False)
    assert names(128) == ["gluon", "gluon_t64"]
    monkeypatch.setattr(dispatch, "WS_SPLITK", True)  # split-K forms: opt-in
    assert names(128) == ["gluon", "gluon_t64", "gluon_sk", "gluon_t64_sk"]
    monkeypatch.setattr(dispatch, "W8A8_WS_COOP", True)
    assert names(4096) == ["gluon", "gluon_coop", "gluon_sk", "gluon_coop_sk"]
    monkeypatch.setattr(dispatch, "W8A8_WS_LAYER", False)
    assert names(128) == []
    for name, path in dispatch._ws_forms():
        assert dispatch._WS_NAMES[name] == dispatch._WS_CONFIG[path]
        assert dispatch._H_OUT_PATHS[name] == path + "+act_quant" and "act_quant" not in dispatch._H_IN_PATHS[name]
    assert dispatch._WS_CONFIG[dispatch.W8A8_WS_COOP_PATH + "_t64"] == dict(COOP=True, BLOCK_T=64)


def test_ws_mid_route_remembers_nothing_to_offer(monkeypatch):
    """Where no Gluon form can run (here: the CPU), the first timed call finds nothing to offer and later calls keep
    split activations without asking again."""
    calls = []
    monkeypatch.setattr(dispatch, "_offer_ws_split", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(dispatch, "_nothing_offered", set())
    monkeypatch.setenv("FUSED_TUNE", "1")
    q, s = quantize_weight(torch.randn(64, 32), "int8")
    x = torch.randn(128, 32, dtype=torch.bfloat16)
    for _ in range(3):
        assert dispatch._ws_mid_route("linear", x, q, s, None, "none", dispatch.SPLIT_PATH) == dispatch.SPLIT_PATH
    assert len(calls) == 1 and len(dispatch._nothing_offered) == 1


def test_w8a16_ws_mid_route(monkeypatch):
    """Below WIDEN_MIN_M the Gluon GEMMs are timed against split activations: the W8A16 one from W8A16_WS_MIN_M (off
    by default: the bound is WIDEN_MIN_M), the split-plane one from WS_SPLIT_MIN_M; picks mapped to their paths;
    untimed, split stays."""
    from fused.kernels import w8a16_ws, w8a8_ws

    assert dispatch.W8A16_WS_MIN_M == dispatch.WIDEN_MIN_M  # off until measured
    assert dispatch.WS_SPLIT_MIN_M == 65
    offered = []
    picks = iter(["ws", "ws split"])

    def fake_pick(key, triton, cublas, op, w8a16=False, others=None):
        assert cublas is None and w8a16
        offered.append((key[1], sorted(others or {})))
        return next(picks)

    monkeypatch.setattr(dispatch, "_graph_pick", fake_pick)
    monkeypatch.setattr(dispatch, "_w8a16_ws", lambda *a: None)
    monkeypatch.setattr(dispatch, "_w8a16_ws_split", lambda *a: None)
    monkeypatch.setattr(w8a16_ws, "supports", lambda x, w, gated=False: None)
    monkeypatch.setattr(w8a8_ws, "supports", lambda w, gated=False: None)
    monkeypatch.setattr(dispatch, "W8A16_WS_MIN_M", 512)
    monkeypatch.setenv("FUSED_TUNE", "1")
    q, s = quantize_weight(torch.randn(64, 32), "int8")
    x = torch.randn(512, 32, dtype=torch.bfloat16)
    assert dispatch._ws_mid_route("linear", x, q, s, None, "none", dispatch.SPLIT_PATH) == dispatch.WS_PATH
    assert dispatch._ws_mid_route("linear", x[:128], q, s, None, "none", dispatch.SPLIT_PATH) == dispatch.WS_SPLIT_PATH
    monkeypatch.setenv("FUSED_TUNE", "0")  # untimed: split
    assert dispatch._ws_mid_route("linear", x[:300], q, s, None, "none", dispatch.SPLIT_PATH) == dispatch.SPLIT_PATH
    forms = ["ws split", "ws split coop", "ws split coop t64", "ws split t64"]
    # t64 forms to WS_SPLIT_T64_MAX_M (256) only; split-K: opt-in (dispatch.WS_SPLITK = True)
    assert offered == [(512, ["ws", "ws split", "ws split coop"]), (128, forms)]
    monkeypatch.setattr(dispatch, "WS_SPLITK", True)
    monkeypatch.setattr(w8a8_ws, "sm_count", lambda device: 132)
    monkeypatch.setenv("FUSED_TUNE", "1")
    picks = iter(["ws split sk", "ws split", "ws split"])
    x = torch.randn(128, 1024, dtype=torch.bfloat16)  # 8 K steps of 128: 2 parts of 4 (2 tiles either form)
    q, s = quantize_weight(torch.randn(64, 1024), "int8")
    route = dispatch._ws_mid_route("linear", x, q, s, None, "none", dispatch.SPLIT_PATH)
    assert route == dispatch.WS_SPLIT_PATH + "_sk"
    assert offered[-1] == (128, sorted(forms + ["ws split coop sk", "ws split sk", "ws split t64 sk",
                                                "ws split coop t64 sk"]))
    x = torch.randn(128, 384, dtype=torch.bfloat16)  # 3 K steps: too few to cut, no split-K form offered
    q, s = quantize_weight(torch.randn(64, 384), "int8")
    dispatch._ws_mid_route("linear", x, q, s, None, "none", dispatch.SPLIT_PATH)
    assert offered[-1] == (128, forms)
    assert w8a16_ws.default_config(512)["BLOCK_T"] == 128 and w8a16_ws.default_config(1024)["BLOCK_T"] == 256


def test_route_check_leaves_out_a_wrong_candidate(monkeypatch):
    """Before a route is timed, each candidate's first output is checked against the incumbent's (the first
    candidate): rounding apart it must agree (ROUTE_CHECK_DB), and NaN / Inf where the incumbent is finite, another
    shape or a nonzero output where it is zero leave the candidate out, with a warning; QuantizedAct outputs compare
    as dequantized h."""
    torch.manual_seed(0)
    ref = torch.randn(8, 16)
    close = ref + 1e-3 * torch.randn(8, 16)
    assert dispatch.route_disagrees(ref, close) is None
    assert "SQNR" in dispatch.route_disagrees(ref, torch.randn(8, 16))  # noise: a wrong kernel
    bad = close.clone()
    bad[3, 4] = float("nan")
    assert "NaN" in dispatch.route_disagrees(ref, bad)
    nan_ref = ref.clone()
    nan_ref[3] = float("nan")  # where the incumbent is NaN (NaN in x), anything goes
    assert dispatch.route_disagrees(nan_ref, bad) is None
    assert "shape" in dispatch.route_disagrees(ref, close[:4])
    assert dispatch.route_disagrees(torch.zeros(4), torch.zeros(4)) is None
    assert "nonzero" in dispatch.route_disagrees(torch.zeros(4), torch.ones(4))
    q, s = torch.randint(-127, 128, (16, 8), dtype=torch.int8), torch.rand(10) + 0.5  # rows past m=10: padding
    qa = dispatch.QuantizedAct(q, s, 10, torch.bfloat16)
    assert dispatch.route_disagrees(qa, dispatch.QuantizedAct(q.clone(), s.clone(), 10, torch.bfloat16)) is None
    assert dispatch.route_disagrees(qa, dispatch.QuantizedAct(-q, s, 10, torch.bfloat16)) is not None
    assert dispatch.route_disagrees(None, ref) is None  # (outputs it cannot read: not compared)
    monkeypatch.setattr(dispatch, "_CHECK_SAMPLES", 7)  # large outputs: a strided sample, the same one of both
    assert dispatch.route_disagrees(ref, close) is None and dispatch.route_disagrees(ref, -ref) is not None
    deq = q[:10].float() * s[:, None]
    assert torch.equal(dispatch._route_value(qa, 3), deq.reshape(-1)[::3])
    assert dispatch.route_disagrees(qa, dispatch.QuantizedAct(-q, s, 10, torch.bfloat16)) is not None
    monkeypatch.undo()

    out = torch.empty(8, 16)

    def incumbent():  # writes a buffer the next candidate reuses: the check keeps its own copy
        return out.copy_(ref)

    cands = {"triton": incumbent, "good": lambda: close, "bad": lambda: out.copy_(torch.randn(8, 16))}
    with pytest.warns(UserWarning, match="the bad route is left out"):
        kept, refused = dispatch._checked("dense_w8a8_route", cands)
    assert list(kept) == ["triton", "good"] and [n for n, _ in refused] == ["bad"]
    monkeypatch.setattr(dispatch, "ROUTE_CHECK_DB", float("-inf"))  # dispatch.ROUTE_CHECK_DB = -inf: off
    assert list(dispatch._checked("dense_w8a8_route", cands)[0]) == ["triton", "good", "bad"]


def test_shipped_picks_are_data_and_a_bench_run_merges_into_them(tmp_path):
    """The tuned table is JSON read on first use; `python -m fused tuned bench.json` folds a run's picks into it (a pick
    replaces its key's entry, other entries stay), and the result reads back as the same table plus the pick."""
    import json

    from fused import cli
    from fused.kernels import tuned, tuning

    table = tuned.table()
    assert table and all(isinstance(k, tuple) and all(isinstance(x, str) for x in k) for k in table)
    assert tuning.TUNED is table
    key = next(iter(table))
    new = ("w8_gemm", "64", "123", "456", "True", "False", "torch.int8")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"picks": [{"key": list(key), "config": {"BLOCK_M": 7}},
                                           {"key": [new[0], 64, 123, 456, True, False, "torch.int8"],
                                            "config": {"BLOCK_M": 8}}]}))
    out = tmp_path / "tuned_h200.json"
    assert cli.main(["tuned", str(bench), "--out", str(out)]) == 0
    merged = {tuple(e["key"]): e["config"] for e in json.loads(out.read_text())["entries"]}
    assert merged == {**table, key: {"BLOCK_M": 7}, new: {"BLOCK_M": 8}}
    assert tuned.table() == table  # the shipped file is untouched with --out
    bench.write_text(json.dumps({"rows": []}))
    assert cli.main(["tuned", str(bench), "--out", str(out)]) == 2  # no picks: a clear error
