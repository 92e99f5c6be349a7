"""The README and docs/ read as a newcomer reads them: pages, lines, the
code in them, and the shell commands that code holds."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`([^`\n]+)`")
# A markdown link's target and a URL: places a page may name outside the repository.
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s`'\")<>\]]*")
# `<role>`, `<free port>`: a placeholder for one word.
_PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_REDIRECT = re.compile(r"^\d*(>>?|<)&?\d*$")
_REDIRECT_ATTACHED = re.compile(r"^\d*(>>?|<)")
# Words that run the command after them.
_WRAPPERS = frozenset({"exec", "nohup", "time"})


@dataclass(frozen=True)
class Spot:
    """A place in a page: the page, the line number and that line's text (or
    the snippet of it being read)."""

    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text.strip()}"


def pages() -> list[Path]:
    """The README and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def lines(page: Path) -> Iterator[Spot]:
    for number, text in enumerate(page.read_text().splitlines(), start=1):
        yield Spot(page, number, text)


def code_lines(page: Path) -> Iterator[Spot]:
    """Each line of the page's fenced code blocks, one ending in a backslash
    joined with the next."""
    fenced = False
    pending: Spot | None = None
    for spot in lines(page):
        if _FENCE.match(spot.text):
            fenced = not fenced
            continue
        if not fenced:
            continue
        joined = spot if pending is None else Spot(page, pending.line, pending.text + spot.text)
        if joined.text.endswith("\\"):
            pending = Spot(page, joined.line, joined.text[:-1] + " ")
            continue
        pending = None
        yield joined


def paragraphs(page: Path) -> Iterator[Spot]:
    """Each paragraph of the page's prose (at its first line), and each line
    of its code (`code_lines`)."""
    fenced = False
    lines_of: list[Spot] = []
    for spot in lines(page):
        if _FENCE.match(spot.text):
            fenced = not fenced
        if fenced or _FENCE.match(spot.text) or not spot.text.strip():
            if lines_of:
                yield Spot(page, lines_of[0].line, " ".join(s.text for s in lines_of))
            lines_of = []
        else:
            lines_of.append(spot)
    if lines_of:
        yield Spot(page, lines_of[0].line, " ".join(s.text for s in lines_of))
    yield from code_lines(page)


def snippets(page: Path) -> Iterator[Spot]:
    """Each line of code (`code_lines`) and each inline code span of the prose."""
    fenced = False
    for spot in lines(page):
        if _FENCE.match(spot.text):
            fenced = not fenced
        elif not fenced:
            for span in _INLINE.finditer(spot.text):
                yield Spot(page, spot.line, span.group(1))
    yield from code_lines(page)


def commands(snippet: str, program: str) -> Iterator[list[str]]:
    """The arguments of each run of `program` in a shell snippet: a command
    whose first word, after `VAR=value` assignments and `exec`, is `program`.
    A `<placeholder>` stands for one word (`VALUE`); comments and redirections
    are left out. ValueError when the snippet names the program but is not a
    shell line (an unclosed quote)."""
    text = re.sub(r"^\s*\$\s+", "", snippet)  # a prompt
    text = re.sub(r"(^|\s)#.*$", "", text)  # a comment
    text = _PLACEHOLDER.sub("VALUE", text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars="&;|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    words = list(lexer)
    command: list[str] = []
    for word in [*words, ";"]:
        if word not in _OPERATORS:
            command.append(word)
            continue
        while command and (_ASSIGNMENT.match(command[0]) or command[0] in _WRAPPERS):
            command.pop(0)
        if command and command[0] == program:
            yield _without_redirections(command[1:])
        command = []


def _without_redirections(words: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif _REDIRECT.match(word):
            skip = not word[-1].isdigit() and not word.endswith("-")
        elif not _REDIRECT_ATTACHED.match(word):
            kept.append(word)
    return kept


def without_places(text: str) -> str:
    """`text` without its URLs and link targets."""
    return URL.sub(" ", LINK_TARGET.sub("]", text))
