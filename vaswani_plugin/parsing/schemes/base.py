"""What a linearization scheme is: the one object that writes trees as target tokens and reads them.

A scheme states its target grammar once, and everything that needs the grammar asks it:

- :func:`vaswani_plugin.parsing.linearize_tree` writes a tree with :meth:`LinearizationScheme.linearize`;
- :func:`vaswani_plugin.parsing.delinearize` reads (and repairs) a predicted sequence token by token
  through :meth:`LinearizationScheme.classify`;
- the constrained search (`--constrained-decoding`) sorts the target dictionary's symbols with the same
  :meth:`~LinearizationScheme.classify`, so it only allows what `delinearize` reads without repair.

Every scheme so far is *bracketed*: a phrase is an opening token, its children, then a closing token
of the same label, and each word is one pre-terminal token. A scheme chooses how these tokens are
spelled; :class:`BracketScheme` spells brackets as ``(LABEL`` and ``)LABEL`` and leaves the
pre-terminal token to its subclasses.
"""
from __future__ import annotations

import re
from typing import List, NamedTuple, Union

from ..trees import Tree

#: Kinds of target tokens (:attr:`Token.kind`).
OPEN, CLOSE, PRETERMINAL, BAD = "open", "close", "preterminal", "bad"

#: The placeholder pre-terminal: every POS tag in the "vinyals" scheme, and what `delinearize` adds
#: for a word that a predicted sequence left without a pre-terminal.
PLACEHOLDER_TAG = "XX"

_BAD_LABEL_CHARS = re.compile(r"[\s()]")


class Token(NamedTuple):
    """What one target token means: its kind and its label (a phrase label, or the pre-terminal's tag;
    ``""`` for an opening or closing bracket written without a label)."""

    kind: str
    label: str


class LinearizationScheme:
    """A target format for trees. Subclasses set ``name`` and ``help`` and register with
    :func:`vaswani_plugin.parsing.schemes.register_scheme`."""

    name: str = ""
    help: str = ""
    #: the pre-terminal `delinearize` writes for a word the sequence left without one
    placeholder_tag = PLACEHOLDER_TAG

    def linearize(self, tree: Tree) -> List[str]:
        """The target tokens of ``tree``."""
        raise NotImplementedError

    def classify(self, token: str) -> Token:
        """The kind and label of one target token (:data:`BAD` for a token the grammar has no place for)."""
        raise NotImplementedError

    def close_token(self, label: str) -> str:
        """The token that closes a phrase labelled ``label``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<linearization scheme {self.name!r}>"


class BracketScheme(LinearizationScheme):
    """Vinyals et al. (2015)'s depth-first bracketing: ``(S (NP XX XX )NP (VP XX )VP )S``."""

    def preterminal_token(self, tag: str) -> str:
        """The token written for a pre-terminal tagged ``tag``."""
        raise NotImplementedError

    def linearize(self, tree: Tree) -> List[str]:
        target: List[str] = []
        stack: List[Union[Tree, str]] = [tree]
        while stack:  # iterative: very deep trees are fine
            item = stack.pop()
            if isinstance(item, str):
                target.append(item)
            elif item.is_preterminal:
                target.append(self.preterminal_token(item.label))
            else:
                target.append("(" + item.label)
                stack.append(self.close_token(item.label))
                stack.extend(reversed(item.children))
        return target

    def close_token(self, label: str) -> str:
        return ")" + label

    def classify(self, token: str) -> Token:
        kind = {"(": OPEN, ")": CLOSE}.get(token[:1], PRETERMINAL)
        label = token[1:] if kind != PRETERMINAL else token
        if not token or _BAD_LABEL_CHARS.search(label) or (kind == PRETERMINAL and not label):
            return Token(BAD, "")
        return Token(kind, label)
