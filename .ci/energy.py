"""Energy per MLP block (thirty-third session). On the H200 the 8-bit blocks run at the 700 W power cap under sustained
timing (SM 1450-1710 MHz instead of 1980, NVML's "SW power cap" reason active), from M=1024 up: the block's time is
then its energy over 700 W, and a kernel that is faster at boost clocks can lose sustained if it burns more joules
(int8 W8A16 at M=1024: 522.5 µs of kernels in a 20-replay burst, 591-623 in do_bench graphs; bf16 eager 537 / 573).
This measures, per block and M, the NVML energy counter across a window of back-to-back CUDA-graph replays after a
warm-up that brings the clocks down: µs and mJ per replay, mean power, SM clock, the clock-event reasons seen, and
mJ / 0.7 (the block's time at 700 W if every joule were spent at the cap).
usage: python .ci/energy.py [llama|gpt] [M,..] ["config,config"] (configs: bf16 eager, ours ..., torchao ...);
on the CPU it runs the blocks at d=64 and says that there is no NVML (a smoke run: no energy)."""
import copy
import ctypes
import os
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.bench import OURS, _torchao_configs, make_block  # noqa: E402

SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap
HW_SLOWDOWN = 0x8


class Nvml:
    """The few NVML calls this needs, through ctypes (the driver's libnvidia-ml; no Python package)."""

    def __init__(self, index: int = 0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2())
        self.h = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.h)))

    @staticmethod
    def _check(rc):
        if rc != 0:
            raise RuntimeError(f"NVML call failed with code {rc}")

    def energy_mj(self) -> int:
        v = ctypes.c_ulonglong()
        self._check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.h, ctypes.byref(v)))
        return v.value

    def sm_mhz(self) -> int:
        v = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(self.h, 1, ctypes.byref(v)))  # NVML_CLOCK_SM
        return v.value

    def reasons(self) -> int:
        v = ctypes.c_ulonglong()
        fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self.lib.nvmlDeviceGetCurrentClocksThrottleReasons
        self._check(fn(self.h, ctypes.byref(v)))
        return v.value

    def limit_w(self) -> float:
        v = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetEnforcedPowerLimit(self.h, ctypes.byref(v)))
        return v.value / 1000


