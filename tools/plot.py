#!/usr/bin/python3
"""Pictures of smolcluster's outputs, drawn with matplotlib (Debian's python3-matplotlib).

    plot.py timeline TRACE.json[.gz] -o OUT.png [--window START,END] [--svg]
    plot.py memory   TRACE.json[.gz] -o OUT.png [--window START,END] [--svg]
    plot.py sweep    SWEEP.json      -o OUT.png [--svg]
    plot.py scaling  SWEEP.json      -o OUT.png [--svg]
    plot.py validate VALIDATE.json   -o OUT.png [--svg]
    plot.py kernels  KERNELS.csv     -o OUT.png [--svg]

timeline: a Gantt chart of a Chrome trace, a row per rank and stream, coloured by op class.
memory:   device memory in use per rank over time, with each device's capacity.
sweep:    step time against peak memory, one marker per simulated plan, coloured by strategy,
          with the Pareto front of the plans that fit.
scaling:  throughput against nodes per strategy (from `sweep --nodes 1,2,4,8 --json`).
validate: simulated against measured time per op class (from `validate --json`).
kernels:  where one rank's micro-batch and step go, kernel by kernel (from `simulate --kernels`):
          time per kernel name split by phase, and the time the device waits for the host.
Every picture is 1200 x 675 pixels (12 x 6.75 in at 100 dpi). `smolcluster plot` runs this file.
"""
import argparse
import csv
import gzip
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

GIB = 2.0 ** 30  # memory in powers of 1024, as the summary prints it (core/units.hpp to_string_binary)

WIDTH_IN, HEIGHT_IN, DPI = 12.0, 6.75, 100
# Colour-blind-safe palette (Okabe & Ito 2008), one colour per op class / strategy.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#999999"]
CLASS_COLOURS = {
    "forward": "#0072B2",
    "backward": "#56B4E9",
    "recompute": "#CC79A7",
    "optimizer": "#009E73",
    "collective": "#D55E00",
    "p2p": "#E69F00",
    "copy": "#999999",
    "timer": "#F0E442",
    "other compute": "#000000",
}


def fail(message):
    print("plot.py: error: " + message, file=sys.stderr)
    sys.exit(2)


def load_json(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        return json.loads(data)
    except ValueError as e:
        fail(f"{path}: not JSON ({e})")


def figure():
    fig = plt.figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    return fig, fig.add_subplot(1, 1, 1)


def plain_log_axis(axis, lo, hi):
    """A log axis labelled in plain numbers (1, 2, 5, 10, … or, within a decade or so, 1, 1.5, 2, 3, …)."""
    narrow = hi / max(lo, 1e-300) < 30
    subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0) if narrow else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))
    axis.set_minor_formatter(NullFormatter())


def time_unit(span_us):
    """Microseconds → (divisor, unit name) so the axis reads in ms or s."""
    if span_us >= 5e6:
        return 1e6, "s"
    if span_us >= 5e3:
        return 1e3, "ms"
    return 1.0, "µs"


def op_class(e):
    a = e.get("args", {})
    kind = a.get("kind", e.get("cat", ""))
    if kind == "compute":
        phase = a.get("phase", "")
        name = e.get("name", "")
        if "recompute" in name:
            return "recompute"
        return {"fwd": "forward", "bwd": "backward", "bwd_input": "backward", "bwd_weight": "backward",
                "opt": "optimizer"}.get(phase, "other compute")
    if kind in ("send", "recv"):
        return "p2p"
    return kind if kind in CLASS_COLOURS else "other compute"


def trace_parts(trace):
    events = trace.get("traceEvents", trace if isinstance(trace, list) else None)
    if events is None:
        fail("not a Chrome trace: no traceEvents")
    names, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return events, names, threads


def parse_window(text):
    if text is None:
        return None
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        fail(f"--window takes START,END in milliseconds, found '{text}'")
    if not hi > lo:
        fail(f"--window END must be above START, found '{text}'")
    return lo * 1e3, hi * 1e3  # µs


def title_of(trace, what):
    meta = trace.get("metadata", {}) if isinstance(trace, dict) else {}
    parts = [meta.get("model"), meta.get("cluster") and "on " + meta["cluster"]]
    head = " ".join(p for p in parts if p)
    plan = meta.get("plan")
    return (what + (": " + head if head else "")) + ("\n" + plan if plan else "")


