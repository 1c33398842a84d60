"""Turn trees into token sequences for a sequence-to-sequence parser, and back.

:func:`linearize_tree` writes a tree as a scheme's target tokens; the default scheme is depth-first
labelled opening and closing brackets (Vinyals et al., 2015, "Grammar as a Foreign Language"), the
target format of the Transformer's constituency parsing experiment:

    (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))
    source: the dog barked .
    target: (S (NP XX XX )NP (VP XX )VP XX )S          scheme="vinyals"
    target: (S (NP DT NN )NP (VP VBD )VP . )S          scheme="tags"

The schemes are objects in :mod:`.schemes` (one file each); this module only asks them. Words appear
only on the source side. :func:`delinearize` turns a (possibly ill-formed) predicted target sequence
plus the source words back into a tree, always, and counts every repair it had to make in a
:class:`Repairs`.
"""

from __future__ import annotations

from collections import Counter
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

from .schemes import BAD, CLOSE, OPEN, PLACEHOLDER_TAG, LinearizationScheme, get_scheme
from .trees import TOP_LABEL, Tree

__all__ = ["PLACEHOLDER_TAG", "REPAIR_KINDS", "Delinearized", "Repairs", "delinearize", "linearize_tree"]
#: Label given to a "(" token that carries no label.
UNKNOWN_LABEL = "X"

# Names of the repairs delinearize can make (the keys of a Repairs counter).
EXTRA_CLOSE = "extra_close"
MISSING_CLOSE = "missing_close"
MISMATCHED_CLOSE = "mismatched_close"
UNLABELLED_OPEN = "unlabelled_open"
BAD_TOKEN = "bad_token"
DROPPED_PRETERMINAL = "dropped_preterminal"
ADDED_PRETERMINAL = "added_preterminal"
EMPTY_CONSTITUENT = "empty_constituent"
ADDED_ROOT = "added_root"

REPAIR_KINDS = {
    EXTRA_CLOSE: "a closing bracket with no open bracket was dropped",
    MISSING_CLOSE: "a bracket still open at the end was closed",
    MISMATCHED_CLOSE: "a closing label differed from the open bracket's label; the open label was kept",
    UNLABELLED_OPEN: f"a '(' without a label was labelled {UNKNOWN_LABEL}",
    BAD_TOKEN: "an empty token, or one whose label holds a bracket or a space, was dropped",
    DROPPED_PRETERMINAL: "more pre-terminals than words: a surplus pre-terminal at the end was dropped",
    ADDED_PRETERMINAL: "fewer pre-terminals than words: a pre-terminal was appended under the root",
    EMPTY_CONSTITUENT: "a constituent without any pre-terminal was removed",
    ADDED_ROOT: f"the sequence did not form exactly one phrase, so it was wrapped in a {TOP_LABEL} root",
}


class Repairs(Counter):
    """Counts of the repairs :func:`delinearize` made, keyed by the names in ``REPAIR_KINDS``."""

    @property
    def count(self) -> int:
        """Total number of repairs (0 for a well-formed sequence)."""
        return sum(self.values())

    def describe(self) -> str:
        """One line per repair kind, e.g. ``missing_close: 2``; empty when nothing was repaired."""
        return "\n".join(f"{kind}: {number}" for kind, number in sorted(self.items()) if number)


class Delinearized(NamedTuple):
    """The result of :func:`delinearize`: the tree and the repairs it needed."""

    tree: Tree
    repairs: Repairs


def linearize_tree(tree: Tree, scheme: Union[str, LinearizationScheme] = "vinyals", reverse_source: bool = False
                   ) -> Tuple[List[str], List[str]]:
    """Return ``(source_tokens, target_tokens)`` for ``tree``.

    ``scheme`` is a registered scheme's name (see :func:`.schemes.scheme_names`) or a scheme object.
    ``reverse_source=True`` reverses the source words (as Vinyals et al. did for their LSTM); the
    target is never reversed.
    """
    target = get_scheme(scheme).linearize(tree)
    source = tree.words()
    if reverse_source:
        source.reverse()
    return source, target


class _Phrase:
    """A constituent while the sequence is being repaired."""

    __slots__ = ("label", "children")

    def __init__(self, label: str):
        self.label = label
        self.children: List[Union["_Phrase", str]] = []  # a str child is a pre-terminal's tag token


