#!/usr/bin/python3
"""Writes validation/vtrain-a100-nccl.json, a smolcluster profile of vTrain's NCCL all-reduce tables.

The AR_GPU{2..8}_1M_1024M_LUT files beside this script are byte-for-byte copies of
VIA-Research/vTrain trace/a100/ at commit f8dda84 ("vTrain release", MIT licence): nccl-tests
all_reduce_perf output on the A100 node vTrain's single-node rows were measured on, one file per
GPU count, messages of 1 MiB to 1 GiB in 1 MiB steps. Columns: size (B), count, type, out-of-place
time (ns) and bus bandwidth, in-place time (ns) and bus bandwidth. The profile keeps the in-place
time, the column vTrain's own predictor reads (src/predictor.py, get_allreduce_LUT: info[-2]).

Usage: /usr/bin/python3 validation/vtrain-nccl/make_profile.py  (from the repository root)
"""
import csv
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
network = []
for gpus in range(2, 9):
    sizes, seconds = [], []
    with open(os.path.join(here, "AR_GPU%d_1M_1024M_LUT" % gpus), newline="") as f:
        rows = csv.reader(f)
        header = next(rows)
        assert header[0].lower() == "size(b)" and header[5] == "time(ns)", header
        for row in rows:
            sizes.append(int(row[0]))
            seconds.append(int(row[5]) * 1e-9)
    network.append({"kind": "all_reduce", "ranks": gpus, "nodes": 1, "bytes": sizes, "seconds": seconds})

profile = {
    "smolcluster_profile": 1,
    "measured_on": {
        "hosts": ["vTrain's 8 x A100 SXM4 NVSwitch node"],
        "nodes": 1,
        "ranks_per_node": 8,
        "date": "2024-09-26",
        "source": "VIA-Research/vTrain trace/a100/AR_GPU{2..8}_1M_1024M_LUT at f8dda84 (MIT licence): "
                  "nccl-tests all_reduce_perf, in-place time; converted by validation/vtrain-nccl/make_profile.py. Date: of that commit (the measurement date is not published)",
    },
    "network": network,
}
out = os.path.join(os.path.dirname(here), "vtrain-a100-nccl.json")
with open(out, "w") as f:
    json.dump(profile, f, separators=(",", ":"))
    f.write("\n")
print("wrote", out)
