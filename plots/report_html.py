"""A capacity plan as one self-contained HTML page: the verdict first, the engine configuration to paste (with a copy
button), the figures, the fleet, and where every number comes from.

The page carries everything it shows: figures as base64 PNG, a few kilobytes of CSS and a dozen lines of script for
the copy buttons, nothing fetched, so it opens the same from a laptop's disk, a mail attachment or a phone. Like the
other figure modules it takes results and returns what it made (here the page's text); the CLI writes it.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

from matplotlib.figure import Figure

from plots.render import render


@dataclass(frozen=True)
class Snippet:
    """A block to paste into an engine's configuration: a label, the text, and a note on what it assumes."""

    label: str
    text: str
    note: str = ""


@dataclass(frozen=True)
class Table:
    """A small table: a header row and body rows, every cell already text."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Section:
    """One heading of the page: paragraphs, tables, snippets and figures, in that order."""

    title: str
    paragraphs: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    snippets: tuple[Snippet, ...] = ()
    figures: tuple[tuple[str, Figure], ...] = ()  # (alt text and caption, figure)
    bullets: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanPage:
    """What `page_html` lays out: a title, the verdict's lines (shown first, in a box), the sections in order,
    and a footer (the command that made the page, the version)."""

    title: str
    subtitle: str
    verdict: tuple[str, ...]
    sections: tuple[Section, ...]
    footer: tuple[str, ...] = field(default=())
    warn: bool = False  # the verdict's box in red: its first line says why the numbers are not to be trusted


# Narrow columns, system fonts, nothing wider than the viewport: figures scale to the column (on a phone they keep a
# readable 720 px), and figures, code and tables scroll inside their own box, so a 390 px phone never scrolls the
# page sideways.
CSS = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232a;background:#f6f7f9}
main{max-width:980px;margin:0 auto;padding:16px}
h1{font-size:1.5rem;margin:.2em 0}
h2{font-size:1.15rem;margin:1.6em 0 .5em;border-bottom:1px solid #d5dae0;padding-bottom:.2em}
.sub{color:#55606b;margin:0 0 1em;overflow-wrap:anywhere}
.verdict{background:#fff;border-left:5px solid #2d7d46;padding:10px 16px;border-radius:4px;
 box-shadow:0 1px 2px #0001}
.verdict li{margin:.25em 0}
.verdict.warn{border-left-color:#b3261e}
section{background:#fff;padding:4px 16px 12px;margin:14px 0;border-radius:4px;box-shadow:0 1px 2px #0001}
figure{margin:12px 0}
figure .wide{overflow-x:auto;max-width:100%}
figure img{display:block;width:100%;height:auto;border:1px solid #e3e6ea}
@media (max-width:640px){figure img{min-width:720px}pre{white-space:pre-wrap}}
figcaption{font-size:.85rem;color:#55606b}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.9rem;margin:8px 0}
th,td{border:1px solid #d5dae0;padding:3px 8px;text-align:left;white-space:nowrap;font-variant-numeric:tabular-nums}
th{background:#eef1f4}
td.wrap{white-space:normal;min-width:14em}
.snippet{margin:10px 0}
.snippet-head{display:flex;justify-content:space-between;align-items:center;gap:8px;flex-wrap:wrap}
.snippet-head b{overflow-wrap:anywhere}
pre{background:#1d232a;color:#e6edf3;padding:10px;border-radius:4px;overflow-x:auto;font-size:.82rem;margin:4px 0}
button{font:inherit;font-size:.85rem;padding:4px 12px;border:1px solid #2d7d46;background:#2d7d46;color:#fff;
 border-radius:4px;cursor:pointer}
button.done{background:#fff;color:#2d7d46}
.note{font-size:.85rem;color:#55606b;margin:2px 0 0}
ul{padding-left:1.2em}
li,p{overflow-wrap:anywhere}
footer{font-size:.8rem;color:#55606b;margin:24px 0;overflow-wrap:anywhere}
code{font-size:.9em;background:#eef1f4;padding:0 3px;border-radius:3px}
"""

# The copy button: the Clipboard API where the page is a secure context (a file on disk is), else a selected hidden
# textarea and execCommand("copy"), the one way older and embedded browsers allow.
SCRIPT = """
function copySnippet(id, button){
  var text = document.getElementById(id).textContent;
  function done(){ button.textContent = "copied"; button.classList.add("done"); }
  function fallback(){
    var t = document.createElement("textarea"); t.value = text; t.setAttribute("readonly", "");
    t.style.position = "fixed"; t.style.opacity = "0"; document.body.appendChild(t); t.select();
    try { document.execCommand("copy"); done(); } finally { document.body.removeChild(t); }
  }
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, fallback);
  } else { fallback(); }
}
"""


def figure_data_uri(fig: Figure, dpi: int = 110) -> str:
    """`fig` as a PNG data URI (the figure is closed)."""
    return "data:image/png;base64," + base64.b64encode(render(fig, "png", dpi=dpi)).decode("ascii")


def _table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f'<td class="wrap">{html.escape(c)}</td>' if len(c) > 40 else
                                    f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    cap = f'<p class="note">{html.escape(t.caption)}</p>' if t.caption else ""
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{cap}'


def _snippet(s: Snippet, ident: str) -> str:
    note = f'<p class="note">{html.escape(s.note)}</p>' if s.note else ""
    return (f'<div class="snippet"><div class="snippet-head"><b>{html.escape(s.label)}</b>'
            f'<button type="button" data-copy="{ident}" onclick="copySnippet(\'{ident}\', this)">copy</button></div>'
            f'<pre id="{ident}">{html.escape(s.text)}</pre>{note}</div>')


def _section(s: Section, index: int) -> str:
    parts = [f"<h2>{html.escape(s.title)}</h2>"]
    parts += [f"<p>{html.escape(p)}</p>" for p in s.paragraphs]
    if s.bullets:
        parts.append("<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in s.bullets) + "</ul>")
    parts += [_table(t) for t in s.tables]
    parts += [_snippet(sn, f"snippet-{index}-{j}") for j, sn in enumerate(s.snippets)]
    for alt, fig in s.figures:
        parts.append(f'<figure><div class="wide"><img src="{figure_data_uri(fig)}" '
                     f'alt="{html.escape(alt, quote=True)}"></div><figcaption>{html.escape(alt)}</figcaption></figure>')
    return "<section>" + "".join(parts) + "</section>"


def page_html(page: PlanPage) -> str:
    """The whole page as text: verdict, then every section (figures rendered and embedded here), then the footer."""
    sections = page.sections
    verdict = "".join(f"<li>{html.escape(v)}</li>" for v in page.verdict)
    body = "".join(_section(s, i) for i, s in enumerate(sections))
    footer = "<br>".join(html.escape(f) for f in page.footer)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\">"
            f"<title>{html.escape(page.title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>{html.escape(page.title)}</h1><p class=\"sub\">{html.escape(page.subtitle)}</p>"
            f"<div class=\"verdict{' warn' if page.warn else ''}\"><b>Verdict</b><ul>{verdict}</ul></div>{body}"
            f"<footer>{footer}</footer></main><script>{SCRIPT}</script></body></html>\n")
