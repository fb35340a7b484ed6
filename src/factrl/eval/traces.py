"""A static HTML page to browse rollouts from a TRAJECTORIES parquet (``factrl traces``).

One self-contained file (inline CSS and JS, no CDN, no network): a summary line, a filter box, and per
rollout a header (id, agent, round, reward and its parts, format validity, tool calls) above the
turns, each turn a collapsible ``<details>``. Turns injected by the environment (tool results) are
marked "env · injected" and shaded, so what the policy generated (loss mask 1) is told apart at a
glance from what it was given (mask 0). All text is HTML-escaped; protocol tags are highlighted.

    factrl traces ROLLOUTS.parquet -o traces.html [--limit N]
"""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from factrl.data.schemas import TRAJECTORIES, validate
from factrl.io import write_text

_TAG = re.compile(r"&lt;(/?)(think|question|result|verification|search|report)&gt;")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header.top{position:sticky;top:0;background:#1d2330;color:#fff;padding:10px 18px;display:flex;gap:16px;
 align-items:center;flex-wrap:wrap;z-index:1}
header.top h1{font-size:17px;margin:0}
header.top input,header.top select{font:inherit;padding:4px 8px;border-radius:4px;border:0}
header.top input{width:260px}
main{padding:14px 18px}
section.rollout{background:#fff;border:1px solid #d6d9e0;border-radius:6px;margin:0 0 12px;padding:8px 12px}
section.rollout.invalid{border-left:5px solid #c62828}
section.rollout.valid{border-left:5px solid #2e7d32}
.meta{display:flex;gap:14px;flex-wrap:wrap;font-size:13px;margin-bottom:6px}
.meta b{font-family:ui-monospace,monospace}
.badge{padding:1px 7px;border-radius:9px;background:#e8eaf0}
.badge.ok{background:#d7f0d9}.badge.bad{background:#f8d7d7}
details.turn{margin:4px 0;border-radius:4px;border:1px solid #e1e4ea}
details.turn>summary{cursor:pointer;padding:3px 8px;font-size:12px;color:#4a5160}
details.turn.model{background:#fff}
details.turn.env{background:#fff6dd;border-color:#e7c66b}
details.turn.env>summary{color:#7a5b00;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;margin:0;padding:6px 10px;font:12.5px/1.4 ui-monospace,monospace}
.tag{color:#3949ab;font-weight:700}
.hidden{display:none}
"""

_JS = """
(function(){
  var box=document.getElementById('filter'), agent=document.getElementById('agent'),
      valid=document.getElementById('validity'), count=document.getElementById('shown');
  var items=Array.prototype.slice.call(document.querySelectorAll('section.rollout'));
  // a link can carry a filter: traces.html#q=some%20text
  var m=/^#q=(.*)$/.exec(location.hash); if(m){box.value=decodeURIComponent(m[1]);}
  function apply(){
    var q=box.value.toLowerCase(), a=agent.value, v=valid.value, n=0;
    items.forEach(function(s){
      var ok=(!q||s.textContent.toLowerCase().indexOf(q)>=0)&&(!a||s.dataset.agent===a)&&
             (!v||s.dataset.valid===v);
      s.classList.toggle('hidden',!ok); if(ok){n++;}
    });
    count.textContent=n;
  }
  [box,agent,valid].forEach(function(el){el.addEventListener('input',apply);el.addEventListener('change',apply);});
  document.getElementById('expand').addEventListener('click',function(){
    var open=this.dataset.open!=='1'; this.dataset.open=open?'1':'0';
    this.textContent=open?'collapse all':'expand all';
    document.querySelectorAll('section.rollout:not(.hidden) details').forEach(function(d){d.open=open;});
  });
  apply();
})();
"""


def _text(value: object) -> str:
    """Escaped text with the agents' protocol tags highlighted."""
    return _TAG.sub(r'<span class="tag">&lt;\1\2&gt;</span>', html.escape("" if value is None else str(value)))


def _fmt_reward(value: object) -> str:
    return "–" if value is None else f"{float(value):.3f}"


def _parts(parts: object) -> str:
    if not parts:
        return ""
    items = parts.items() if isinstance(parts, Mapping) else parts  # pyarrow maps come as (k, v) pairs
    return ", ".join(f"{html.escape(str(k))}={float(v):.3g}" for k, v in items)


def _rollout(row: Mapping, open_turns: bool) -> str:
    fv = row.get("format_valid")
    valid = "unknown" if fv is None else ("yes" if fv else "no")
    cls = {"yes": "valid", "no": "invalid"}.get(valid, "")
    badge = {"yes": "badge ok", "no": "badge bad"}.get(valid, "badge")
    head = [
        f'<span>id <b>{html.escape(str(row.get("id")))}</b></span>',
        f'<span>prompt <b>{html.escape(str(row.get("prompt_id")))}</b></span>',
        f'<span class="badge">agent {html.escape(str(row.get("agent")))}</span>',
        f'<span>round {html.escape(str(row.get("round")))}</span>',
        f'<span>reward <b>{_fmt_reward(row.get("reward"))}</b></span>',
        f'<span class="{badge}">format valid: {valid}</span>',
        f'<span>tool calls <b>{html.escape(str(row.get("num_tool_calls")))}</b></span>',
        f'<span>response tokens {len(row.get("response_ids") or [])}</span>',
    ]
    if row.get("reward_parts"):
        head.append(f"<span>parts: {_parts(row['reward_parts'])}</span>")
    turns = []
    for i, turn in enumerate(row.get("turns") or []):
        role = str(turn.get("role") or "model")
        kind = "env" if role == "env" else "model"
        label = "env · injected" if kind == "env" else "model · generated"
        text = turn.get("text") or ""
        turns.append(
            f'<details class="turn {kind}"{" open" if open_turns else ""}>'
            f"<summary>turn {i + 1} — {label} ({len(text)} chars)</summary><pre>{_text(text)}</pre></details>"
        )
    if not turns:
        turns.append("<p><i>no turns recorded</i></p>")
    return (
        f'<section class="rollout {cls}" data-agent="{html.escape(str(row.get("agent")), quote=True)}" '
        f'data-valid="{valid}"><div class="meta">{"".join(head)}</div>{"".join(turns)}</section>'
    )


def trace_page(rows: Sequence[Mapping], *, title: str = "factrl rollouts", open_turns: bool = True) -> str:
    """The page as a string (see the module docstring)."""
    rows = list(rows)
    rewards = [float(r["reward"]) for r in rows if r.get("reward") is not None]
    valid = [bool(r["format_valid"]) for r in rows if r.get("format_valid") is not None]
    agents = sorted({str(r.get("agent")) for r in rows})
    summary = f"{len(rows)} rollouts"
    if rewards:
        summary += f" · mean reward {sum(rewards) / len(rewards):.3f}"
    if valid:
        summary += f" · format valid {100 * sum(valid) / len(valid):.1f}%"
    options = "".join(f'<option value="{html.escape(a, quote=True)}">{html.escape(a)}</option>' for a in agents)
    body = "\n".join(_rollout(r, open_turns) for r in rows)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body>
<header class="top"><h1>{html.escape(title)}</h1><span>{html.escape(summary)} · showing <b id="shown">{len(rows)}</b></span>
<input id="filter" type="search" placeholder="filter: any text in a rollout (claim, id, query…)">
<select id="agent"><option value="">all agents</option>{options}</select>
<select id="validity"><option value="">any format</option><option value="yes">format valid</option>
<option value="no">format invalid</option></select>
<button id="expand" type="button" data-open="{1 if open_turns else 0}">{"collapse all" if open_turns else "expand all"}</button>
</header>
<main>
{body}
</main>
<script>{_JS}</script>
</body></html>
"""


def write_trace_page(
    rows: Iterable[Mapping] | pa.Table, path: str | Path, *, title: str = "factrl rollouts",
    limit: int | None = None, open_turns: bool = True,
) -> Path:
    """Write the page for ``rows`` (TRAJECTORIES dicts or a table), first ``limit`` only; atomic."""
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    rows = list(rows)[:limit] if limit is not None else list(rows)
    write_text(trace_page(rows, title=title, open_turns=open_turns), path)
    return Path(path)


def read_trajectories(path: str | Path) -> pa.Table:
    """A TRAJECTORIES parquet, validated (errors name the file, row and field)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such rollouts file")
    return validate(pq.read_table(path), TRAJECTORIES, str(path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="factrl traces", description="write a static HTML page of rollouts")
    parser.add_argument("rollouts", help="a TRAJECTORIES parquet file")
    parser.add_argument("-o", "--out", default="traces.html", help="output HTML file (default traces.html)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N rollouts")
    parser.add_argument("--title", default=None, help="page title (default: the parquet file name)")
    parser.add_argument("--collapsed", action="store_true", help="start with every turn collapsed")
    args = parser.parse_args(argv)
    table = read_trajectories(args.rollouts)
    out = write_trace_page(table, args.out, title=args.title or Path(args.rollouts).name, limit=args.limit,
                           open_turns=not args.collapsed)
    print(f"wrote {out} ({min(table.num_rows, args.limit or table.num_rows)} rollouts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
