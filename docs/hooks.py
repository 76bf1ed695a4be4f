"""MkDocs hooks: the pages' generated parts, made at build time from the project's own code.

- ``<!-- generated: rule-tables -->`` (rules.md): the dispatcher's decision tables, from the
  case matrices of `portable_rnn._src.tools.rules` (``RULE_TABLES``: those
  ``python -m portable_rnn`` prints, and more).
- ``<!-- generated: benchmarks-summary -->`` and ``<!-- generated: benchmarks -->``
  (benchmarks.md): the benchmark tables and charts, from ``benchmarks/results/*.json`` through
  `benchmarks.report` (the charts are drawn into the built site, not into the checkout).

A marker that is missing, or left over in a page, fails the build.

The API reference reads the package's source and its type stubs (``portable_rnn/*.pyi``, which
declare the functions and layer classes the registry makes at import, with their docstrings).
`ShapeProducts`, a griffe extension that mkdocs.yml names, keeps the shapes the docstrings write
as plain text, ``(L*D, B, H)``, from reading as Markdown emphasis: it escapes a ``*`` between two
word characters (or brackets) outside code (inline code, doctest examples).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Keras, should the build import it (portable_rnn.keras), on the JAX backend.
os.environ.setdefault("KERAS_BACKEND", "jax")
if ROOT not in sys.path:  # `benchmarks` is not installed: import it from the checkout
    sys.path.insert(0, ROOT)

import griffe  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
CHARTS = "assets/benchmarks/"  # where the charts go in the site, relative to benchmarks.md
MARKERS = {
    "rules.md": ("rule-tables",),
    "benchmarks.md": ("benchmarks-summary", "benchmarks", "benchmarks-gpu"),
}
_charts_dirs: list[str] = []  # drawn for this build, removed after it


def _payloads() -> dict[str, dict]:
    from benchmarks import report

    return report.load(RESULTS)


def on_files(files, config):
    """Draws each benchmark family's chart from its JSON file and adds it to the site."""
    from benchmarks import report

    charts = tempfile.mkdtemp(prefix="portable-rnn-docs-charts-")
    _charts_dirs.append(charts)
    for family, payload in _payloads().items():
        path = os.path.join(charts, f"{family}.png")
        report.chart(payload, path)
        files.append(File.generated(config, f"{CHARTS}{family}.png", abs_src_path=path))
    return files


def benchmark_summary(payloads: dict[str, dict]) -> str:
    """Per family, a table of each peer's time (or memory) relative to the baseline's, one row
    per panel: the smallest and largest ratio over the panel's cases (above 1: the peer is
    slower)."""
    from benchmarks import report

    lines = []
    for payload in payloads.values():
        groups = report.panels(payload["rows"])
        first = next(iter(groups.values()))
        baseline = first[0]["baseline"]
        peers = [n for n in report.implementations(payload["rows"]) if n != baseline]
        lines += [f"**{payload['title']}**: each peer against {baseline}", "",
                  "| panel | " + " | ".join(peers) + " |", "|---|" + "---|" * len(peers)]
        for panel, rows in groups.items():
            cells = []
            for name in peers:
                ratios = [r["results"][name]["ratio"] for r in rows
                          if name in r["results"] and r["results"][name].get("ratio")]
                low, high = (f"{min(ratios):.2f}", f"{max(ratios):.2f}") if ratios else ("", "")
                cells.append("n/a" if not ratios else f"{low}x" if low == high
                             else f"{low}-{high}x")
            lines.append(f"| {panel} ({len(rows)} cases) | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _generated(name: str) -> str:
    if name == "rule-tables":
        from portable_rnn._src.tools.rules import markdown_rule_tables

        return markdown_rule_tables(heading="##")
    from benchmarks import report

    if name == "benchmarks-gpu":
        from benchmarks import gpu

        path = os.path.join(RESULTS, "gpu.json")
        if not os.path.exists(path):
            return "No GPU results yet: run `python -m benchmarks.gpu` on a CUDA GPU.\n"
        with open(path) as f:
            return gpu.markdown(json.load(f))
    payloads = _payloads()
    if name == "benchmarks-summary":
        return benchmark_summary(payloads)
    return report.markdown(payloads, image_dir=CHARTS, heading="###")


def on_page_markdown(markdown, page, config, files):
    for name in MARKERS.get(page.file.src_uri, ()):
        marker = f"<!-- generated: {name} -->"
        if markdown.count(marker) != 1:
            raise PluginError(f"{page.file.src_uri} must contain {marker} once")
        markdown = markdown.replace(marker, _generated(name))
    if "<!-- generated: " in markdown:
        raise PluginError(f"{page.file.src_uri}: a generated-content marker that no hook fills")
    return markdown


def on_post_build(config):
    while _charts_dirs:
        shutil.rmtree(_charts_dirs.pop(), ignore_errors=True)


_CODE_SPAN = re.compile(r"(``.+?``|`[^`]+`)")
_PRODUCT_STAR = re.compile(r"(?<=[\w)\]])\*(?=[\w(\[])")


def escape_products(text: str) -> str:
    """`text` with ``A*B`` written ``A\\*B`` outside code spans and doctest examples."""
    lines, in_example = [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        if not in_example:
            line = "".join(part if i % 2 else _PRODUCT_STAR.sub(r"\\*", part)
                           for i, part in enumerate(_CODE_SPAN.split(line)))
        lines.append(line)
    return "\n".join(lines)


def _documented(module: griffe.Module):
    """Every module of the package, and the functions and classes defined (or declared by a
    stub) at their top, with their members."""
    modules = [module]
    while modules:
        mod = modules.pop()
        modules += [m for m in mod.modules.values() if not m.is_alias]
        members = [m for m in mod.members.values()
                   if not m.is_alias and (m.is_function or m.is_class)]
        yield from [mod, *members]
        yield from (m for c in members if c.is_class for m in c.members.values()
                    if not m.is_alias)


class ShapeProducts(griffe.Extension):
    """Escapes the shape products of every docstring of the package (`escape_products`)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for obj in _documented(pkg):
            if obj.docstring is not None:
                obj.docstring.value = escape_products(obj.docstring.value)