def plot_timeline(trace, out, window, fmt):
    events, names, threads = trace_parts(trace)
    rows = {}
    for e in events:
        if e.get("ph") != "X" or e["pid"] not in names or names[e["pid"]] == "network":
            continue
        lo, hi = e["ts"], e["ts"] + e["dur"]
        if window and (hi < window[0] or lo > window[1]):
            continue
        rows.setdefault((e["pid"], e["tid"]), {}).setdefault(op_class(e), []).append((lo, e["dur"]))
    if not rows:
        fail("the trace has no slices" + (" in the window" if window else ""))
    keys = sorted(rows)
    t0 = window[0] if window else min(s for r in rows.values() for c in r.values() for s, _ in c)
    t1 = window[1] if window else max(s + d for r in rows.values() for c in r.values() for s, d in c)
    div, unit = time_unit(t1 - t0)
    fig, ax = figure()
    used = set()
    for y, key in enumerate(keys):
        for cls, spans in rows[key].items():
            used.add(cls)
            ax.broken_barh([((s - t0) / div, max(d / div, (t1 - t0) / div * 2e-4)) for s, d in spans],
                           (y - 0.4, 0.8), facecolors=CLASS_COLOURS[cls], edgecolor="none")
    labels = [f"{names.get(p, p)} {threads.get((p, t), t)}" for p, t in keys]
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(labels, fontsize=max(5, min(9, int(400 / max(1, len(keys))))))
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) / div)
    ax.set_xlabel(f"time ({unit})" + (f" from {t0 / 1e3:.6g} ms" if window else ""))
    ax.set_ylabel("rank and stream")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    order = [c for c in CLASS_COLOURS if c in used]
    ax.legend(handles=[Patch(color=CLASS_COLOURS[c], label=c) for c in order], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False, title="op class")
    ax.set_title(title_of(trace, "Timeline"), fontsize=11, loc="left")
    fig.savefig(out, dpi=DPI, format=fmt)