def delinearize(target_tokens: Union[str, Sequence[str]], words: Sequence[str],
                gold_tags: Optional[Sequence[str]] = None,
                scheme: Union[str, LinearizationScheme] = "vinyals") -> Delinearized:
    """Rebuild a tree from a predicted target sequence and the sentence's words.

    Always returns a tree (with the :class:`Repairs` made), however ill-formed
    the sequence: brackets are balanced, closing labels fixed, the number of
    pre-terminals made equal to the number of words, empty constituents
    removed and, where needed, a ``TOP`` root added. Each token is read as
    ``scheme`` classifies it (opening, closing, pre-terminal or bad). The words go back in order;
    their tags are ``gold_tags`` when given (the usual practice when reporting
    parsing scores), else the predicted tokens (``XX`` or the predicted tags).
    A closing token may omit its label (``)``). ``words`` must be in sentence
    order, even if the model read them reversed.
    """
    words = list(words)
    if not words:
        raise ValueError("delinearize needs at least one word")
    if gold_tags is not None and len(gold_tags) != len(words):
        raise ValueError(f"got {len(gold_tags)} gold tags for {len(words)} words")
    tokens = target_tokens.split() if isinstance(target_tokens, str) else list(target_tokens)
    repairs = Repairs()

    scheme = get_scheme(scheme)
    forest = _parse_brackets(tokens, scheme, repairs)
    surplus = len(_preterminal_places(forest)) - len(words)
    if surplus > 0:
        _drop_last_preterminals(forest, surplus)
        repairs[DROPPED_PRETERMINAL] += surplus
    forest = _prune_empty(forest, repairs)

    if len(forest) == 1 and isinstance(forest[0], _Phrase):
        root = forest[0]
    else:
        root = _Phrase(TOP_LABEL)
        root.children = forest
        repairs[ADDED_ROOT] += 1
    if surplus < 0:
        root.children.extend([scheme.placeholder_tag] * -surplus)
        repairs[ADDED_PRETERMINAL] += -surplus
    for kind in [kind for kind, number in repairs.items() if not number]:
        del repairs[kind]  # only the repairs actually made, so a clean result compares equal to {}
    return Delinearized(_to_tree(root, words, gold_tags), repairs)


def _parse_brackets(tokens: List[str], scheme: LinearizationScheme, repairs: Repairs) -> List[Union[_Phrase, str]]:
    """Read brackets and pre-terminal tokens into a forest, balancing as it goes."""
    forest: List[Union[_Phrase, str]] = []
    stack: List[_Phrase] = []
    for token in tokens:
        kind, label = scheme.classify(token)
        if kind == BAD:
            repairs[BAD_TOKEN] += 1
            continue
        siblings = stack[-1].children if stack else forest
        if kind == OPEN:
            if not label:
                label = UNKNOWN_LABEL
                repairs[UNLABELLED_OPEN] += 1
            phrase = _Phrase(label)
            siblings.append(phrase)
            stack.append(phrase)
        elif kind == CLOSE:
            if not stack:
                repairs[EXTRA_CLOSE] += 1
                continue
            if label and label != stack[-1].label:
                repairs[MISMATCHED_CLOSE] += 1
            stack.pop()
        else:
            siblings.append(label)
    repairs[MISSING_CLOSE] += len(stack)
    return forest


def _walk(forest: List[Union[_Phrase, str]]) -> List[_Phrase]:
    """All phrases in pre-order (each before its descendants)."""
    order: List[_Phrase] = []
    stack = [item for item in reversed(forest) if isinstance(item, _Phrase)]
    while stack:
        phrase = stack.pop()
        order.append(phrase)
        stack.extend(child for child in reversed(phrase.children) if isinstance(child, _Phrase))
    return order


def _preterminal_places(forest: List[Union[_Phrase, str]]) -> List[Tuple[list, int]]:
    """``(siblings, index)`` of every pre-terminal token, in sentence order."""
    places: List[Tuple[list, int]] = []
    stack: List[Tuple[list, int]] = [(forest, 0)]
    while stack:
        siblings, index = stack.pop()
        if index >= len(siblings):
            continue
        stack.append((siblings, index + 1))
        item = siblings[index]
        if isinstance(item, str):
            places.append((siblings, index))
        else:
            stack.append((item.children, 0))
    return places


def _drop_last_preterminals(forest: List[Union[_Phrase, str]], number: int) -> None:
    # Delete from the right so that the earlier indices stay valid.
    for siblings, index in reversed(_preterminal_places(forest)[-number:]):
        del siblings[index]


def _prune_empty(forest: List[Union[_Phrase, str]], repairs: Repairs) -> List[Union[_Phrase, str]]:
    def keep(item: Union[_Phrase, str]) -> bool:
        return isinstance(item, str) or bool(item.children)

    # Reversed pre-order visits every phrase after all of its descendants,
    # so emptiness propagates upwards in one pass.
    for phrase in reversed(_walk(forest)):
        kept = [child for child in phrase.children if keep(child)]
        repairs[EMPTY_CONSTITUENT] += len(phrase.children) - len(kept)
        phrase.children = kept
    kept = [item for item in forest if keep(item)]
    repairs[EMPTY_CONSTITUENT] += len(forest) - len(kept)
    return kept


def _to_tree(root: _Phrase, words: List[str], gold_tags: Optional[Sequence[str]]) -> Tree:
    """Attach the words (and tags) in order and convert to :class:`Tree`, bottom-up."""
    for position, (siblings, index) in enumerate(_preterminal_places([root])):
        tag = gold_tags[position] if gold_tags is not None else siblings[index]
        siblings[index] = Tree(tag, [words[position]])
    built = {}
    for phrase in reversed(_walk([root])):  # every phrase after its descendants
        built[id(phrase)] = Tree(phrase.label, [child if isinstance(child, Tree) else built.pop(id(child))
                                                for child in phrase.children])
    return built[id(root)]
