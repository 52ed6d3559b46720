"""The replay report as one self-contained HTML page: tables and inline SVG charts, no script, no
stylesheet or font from elsewhere, so it opens offline and can be mailed as it is."""

from __future__ import annotations

from html import escape
from typing import Any

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H, PAD = 640, 180, 36


def _line_chart(title: str, series: dict[str, list[float | None]], top: float | None = None) -> str:
    values = [v for s in series.values() for v in s if v is not None]
    hi = top if top is not None else max(values, default=1.0) or 1.0
    n = max((len(s) for s in series.values()), default=1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 20}" role="img" '
             f'aria-label="{escape(title)}"><text x="{PAD}" y="14" font-size="12">{escape(title)}</text>',
             f'<line x1="{PAD}" y1="{H}" x2="{W}" y2="{H}" stroke="#999"/>',
             f'<line x1="{PAD}" y1="20" x2="{PAD}" y2="{H}" stroke="#999"/>',
             f'<text x="2" y="28" font-size="10">{hi:.3g}</text><text x="2" y="{H}" font-size="10">0</text>']
    for i, (name, s) in enumerate(series.items()):
        pts = " ".join(f"{PAD + (W - PAD) * k / max(n - 1, 1):.1f},{H - (H - 20) * min(v / hi, 1):.1f}"
                       for k, v in enumerate(s) if v is not None)
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>')
        parts.append(f'<text x="{W - 150}" y="{30 + 12 * i}" font-size="10" fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bars(title: str, groups: dict[str, dict[str, Any]]) -> str:
    """Wait p50/p95/p99 per group, one bar each, on one scale."""
    rows = [(g, q, w.get(q) or 0.0) for g, w in groups.items() for q in ("p50_s", "p95_s", "p99_s")]
    hi = max((v for _, _, v in rows), default=1.0) or 1.0
    height = 16 + 14 * len(rows)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" role="img" '
             f'aria-label="{escape(title)}"><text x="0" y="12" font-size="12">{escape(title)}</text>']
    for k, (g, q, v) in enumerate(rows):
        y = 16 + 14 * k
        width = (W - 260) * v / hi
        parts.append(f'<text x="0" y="{y + 10}" font-size="10">{escape(str(g))} {q[:3]}</text>'
                     f'<rect x="120" y="{y}" width="{width:.1f}" height="11" fill="{COLOURS[k % 3]}"/>'
                     f'<text x="{124 + width:.1f}" y="{y + 10}" font-size="10">{v / 3600:.2f} h</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: list[list[Any]], head: list[str]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape('' if c is None else str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _policy(p: dict[str, Any]) -> str:
    s = p["series"]
    shares: dict[str, list[float | None]] = {n: v["share"] for n, v in s["tenant_share"].items()}
    out = [f"<h2>{escape(p['name'])} <small>({escape(p['policy']['kind'])})</small></h2>",
           _table([[k, v] for k, v in p["summary"].items()], ["figure", "value"]),
           _line_chart(f"Utilisation (bins of {s['bin_s'] / 3600:.2f} h)",
                       {"GPU": s["gpu_utilisation"], "node": s["node_utilisation"]}, 1.0),
           _line_chart("Queue depth (pending requests)", {"queue": s["queue_depth"]}),
           _line_chart("Preemptions per bin", {"preemptions": [float(x) for x in s["preemptions"]]}),
           _line_chart("Share of the GPUs, heaviest tenants", shares),
           _bars("Wait per class", p["wait"]["by_class"]),
           _bars("Wait per priority", p["wait"]["by_priority"]),
           "<h3>Preemptions</h3>",
           _table([[r, n] for r, n in p["preemption"]["victims_by_reason"].items()], ["reason", "victims"]),
           _table([[k, n] for k, n in p["preemption"]["victims_per_preemption"].items()],
                  ["victims per preemption", "preemptions"]),
           "<h3>Tenants</h3>",
           _table([[n, t["fair_share"], t["mean_share"], t["gpu_hours"], t["below_fair_share_hours"],
                    t["starving_hours"], p["wait"]["by_tenant"].get(n, {}).get("p95_s")]
                   for n, t in p["tenants"].items()],
                  ["tenant", "fair share", "mean share", "GPU-hours", "below fair share (h)", "starving (h)",
                   "wait p95 (s)"])]
    return "<section>" + "".join(out) + "</section>"


def comparison(report: dict[str, Any]) -> str:
    """The policies side by side with the differences (also shown on the console's evaluation page)."""
    return "".join(
        f"<h2>{escape(c['other'])} against {escape(c['baseline'])}</h2>"
        + _table([[k, f["baseline"], f["other"], f["difference"]] for k, f in c["figures"].items()],
                 ["figure", c["baseline"], c["other"], "difference"])
        for c in report["comparison"])


def render(report: dict[str, Any]) -> str:
    trace, cluster = report["trace"], report["cluster"]
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Lattice replay</title>"
            "<style>body{font:14px sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse;"
            "margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}svg{display:block;"
            "margin:.8em 0}</style></head><body>"
            f"<h1>Replay of {escape(str(trace.get('source')))}</h1>"
            f"<p>{trace.get('jobs')} jobs ({escape(str(trace.get('format')))}); cluster "
            f"{escape(str(cluster.get('name')))}: {cluster.get('nodes')} nodes, {cluster.get('gpus')} GPUs.</p>"
            + comparison(report) + "".join(_policy(p) for p in report["policies"]) + "</body></html>\n")