def plot_memory(trace, out, window, fmt):
    events, names, _ = trace_parts(trace)
    series = {}
    for e in events:
        if e.get("ph") == "C" and e.get("name") == "memory device" and e["pid"] in names:
            series.setdefault(e["pid"], []).append((e["ts"], e["args"]["bytes"]))
    if not series:
        fail("the trace has no device memory counters (simulate --trace records them)")
    capacity = {}
    meta = trace.get("metadata", {}) if isinstance(trace, dict) else {}
    for item in filter(None, meta.get("device-memory-bytes", "").split(",")):
        rank, cap = item.split(":")
        capacity[int(rank)] = float(cap)
    t_all = [t for s in series.values() for t, _ in s]
    t0 = window[0] if window else min(t_all)
    t1 = window[1] if window else max(t_all)
    div, unit = time_unit(max(t1 - t0, 1.0))
    fig, ax = figure()
    many = len(series) > 8
    for k, (pid, points) in enumerate(sorted(series.items())):
        points.sort()
        xs = [(t - t0) / div for t, _ in points] + [(t1 - t0) / div]
        ys = [b / GIB for _, b in points] + [points[-1][1] / GIB]
        colour = PALETTE[k % len(PALETTE)]
        ax.step(xs, ys, where="post", color=colour, linewidth=0.9 if many else 1.4,
                label=None if many and k >= 8 else names[pid])
    for k, cap in enumerate(sorted(set(capacity.get(p) for p in series if p in capacity))):
        ax.axhline(cap / GIB, color="#D55E00", linestyle="--", linewidth=1.2,
                   label="device capacity" if k == 0 else None)
        ax.annotate(f"capacity {cap / GIB:.4g} GiB", xy=(0.005, cap / GIB), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", color="#D55E00", fontsize=9)
    ax.set_xlim(0, (t1 - t0) / div)
    peak = max(b for s in series.values() for _, b in s) / GIB
    caps = [capacity[p] / GIB for p in series if p in capacity]
    if caps and peak < 0.25 * min(caps):
        # Far below the capacity: a log axis shows both the use and the line.
        low = min((b for s in series.values() for _, b in s if b > 0), default=1e6) / GIB
        ax.set_yscale("log")
        ax.set_ylim(low / 2, max(caps) * 1.5)
        plain_log_axis(ax.yaxis, low / 2, max(caps) * 1.5)
        ax.set_ylabel("device memory in use (GiB, log scale)")
    else:
        ax.set_ylim(0, max([peak] + caps) * 1.08)
        ax.set_ylabel("device memory in use (GiB)")
    ax.set_xlabel(f"time ({unit})")
    ax.grid(color="#dddddd", linewidth=0.6, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
              title=f"rank (first 8 of {len(series)})" if many else "rank")
    ax.set_title(title_of(trace, "Device memory"), fontsize=11, loc="left")
    fig.savefig(out, dpi=DPI, format=fmt)


def sweep_parts(doc):
    if not isinstance(doc, dict) or "sweeps" not in doc:
        fail("not a sweep file (smolcluster sweep --json FILE)")
    return doc["sweeps"]


def plot_sweep(doc, out, fmt):
    sweeps = sweep_parts(doc)
    s = sweeps[-1]
    plans = [p for p in s["plans"] if "iteration_time_s" in p]
    if not plans:
        fail("the sweep simulated no plan")
    strategies = sorted({p["strategy"] for p in plans})
    colour = {name: PALETTE[k % len(PALETTE)] for k, name in enumerate(strategies)}
    fig, ax = figure()
    # The largest groups first, so the small ones are drawn on top and stay visible.
    for name in sorted(strategies, key=lambda n: -sum(p["strategy"] == n for p in plans)):
        ok = [p for p in plans if p["strategy"] == name and p["status"] == "ranked"]
        bad = [p for p in plans if p["strategy"] == name and p["status"] != "ranked"]
        ax.scatter([p["peak_memory_bytes"] / GIB for p in ok], [p["iteration_time_s"] for p in ok], s=14,
                   color=colour[name], alpha=0.75, linewidths=0, label=f"{name} ({len(ok)})")
        if bad:
            ax.scatter([p["peak_memory_bytes"] / GIB for p in bad], [p["iteration_time_s"] for p in bad], s=14,
                       marker="x", color=colour[name], alpha=0.35, linewidths=0.8)
    # Pareto front of the plans that fit: no other is both faster and smaller.
    ranked = sorted((p for p in plans if p["status"] == "ranked"),
                    key=lambda p: (p["peak_memory_bytes"], p["iteration_time_s"]))
    front, best = [], float("inf")
    for p in ranked:
        if p["iteration_time_s"] < best:
            front.append(p)
            best = p["iteration_time_s"]
    if front:
        xs = [p["peak_memory_bytes"] / GIB for p in front]
        ys = [p["iteration_time_s"] for p in front]
        ax.step(xs, ys, where="post", color="#000000", linewidth=1.2, label=f"Pareto front ({len(front)})")
        ax.scatter(xs, ys, s=40, facecolors="none", edgecolors="#000000", linewidths=1.0)
        b = min(front, key=lambda p: p["iteration_time_s"])
        offload = f" {b['offload']}" if b.get("offload") else ""   # sweep --json: the simulate flags, "" without
        if b.get("compress", "none") != "none":
            offload += f" --compress {b['compress']}"
        if b.get("zeropp"):   # sweep --zeropp: its simulate flags
            offload += f" {b['zeropp']}"
        text = (f"fastest: {b['strategy']} tp {b['tp']} pp {b['pp']} mb {b['micro_batch']}{offload}, "
                f"{b['iteration_time_s']:.4g} s")
        ax.annotate(text, xy=(b["peak_memory_bytes"] / GIB, b["iteration_time_s"]), xytext=(10, -14),
                    textcoords="offset points", fontsize=9)
    if "device_memory_bytes" in s:
        ax.axvline(s["device_memory_bytes"] / GIB, color="#D55E00", linestyle="--", linewidth=1.2,
                   label=f"device memory {s['device_memory_bytes'] / GIB:.4g} GiB")
    times = [p["iteration_time_s"] for p in plans]
    if max(times) / max(min(times), 1e-12) > 20:
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis, min(times), max(times))
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda k: (labels[k].split(" ")[0] not in colour, labels[k]))
    ax.legend([handles[k] for k in order], [labels[k] for k in order], loc="upper left", bbox_to_anchor=(1.0, 1.0),
              frameon=False, title="strategy (plans that fit)", markerscale=2)
    ax.set_xlim(left=0)
    ax.set_xlabel("peak device memory (GiB)")
    ax.set_ylabel("step time (s)")
    ax.grid(color="#dddddd", linewidth=0.6, which="both")
    shown = len(plans)
    ax.set_title(f"Sweep: {doc.get('model', '')} on {s['cluster']} ({s['devices']} devices), global batch "
                 f"{doc.get('global_batch', '')}\n{shown} simulated plans ({doc.get('network', '')} network; x: did not fit)",
                 fontsize=11, loc="left")
    fig.savefig(out, dpi=DPI, format=fmt)


