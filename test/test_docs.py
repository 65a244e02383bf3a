"""The README and docs/ name only things that exist, and their commands parse.

Read from README.md and docs/*.md:

- every command in a ```bash block, and every `airplay ...`, `make ...`, `python ...` or
  `ros2 launch airplay ...` inline code span: the sub-command exists, each ``--flag`` is one of its
  options and each ``key:=value`` is an argument of the launch graph; commands in ```bash blocks
  must parse completely with the ``airplay`` parser (inline spans are often fragments, so for them
  only the sub-command and the flags are checked). ``make`` targets exist in the Makefile, bench
  scripts exist and take the flags given, pytest node ids name an existing file and function;
- every relative link points to an existing file, and its ``#anchor`` to a heading there;
- every repository path (``src/...``, ``test/...``, ``bench/...``, ...), test file name, test id
  (``test_x.py::test_y``) and dotted name (``airplay.pkg.module.Name``) named in code spans exists;
- the imports of ```python blocks name existing modules and names.

Nothing is run: names are resolved on the source files (``ast``), commands with the real parsers.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REPO_DIRS = ("src", "test", "bench", "config", "launch", "docker", "requirements", "resource", "docs")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


# ---------------------------------------------------------------------------------------------
# Reading the markdown


def _split_markdown(text: str) -> tuple[list[tuple[str, int, str]], str]:
    """(fenced blocks as (language, first line number, body), the prose with fences blanked)."""
    blocks, prose, body, lang, start = [], [], None, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if body is None and match:
            body, lang, start = [], match.group(2), number + 1
            prose.append("")
        elif body is not None and match and not match.group(2):
            blocks.append((lang, start, "\n".join(body)))
            body = None
            prose.append("")
        elif body is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return blocks, "\n".join(prose)


def _code_spans(prose: str) -> list[tuple[int, str]]:
    """Inline code spans of the prose with the line they start on (spans may wrap lines)."""
    spans = []
    for match in re.finditer(r"`([^`]+)`", prose):
        line = prose.count("\n", 0, match.start()) + 1
        spans.append((line, " ".join(match.group(1).split())))
    return spans


def _shell_commands(body: str) -> list[tuple[int, list[str]]]:
    """The simple commands of a shell block as (line offset, tokens): continuation lines joined,
    comments dropped, split at ``&&``, ``||``, ``;`` and ``|``, leading ``VAR=value`` removed."""
    commands, pending, first = [], "", 0
    for offset, line in enumerate(body.splitlines()):
        if not pending:
            first = offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        pending += line
        lexer = shlex.shlex(pending, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in list(lexer) + [";"]:
            if token in (";", "&&", "||", "|", "&"):
                while current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", current[0]):
                    current.pop(0)
                if current:
                    commands.append((first, current))
                current = []
            else:
                current.append(token)
        pending = ""
    return commands


def _docs():
    for path in DOC_FILES:
        blocks, prose = _split_markdown(path.read_text(encoding="utf-8"))
        yield path, blocks, prose


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


# ---------------------------------------------------------------------------------------------
# Names in the source, resolved without importing


@lru_cache(maxsize=None)
def _module_names(path: Path) -> dict[str, ast.AST | None]:
    """Top-level names a module defines or imports: name -> its def/class node (None otherwise)."""
    names: dict[str, ast.AST | None] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree) if path.name == "__init__.py" else tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names.setdefault(name.id, None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], None)
    if path.name == "__init__.py":  # names exported lazily through __getattr__ tables
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                names.setdefault(node.value, None)
    return names


def _class_members(node: ast.ClassDef) -> set[str]:
    members = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.add(item.target.id)
        elif isinstance(item, ast.Assign):
            members.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return members


def resolve_dotted(name: str) -> str | None:
    """None if ``airplay.a.b.Name[.member]`` exists in src/, else what is missing."""
    parts = name.split(".")
    folder = SRC / parts[0]
    module = folder / "__init__.py"
    rest = parts[1:]
    while rest and ((folder / rest[0]).is_dir() or (folder / f"{rest[0]}.py").is_file()):
        if (folder / rest[0]).is_dir():
            folder = folder / rest[0]
            module = folder / "__init__.py"
        else:
            module = folder / f"{rest[0]}.py"
        rest = rest[1:]
    if not rest:
        return None
    names = _module_names(module)
    if rest[0] not in names:
        return f"{rest[0]!r} is not defined in {module.relative_to(ROOT)}"
    node = names[rest[0]]
    if len(rest) > 1 and isinstance(node, ast.ClassDef) and rest[1] not in _class_members(node):
        return f"class {rest[0]} in {module.relative_to(ROOT)} has no member {rest[1]!r}"
    return None


def _test_function_exists(file: Path, function: str) -> bool:
    return re.search(rf"^\s*(async )?def {re.escape(function)}\(", file.read_text(encoding="utf-8"),
                     re.MULTILINE) is not None


def check_test_id(text: str) -> str | None:
    """``test/test_x.py``, ``test_x.py`` or either with ``::test_name`` (parametrization ignored)."""
    file, _, function = text.partition("::")
    path = ROOT / file if "/" in file else ROOT / "test" / file
    if not path.is_file():
        return f"no test file {path.relative_to(ROOT)}"
    function = function.split("[")[0]
    if function and not _test_function_exists(path, function):
        return f"no function {function} in {path.relative_to(ROOT)}"
    return None


# ---------------------------------------------------------------------------------------------
# Commands


@lru_cache(maxsize=None)
def _airplay_parser() -> argparse.ArgumentParser:
    from airplay.cli import build_parser

    return build_parser()


def _launch_arguments(graph: str) -> set[str] | None:
    """The launch arguments a graph accepts, None if there is no such graph."""
    from airplay.graph import GRAPHS

    if graph not in GRAPHS:
        return None
    return set(GRAPHS[graph][1])


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _is_placeholder(token: str) -> bool:
    return token in ("...", "…") or bool(re.fullmatch(r"[A-Z][A-Z0-9_]*(\.\.\.)?", token))


def _check_launch_tokens(graph: str, tokens: list[str]) -> list[str]:
    accepted = _launch_arguments(graph)
    if accepted is None:
        return [f"no launch graph {graph!r}"]
    problems = []
    for token in tokens:
        if ":=" in token:
            key = token.split(":=", 1)[0]
            if key not in accepted:
                problems.append(f"graph {graph} has no launch argument {key!r}")
        elif token.startswith("-"):
            if token.split("=")[0] not in ("--print", "--grace", "--help", "-h", "--show-args"):
                problems.append(f"launch takes no option {token}")
    return problems


def check_airplay(tokens: list[str], strict: bool) -> list[str]:
    """Problems with ``airplay TOKENS``: unknown sub-commands, options or launch arguments; with
    ``strict``, anything the real parser refuses."""
    parser, rest, path = _airplay_parser(), list(tokens), ["airplay"]
    while rest and not rest[0].startswith("-"):
        choices = _subparsers(parser)
        if not choices:
            break
        if rest[0] not in choices:
            if _is_placeholder(rest[0]):
                return []
            return [f"{' '.join(path)} has no sub-command {rest[0]!r}"]
        path.append(rest[0])
        parser = choices[rest.pop(0)]
    if path[1:2] == ["launch"]:
        positionals = [t for t in rest if not t.startswith("-") and ":=" not in t]
        graph = positionals[0] if positionals else None
        if graph is None or _is_placeholder(graph):
            return []
        return _check_launch_tokens(graph, [t for t in rest if t != graph])
    known = _options(parser) | {"-h", "--help"}
    problems = [f"{' '.join(path)} has no option {token.split('=')[0]}" for token in rest
                if token.startswith("--") and token.split("=")[0] not in known]
    if strict and not problems:
        try:
            _airplay_parser().parse_args(tokens)
        except SystemExit:
            problems.append(f"the airplay parser refuses: {shlex.join(tokens)}")
    return problems


@lru_cache(maxsize=None)
def _script_options(path: Path) -> set[str]:
    """The ``--options`` a script's argparse parser declares (string literals of add_argument)."""
    options = {"-h", "--help"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            options.update(a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-"))
    return options


def _registered_markers() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return set(re.findall(r'^\s*"(\w+):', text, re.MULTILINE))


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w.-]+):", text, re.MULTILINE))


