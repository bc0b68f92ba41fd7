#!/usr/bin/env python3
"""How many independent measurements vtrain-single-node.csv holds.

Groups the 1,440 rows by everything but the global batch (hidden, tp, pp, micro-batch, layers,
GPUs), fits iteration time = A + n * B to each group (n = micro-batches per replica = global batch
/ (dp * micro-batch)), and prints the largest relative residual, how many distinct per-micro-batch
times B there are once the GPU count is also dropped, and the layer/head split of B (B = L/pp * c
+ b, c per layer, b the micro-batch's embedding, head and loss) per pipeline depth.

Standard library only: /usr/bin/python3 validation/vtrain_structure.py
"""
import csv
import os
from collections import defaultdict


def fit_line(points):
    """Least squares y = a + b x over (x, y) points; returns (a, b, max relative residual)."""
    n = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    a = (sy - b * sx) / n
    return a, b, max(abs(a + b * x - y) / y for x, y in points)


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vtrain-single-node.csv")
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))[1:]
    groups = defaultdict(list)
    for gpus, gb, mb, h, _heads, layers, _seq, tp, dp, pp, ms in rows:
        gpus, gb, mb, h, layers, tp, dp, pp = map(int, (gpus, gb, mb, h, layers, tp, dp, pp))
        groups[(h, tp, pp, mb, layers, gpus)].append((gb // (dp * mb), float(ms)))
    worst, slopes = 0.0, defaultdict(set)
    fitted = 0
    for key, points in groups.items():
        if len({n for n, _ in points}) < 2:
            continue
        _, b, res = fit_line(points)
        worst = max(worst, res)
        fitted += 1
        slopes[key[:5]].add(round(b, 6))
    print(f"{len(rows)} rows in {len(groups)} groups (all but the global batch equal); "
          f"{fitted} groups with two or more micro-batch counts")
    print(f"iteration time = A + n * B: largest relative residual {worst:.1e}")
    spread = max(len(s) for s in slopes.values())
    print(f"per-micro-batch time B: {len(slopes)} distinct (hidden, tp, pp, micro-batch, layers); "
          f"{'one value' if spread == 1 else f'up to {spread} values'} across GPU counts")
    # B against layers per stage: slope c per layer, intercept b (head and loss on the last stage)
    print("\nB = layers/pp * c + b, per (hidden, tp, micro-batch):")
    print("hidden tp mb   pp  c (ms)   b (ms)")
    by_cell = defaultdict(list)
    for (h, tp, pp, mb, layers), bs in slopes.items():
        by_cell[(h, tp, mb, pp)].append((layers / pp, next(iter(bs))))
    for (h, tp, mb, pp) in sorted(by_cell):
        points = by_cell[(h, tp, mb, pp)]
        if len(points) < 2:
            continue
        b, c, _ = fit_line(points)
        print(f"{h:6d} {tp:2d} {mb:2d} {pp:4d} {c:8.3f} {b:8.2f}")


if __name__ == "__main__":
    main()
