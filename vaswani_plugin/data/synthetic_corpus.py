"""Deterministic English -> German-like parallel corpus from a synchronous grammar.

Each sentence is first sampled as one abstract structure (clauses, noun phrases, verbs) and
then realised twice: in lowercase English and in a German-like language whose content words
are invented (see ``lexicon.py``) but whose grammar follows real German:

* articles agree with the noun's gender (m/f/n), number and case: nominative for subjects,
  accusative for direct objects and after für/ohne/durch/gegen, dative for indirect objects
  and after mit/von/bei/zu ("der/die/das/den/dem", "ein/eine/einen/einem/einer");
* adjective endings follow the weak (after der), mixed (after ein) and strong (no article,
  bare plurals) paradigms; nouns have plural forms and take -n in the dative plural;
* main clauses are verb-second: a fronted time adverb or a fronted subordinate clause pushes
  the subject behind the finite verb ("hoit specht der Brunk ...");
* subordinate clauses (weil/wenn/obwohl, and dass after verbs of saying) are verb-final and
  set off by commas;
* separable verbs send their particle to the end of a main clause but keep it attached to
  the clause-final verb in a subordinate clause ("lappt ... ein" vs "... einlappt");
* the finite verb agrees with the subject's person and number (ich -e, du -st, er -t, wir -en).

The English side never leaves a choice open: every English word form has one lexicon entry
and the German rules only look at information visible in English (roles come from word
order, number from the noun form), so each source sentence has exactly one translation.
Sentences are 4-40 tokens with punctuation as separate tokens. Plain Python, no torch.
"""
from __future__ import annotations

import argparse
import os
import random
from typing import Iterator, NamedTuple, Optional, Union

from .lexicon import (
    ADJECTIVES, COMPLEMENTIZER, NOUNS, PREPOSITIONS, PRONOUNS, SUBORDINATORS, TIME_ADVERBS,
    Adjective, Noun, Pronoun, Verb, VERBS,
)

MIN_TOKENS, MAX_TOKENS = 4, 40

# Sampling probabilities. They only shape the distribution, never the translation.
P_PRONOUN_SUBJECT = 0.25
P_PLURAL = 0.35
P_DEFINITE = 0.6  # otherwise "a" (singular) or a bare plural
ADJECTIVE_COUNT_WEIGHTS = (0.55, 0.35, 0.10)  # zero, one or two adjectives
MAIN_FRAME_WEIGHTS = {"intr": 0.25, "tr": 0.40, "ditr": 0.20, "clause": 0.15}
SUB_FRAME_WEIGHTS = {"intr": 0.30, "tr": 0.45, "ditr": 0.25}
P_PP_MAIN, P_PP_SUB = 0.3, 0.2
P_FRONTED_ADVERB, P_FRONTED_SUB, P_TRAILING_SUB = 0.2, 0.12, 0.22

ANIMATE_NOUNS = [n for n in NOUNS if n.animate]
VERBS_BY_FRAME = {frame: [v for v in VERBS if v.frame == frame] for frame in MAIN_FRAME_WEIGHTS}

# Article tables, indexed by case and then m/f/n/plural. "ein" has no plural: bare plurals.
_DEFINITE = {"nom": ("der", "die", "das", "die"), "acc": ("den", "die", "das", "die"),
             "dat": ("dem", "der", "dem", "den")}
_INDEFINITE = {"nom": ("ein", "eine", "ein"), "acc": ("einen", "eine", "ein"),
               "dat": ("einem", "einer", "einem")}
_GENDER_INDEX = {"m": 0, "f": 1, "n": 2}
# Regular present tense endings by (person, plural).
_VERB_ENDINGS = {(1, False): "e", (2, False): "st", (3, False): "t", (1, True): "en",
                 (3, True): "en"}


class NounPhrase(NamedTuple):
    noun: Noun
    plural: bool
    determiner: str  # "def", "indef" (singular only) or "bare" (plural only)
    adjectives: tuple[Adjective, ...]


Subject = Union[NounPhrase, Pronoun]