def sustained(replay, nvml, warm_s=1.0, window_s=2.0, chunk=10):
    """(µs per replay, mJ per replay, mean W, mean SM MHz, reasons OR'ed) over ``window_s`` of back-to-back replays
    after ``warm_s`` of them; chunks of ``chunk`` replays are queued while the host samples the clock."""
    end = time.time() + warm_s
    while time.time() < end:
        for _ in range(chunk):
            replay()
        torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    mhz, why, n = [], 0, 0
    e0 = nvml.energy_mj()
    a.record()
    end = time.time() + window_s
    while time.time() < end:
        for _ in range(chunk):
            replay()
        ev[n // chunk % 2].record()
        if n:  # wait for the chunk before this one: the GPU always has one queued, the samples stay in step
            ev[(n // chunk - 1) % 2].synchronize()
        n += chunk
        mhz.append(nvml.sm_mhz())
        why |= nvml.reasons()
    last = ev[(n // chunk - 1) % 2]
    last.synchronize()
    e1 = nvml.energy_mj()
    ms = a.elapsed_time(last)
    return ms * 1e3 / n, (e1 - e0) / n, (e1 - e0) / ms, sum(mhz) / len(mhz), why


def measure(replay, nvml):
    """sustained() after ENERGY_COOL_S of idle (each measurement starts from the same state), with the warm-up and
    window from ENERGY_WARM_S / ENERGY_WINDOW_S (default 1 s / 2 s)."""
    time.sleep(float(os.environ.get("ENERGY_COOL_S", 1.0)))
    return sustained(replay, nvml, float(os.environ.get("ENERGY_WARM_S", 1.0)),
                     float(os.environ.get("ENERGY_WINDOW_S", 2.0)))


class CublasGemms:
    """The block's two GEMMs alone on cuBLAS (gate | up stacked as one), no activation, no quantization pass: the
    MMA work's own joules, bf16 or fp8 rowwise (torch._scaled_mm with fast accumulation, as torchao's rowwise
    config), for comparing a block against. The second GEMM's input is a fixed random h per M."""

    def __init__(self, base, fp8: bool):
        lins = [m.weight.detach() for m in base.modules() if isinstance(m, torch.nn.Linear)]
        self.w1 = torch.cat(lins[:2]) if len(lins) == 3 else lins[0]
        self.w2 = lins[-1]
        self.fp8 = fp8
        if fp8:
            (self.w1, s1), (self.w2, s2) = self._rowwise(self.w1), self._rowwise(self.w2)
            self.s1, self.s2 = s1.t().contiguous(), s2.t().contiguous()  # [1, N]
        self._h = {}

    @staticmethod
    def _rowwise(w):
        s = w.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 448.0
        return (w.float() / s).to(torch.float8_e4m3fn), s

    def __call__(self, x):
        M = x.shape[0]
        if M not in self._h:  # made on the first (uncaptured) call
            h = torch.randn(M, self.w2.shape[1], device=x.device, dtype=torch.bfloat16)
            self._h[M] = (self._rowwise(x), self._rowwise(h)) if self.fp8 else (None, h)
        xa, ha = self._h[M]
        if not self.fp8:
            x @ self.w1.t()
            return ha @ self.w2.t()
        mm = torch._scaled_mm
        mm(xa[0], self.w1.t(), xa[1], self.s1, out_dtype=torch.bfloat16, use_fast_accum=True)
        return mm(ha[0], self.w2.t(), ha[1], self.s2, out_dtype=torch.bfloat16, use_fast_accum=True)


def _torchao(base, cfg):
    """A copy of the block quantized by torchao's ``cfg``, compiled (as the bench's baselines)."""
    from torchao.quantization import quantize_

    m = copy.deepcopy(base)
    quantize_(m, cfg)
    return torch.compile(m)


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "llama"
    Ms = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1024").split(",")]
    names = (sys.argv[3] if len(sys.argv) > 3 else
             "bf16 eager,ours int8 W8A16,ours fp8 W8A16,ours fp8 W8A8,ours int8 W8A8").split(",")
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    d, h = (4096, 14336 if kind == "llama" else 16384) if cuda else (64, 128)
    base = make_block(kind, d, h, dev)
    makers = dict({"bf16 eager": lambda: base}, **{n: (lambda n=n: fused.quantize(copy.deepcopy(base), OURS[n](),
                                                                                  blocks=True)) for n in OURS})
    if cuda:
        for n, cfg in _torchao_configs().items():
            makers[n] = lambda cfg=cfg: _torchao(base, cfg())
        makers["cublas bf16 GEMMs only"] = lambda: CublasGemms(base, fp8=False)
        makers["cublas fp8 rowwise GEMMs only"] = lambda: CublasGemms(base, fp8=True)
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; known: {sorted(makers)}")
    nvml = None
    if cuda:
        nvml = Nvml()
        print(f"enforced power limit {nvml.limit_w():.0f} W")
    else:
        print("CPU: no NVML here, the blocks run once each (a smoke run: no energy)")
    for name in names:
        model = makers[name]()
        with torch.no_grad():
            for M in Ms:
                x = torch.randn(M, d, device=dev, dtype=torch.bfloat16)
                for _ in range(3):
                    model(x)  # route timings, tuning, compile
                if not cuda:
                    print(f"{kind} {name} M={M}: ran, output {tuple(model(x).shape)}")
                    continue
                g = dispatch._graph_replay(lambda model=model, x=x: model(x))
                if g is None:
                    print(f"{kind} {name} M={M}: could not be captured")
                    continue
                us, mj, w, mhz, why = measure(g.replay, nvml)
                flags = "+".join(f for bit, f in ((SW_POWER_CAP, "sw power cap"), (HW_SLOWDOWN, "hw slowdown"))
                                 if why & bit) or "none"
                print(f"{kind} {name:24s} M={M:5d}: {us:8.1f} µs {mj:8.1f} mJ per block, {w:5.0f} W, "
                      f"SM {mhz:5.0f} MHz, reasons {flags} (0x{why:x}); at 700 W {mj / 0.7:8.1f} µs", flush=True)
                del g
        del model
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
