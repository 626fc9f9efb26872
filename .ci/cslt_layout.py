"""Dump cuSPARSELt's compressed layout (torch._cslt_compress) for small 2:4 matrices with coded contents, so
the layout can be worked out offline (values: where kept value j of row n lands; metadata: where each group's
4-bit position nibble lands). Writes $OUT/cslt_layout.pt: {(dtype, N, K): [compressed uint8 per experiment]}."""
import os
import torch

OUT = os.environ.get("OUT", "out")
NIB = torch.tensor([0x4, 0x8, 0xC, 0x9, 0xD, 0xE])  # (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
POS = torch.tensor([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]])


def make(N, K, e):
    """Experiment e: kept value j of row n = digit e of its id in base 126, + 1; group g's positions = digit e
    of its id in base 6."""
    G = K // 4
    vid = torch.arange(N * K // 2).reshape(N, K // 2)
    gid = torch.arange(N * G).reshape(N, G)
    vals = (vid // 126 ** min(e, 2)) % 126 + 1 if e < 3 else (vid * 7 + e) % 126 + 1
    pos = POS[(gid // 6 ** e) % 6]  # [N, G, 2]
    w = torch.zeros(N, G, 4, dtype=torch.uint8)
    w.scatter_(2, pos, vals.reshape(N, G, 2).to(torch.uint8))
    return w.reshape(N, K)


res = {}
for N, K in [(32, 64), (32, 128), (64, 64), (64, 128), (128, 128), (128, 256), (256, 256), (256, 512), (512, 1024),
             (96, 160), (160, 96)]:
    for dt in (torch.int8, torch.float8_e4m3fn):
        outs = []
        for e in range(8):
            w = make(N, K, e).view(dt).cuda()
            try:
                c = torch._cslt_compress(w)
            except Exception as ex:  # noqa: BLE001
                print("fail", N, K, dt, ex)
                break
            outs.append(c.view(torch.uint8).cpu())
        res[(str(dt), N, K)] = outs
        if outs:
            print(N, K, dt, "compressed bytes", outs[0].numel(), "dense", N * K, "ratio", outs[0].numel() / (N * K))
torch.save(res, f"{OUT}/cslt_layout.pt")
res = {}
for N, K in [(28672, 4096), (4096, 14336), (14336, 4096)]:
    w = make(N, K, 0).view(torch.int8).cuda()
    c = torch._cslt_compress(w)
    print("llama", N, K, c.dtype, c.shape, "bytes", c.numel() * c.element_size(), "ratio", c.numel() * c.element_size() / (N * K))
    u = c.view(torch.uint8)
    h = N * K // 2  # the slices around where the values would end (checked against the offline formula later)
    res[("llama", N, K)] = [u[:1 << 20].cpu(), u[h - (1 << 20):h + (1 << 20)].cpu(), u[-(1 << 20):].cpu(), u.numel()]
torch.save(res, f"{OUT}/cslt_layout_llama.pt")
print("saved")