class Clause(NamedTuple):
    subject: Subject
    verb: Verb
    indirect_object: Optional[NounPhrase]  # dative, ditransitive verbs only
    direct_object: Optional[NounPhrase]  # accusative, transitive and ditransitive verbs
    prepositional: Optional[tuple[str, NounPhrase]]  # (English preposition, its object)


class Sentence(NamedTuple):
    main: Clause
    fronted_adverb: Optional[str]  # English time adverb
    fronted_sub: Optional[tuple[str, Clause]]  # (English subordinator, clause) before main
    trailing_sub: Optional[tuple[str, Clause]]  # (subordinator or "that", clause) after main


# ----------------------------------------------------------------------------- sampling


def _weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _sample_np(rng: random.Random, nouns: list[Noun]) -> NounPhrase:
    plural = rng.random() < P_PLURAL
    if rng.random() < P_DEFINITE:
        determiner = "def"
    else:
        determiner = "bare" if plural else "indef"
    n_adjectives = rng.choices((0, 1, 2), weights=ADJECTIVE_COUNT_WEIGHTS)[0]
    return NounPhrase(rng.choice(nouns), plural, determiner,
                      tuple(rng.sample(ADJECTIVES, n_adjectives)))


def _sample_clause(rng: random.Random, frame_weights: dict[str, float], p_pp: float) -> Clause:
    verb = rng.choice(VERBS_BY_FRAME[_weighted(rng, frame_weights)])
    if rng.random() < P_PRONOUN_SUBJECT:
        subject: Subject = rng.choice(PRONOUNS)
    else:
        subject = _sample_np(rng, ANIMATE_NOUNS)
    indirect = _sample_np(rng, ANIMATE_NOUNS) if verb.frame == "ditr" else None
    direct = _sample_np(rng, NOUNS) if verb.frame in ("tr", "ditr") else None
    # Verbs of saying take their dass-clause instead of a prepositional phrase.
    prepositional = None
    if verb.frame != "clause" and rng.random() < p_pp:
        prepositional = (rng.choice(sorted(PREPOSITIONS)), _sample_np(rng, NOUNS))
    return Clause(subject, verb, indirect, direct, prepositional)


def _sample_subordinate(rng: random.Random) -> tuple[str, Clause]:
    return rng.choice(sorted(SUBORDINATORS)), _sample_clause(rng, SUB_FRAME_WEIGHTS, P_PP_SUB)


def _sample_sentence(rng: random.Random) -> Sentence:
    main = _sample_clause(rng, MAIN_FRAME_WEIGHTS, P_PP_MAIN)
    adverb = fronted = trailing = None
    roll = rng.random()
    if roll < P_FRONTED_ADVERB:
        adverb = rng.choice(sorted(TIME_ADVERBS))
    elif roll < P_FRONTED_ADVERB + P_FRONTED_SUB and main.verb.frame != "clause":
        fronted = _sample_subordinate(rng)
    # At most one subordinate clause per sentence; a verb of saying always gets its dass-clause.
    if main.verb.frame == "clause":
        trailing = (COMPLEMENTIZER[0], _sample_clause(rng, SUB_FRAME_WEIGHTS, P_PP_SUB))
    elif fronted is None and rng.random() < P_TRAILING_SUB:
        trailing = _sample_subordinate(rng)
    return Sentence(main, adverb, fronted, trailing)


# ----------------------------------------------------------------------------- English


def _person_number(subject: Subject) -> tuple[int, bool]:
    if isinstance(subject, Pronoun):
        return subject.person, subject.plural
    return 3, subject.plural


def _english_np(phrase: Subject) -> list[str]:
    if isinstance(phrase, Pronoun):
        return [phrase.en]
    words = [a.en for a in phrase.adjectives]
    words.append(phrase.noun.en_pl if phrase.plural else phrase.noun.en_sg)
    if phrase.determiner == "def":
        return ["the"] + words
    if phrase.determiner == "indef":
        return ["an" if words[0][0] in "aeiou" else "a"] + words
    return words


