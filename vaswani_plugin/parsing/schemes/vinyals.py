"""The "vinyals" scheme (Vinyals et al., 2015; the paper's §6.3 setting): every POS tag written as XX.

    (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))  ->  (S (NP XX XX )NP (VP XX )VP XX )S
"""
from . import register_scheme
from .base import BracketScheme


@register_scheme
class VinyalsScheme(BracketScheme):
    name = "vinyals"
    help = "labelled brackets, every POS tag written as XX (Vinyals et al., 2015)"

    def preterminal_token(self, tag: str) -> str:
        return self.placeholder_tag