def plot_scaling(doc, out, fmt):
    sweep_parts(doc)
    rows = doc.get("scaling", [])
    if not rows:
        fail("the sweep file has no scaling table (sweep --nodes 1,2,4,8 --json FILE)")
    by = {}
    for r in rows:
        by.setdefault(r["strategy"], []).append(r)
    fig, ax = figure()
    for k, (name, rs) in enumerate(sorted(by.items())):
        rs.sort(key=lambda r: r["nodes"])
        c = PALETTE[k % len(PALETTE)]
        last = rs[-1]
        ax.plot([r["nodes"] for r in rs], [r["samples_per_s"] for r in rs], marker="o", color=c,
                label=f"{name}: {last['efficiency'] * 100:.1f} % at {last['nodes']} nodes")
        base = rs[0]
        ax.plot([r["nodes"] for r in rs], [base["samples_per_s"] * r["nodes"] / base["nodes"] for r in rs],
                linestyle=":", color=c, linewidth=0.9)
    nodes = sorted({r["nodes"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis, min(r["samples_per_s"] for r in rows), max(r["samples_per_s"] for r in rows))
    ax.set_xticks(nodes)
    ax.set_xticklabels([str(n) for n in nodes])
    ax.set_xlabel("nodes")
    ax.set_ylabel("throughput (samples/s)")
    ax.grid(color="#dddddd", linewidth=0.6, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
              title="strategy: scaling efficiency\n(dotted: linear scaling)")
    cluster = doc["sweeps"][0]["cluster"]
    ax.set_title(f"Scaling: {doc.get('model', '')} on {cluster}, global batch {doc.get('global_batch', '')} "
                 f"(best plan of each strategy per node count)", fontsize=11, loc="left")
    fig.savefig(out, dpi=DPI, format=fmt)


def plot_validate(doc, out, fmt):
    for key in ("simulated_step_s", "measured_step_s", "step_error", "per_class"):
        if not isinstance(doc, dict) or key not in doc:
            fail(f"not a validate file: no '{key}' (smolcluster validate --json)")
    classes = sorted(doc["per_class"])
    if not classes:
        fail("the validate file has no op classes")
    sim = [doc["per_class"][c]["simulated_s"] for c in classes]
    real = [doc["per_class"][c]["measured_s"] for c in classes]
    err = [doc["per_class"][c]["error"] for c in classes]
    scale, unit = (1e3, "ms") if max(sim + real) < 5 else (1.0, "s")
    fig, ax = figure()
    xs = range(len(classes))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [v * scale for v in sim], w, color="#0072B2", label="simulated")
    ax.bar([x + w / 2 for x in xs], [v * scale for v in real], w, color="#E69F00", label="measured")
    for x, s, r, e in zip(xs, sim, real, err):
        ax.annotate(f"{e * 100:+.1f} %", xy=(x, max(s, r) * scale), xytext=(0, 4), textcoords="offset points",
                    ha="center", fontsize=9)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(classes)
    ax.set_xlabel("op class")
    ax.set_ylabel(f"time per step ({unit})")
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="label: simulated / measured − 1")
    ax.set_title(f"Validation: step {doc['simulated_step_s'] * scale:.4g} {unit} simulated, "
                 f"{doc['measured_step_s'] * scale:.4g} {unit} measured ({doc['step_error'] * 100:+.1f} %)",
                 fontsize=11, loc="left")
    fig.savefig(out, dpi=DPI, format=fmt)