def _english_clause(clause: Clause) -> list[str]:
    verb = clause.verb
    tokens = _english_np(clause.subject)
    tokens.append(verb.en_3sg if _person_number(clause.subject) == (3, False) else verb.en_base)
    for obj in (clause.indirect_object, clause.direct_object):  # English: "gives X Y"
        if obj is not None:
            tokens += _english_np(obj)
    if clause.prepositional is not None:
        tokens += [clause.prepositional[0]] + _english_np(clause.prepositional[1])
    return tokens


def english_sentence(sentence: Sentence) -> list[str]:
    tokens: list[str] = []
    if sentence.fronted_adverb:
        tokens.append(sentence.fronted_adverb)
    if sentence.fronted_sub:
        conjunction, clause = sentence.fronted_sub
        tokens += [conjunction] + _english_clause(clause) + [","]
    tokens += _english_clause(sentence.main)
    if sentence.trailing_sub:
        conjunction, clause = sentence.trailing_sub
        tokens += [conjunction] + _english_clause(clause)
    return tokens + ["."]


# ----------------------------------------------------------------------------- German


def _adjective_ending(determiner: str, gender: str, case: str, plural: bool) -> str:
    if determiner == "def":  # weak: -e only where the article already shows nom. (or f/n acc.)
        if plural or case == "dat" or (case == "acc" and gender == "m"):
            return "en"
        return "e"
    if determiner == "indef":  # mixed: the adjective shows the gender "ein" leaves unmarked
        if case == "dat" or (case == "acc" and gender == "m"):
            return "en"
        return {"m": "er", "f": "e", "n": "es"}[gender]
    return "en" if case == "dat" else "e"  # strong plural without an article


def _german_np(phrase: Subject, case: str) -> list[str]:
    if isinstance(phrase, Pronoun):  # pronouns only occur as (nominative) subjects
        return [phrase.de]
    noun = phrase.noun
    tokens = []
    if phrase.determiner == "def":
        tokens.append(_DEFINITE[case][3 if phrase.plural else _GENDER_INDEX[noun.gender]])
    elif phrase.determiner == "indef":
        tokens.append(_INDEFINITE[case][_GENDER_INDEX[noun.gender]])
    ending = _adjective_ending(phrase.determiner, noun.gender, case, phrase.plural)
    tokens += [a.de_stem + ending for a in phrase.adjectives]
    if not phrase.plural:
        tokens.append(noun.de_sg)
    elif case == "dat" and not noun.de_pl.endswith(("n", "s")):
        tokens.append(noun.de_pl + "n")  # dative plural -n ("den Hufter" -> "den Huftern")
    else:
        tokens.append(noun.de_pl)
    return tokens


def _german_middle_field(clause: Clause) -> list[str]:
    """Everything between the finite verb and the clause end: dative, accusative, PP."""
    tokens: list[str] = []
    if clause.indirect_object is not None:
        tokens += _german_np(clause.indirect_object, "dat")
    if clause.direct_object is not None:
        tokens += _german_np(clause.direct_object, "acc")
    if clause.prepositional is not None:
        preposition, case = PREPOSITIONS[clause.prepositional[0]]
        tokens += [preposition] + _german_np(clause.prepositional[1], case)
    return tokens


def _finite_verb(clause: Clause) -> str:
    return clause.verb.de_stem + _VERB_ENDINGS[_person_number(clause.subject)]


def _german_main_clause(clause: Clause, prefield: list[str]) -> list[str]:
    """Verb-second: one constituent (subject, adverb or clause), finite verb, rest, particle."""
    subject = _german_np(clause.subject, "nom")
    particle = [clause.verb.particle] if clause.verb.particle else []
    if prefield:  # something else is fronted: the subject follows the verb
        head = prefield + [_finite_verb(clause)] + subject
    else:
        head = subject + [_finite_verb(clause)]
    return head + _german_middle_field(clause) + particle


