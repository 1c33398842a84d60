"""The "tags" scheme: Vinyals et al.'s brackets with the real POS tags as pre-terminals.

    (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))  ->  (S (NP DT NN )NP (VP VBD )VP . )S
"""
from . import register_scheme
from .base import BracketScheme


@register_scheme
class TagsScheme(BracketScheme):
    name = "tags"
    help = "labelled brackets with the real POS tags as pre-terminals (the tagger comes for free)"

    def preterminal_token(self, tag: str) -> str:
        return tag
