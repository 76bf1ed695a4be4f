"""Every ```python block of the documentation runs: the pages under docs/ and the README.

The blocks of a page run in order in one namespace (a page reads as one session), in a fresh
working directory per page, under JAX's default ("standard") dtype promotion, as a user's code
would. One test per block, named by its page and line; a traceback points at the page's line.

A block may be preceded by a comment that the site does not show:

- ``<!-- docs-test: needs torch -->``: the block runs when torch (or the module named) can be
  imported and is skipped with that reason otherwise. A block that imports an optional package
  (`OPTIONAL`, also as ``portable_rnn.equinox`` or ``portable_rnn.keras``) needs it without the
  comment; a later block that fails for a name an earlier skipped block would have defined is
  skipped with that reason too.
- ``<!-- docs-test: warns portable_rnn.FallbackWarning -->``: the block must emit that warning.

A block followed by a ``text`` block titled ``Output`` must print that text (doctest's
comparison: ``...`` matches anything, whitespace runs are one space).
"""

from __future__ import annotations

import contextlib
import dataclasses
import doctest
import importlib
import importlib.util
import io
import itertools
import pathlib
import re

import jax
import pytest

from portable_rnn._src.core import dispatch as _dispatch

pytestmark = pytest.mark.cpu  # the pages show a CPU machine's output

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
ANNOTATION = re.compile(r"^\s*<!-- docs-test: (?P<key>needs|warns) (?P<value>[\w.]+) -->\s*$")
OUTPUT_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclasses.dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str
    title: str | None
    code: str
    needs: list[str] = dataclasses.field(default_factory=list)
    warns: list[str] = dataclasses.field(default_factory=list)
    output: str | None = None  # the Output block that follows it, if any

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks(path: pathlib.Path) -> list[Block]:
    """The page's fenced blocks (indented ones too, e.g. inside an admonition), with the
    annotations written just before each and the Output block after each python block."""
    lines = path.read_text().splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    pending: dict[str, list[str]] = {"needs": [], "warns": []}
    i = 0
    while i < len(lines):
        if m := ANNOTATION.match(lines[i]):
            pending[m["key"]].append(m["value"])
            i += 1
            continue
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                pending = {"needs": [], "warns": []}  # an annotation applies to the next block
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        language = info.split()[0].lstrip(".").lower() if info else ""
        title = re.search(r'title="([^"]*)"', info)
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].startswith(indent + fence[0] * len(fence))
                                      and not lines[j].strip().strip(fence[0])):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{page}:{i + 1}: the fenced block is never closed")
        blocks.append(Block(page, i + 1, language, title and title[1], "\n".join(body) + "\n",
                            **pending))
        pending = {"needs": [], "warns": []}
        i = j + 1
    for before, after in itertools.pairwise(blocks):
        if before.language == "python" and after.language == "text" and after.title == "Output":
            before.output = after.code
    return blocks


def python_blocks() -> list[Block]:
    return [b for page in PAGES for b in fenced_blocks(page) if b.language == "python"]


BLOCKS = python_blocks()


@dataclasses.dataclass
class PageRun:
    namespace: dict
    workdir: pathlib.Path
    done: dict[int, str] = dataclasses.field(default_factory=dict)  # line -> "ok" / why not


_RUNS: dict[str, PageRun] = {}


OPTIONAL = ("equinox", "keras", "torch", "optax", "orbax", "matplotlib")
IMPORTED = re.compile(r"^\s*(?:import|from)\s+(\w+)|\bportable_rnn\.(\w+)|"
                      r"^\s*from\s+portable_rnn\s+import\s+(\w+)", re.M)


def _needs(block: Block) -> list[str]:
    """The modules a block needs: its annotations, and the optional packages it imports."""
    found = {name for m in IMPORTED.finditer(block.code) for name in m.groups() if name}
    return block.needs + sorted(found & set(OPTIONAL))


def _missing(block: Block) -> str | None:
    for name in _needs(block):
        if importlib.util.find_spec(name) is None:
            return f"needs {name}, which is not installed"
    return None


