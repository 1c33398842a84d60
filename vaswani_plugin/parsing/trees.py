"""Constituency trees and a reader for Penn Treebank bracketed files.

A :class:`Tree` is a label with children. Words are plain strings and always
sit alone under a pre-terminal (POS tag) node, e.g. ``(NP (DT the) (NN dog))``.

The reader accepts Penn Treebank ``.mrg`` files (several multi-line trees per
file) as well as one-tree-per-line files, and normalises every tree:

* function tags and indices are stripped (``NP-SBJ-1`` -> ``NP``,
  ``NP=2`` -> ``NP``, ``PP-LOC-CLR`` -> ``PP``) while tags that begin with a
  dash (``-NONE-``, ``-LRB-``, ``-RRB-``) are kept intact;
* traces (``-NONE-`` pre-terminals) are removed, and so is every constituent
  that the removal leaves empty (recursively);
* the unlabelled root ``( (S ...) )`` and ``TOP``/``ROOT`` roots are removed
  when they wrap a single phrase; a wrapper around several children (or around
  a lone pre-terminal) becomes a single ``TOP`` root, so the root of a tree
  read from a file is always a phrase. With ``normalise_root=False`` the
  root is kept as written (an unlabelled root gets the label ``""``), which
  is what EVALB scores: it counts the unlabelled root as a bracket.

Malformed input raises :class:`TreebankError`, whose message names the file,
the line and what was expected. With ``skip_bad_trees=True`` bad trees are
skipped instead; the returned :class:`Treebank` records each one in
``errors`` and their number in ``skipped``.
"""

from __future__ import annotations

import gc
import re
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

Child = Union["Tree", str]

#: Root labels that only wrap the real tree; the reader normalises them away.
ROOT_WRAPPER_LABELS = frozenset({"", "TOP", "ROOT"})
#: Label of the single root the reader creates when a wrapper has several children.
TOP_LABEL = "TOP"
#: POS tag of traces and other empty elements in the Penn Treebank.
TRACE_TAG = "-NONE-"

_FORBIDDEN_CHARS = re.compile(r"[\s()]")
_TOKEN = re.compile(r"[()]|[^\s()]+")
_BASE_LABEL = re.compile(r"[^-=]+")


def strip_function_tags(label: str) -> str:
    """Return ``label`` without function tags and indices (``NP-SBJ-1`` -> ``NP``).

    Labels that begin with a dash (``-NONE-``, ``-LRB-``, ``-RRB-``) are
    returned unchanged: there the dashes are part of the tag itself.
    """
    if label.startswith("-"):
        return label
    match = _BASE_LABEL.match(label)
    return match.group(0) if match else label


def _check_symbol(kind: str, text: object) -> None:
    # Labels and words must survive a round trip through the bracketed format.
    if not isinstance(text, str) or not text or _FORBIDDEN_CHARS.search(text):
        raise ValueError(f"a tree {kind} must be a non-empty string without spaces or brackets, got {text!r}")


