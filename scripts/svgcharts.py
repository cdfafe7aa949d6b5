"""SVG charts shared by scripts/results.py (virtual time) and scripts/kernel_compare.py
(the kernel stacks on the emulated disk): a margin CDF per configuration on a log
probability axis (AVFS Fig. 12-13) and a small line chart. Plain SVG text, no plotting
library, so the figures regenerate byte-identical from the same numbers.
"""
import math

# The results' five colours (a chart with more curves reuses them in turn).
COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]
# The kernel comparison's: one per stack.
MANY_COLORS = COLORS + ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"]

def combined_cdf(wl, curves, path, label=None, disk="avfs-250g", colors=COLORS):
    """One SVG with a margin CDF per configuration (log probability axis, as AVFS Fig. 12-13)."""
    W, H, L, B, T, R = 760, 460, 70, 50, 40, 170
    xs = [x for _, pts in curves for x, _ in pts]
    x0, x1 = min(0.0, min(xs)), max(xs)
    x1 = x0 + max(1.0, x1 - x0)
    ymin = 1e-5
    def px(x): return L + (x - x0) / (x1 - x0) * (W - L - R)
    def py(y): return T + (math.log10(1.0) - math.log10(max(y, ymin))) / (0 - math.log10(ymin)) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{(W - R + L) / 2}" y="22" text-anchor="middle" font-size="15">completion margin CDF, {label or wl}, {disk}</text>']
    for e in range(0, 6):
        y = 10 ** -e
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">1e-{e}</text>')
    step = 250 if x1 - x0 <= 2500 else 500
    t = math.ceil(x0 / step) * step
    while t <= x1:
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{T}" y2="{H - B}" stroke="#eee"/>')
        out.append(f'<text x="{px(t):.1f}" y="{H - B + 16}" text-anchor="middle">{t:.0f}</text>')
        t += step
    out.append(f'<text x="{(W - R + L) / 2}" y="{H - 12}" text-anchor="middle">completion margin (ms)</text>')
    out.append(f'<text x="16" y="{(H - B + T) / 2}" transform="rotate(-90 16 {(H - B + T) / 2})" text-anchor="middle">P(margin &lt;= x)</text>')
    for i, (name, pts) in enumerate(curves):
        c = colors[i % len(colors)]
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{d}"/>')
        out.append(f'<line x1="{W - R + 15}" x2="{W - R + 40}" y1="{T + 20 * i + 10}" y2="{T + 20 * i + 10}" stroke="{c}" stroke-width="3"/>')
        out.append(f'<text x="{W - R + 46}" y="{T + 20 * i + 14}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))

def line_chart(title, xlabel, ylabel, xs, series, path, ylo=None, yhi=None, colors=COLORS):
    """A small SVG line chart: series = [(name, [y...])] over the same xs."""
    W, H, L, B, T, R = 640, 380, 70, 50, 40, 120
    ys = [y for _, v in series for y in v]
    lo = min(ys) if ylo is None else ylo
    hi = max(ys) if yhi is None else yhi
    if hi - lo < 1e-9:
        hi = lo + 1
    def px(i): return L + (xs[i] - xs[0]) / max(1e-9, xs[-1] - xs[0]) * (W - L - R)
    def py(y): return T + (hi - y) / (hi - lo) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{(W - R + L) / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for k in range(6):
        y = lo + (hi - lo) * k / 5
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{H - B + 16}" text-anchor="middle">{x:g}</text>')
    out.append(f'<text x="{(W - R + L) / 2}" y="{H - 12}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="16" y="{(H - B + T) / 2}" transform="rotate(-90 16 {(H - B + T) / 2})" text-anchor="middle">{ylabel}</text>')
    for j, (name, v) in enumerate(series):
        c = colors[j % len(colors)]
        pts = " ".join(f"{px(i):.1f},{py(y):.1f}" for i, y in enumerate(v))
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pts}"/>')
        for i, y in enumerate(v):
            out.append(f'<circle cx="{px(i):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<line x1="{W - R + 15}" x2="{W - R + 40}" y1="{T + 20 * j + 10}" y2="{T + 20 * j + 10}" stroke="{c}" stroke-width="3"/>')
        out.append(f'<text x="{W - R + 46}" y="{T + 20 * j + 14}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))