KERNEL_COLUMNS = ("rank", "device", "op", "phase", "kernel", "run_s", "op_s")
PHASE_CLASSES = {"fwd": "forward", "recompute": "recompute", "bwd": "backward", "bwd_input": "backward",
                 "bwd_weight": "backward", "opt": "optimizer"}


def load_kernels(path):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except (UnicodeDecodeError, csv.Error) as e:
        fail(f"{path}: not a CSV file ({e})")
    if not rows or any(c not in rows[0] for c in KERNEL_COLUMNS):
        fail(f"{path}: not a kernels file (smolcluster simulate --kernels FILE): needs the columns "
             + ", ".join(KERNEL_COLUMNS))
    return rows


def plot_kernels(rows, out, fmt, top=15):
    try:
        rank = min(int(r["rank"]) for r in rows)
        mine = [r for r in rows if int(r["rank"]) == rank]
        per_name, ops = {}, {}
        for r in mine:
            cls = PHASE_CLASSES.get(r["phase"], "other compute")
            per_name.setdefault(r["kernel"], {}).setdefault(cls, 0.0)
            per_name[r["kernel"]][cls] += float(r["run_s"])
            busy, total = ops.get(r["op"], (0.0, float(r["op_s"])))
            ops[r["op"]] = (busy + float(r["run_s"]), total)
    except (KeyError, ValueError) as e:
        fail(f"not a kernels file: a row has a bad field ({e})")
    waits = sum(max(0.0, total - busy) for busy, total in ops.values())
    names = sorted(per_name, key=lambda n: -sum(per_name[n].values()))
    if len(names) > top:
        other = {}
        for n in names[top:]:
            for cls, t in per_name[n].items():
                other[cls] = other.get(cls, 0.0) + t
        names = names[:top]
        per_name["other kernels"] = other
        names.append("other kernels")
    if waits > 0:
        per_name["device waits for the host"] = {"host": waits}
        names.append("device waits for the host")
    grand = sum(sum(v.values()) for v in per_name.values())
    scale, unit = (1e3, "ms") if grand < 5 else (1.0, "s")
    fig, ax = figure()
    colours = dict(CLASS_COLOURS, host="#999999")
    order = ["forward", "recompute", "backward", "optimizer", "other compute", "host"]
    ys = list(range(len(names)))[::-1]
    used = set()
    for y, n in zip(ys, names):
        left = 0.0
        for cls in order:
            t = per_name[n].get(cls, 0.0) * scale
            if t <= 0:
                continue
            ax.barh(y, t, left=left, color=colours[cls], height=0.7)
            left += t
            used.add(cls)
        ax.annotate(f"{left:.3g} {unit} ({left / (grand * scale) * 100:.1f} %)", xy=(left, y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels(names, fontsize=9)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    labels = {"host": "host (the device idle inside ops)"}
    ax.legend(handles=[Patch(color=colours[c], label=labels.get(c, c)) for c in order if c in used],
              loc="lower right", frameon=False)
    ax.margins(x=0.12)
    ax.set_title(f"Kernels of micro-batch 0 and the step on rank {rank} ({mine[0]['device']}): "
                 f"{grand * scale:.4g} {unit} in {len(ops)} ops, as simulated", fontsize=11, loc="left")
    fig.savefig(out, dpi=DPI, format=fmt)


def main():
    p = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["timeline", "memory", "sweep", "scaling", "validate", "kernels"])
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--svg", action="store_true", help="write SVG instead of PNG")
    p.add_argument("--window", help="START,END in milliseconds (timeline, memory)")
    a = p.parse_args()
    fmt = "svg" if a.svg else "png"
    if a.kind == "kernels":
        plot_kernels(load_kernels(a.input), a.output, fmt)
        return
    doc = load_json(a.input)
    window = parse_window(a.window)
    if a.kind == "timeline":
        plot_timeline(doc, a.output, window, fmt)
    elif a.kind == "memory":
        plot_memory(doc, a.output, window, fmt)
    elif a.kind == "sweep":
        plot_sweep(doc, a.output, fmt)
    elif a.kind == "scaling":
        plot_scaling(doc, a.output, fmt)
    else:
        plot_validate(doc, a.output, fmt)


if __name__ == "__main__":
    main()