class Tree:
    """A constituency tree node: ``label`` and a list of ``children``.

    A pre-terminal has exactly one child, the word (a ``str``); every other
    node has one or more :class:`Tree` children. The constructor enforces this.
    """

    __slots__ = ("label", "children")

    def __init__(self, label: str, children: Sequence[Child]):
        children = list(children)
        _check_symbol("label", label)
        if not children:
            raise ValueError(f"tree node {label!r} needs at least one child")
        if isinstance(children[0], str):
            if len(children) != 1:
                raise ValueError(f"pre-terminal {label!r} must have exactly one word, got {children!r}")
            _check_symbol("word", children[0])
        elif not all(isinstance(child, Tree) for child in children):
            raise ValueError(f"node {label!r} mixes words and sub-trees: words need a POS-tag parent")
        self.label = label
        self.children = children

    @classmethod
    def _trusted(cls, label: str, children: List[Child]) -> "Tree":
        # For callers whose labels and words are valid by construction (the
        # tokenizer cannot produce spaces or brackets): skips the checks.
        node = cls.__new__(cls)
        node.label = label
        node.children = children
        return node

    @property
    def is_preterminal(self) -> bool:
        """True when this node is a POS tag over a single word."""
        return isinstance(self.children[0], str)

    def subtrees(self) -> Iterator["Tree"]:
        """Yield every node (pre-terminals included) in pre-order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            if not node.is_preterminal:
                stack.extend(reversed(node.children))

    def preterminals(self) -> List["Tree"]:
        """The pre-terminal nodes, left to right."""
        return [node for node in self.subtrees() if node.is_preterminal]

    def words(self) -> List[str]:
        """The words of the sentence, left to right."""
        return [node.children[0] for node in self.preterminals()]

    def tags(self) -> List[str]:
        """The POS tags, left to right."""
        return [node.label for node in self.preterminals()]

    def pos(self) -> List[Tuple[str, str]]:
        """``(word, tag)`` pairs, left to right."""
        return [(node.children[0], node.label) for node in self.preterminals()]

    def to_string(self) -> str:
        """The one-line bracketed form, e.g. ``(S (NP (PRP I)) (VP (VBD ran)))``."""
        parts: List[str] = []
        stack: List[Union[Tree, str]] = [self]
        while stack:  # iterative, so very deep (e.g. repaired) trees are fine
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item.is_preterminal:
                parts.append(f"({item.label} {item.children[0]})")
            else:
                parts.append("(" + item.label)
                stack.append(")")
                stack.extend(reversed(item.children))
        # Labels and words never hold spaces or brackets, so this is unambiguous.
        return " ".join(parts).replace(" )", ")")

    def copy(self) -> "Tree":
        """A deep copy."""
        return rebuild(self, lambda node, kids: Tree(node.label, kids))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tree):
            return NotImplemented
        return self.to_string() == other.to_string()

    __hash__ = None  # mutable: children may be edited in place

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return f"Tree.fromstring({self.to_string()!r})"

    @staticmethod
    def fromstring(text: str) -> "Tree":
        """Parse exactly one bracketed tree (normalised like the file reader)."""
        return parse_tree(text)


def rebuild(tree: Tree, make: Callable[[Tree, List[Child]], Optional[Tree]]) -> Optional[Tree]:
    """Rebuild ``tree`` bottom-up without recursion.

    ``make(node, kept_children)`` returns the new node, or ``None`` to drop it;
    for a pre-terminal ``kept_children`` is ``[word]``. Returns the new root.
    """
    top: List[Child] = []
    stack: List[Tuple[Tree, Iterator[Child], List[Child]]] = [(tree, iter(tree.children), [])]
    while stack:
        node, pending, kept = stack[-1]
        child = None if node.is_preterminal else next(pending, None)
        if child is not None:
            stack.append((child, iter(child.children), []))
            continue
        stack.pop()
        new = make(node, kept if not node.is_preterminal else list(node.children))
        if new is not None:
            (stack[-1][2] if stack else top).append(new)
    return top[0] if top else None


# --------------------------------------------------------------------------- reading


class TreebankError(ValueError):
    """Malformed treebank input; ``source``, ``line`` and ``reason`` say where and what."""

    def __init__(self, source: str, line: Optional[int], reason: str):
        self.source = source
        self.line = line
        self.reason = reason
        where = f"{source}, line {line}" if line is not None else str(source)
        super().__init__(f"{where}: {reason}")


class Treebank(list):
    """A list of trees read from one source, plus the bad trees that were skipped."""

    def __init__(self, trees: Sequence[Tree] = (), source: str = "", errors: Sequence[TreebankError] = ()):
        super().__init__(trees)
        self.source = source
        self.errors: List[TreebankError] = list(errors)

    @property
    def skipped(self) -> int:
        """How many bad trees were skipped (``skip_bad_trees=True``)."""
        return len(self.errors)


_Token = Tuple[str, int, bool]  # text, line number, first thing on its line at column 0


def _tokenize(text: str) -> List[_Token]:
    tokens: List[_Token] = []
    # Split on "\n" only, so line numbers agree with editors (a "\r" is whitespace).
    for number, line in enumerate(text.split("\n"), start=1):
        found = _TOKEN.findall(line)
        if found:
            tokens.append((found[0], number, line.startswith("(")))
            tokens.extend([(text, number, False) for text in found[1:]])
    return tokens


def _split_trees(tokens: List[_Token], source: str) -> Iterator[Union[List[_Token], TreebankError]]:
    """Cut the token stream into top-level trees; yield each, or an error for bad input.

    A ``(`` in column 0 while a tree is still open starts a new tree: .mrg
    files indent every line inside a tree, and one-tree-per-line files start
    each tree on its own line, so this keeps one missing ``)`` from swallowing
    the rest of the file.
    """
    current: List[_Token] = []
    depth = 0
    finished: Optional[List[_Token]] = None  # last complete tree, held back in case a stray ')' follows
    for token in tokens:
        text, line, line_start = token
        if text == "(":
            if depth == 0:
                if finished is not None:
                    yield finished
                    finished = None
            elif line_start:
                yield TreebankError(source, current[0][1], f"unbalanced brackets: expected {depth} more ')' "
                                    f"to close this tree before the next tree starts at line {line}")
                current, depth = [], 0
            current.append(token)
            depth += 1
        elif text == ")":
            if depth == 0:
                if finished is not None:
                    yield TreebankError(source, line, "unbalanced brackets: extra ')' after the tree that "
                                        f"starts at line {finished[0][1]} was already closed")
                    finished = None
                else:
                    yield TreebankError(source, line, "unbalanced brackets: found ')' but no bracket is open")
                continue
            current.append(token)
            depth -= 1
            if depth == 0:
                finished, current = current, []
        elif depth == 0:
            if finished is not None:
                yield finished
                finished = None
            yield TreebankError(source, line, f"expected '(' to start a tree, found {text!r}")
        else:
            current.append(token)
    if finished is not None:
        yield finished
    if depth > 0:
        last_line = tokens[-1][1]
        yield TreebankError(source, current[0][1], f"unbalanced brackets: expected {depth} more ')' to "
                            f"close this tree, found the end of the input at line {last_line}")


class _Frame:
    """An open bracket while parsing: its raw label and what it holds so far."""

    __slots__ = ("label", "line", "children", "words")

    def __init__(self, label: str, line: int):
        self.label = label
        self.line = line
        self.children: List[Optional[Tree]] = []  # None marks a child removed as a trace
        self.words: List[Tuple[str, int]] = []


def _build_tree(tokens: List[_Token], source: str, remove_traces: bool, strip_tags: bool,
                normalise_root: bool) -> Tree:
    """Parse one balanced token group into a normalised tree (or raise TreebankError)."""
    stack: List[_Frame] = []
    root: Optional[Tree] = None
    index = 0
    while index < len(tokens):
        text, line, _ = tokens[index]
        index += 1
        if text == "(":
            following = tokens[index][0]  # a balanced group never ends with '('
            if following == ")":
                raise TreebankError(source, line, "empty brackets '()': expected a label after '('")
            if following == "(":
                if stack:
                    raise TreebankError(source, line, "expected a label after '(' (only the outermost "
                                        "bracket may be unlabelled)")
                label = ""
            else:
                label = following
                index += 1
            stack.append(_Frame(label, line))
        elif text == ")":
            frame = stack.pop()
            node = _close(frame, source, remove_traces, strip_tags, is_root=normalise_root and not stack)
            if stack:
                stack[-1].children.append(node)
            else:
                root = node
        else:
            stack[-1].words.append((text, line))
    if root is None:
        raise TreebankError(source, tokens[0][1], "the tree has no words left after removing traces (-NONE-)")
    return root


def _close(frame: _Frame, source: str, remove_traces: bool, strip_tags: bool, is_root: bool) -> Optional[Tree]:
    label = strip_function_tags(frame.label) if strip_tags else frame.label
    if frame.words:
        if frame.children or len(frame.words) > 1:
            word, line = frame.words[1] if not frame.children else frame.words[0]
            raise TreebankError(source, line, f"the word {word!r} has no POS tag: expected '(TAG {word})' "
                                f"inside '({frame.label} ...'")
        if remove_traces and label == TRACE_TAG:
            return None
        preterminal = Tree._trusted(label, [frame.words[0][0]])
        return Tree._trusted(TOP_LABEL, [preterminal]) if is_root else preterminal
    if not frame.children:
        raise TreebankError(source, frame.line, f"empty constituent '({frame.label})': expected a word "
                            "or sub-trees after the label")
    kids = [child for child in frame.children if child is not None]
    if not kids:
        return None  # everything under it was a trace
    if is_root and label in ROOT_WRAPPER_LABELS:
        if len(kids) == 1 and not kids[0].is_preterminal:
            return kids[0]
        return Tree._trusted(TOP_LABEL, kids)
    return Tree._trusted(label, kids)


def parse_trees(text: str, source: str = "<string>", *, skip_bad_trees: bool = False,
                remove_traces: bool = True, strip_tags: bool = True, normalise_root: bool = True) -> Treebank:
    """Parse every tree in ``text`` (multi-line .mrg style or one tree per line).

    ``normalise_root=False`` keeps each root as written (see the module docstring).

    ``source`` names the input in error messages. Raises :class:`TreebankError`
    on the first bad tree, or on empty input; with ``skip_bad_trees=True``
    bad trees are skipped and recorded in the result's ``errors``.
    """
    # Parsing allocates millions of small objects, none in reference cycles;
    # pausing the cyclic garbage collector halves the time on large files.
    collecting = gc.isenabled()
    gc.disable()
    try:
        tokens = _tokenize(text)
        if not tokens:
            raise TreebankError(source, 1, "the input is empty: expected at least one bracketed tree")
        treebank = Treebank(source=source)
        for group in _split_trees(tokens, source):
            try:
                if isinstance(group, TreebankError):
                    raise group
                treebank.append(_build_tree(group, source, remove_traces, strip_tags, normalise_root))
            except TreebankError as error:
                if not skip_bad_trees:
                    raise
                treebank.errors.append(error)
        return treebank
    finally:
        if collecting:
            gc.enable()


def read_treebank(path: str, *, skip_bad_trees: bool = False, remove_traces: bool = True,
                  strip_tags: bool = True, normalise_root: bool = True, encoding: str = "utf-8") -> Treebank:
    """Read a treebank file; see :func:`parse_trees` for the options and errors."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise TreebankError(source, None, f"cannot read the file: {error.strerror or error}") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise TreebankError(source, line, f"expected {encoding} text, found byte "
                            f"0x{data[error.start]:02x}") from None
    return parse_trees(text, source, skip_bad_trees=skip_bad_trees, remove_traces=remove_traces,
                       strip_tags=strip_tags, normalise_root=normalise_root)


def parse_tree(text: str, source: str = "<string>") -> Tree:
    """Parse exactly one bracketed tree, normalised like :func:`read_treebank`."""
    trees = parse_trees(text, source)
    if len(trees) != 1:
        raise TreebankError(source, None, f"expected exactly one tree, found {len(trees)}")
    return trees[0]


def save_trees(path: str, trees: Sequence[Tree]) -> None:
    """Write ``trees`` one per line in the bracketed form."""
    with open(path, "w", encoding="utf-8") as handle:
        for tree in trees:
            handle.write(tree.to_string() + "\n")
