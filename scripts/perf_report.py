#!/usr/bin/env python3
"""Regenerates docs/performance.md (and one SVG plot per suite/op) from the
CSV files `sinew bench <suite> --csv FILE` writes (suite,case,impl,metric,value,unit).

usage: scripts/perf_report.py docs/perf/*.csv > docs/performance.md
"""
import csv
import math
import os
import sys
from collections import OrderedDict, defaultdict

PEERS_FIRST = ["sinew", "sinew-ucx", "gloo", "mpi", "memcpy"]


def load(paths):
    rows = []
    for p in paths:
        # `--fr pair` runs (fr.csv) time their own collectives: keep them out
        # of the collectives tables, whose cases come from another run.
        fr_run = os.path.basename(p) == "fr.csv"
        with open(p) as f:
            for r in csv.DictReader(f):
                r["value"] = float(r["value"])
                if fr_run:
                    r["suite"] = "flight_recorder"
                rows.append(r)
    return rows


def render_fr(rows):
    """The Flight Recorder's cost (issue #4): a `--fr pair` run and a full-ring dump."""
    val = {(r["case"], r["impl"], r["metric"]): r["value"] for r in rows}
    print("`sinew bench collectives --fr pair`: samples alternate recording on and off in one run (the order")
    print("inside each pair alternating too); the overhead is the median of the on/off ratio of each pair. The")
    print("dump is of the full ring, rendered to JSON and written to a file. Targets: at most 1% of a 4 KiB")
    print("allreduce's latency, a 2000-entry dump under 100 ms. The file holds the median of a batch of runs")
    print("(`--samples 1000`); docs/flight_recorder.md, \"Cost\", gives each batch's spread.\n")
    print("| case | latency on (us) | latency off (us) | overhead | target | met |")
    print("|---|---|---|---|---|---|")
    for c in OrderedDict.fromkeys(r["case"] for r in rows if r["metric"] == "fr_overhead_pct"):
        pct = val[(c, "sinew", "fr_overhead_pct")]
        on, off = val.get((c, "sinew", "latency_us")), val.get((c, "sinew-fr-off", "latency_us"))
        print(f"| {c} | {fmt(on) if on else '-'} | {fmt(off) if off else '-'} | {pct:.2f}% | <= 1% | "
              f"{'yes' if pct <= 1 else 'NO'} |")
    for c in OrderedDict.fromkeys(r["case"] for r in rows if r["metric"] == "dump_ms"):
        d, rnd = val[(c, "sinew", "dump_ms")], val.get((c, "sinew", "render_ms"))
        print(f"| {c} | | | rendered in {fmt(rnd) if rnd else '-'} ms, written in {fmt(d)} ms | < 100 ms | "
              f"{'yes' if d < 100 else 'NO'} |")
    print()


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def svg_plot(path, title, series, xlabel, ylabel):
    """A log-log line plot: series = {name: [(x, y), ...]}."""
    W, H, L, B, T, R = 640, 380, 70, 50, 30, 120
    xs = [x for s in series.values() for x, _ in s if x > 0]
    ys = [y for s in series.values() for _, y in s if y > 0]
    if not xs or not ys:
        return
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    sx = lambda x: L + (math.log10(x) - x0) / max(x1 - x0, 1e-9) * (W - L - R)
    sy = lambda y: H - B - (math.log10(y) - y0) / max(y1 - y0, 1e-9) * (H - B - T)
    colors = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#7f7f7f", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="18" text-anchor="middle" font-size="13">{title}</text>']
    for e in range(int(y0), int(y1) + 1):
        y = sy(10 ** e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W-R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L-5}" y="{y+4:.1f}" text-anchor="end">1e{e}</text>')
    for x in sorted(set(xs)):
        if abs(math.log2(x) % 4) < 1e-9 or x == max(xs):
            label = f"{x/2**20:g}M" if x >= 2**20 else f"{x/1024:g}K" if x >= 1024 else f"{x:g}"
            out.append(f'<text x="{sx(x):.1f}" y="{H-B+15}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="15" y="{(T+H-B)/2}" transform="rotate(-90 15 {(T+H-B)/2})" text-anchor="middle">{ylabel}</text>')
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(p for p in pts if p[0] > 0 and p[1] > 0)
        c = colors[i % len(colors)]
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{d}"/>')
        out.append(f'<text x="{W-R+8}" y="{T+15+15*i}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def targets(rows):
    """Issue #2's targets, 2 ranks on one host, read off this run."""
    val = {(r["case"], r["impl"], r["metric"]): r["value"] for r in rows}
    big, small = "allreduce/float32/67108864B/ws2", "allreduce/float32/8B/ws2"
    checks = []
    s, g, m = (val.get((big, i, "busbw_GBps")) for i in ("sinew", "gloo", "mpi"))
    if s and g:
        checks.append(("allreduce 64 MiB busbw >= 3x gloo", f"{s:.2f} vs {g:.2f} GB/s = {s/g:.2f}x", s / g >= 3))
    if s and m:
        checks.append(("allreduce 64 MiB busbw >= 1.2x mpi", f"{s:.2f} vs {m:.2f} GB/s = {s/m:.2f}x", s / m >= 1.2))
    s, m = (val.get((small, i, "latency_us")) for i in ("sinew", "mpi"))
    if s and m:
        checks.append(("allreduce 8 B latency <= mpi", f"{s:.3f} vs {m:.3f} us", s <= m))
    if checks:
        print("| target | measured | met |")
        print("|---|---|---|")
        for name, got, ok in checks:
            print(f"| {name} | {got} | {'yes' if ok else 'NO'} |")
        print()



# --- gemm and peak (issue #5) -------------------------------------------------

GEMM_PEERS = ["sinew", "sinew-tile", "sinew-blas", "sinew-fused", "sinew-unfused", "openblas", "blis"]


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def parse_gemm_case(c):
    """'mm/f32/128x3072x768/none/t1' -> (op, dtype, (m, n, k), epilogue, threads)."""
    parts = c.split("/")
    if len(parts) != 5 or not parts[4].startswith("t"):
        return None
    dims = [int(x) for x in parts[2].split("x")]
    if len(dims) != 3:
        return None
    return parts[0], parts[1], tuple(dims), parts[3], int(parts[4][1:])


def svg_roofline(path, title, points, peaks, bandwidths):
    """Log-log GFLOP/s over arithmetic intensity (flop/byte), with horizontal
    peak lines and the bandwidth roofs y = GB/s x intensity."""
    W, H, L, B, T, R = 680, 420, 70, 50, 30, 170
    xs = [x for pts in points.values() for x, _ in pts if x > 0]
    ys = [y for pts in points.values() for _, y in pts if y > 0] + [p for _, p in peaks if p > 0]
    if not xs or not ys:
        return False
    x0, x1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys) * 1.2))
    sx = lambda x: L + (math.log10(x) - x0) / max(x1 - x0, 1e-9) * (W - L - R)
    sy = lambda y: H - B - (math.log10(y) - y0) / max(y1 - y0, 1e-9) * (H - B - T)
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#7f7f7f", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{(L + W - R) / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>']
    for e in range(int(y0), int(y1) + 1):
        out.append(f'<line x1="{L}" y1="{sy(10 ** e):.1f}" x2="{W - R}" y2="{sy(10 ** e):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 5}" y="{sy(10 ** e) + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    for e in range(int(x0), int(x1) + 1):
        out.append(f'<line x1="{sx(10 ** e):.1f}" y1="{T}" x2="{sx(10 ** e):.1f}" y2="{H - B}" stroke="#eee"/>')
        out.append(f'<text x="{sx(10 ** e):.1f}" y="{H - B + 15}" text-anchor="middle">{10 ** e:g}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">arithmetic intensity (flop/byte)</text>')
    out.append(f'<text x="15" y="{(T + H - B) / 2}" transform="rotate(-90 15 {(T + H - B) / 2})" '
               f'text-anchor="middle">GFLOP/s</text>')
    ymax = 10 ** y1
    for i, (label, gbps) in enumerate(bandwidths):
        # The roof y = gbps * x, clipped to the plot.
        xa, xb = 10 ** x0, min(10 ** x1, ymax / gbps)
        if xb > xa and gbps * xa > 0:
            out.append(f'<line x1="{sx(xa):.1f}" y1="{sy(max(gbps * xa, 10 ** y0)):.1f}" x2="{sx(xb):.1f}" '
                       f'y2="{sy(gbps * xb):.1f}" stroke="#555" stroke-dasharray="{4 + 3 * i},3"/>')
            out.append(f'<text x="{W - R + 8}" y="{H - B - 15 * i}" fill="#555">{label}</text>')
    for i, (label, gf) in enumerate(peaks):
        if gf <= 0:
            continue
        out.append(f'<line x1="{L}" y1="{sy(gf):.1f}" x2="{W - R}" y2="{sy(gf):.1f}" stroke="#000" '
                   f'stroke-dasharray="{8 - 3 * i},3"/>')
        out.append(f'<text x="{W - R + 8}" y="{sy(gf) + 4:.1f}">{label}</text>')
    for i, (name, pts) in enumerate(points.items()):
        c = colors[i % len(colors)]
        for x, y in pts:
            if x > 0 and y > 0:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}" fill-opacity="0.75"/>')
        # The legend stacks up from above the bandwidth labels.
        ly = H - B - 15 * (len(bandwidths) + len(points) - i)
        out.append(f'<circle cx="{W - R + 12}" cy="{ly - 4}" r="4" fill="{c}"/>'
                   f'<text x="{W - R + 20}" y="{ly}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))
    return True


def peak_figures(rows):
    """{(what, threads): value} from suite peak rows (what: fma_f32, dot_bf16, triad, copy)."""
    out = {}
    for r in rows:
        if r["suite"] == "peak":
            what, t = r["case"].split("/")
            out[(what, int(t[1:]))] = r["value"]
    return out


def render_peak(rows):
    peak = peak_figures(rows)
    threads = sorted({t for _, t in peak})
    print("The machine's limits, measured in the same run as the suites compared with them: chains of zmm")
    print("FMAs (f32), of vdpbf16ps (bf16 dot products, two multiply-adds per f32 lane), and STREAM triad and")
    print("copy over 128 MiB arrays (bytes as STREAM counts them); best of several runs. The microkernel row is")
    print("sinew's f32 12x32 tile multiplying panels that stay in L1: the most any GEMM built on it can reach.\n")
    names = [("fma_f32", "f32 FMA peak", "GFLOP/s"), ("tile_f32_l1", "f32 microkernel, panels in L1", "GFLOP/s"),
             ("dot_bf16", "bf16 dot-product peak", "GFLOP/s"),
             ("triad", "stream triad", "GB/s"), ("copy", "stream copy", "GB/s")]
    print("| what | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in threads) + " |")
    print("|---" * (1 + len(threads)) + "|")
    for key, label, unit in names:
        if any((key, t) in peak for t in threads):
            cells = [f"{fmt(peak[(key, t)])} {unit}" if (key, t) in peak else "-" for t in threads]
            print(f"| {label} | " + " | ".join(cells) + " |")
    print()


def gemm_targets(val, cases, peak):
    """Issue #5's targets, read off this run, per thread count."""
    checks = []
    threads = sorted({p[4] for p in cases.values()})
    for t in threads:
        sq = [(c, p) for c, p in cases.items() if p[4] == t and p[0] == "mm" and len(set(p[2])) == 1]
        f32 = [(c, p) for c, p in sq if p[1] == "f32" and p[2][0] >= 512]
        r = [val[(c, "sinew", "gflops")] / val[(c, "openblas", "gflops")] for c, _ in f32
             if (c, "openblas", "gflops") in val and (c, "sinew", "gflops") in val]
        if r:
            g = geomean(r)
            checks.append((f"f32 mm >= 1.05x OpenBLAS (geomean, squares n >= 512), t{t}", f"{g:.2f}x over {len(r)}",
                           g >= 1.05))
        fr = [val[(c, "sinew", "frac_of_peak")] for c, p in f32 if p[2][0] >= 1024 and (c, "sinew", "frac_of_peak") in val]
        if fr:
            ceiling = ""
            if ("tile_f32_l1", t) in peak and peak.get(("fma_f32", t)):
                ceiling = f" (microkernel in L1: {100 * peak[('tile_f32_l1', t)] / peak[('fma_f32', t)]:.0f}%)"
            checks.append((f"f32 mm >= 92% of FMA peak at n >= 1024, t{t}",
                           f"{100 * min(fr):.0f}% to {100 * max(fr):.0f}%{ceiling}", min(fr) >= 0.92))
        fb = [val[(c, "sinew", "frac_of_peak")] for c, p in sq if p[1] == "bf16" and p[2][0] >= 1024
              and (c, "sinew", "frac_of_peak") in val]
        if fb:
            checks.append((f"bf16 mm >= 85% of the bf16 peak (n >= 1024), t{t}",
                           f"{100 * min(fb):.0f}% to {100 * max(fb):.0f}%", min(fb) >= 0.85))
        ep = [(c, p) for c, p in cases.items() if p[4] == t and p[0] == "addmm"]
        mem = [val[(c, "sinew", "gflops")] / val[(c, "openblas", "gflops")] for c, p in ep if p[2][0] <= 8
               and (c, "openblas", "gflops") in val and (c, "sinew", "gflops") in val]
        rest = [val[(c, "sinew", "gflops")] / val[(c, "openblas", "gflops")] for c, p in ep if p[2][0] > 8
                and (c, "openblas", "gflops") in val and (c, "sinew", "gflops") in val]
        if mem:
            checks.append((f"addmm+bias+GELU fused >= 1.3x OpenBLAS + separate pass (M <= 8), t{t}",
                           f"{min(mem):.2f}x to {max(mem):.2f}x", min(mem) >= 1.3))
        if rest:
            checks.append((f"addmm+bias+GELU never slower than OpenBLAS + pass (M > 8), t{t}",
                           f"{min(rest):.2f}x to {max(rest):.2f}x", min(rest) >= 1.0))
        # Decode GEMV targets on large weights (f32 >= 64 MiB; the benchmark rotates copies past the LLC), M = 1.
        big = lambda p: p[0] == "gemv" and p[4] == t and p[2][0] == 1 and p[2][1] * p[2][2] * 4 >= 64 << 20
        gv = [val[(c, "sinew", "frac_of_triad")] for c, p in cases.items() if big(p) and p[1] == "f32"
              and (c, "sinew", "frac_of_triad") in val]
        if gv:
            checks.append((f"f32 GEMV >= 0.9x stream triad (M = 1, weights past the caches), t{t}",
                           f"{min(gv):.2f}x to {max(gv):.2f}x", min(gv) >= 0.9))
        for wd, want in (("bf16", 2), ("fp8_e4m3", 4), ("nvfp4", 7)):
            sp = [val[(c, "sinew", "speedup_vs_f32")] for c, p in cases.items() if big(p)
                  and p[1] == wd and (c, "sinew", "speedup_vs_f32") in val]
            if sp:
                checks.append((f"GEMV {wd} weights ~{want}x the f32 tokens/s (same shapes), t{t}",
                               f"{min(sp):.2f}x to {max(sp):.2f}x", min(sp) >= 0.8 * want))
    for (c, i, m), v in val.items():
        if m == "within_3pct_share":
            n = val.get((c, i, "shapes"), 0)
            checks.append((f"autotuned pick within 3% of the exhaustive best on >= 90% of unseen shapes, {c.split('/')[-1]}",
                           f"{v:.0f}% of {n:.0f} shapes", v >= 90))
        if m == "ns" and c.startswith("dispatch/warm_lookup"):
            checks.append(("warm dispatch (cached pick) < 1 us", f"{v:.0f} ns", v < 1000))
    if checks:
        print("| target | measured | met |")
        print("|---|---|---|")
        for name, got, ok in checks:
            print(f"| {name} | {got} | {'yes' if ok else 'NO'} |")
        print()


def render_gemm(rows, all_rows, out_dir):
    val = {(r["case"], r["impl"], r["metric"]): r["value"] for r in rows}
    cases = OrderedDict()
    for r in rows:
        p = parse_gemm_case(r["case"])
        if p:
            cases.setdefault(r["case"], p)
    peak = peak_figures(all_rows)
    print("Cases are `<op>/<dtype>/<M>x<N>x<K>/<epilogue>/t<threads>`. `sinew` = mm/addmm through the public API,")
    print("dispatched to the autotuned pick; `sinew-tile` / `sinew-blas` = each family's best variant from the")
    print("tuning; `sinew-fused` / `sinew-unfused` = the pick with its epilogue fused into the tile store or run as")
    print("a separate pass; `openblas` = CBLAS called directly (addmm: bias broadcast, sgemm with beta = 1, then a")
    print("vectorized GELU pass; bf16, fp8 and NVFP4 rows: sgemm/sgemv of the same shape on f32 operands, as")
    print("OpenBLAS 0.3.21 has no bf16 GEMM); `blis` = BLIS 0.9 (skx kernels) through its typed API. OpenBLAS ran")
    print("its Cooperlake kernels (`peers:` line of the run); where it does not recognize the CPU and falls back to")
    print("Prescott, `sinew bench` forces the core that the CPU's features call for. Each figure is the fastest of")
    print("samples interleaved across the impls (the machine is shared; other work only adds time). On several")
    print("threads an impl that follows OpenBLAS or BLIS waits 120 ms for their spinning threads, then runs")
    print("untimed for 20 ms, so that every impl is timed on running cores, as the peak is. frac_of_peak")
    print("is of the FMA peak measured in the same run (the bf16 dot peak for bf16 cases).\n")
    gemm_targets(val, cases, peak)
    ops = OrderedDict()
    for c, p in cases.items():
        ops.setdefault(p[0], []).append(c)
    for op, cs in ops.items():
        metric = "GBps" if op == "gemv" else "gflops"
        unit = "GB/s" if metric == "GBps" else "GFLOP/s"
        impls = [i for i in GEMM_PEERS if any((c, i, metric) in val for c in cs)]
        peers = [i for i in impls if i != "sinew"]
        extra = "frac_of_triad" if op == "gemv" else "frac_of_peak"
        print(f"### {op}: {metric} ({unit}, higher is better)\n")
        if op == "gemv":
            print("Bytes are the weights as stored (with their scales) plus x and y; `openblas` streams f32 weights.")
            print("speedup_vs_f32 = sinew's f32-weight time over this format's (tokens per second gained).\n")
        head = ["case"] + impls + [f"sinew {extra}"] + (["speedup_vs_f32"] if op == "gemv" else []) + \
               [f"sinew vs {p}" for p in peers]
        print("| " + " | ".join(head) + " |")
        print("|---" * len(head) + "|")
        for c in cs:
            cells = [fmt(val[(c, i, metric)]) if (c, i, metric) in val else "-" for i in impls]
            cells.append(f"{100 * val[(c, 'sinew', extra)]:.0f}%" if (c, "sinew", extra) in val else "-")
            if op == "gemv":
                cells.append(f"{val[(c, 'sinew', 'speedup_vs_f32')]:.2f}x" if (c, "sinew", "speedup_vs_f32") in val
                             else "-")
            s = val.get((c, "sinew", metric))
            for p in peers:
                v = val.get((c, p, metric))
                cells.append(f"{s / v:.2f}x" if s and v else "-")
            print(f"| {c} | " + " | ".join(cells) + " |")
        print()

    evals = [(r["case"], r["value"]) for r in rows if r["metric"] == "pick_vs_best"]
    if evals:
        print("### autotuner: prescreened pick against the exhaustive best\n")
        print("Every variant of each shape was timed (the tuner's default samples); `pick` is the fastest of the")
        print("variants the cost model let through, `best` the fastest of all, from the same timings. These shapes")
        print("are outside the cost model's training set (`sinew tune --fit`).\n")
        print("| shape | pick / best |")
        print("|---|---|")
        for c, v in evals:
            print(f"| {c} | {v:.3f}x{'' if v <= 1.03 else ' (over 3%)'} |")
        print()
    disp = [(r["case"], r["impl"], r["value"]) for r in rows if r["case"].startswith("dispatch/")]
    if disp:
        print("### dispatch cost\n")
        print("| case | impl | ns |")
        print("|---|---|---|")
        for c, i, v in disp:
            print(f"| {c} | {i} | {v:.0f} |")
        print()

    # Roofline per thread count: sinew and openblas over arithmetic intensity.
    size = {"f32": 4, "bf16": 2, "fp8_e4m3": 1, "nvfp4": 0.5625}
    for t in sorted({p[4] for p in cases.values()}):
        points = defaultdict(list)
        for c, p in cases.items():
            op, dt, (m, n, k), _, tt = p
            if tt != t or op == "gemv":
                continue
            bytes_ = (m * k + k * n + m * n) * size.get(dt, 4)
            # The peers' rows of other dtypes are f32 runs of the shape: not at this intensity.
            for impl in ("sinew", "openblas", "blis") if dt == "f32" else ("sinew",):
                g = val.get((c, impl, "gflops"))
                if g:
                    points[f"{impl} {dt}" if dt != "f32" else impl].append((2.0 * m * n * k / bytes_, g))
        peaks = [(f"f32 FMA peak {fmt(peak.get(('fma_f32', t), 0))}", peak.get(("fma_f32", t), 0)),
                 (f"bf16 dot peak {fmt(peak.get(('dot_bf16', t), 0))}", peak.get(("dot_bf16", t), 0))]
        bws = [(f"triad {fmt(peak[('triad', t)])} GB/s", peak[("triad", t)])] if ("triad", t) in peak else []
        name = f"gemm-roofline-t{t}.svg"
        if svg_roofline(os.path.join(out_dir, name), f"GEMM roofline, {t} thread{'s' if t > 1 else ''}",
                        dict(points), peaks, bws):
            print(f"![gemm roofline t{t}](perf/{name})\n")

def main(paths):
    rows = load(paths)
    out_dir = "docs/perf"
    os.makedirs(out_dir, exist_ok=True)
    print("# Performance\n")
    print("Generated by `scripts/perf_report.py` from the CSV that `sinew bench <suite> --csv FILE` wrote")
    print("(kept in docs/perf/). Every peer ran in the same run as sinew, on the same machine; compare")
    print("ratios, not absolute numbers (machines here are shared and noisy).\n")
    by_suite = OrderedDict()
    for r in rows:
        by_suite.setdefault(r["suite"], []).append(r)
    for suite, srows in by_suite.items():
        print(f"## {suite}\n")
        if suite == "peak":
            render_peak(srows)
            continue
        if suite == "gemm":
            render_gemm(srows, rows, out_dir)
            continue
        if suite == "flight_recorder":
            render_fr(srows)
            continue
        if suite == "collectives":
            print("Cases are `<op>/<dtype>/<bytes>B/ws<ranks>`; busbw as nccl-tests defines it; latency is the")
            print("median over samples of the slowest rank's time per op. `sinew` = shared memory, `sinew-ucx` =")
            print("the native backend with shared memory off (UCX over TCP loopback), `gloo` = the gloo backend")
            print("(libgloo TCP), `mpi` = raw OpenMPI 4.1 calls (`vader`, no CMA in this container), `memcpy` =")
            print("one memcpy of the same size. Peers ran with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (their")
            print("best setting, see shared/BASELINES.md); all buffers are allocated and touched once.\n")
        if suite == "collectives":
            targets(srows)
        if suite == "recovery":
            print("Time from a SIGKILL of one rank (wall clock, written to the store just before the kill) to each")
            print("phase on the survivors, median and max over trials. `restart-all` is what torchrun does: kill")
            print("the rest and start every worker again (new processes, init, first allreduce); here the workers")
            print("are small C++ programs, so it is a lower bound: real PyTorch restarts add interpreter start,")
            print("imports, CUDA/NCCL init and checkpoint reload, typically seconds. `shrink-ucx` is the shrink over")
            print("UCX (as between hosts): `sinew` keeps the survivors' worker and connections, `fresh-connections`")
            print("makes new ones every epoch (`SINEW_UCX_KEEP_CONNECTIONS=0`).\n")
        ops = OrderedDict()
        for r in srows:
            parts = r["case"].split("/")
            key = suite if suite == "recovery" else parts[0]
            ops.setdefault(key, []).append(r)
        for op, orows in ops.items():
            impls = [i for i in PEERS_FIRST if any(r["impl"] == i for r in orows)]
            impls += sorted({r["impl"] for r in orows} - set(impls))
            cases = list(OrderedDict.fromkeys(r["case"] for r in orows))
            val = {(r["case"], r["impl"], r["metric"]): r["value"] for r in orows}
            metrics = list(OrderedDict.fromkeys(r["metric"] for r in orows))
            shown = ("busbw_GBps", "latency_us", "ms", "ms_max", "GFLOPs", "us", "overhead_pct")
            for metric in [m for m in metrics if m in shown] or metrics[:1]:
                unit = next(r["unit"] for r in orows if r["metric"] == metric)
                higher = metric not in ("latency_us", "ms", "ms_max", "us", "overhead_pct")
                peers = [i for i in impls if i != "sinew"]
                print(f"### {op}: {metric} ({unit}, {'higher' if higher else 'lower'} is better)\n")
                print("| case | " + " | ".join(impls) + " | " + " | ".join(f"sinew vs {p}" for p in peers) + " |")
                print("|---" * (1 + len(impls) + len(peers)) + "|")
                for c in cases:
                    cells = [fmt(val[(c, i, metric)]) if (c, i, metric) in val else "-" for i in impls]
                    ratios = []
                    s = val.get((c, "sinew", metric))
                    for p in peers:
                        v = val.get((c, p, metric))
                        if s and v:
                            ratios.append(f"{(s / v if higher else v / s):.2f}x")
                        else:
                            ratios.append("-")
                    print(f"| {c} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
                print()
                if suite == "collectives":
                    series = defaultdict(list)
                    for c in cases:
                        size = float(c.split("/")[2].rstrip("B"))
                        for i in impls:
                            if (c, i, metric) in val:
                                series[i].append((size, val[(c, i, metric)]))
                    name = f"{suite}-{op}-{metric}.svg"
                    svg_plot(os.path.join(out_dir, name), f"{op} {metric}", series, "bytes", f"{metric} ({unit})")
                    print(f"![{op} {metric}](perf/{name})\n")


if __name__ == "__main__":
    main(sys.argv[1:])