def _check_pytest(args: list[str]) -> list[str]:
    problems = []
    for index, token in enumerate(args):
        previous = args[index - 1] if index else ""
        if previous == "-m":
            unknown = set(re.findall(r"\w+", token)) - {"and", "or", "not"} - _registered_markers()
            problems += [f"pytest marker {m!r} is not registered in pyproject.toml" for m in sorted(unknown)]
        elif previous in ("-k", "-p", "--durations", "-n") or token.startswith("-"):
            continue
        elif token.startswith("test/"):
            problem = check_test_id(token)
            if problem:
                problems.append(problem)
    return problems


def check_command(tokens: list[str], strict: bool) -> list[str] | None:
    """Problems with one command; None for commands this test does not know (git, cd, pip...)."""
    if not tokens:
        return None
    head, args = tokens[0], tokens[1:]
    if head in ("airplay", ".venv/bin/airplay"):
        return check_airplay(args, strict)
    if tokens[:3] == ["ros2", "run", "airplay"] and tokens[3:4] == ["airplay"]:
        return check_airplay(tokens[4:], strict)
    if tokens[:3] == ["ros2", "launch", "airplay"] and len(tokens) > 3:
        launch_file = tokens[3]
        if not (ROOT / "launch" / launch_file).is_file():
            return [f"no launch file launch/{launch_file}"]
        return _check_launch_tokens(launch_file.removesuffix(".launch.py"), tokens[4:])
    if head == "make":
        return [f"no make target {t!r}" for t in args if not t.startswith("-") and "=" not in t
                and t not in _make_targets()]
    if re.fullmatch(r"(\S*/)?python3?", head):
        if args[:2] == ["-m", "pytest"]:
            return _check_pytest(args[2:])
        if args and args[0].endswith(".py"):
            script = ROOT / args[0]
            if not script.is_file():
                return [f"no script {args[0]}"]
            return [f"{args[0]} has no option {t.split('=')[0]}" for t in args[1:]
                    if t.startswith("--") and t.split("=")[0] not in _script_options(script)]
    return None