def _run(block: Block) -> None:
    """Runs one block in its page's namespace; raises what it raises."""
    run = _RUNS[block.page]
    with contextlib.chdir(run.workdir), jax.numpy_dtype_promotion("standard"):
        _dispatch._WARNED.clear()  # FallbackWarning once per decision: as in a fresh process
        code = compile("\n" * block.line + block.code, str(ROOT / block.page), "exec")
        out = io.StringIO()
        warns = [_resolve(name) for name in block.warns]
        with contextlib.ExitStack() as stack:
            for category in warns:
                stack.enter_context(pytest.warns(category))
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, run.namespace)
            finally:
                print(out.getvalue(), end="")  # shown by pytest when the test fails
    if block.output is not None:
        checker = doctest.OutputChecker()
        if not checker.check_output(block.output, out.getvalue(), OUTPUT_FLAGS):
            example = doctest.Example(block.code, block.output)
            raise AssertionError(f"{block.id}: the printed output differs from the page's "
                                 "Output block:\n"
                                 + checker.output_difference(example, out.getvalue(),
                                                             OUTPUT_FLAGS))


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _attempt(run: PageRun, block: Block) -> None:
    """Runs a block (or skips it: a missing module) and records the outcome in `run.done`;
    raises what the block raises, as `pytest.skip` where it failed for a name that a skipped
    block would have defined."""
    why = _missing(block)
    if why is not None:
        run.done[block.line] = why
        pytest.skip(f"{block.id} {why}")
    try:
        _run(block)
    except NameError as e:
        skipped = [line for line, why in run.done.items() if why.startswith(("needs ", "uses "))]
        if not skipped:
            run.done[block.line] = f"failed: NameError: {e}"
            raise
        run.done[block.line] = f"uses a name of the skipped block at line {skipped[-1]} ({e})"
        pytest.skip(f"{block.id} {run.done[block.line]}")
    except BaseException as e:
        run.done[block.line] = f"failed: {type(e).__name__}: {e}"
        raise
    run.done[block.line] = "ok"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_docs_block_runs(block, tmp_path_factory):
    if block.page not in _RUNS:
        _RUNS[block.page] = PageRun({"__name__": "__docs__"},
                                    tmp_path_factory.mktemp(block.page.replace("/", "_")))
    run = _RUNS[block.page]
    for earlier in [b for b in BLOCKS if b.page == block.page and b.line < block.line]:
        if earlier.line not in run.done:  # e.g. under -k: run the page up to here
            try:
                _attempt(run, earlier)
            except (Exception, pytest.skip.Exception):  # recorded in run.done
                pass
        if run.done[earlier.line].startswith("failed"):
            pytest.fail(f"the block at {earlier.id} {run.done[earlier.line]}", pytrace=False)
    _attempt(run, block)


def test_every_page_is_collected():
    """The docs have python blocks on the pages that teach by example, and none is mistyped
    (a ```py or ```Python fence would be shown but never run; ```mermaid draws a diagram)."""
    pages = {b.page for b in BLOCKS}
    for page in ("docs/index.md", "docs/getting-started.md", "docs/dispatch.md",
                 "docs/migrating.md", "docs/mixed-precision.md", "docs/layers.md",
                 "docs/sharding-export.md", "docs/troubleshooting.md", "README.md"):
        assert page in pages, page
    odd = [f"{b.id} ({b.language})" for page in PAGES for b in fenced_blocks(page)
           if b.language not in ("python", "text", "console", "bash", "toml", "yaml", "mermaid",
                                 "")]
    assert not odd, odd


def _parse_markdown_tables(text: str) -> list[list[list[str]]]:
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if current is None:
                current = []
                tables.append(current)
            if not set("".join(cells)) <= set("-"):
                current.append(cells)
        else:
            current = None
    return tables


def test_rule_tables_cover_every_case_once():
    """The Rule tables page's tables (generated at build time by `markdown_rule_tables`):
    every case of each matrix appears once, and the paths agree with `explain_*`."""
    from portable_rnn._src.tools.rules import RULE_TABLES, markdown_rule_tables

    text = markdown_rule_tables()
    tables = _parse_markdown_tables(text)
    matrices = [cases(caps) for _, _, cases, machines in RULE_TABLES for _, caps in machines]
    assert len(tables) == len(matrices)
    for table, (columns, domains, rows) in zip(tables, matrices):
        header, *cells = table
        assert header == [*columns, "path", "why / how"]
        covered = {}
        for cell in cells:
            sep = "<br>" if len(columns) == 1 else ", "
            values = [domain if v == "any" else tuple(v.split(sep))
                      for v, domain in zip(cell, domains)]
            for case in itertools.product(*values):
                assert case not in covered, case
                covered[case] = cell[len(columns)].strip("`")
        assert covered == {case: path for case, path, _ in rows}
    assert "| float32 | 0.0 | any | any | `scan` | the automatic choice takes the scan path" in text
    # the LSTM on a GPU with cuDNN asked for
    assert re.search(r"^\| policy\(lstm='cudnn'\)[^|]*\| `cudnn` \|", text, re.MULTILINE)
