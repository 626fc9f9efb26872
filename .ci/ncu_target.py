"""Shared by the ncu target scripts (.ci/ws_ncu.py, .ci/coop_ncu.py): each launch once to compile and warm up, then
once more, the launches ncu profiles (`--launch-skip` past the first round)."""
import torch


def warm_then_profile(runs, name: str) -> None:
    for _ in range(2):  # round 0: compile and warm up; round 1: the profiled launches
        for f in runs:
            f()
        torch.cuda.synchronize()
    print(f"{name} done")
