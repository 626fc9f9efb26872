"""Random-interleaving model of w8a8_ws COOP's stage ring (thirty-fifth session, before its first GPU run): one loader,
two consumers sharing each stage, mbarrier phase parity; checks no deadlock and that no consumer reads a stage before
the load of its ring position (the ping-pong form's first hang was such a parity alias). usage: python
tests/ring_model.py
A barrier completes phase p when its pending count reaches 0; wait(parity) passes iff the last completed phase's
parity == parity (phase -1 counts as complete with parity 1, as on the GPU for a fresh barrier). Also the COOP
consumers' absmax trade (`exchange`)."""
import random

class Bar:
    def __init__(self, count):
        self.count, self.pending, self.completed = count, count, -1  # completed: last completed phase index
    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.completed += 1
            self.pending = self.count
    def passes(self, parity):
        return (self.completed & 1) == parity if self.completed >= 0 else parity == 1

def run(STAGES, k_tiles, tiles_per_prog, seed):
    rnd = random.Random(seed)
    ready = [Bar(1) for _ in range(STAGES)]
    empty = [Bar(2) for _ in range(STAGES)]
    data = [None] * STAGES  # the ring position whose load the stage holds
    total = k_tiles * tiles_per_prog
    # loader state: next position p
    L = {"p": 0}
    C = [{"p": 0, "pending_release": None} for _ in range(2)]
    steps = 0
    while True:
        steps += 1
        if steps > 10**6:
            raise RuntimeError("no progress")
        actors = []
        p = L["p"]
        if p < total and empty[p % STAGES].passes(((p // STAGES) & 1) ^ 1):
            actors.append("L")
        for c in range(2):
            q = C[c]["p"]
            if q < total and ready[q % STAGES].passes((q // STAGES) & 1):
                actors.append(c)
            elif q == total and C[c]["pending_release"] is not None:
                actors.append(c)
        if not actors:
            done = L["p"] == total and all(C[c]["p"] == total and C[c]["pending_release"] is None for c in range(2))
            if done:
                return
            raise RuntimeError(f"deadlock: L {L} C {C}")
        a = rnd.choice(actors)
        if a == "L":
            s = p % STAGES
            data[s] = p
            ready[s].arrive()  # the TMA bytes landing
            L["p"] += 1
        else:
            c = C[a]
            q = c["p"]
            if q < total:
                s = q % STAGES
                assert data[s] == q, f"consumer {a} read position {data[s]} at {q}"
                # release the step before (its wgmma done), as the kernel: k > 0 within a tile
                k = q % k_tiles
                if c["pending_release"] is not None and k > 0:
                    empty[c["pending_release"] % STAGES].arrive()
                    c["pending_release"] = None
                c["pending_release"] = q
                if k == k_tiles - 1:  # tile end: wait(0), release the last step
                    empty[q % STAGES].arrive()
                    c["pending_release"] = None
                c["p"] += 1
            else:
                empty[c["pending_release"] % STAGES].arrive()
                c["pending_release"] = None


def exchange(tiles, seed):
    """The gated QUANT_OUT groups of 128 (w8a8_ws._amax_exchange, thirty-seventh session): per tile n each consumer
    stores its absmax in slot [n % 2][part], arrives on one barrier of two arrivals, waits for parity n & 1 and reads
    the other's slot [n % 2][1 - part]. Each consumer's steps, interleaved at random: it must read the other's value
    for its own tile (not one of a tile before or after), and never block for good."""
    rnd = random.Random(seed)
    bar, slots = Bar(2), [[None, None], [None, None]]
    C = [{"n": 0, "at": "store"} for _ in range(2)]
    steps = 0
    while any(c["n"] < tiles for c in C):
        steps += 1
        if steps > 10**5:
            raise RuntimeError("no progress")
        actors = [i for i, c in enumerate(C) if c["n"] < tiles and (c["at"] != "wait" or bar.passes(c["n"] & 1))]
        if not actors:
            raise RuntimeError(f"deadlock: {C}")
        i = rnd.choice(actors)
        c, n = C[i], C[i]["n"]
        if c["at"] == "store":
            slots[n % 2][i] = n
            c["at"] = "arrive"
        elif c["at"] == "arrive":
            bar.arrive()
            c["at"] = "wait"
        elif c["at"] == "wait":
            c["at"] = "read"
        else:
            assert slots[n % 2][1 - i] == n, f"consumer {i} at tile {n} read the value of tile {slots[n % 2][1 - i]}"
            c["n"], c["at"] = n + 1, "store"


for STAGES in (2, 3, 4, 6):
    for k_tiles in (1, 2, 3, 5, 8):
        for tiles in (1, 2, 3):
            for seed in range(200):
                run(STAGES, k_tiles, tiles, seed)
for tiles in (1, 2, 3, 5, 8):
    for seed in range(2000):
        exchange(tiles, seed)
print("ok: no deadlock, no stale stage; the absmax trade reads each tile's own values")