def _fenced_commands():
    for path, blocks, _ in _docs():
        for lang, start, body in blocks:
            if lang in ("bash", "sh", "shell", "console"):
                for offset, tokens in _shell_commands(body):
                    yield _where(path, start + offset), tokens


INLINE_COMMAND = re.compile(r"^(\.venv/bin/)?(airplay|make|python3?|ros2 (launch|run) airplay)\s")


def _inline_commands():
    for path, _, prose in _docs():
        for line, span in _code_spans(prose):
            if INLINE_COMMAND.match(span):
                try:
                    tokens = shlex.split(span.replace("\\|", "|"), comments=True)
                except ValueError:
                    tokens = span.split()
                yield _where(path, line), tokens


# ---------------------------------------------------------------------------------------------
# The tests


def test_the_docs_hold_commands_and_the_extraction_finds_them():
    fenced, inline = list(_fenced_commands()), list(_inline_commands())
    known = [tokens for _, tokens in fenced if check_command(tokens, strict=True) is not None]
    assert len(known) >= 50, f"only {len(known)} known commands in bash blocks"
    assert any(tokens[:2] == ["airplay", "launch"] for _, tokens in fenced)
    assert len(inline) >= 20, f"only {len(inline)} inline commands"


def test_commands_in_bash_blocks_parse():
    problems = [f"{where}: {problem}" for where, tokens in _fenced_commands()
                for problem in check_command(tokens, strict=True) or []]
    assert not problems, "\n".join(problems)


def test_inline_commands_name_existing_subcommands_and_options():
    problems = [f"{where}: {problem}" for where, tokens in _inline_commands()
                for problem in check_command(tokens, strict=False) or []]
    assert not problems, "\n".join(problems)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation (backticks too) dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@lru_cache(maxsize=None)