def _german_subordinate_clause(conjunction: str, clause: Clause) -> list[str]:
    """Verb-final; a separable particle stays glued to the verb ("... einlappt")."""
    return ([conjunction] + _german_np(clause.subject, "nom") + _german_middle_field(clause)
            + [clause.verb.particle + _finite_verb(clause)])


def _german_conjunction(english: str) -> str:
    return COMPLEMENTIZER[1] if english == COMPLEMENTIZER[0] else SUBORDINATORS[english]


def german_sentence(sentence: Sentence) -> list[str]:
    prefield: list[str] = []
    if sentence.fronted_adverb:
        prefield = [TIME_ADVERBS[sentence.fronted_adverb]]
    if sentence.fronted_sub:
        conjunction, clause = sentence.fronted_sub
        prefield = _german_subordinate_clause(_german_conjunction(conjunction), clause) + [","]
    tokens = _german_main_clause(sentence.main, prefield)
    if sentence.trailing_sub:  # German always sets subordinate clauses off with a comma
        conjunction, clause = sentence.trailing_sub
        tokens += [","] + _german_subordinate_clause(_german_conjunction(conjunction), clause)
    return tokens + ["."]


# ----------------------------------------------------------------------------- corpus


def iter_pairs(rng: random.Random) -> Iterator[tuple[str, str]]:
    """Endless stream of (English, German) pairs whose lengths are within the bounds."""
    while True:
        sentence = _sample_sentence(rng)
        source, target = english_sentence(sentence), german_sentence(sentence)
        if all(MIN_TOKENS <= len(side) <= MAX_TOKENS for side in (source, target)):
            yield " ".join(source), " ".join(target)


def generate_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` pairs (duplicates possible), deterministic for ``seed``; never uses global RNG."""
    stream = iter_pairs(random.Random(seed))
    return [next(stream) for _ in range(n)]


def write_corpus(out_dir, train: int = 50000, valid: int = 1000, test: int = 1000,
                 seed: int = 1, src: str = "en", tgt: str = "de") -> dict[str, int]:
    """Write ``{split}.{src}`` / ``{split}.{tgt}`` files; return the number of pairs per split.

    Sources are unique across all splits, so no valid/test sentence is seen in training.
    """
    stream = iter_pairs(random.Random(seed))
    seen: set[str] = set()
    splits: dict[str, list[tuple[str, str]]] = {}
    # Held-out splits first: then training simply skips anything already held out.
    for split, size in (("test", test), ("valid", valid), ("train", train)):
        pairs: list[tuple[str, str]] = []
        attempts = 0
        while len(pairs) < size:
            attempts += 1
            if attempts > 20 * size + 1000:  # the grammar is far larger; guard anyway
                raise RuntimeError(f"could not find {size} unique sentences for {split}")
            source, target = next(stream)
            if source not in seen:
                seen.add(source)
                pairs.append((source, target))
        splits[split] = pairs
    os.makedirs(out_dir, exist_ok=True)
    for split in ("train", "valid", "test"):
        for lang, column in ((src, 0), (tgt, 1)):
            path = os.path.join(out_dir, f"{split}.{lang}")
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                handle.writelines(pair[column] + "\n" for pair in splits[split])
    return {split: len(splits[split]) for split in ("train", "valid", "test")}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m vaswani_plugin.data.synthetic_corpus",
        description="Write a deterministic synthetic English->German-like parallel corpus.")
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--train", type=int, default=50000, help="training pairs (default 50000)")
    parser.add_argument("--valid", type=int, default=1000, help="validation pairs (default 1000)")
    parser.add_argument("--test", type=int, default=1000, help="test pairs (default 1000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--src", default="en", help="source file suffix (default en)")
    parser.add_argument("--tgt", default="de", help="target file suffix (default de)")
    args = parser.parse_args(argv)
    counts = write_corpus(args.out, args.train, args.valid, args.test, args.seed,
                          args.src, args.tgt)
    print(f"wrote corpus to {os.path.abspath(args.out)}")
    for split, count in counts.items():
        print(f"  {split}={count} pairs: {split}.{args.src} {split}.{args.tgt}")


if __name__ == "__main__":
    main()
