"""Where a kernel's warps stall, per SASS line: reads `ncu --page source --csv --print-source sass` output (one kernel)
and prints the lines with the most warp-stall samples, each with its top stall reasons, and the totals per reason over
the kernel. Written for the W8A16 Gluon GEMM's question (NOTES lead 4): do its consumer warps stall at the warpgroup
bar.sync around the stage barriers (two per K step in its SASS), at the wgmma wait, or on the widening's registers?

usage: python .ci/ncu_stalls.py SASS.csv [N]"""
import csv
import io
import sys
from collections import Counter


def rows(path: str):
    text = open(path, errors="replace").read()
    start = text.find('"Address"')  # ncu prints its own lines before the table
    if start < 0:
        start = text.find("Address")
    if start < 0:
        raise SystemExit(f"{path}: no SASS table (no 'Address' column)")
    return list(csv.DictReader(io.StringIO(text[start:])))


def number(v) -> float:
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0


def short(c: str) -> str:
    return c.split("stall_", 1)[-1] if "stall_" in c else c


def main(path: str, n: int = 20) -> None:
    table = rows(path)
    cols = list(table[0])
    total_col = next((c for c in cols if c.startswith("Warp Stall Sampling (All")), None)
    if total_col is None:
        raise SystemExit(f"{path}: no 'Warp Stall Sampling (All Samples)' column; columns: {cols}")
    # per-reason columns, as ncu names them ("stall_barrier", "smsp__pcsamp_warps_issue_stalled_barrier", ...)
    reasons = [c for c in cols if "stall" in c.lower() and c != total_col and "Not-issued" not in c
               and "Sampling" not in c]
    source = next((c for c in cols if c == "Source"), cols[1])
    total = sum(number(r[total_col]) for r in table) or 1.0
    per_reason = Counter({c: sum(number(r[c]) for r in table) for c in reasons})
    print(f"{path}: {len(table)} SASS lines, {total:.0f} stall samples")
    print("by reason:", ", ".join(f"{short(c)} {100 * v / total:.1f}%" for c, v in per_reason.most_common(8) if v)
          or "(no per-reason columns in this export)")
    top = sorted(range(len(table)), key=lambda i: -number(table[i][total_col]))[:n]
    for i in sorted(top):
        r = table[i]
        why = Counter({c: number(r[c]) for c in reasons}).most_common(2)
        share = 100 * number(r[total_col]) / total
        print(f"{share:5.1f}%  {r.get('Address', '')[-6:]:>6}  {r[source].strip()[:70]:70s}  "
              + ", ".join(f"{short(c)} {number(v):.0f}" for c, v in why if v))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