def _anchors(path: Path) -> set[str]:
    _, prose = _split_markdown(path.read_text(encoding="utf-8"))
    anchors, seen = set(), {}
    for line in prose.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_relative_links_point_to_existing_files_and_headings():
    problems = []
    for path, _, prose in _docs():
        for match in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", prose):
            target = match.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            where = _where(path, prose.count("\n", 0, match.start()) + 1)
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                problems.append(f"{where}: {target} does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                problems.append(f"{where}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not problems, "\n".join(problems)


PATH_SPAN = re.compile(rf"^({'|'.join(REPO_DIRS)})/[\w./*{{}},-]*$")
TEST_ID = re.compile(r"^(test/)?test_\w+\.py(::\w+(\[[^\]]*\])?)?$")
DOTTED = re.compile(r"(?<![\w.\"'])airplay(?:\.[A-Za-z_]\w*)+")


def _expand_braces(text: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    return [expanded for option in match.group(1).split(",")
            for expanded in _expand_braces(text[:match.start()] + option + text[match.end():])]


def test_paths_tests_and_names_in_code_spans_exist():
    problems = []
    for path, blocks, prose in _docs():
        for line, span in _code_spans(prose):
            where = _where(path, line)
            for word in span.split():
                word = word.strip("(),;:")
                if PATH_SPAN.match(word):
                    for candidate in _expand_braces(word):
                        if not any(ROOT.glob(candidate.rstrip("/"))):
                            problems.append(f"{where}: {candidate} does not exist")
                elif TEST_ID.match(word):
                    problem = check_test_id(word)
                    if problem:
                        problems.append(f"{where}: {problem}")
            for name in DOTTED.findall(span):
                if name.endswith((".py", ".yaml")):
                    continue
                problem = resolve_dotted(name)
                if problem:
                    problems.append(f"{where}: {name}: {problem}")
    assert not problems, "\n".join(problems)


def test_paths_listed_in_plain_blocks_exist():
    """Plain fenced blocks (the README's layout) list paths first on a line: those must exist."""
    problems = []
    for path, blocks, _ in _docs():
        for lang, start, body in blocks:
            if lang:
                continue
            for offset, line in enumerate(body.splitlines()):
                first = line.split()[0] if line.split() else ""
                if PATH_SPAN.match(first) and not any(ROOT.glob(first.rstrip("/"))):
                    problems.append(f"{_where(path, start + offset)}: {first} does not exist")
    assert not problems, "\n".join(problems)


def test_python_blocks_import_existing_names():
    problems = []
    for path, blocks, _ in _docs():
        for lang, start, body in blocks:
            if lang != "python":
                continue
            for node in ast.walk(ast.parse(body)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airplay"):
                    for alias in node.names:
                        problem = resolve_dotted(f"{node.module}.{alias.name}")
                        if problem:
                            problems.append(f"{_where(path, start + node.lineno - 1)}: {problem}")
    assert not problems, "\n".join(problems)


EXTERNAL_OPTIONS = {"--symlink-install", "--show-args", "--system-site-packages", "--served-model-name",
                    "--limit-mm-per-prompt", "--max-model-len", "--port", "--stat", "--durations", "--once"}
"""Options of other programs the docs name (colcon, ros2, venv, vLLM, git, pytest)."""


def _all_airplay_options(parser: argparse.ArgumentParser) -> set[str]:
    options = _options(parser)
    for child in _subparsers(parser).values():
        options |= _all_airplay_options(child)
    return options


def test_every_option_named_in_the_docs_exists():
    """A ``--flag`` in prose belongs to the command the paragraph is about: it must at least be an
    option of some airplay command, bench or example script, or of a program in EXTERNAL_OPTIONS."""
    known = _all_airplay_options(_airplay_parser()) | EXTERNAL_OPTIONS
    for script in [*(ROOT / "bench").glob("*.py"), *(ROOT / "examples").glob("*.py"),
                   ROOT / "test" / "sitl_harness.py"]:   # the docs tell users to run the harness too
        known |= _script_options(script)
    problems = []
    for path, _, prose in _docs():
        for line, span in _code_spans(prose):
            for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", span):
                if option not in known:
                    problems.append(f"{_where(path, line)}: no command takes {option}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("tokens, strict, expected", [
    (["airplay", "render", "s", "--pose", "1", "2", "3", "0", "--out", "v.png"], True, []),
    (["airplay", "render", "s", "--pose", "1", "2", "3"], True, ["the airplay parser refuses"]),
    (["airplay", "render", "s", "--no-such-flag"], False, ["has no option --no-such-flag"]),
    (["airplay", "scene", "nope"], False, ["has no sub-command 'nope'"]),
    (["airplay", "launch", "sim_eval", "episode:=2"], False, ["no launch argument 'episode'"]),
    (["airplay", "launch", "sim_eval", "--print", "episodes:=2"], True, []),
    (["make", "no-such-target"], False, ["no make target"]),
    (["python", "-m", "pytest", "test/test_docs.py::test_nope"], False, ["no function test_nope"]),
    (["python", "-m", "pytest", "-m", "not ros and not bogus"], False, ["marker 'bogus'"]),
    (["python", "bench/render.py", "--frames", "3", "--bogus"], False, ["has no option --bogus"]),
])
def test_the_checks_catch_what_they_should(tokens, strict, expected):
    problems = check_command(tokens, strict)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem


def test_the_name_checks_catch_what_they_should():
    assert resolve_dotted("airplay.graph.GRAPHS") is None
    assert resolve_dotted("airplay.cli.build_parser") is None
    assert "no_such_name" in resolve_dotted("airplay.cli.no_such_name")
    assert _slug("Rendering: `bench/render.py`") == "rendering-benchrenderpy"
    assert "rendering-benchrenderpy" in _anchors(ROOT / "docs" / "benchmarks.md")
    assert _expand_braces("scenes/{a,b}_0") == ["scenes/a_0", "scenes/b_0"]
    assert _shell_commands("A=1 make x && cd y  # c\nairplay a \\\n  --b") == [
        (0, ["make", "x"]), (0, ["cd", "y"]), (1, ["airplay", "a", "--b"])]


def test_the_readme_stays_a_readme():
    """README.md is for a new user: under 250 lines, and no table cell over 250 characters (figures
    belong in the pages the README links to)."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines (< 250)"
    long_cells = [(n, len(cell.strip())) for n, line in enumerate(lines, 1) if line.startswith("|")
                  for cell in line.strip().strip("|").split(" | ") if len(cell.strip()) > 250]
    assert not long_cells, f"README.md table cells over 250 characters (line, length): {long_cells}"
