"""The registered linearization schemes (one object per target format; see :mod:`.base`).

Adding a scheme is one file and a registration: a module here with a :class:`.base.LinearizationScheme`
subclass decorated with :func:`register_scheme`, imported at the bottom of this file. Every registered
scheme is then a `--scheme` of `python -m vaswani_plugin.parsing.prepare`, read back by `delinearize`,
searched by `--constrained-decoding`, and covered by the round-trip and never-malformed tests.
"""
from typing import Dict, Tuple, Type, Union

from .base import BAD, CLOSE, OPEN, PLACEHOLDER_TAG, PRETERMINAL, BracketScheme, LinearizationScheme, Token

_REGISTRY: Dict[str, LinearizationScheme] = {}


def register_scheme(cls: Type[LinearizationScheme]) -> Type[LinearizationScheme]:
    """Class decorator: make ``cls.name`` a scheme (one shared instance; schemes hold no state)."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"a linearization scheme needs a new, non-empty name; got {cls.name!r}")
    _REGISTRY[cls.name] = cls()
    return cls


def scheme_names() -> Tuple[str, ...]:
    """The names of the registered schemes, in registration order."""
    return tuple(_REGISTRY)


def get_scheme(scheme: Union[str, LinearizationScheme]) -> LinearizationScheme:
    """The scheme of that name (a scheme object is returned as is)."""
    if isinstance(scheme, LinearizationScheme):
        return scheme
    if scheme not in _REGISTRY:
        raise ValueError(f"unknown linearization scheme {scheme!r}; expected one of {', '.join(_REGISTRY)}")
    return _REGISTRY[scheme]


# The registrations (each module registers its scheme on import).
from . import vinyals, tags  # noqa: E402,F401

__all__ = ["BAD", "CLOSE", "OPEN", "PLACEHOLDER_TAG", "PRETERMINAL", "BracketScheme", "LinearizationScheme", "Token", "get_scheme",
           "register_scheme", "scheme_names"]
