"""Phase table of devmem::mpi rendezvous messages from phase-profile.patch's records.

Usage: python3 phases.py PREFIX... where each PREFIX names runs PREFIX-1.0/PREFIX-1.1, PREFIX-2.0,
... (DEVMEM_MPI_PHASES_OUT=PREFIX-N for run N; .0 and .1 are the two ranks' files). Records of
the two ranks are matched by (sender rank, sequence number); times are CLOCK_MONOTONIC, common to
both processes. Prints the median over runs of each run's per-message medians, in microseconds.
"""
import sys, statistics as st, collections, glob
def load(prefix):
    recs = {}
    for r in (0, 1):
        lines = open(f"{prefix}.{r}").read().split("\n")
        hdr = lines[0].split()
        for ln in lines[1:]:
            if not ln.strip(): continue
            d = dict(zip(hdr, map(int, ln.split())))
            sender = d["me"] if d["sending"] else d["peer"]
            recs.setdefault((sender, d["seq"]), {})["S" if d["sending"] else "R"] = d
    groups = collections.defaultdict(list)
    for pr in recs.values():
        if "S" not in pr or "R" not in pr: continue
        S, R = pr["S"], pr["R"]
        us = lambda ns: ns / 1000.0
        ph = collections.OrderedDict()
        ph["one-way"] = us(R["end"] - S["begin"])
        ph["S setup"] = us(S["start"] - S["begin"]) - us(S["copy_before_start"])
        ph["S pack before header"] = us(S["copy_before_start"])
        ph["handshake: header->R->ack->S"] = us(S["ack"] - S["start"])
        ph["S ack->1st post"] = us(S["first_post"] - S["ack"])
        ph["payload: 1st post->R last in"] = us(R["last_xfer"] - S["first_post"])
        ph["R last unpack"] = us(R["end"] - R["last_xfer"])
        ph["S pack total"] = us(S["copy_ns"])
        ph["R unpack total"] = us(R["copy_ns"])
        ph["R header->ack"] = us(R["ack"] - R["start"])
        groups[("staged" if S["staged"] else "direct", S["bytes"], S["chunks"])].append(ph)
    return {g: {k: st.median([x[k] for x in L]) for k in L[0]} for g, L in groups.items()}
for label in sys.argv[1:]:
    runs = [load(p[:-2]) for p in sorted(glob.glob(f"{label}-*.0"))]
    print(f"\n### {label}: median over {len(runs)} runs of per-run medians (us)")
    keys = sorted(runs[0])
    cols = list(next(iter(runs[0].values())).keys())
    print("| transport, size, chunks | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for g in keys:
        vals = [st.median([r[g][c] for r in runs if g in r]) for c in cols]
        print(f"| {g[0]} {g[1]//1024} KiB, {g[2]} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
