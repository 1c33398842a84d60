"""Bilingual lexicon of the synthetic corpus: real English words, invented German-like words.

Only content words (nouns, adjectives, verb stems, time adverbs) are invented; the closed
classes (articles, pronouns, prepositions, conjunctions, verb particles) are real German, so
that the grammar in ``synthetic_corpus`` can model real German agreement and word order.

Every English word form belongs to exactly one entry of one word class. That is what makes
the translation a function of the source sentence: no English form is ambiguous.
"""
from __future__ import annotations

from typing import NamedTuple


class Noun(NamedTuple):
    en_sg: str
    en_pl: str
    de_sg: str
    de_pl: str  # nominative/accusative plural; the dative plural adds -n (see the grammar)
    gender: str  # "m", "f" or "n"
    animate: bool  # only animate nouns are subjects or indirect objects


class Adjective(NamedTuple):
    en: str
    de_stem: str  # the German form is always stem + ending; the ending carries the agreement


class Verb(NamedTuple):
    en_base: str
    en_3sg: str
    de_stem: str  # regular present tense: stem + -e/-st/-t/-en
    particle: str  # separable particle ("" if none): split off in main clauses
    frame: str  # "intr", "tr" (accusative object), "ditr" (dative + accusative), "clause" (+ dass)


class Pronoun(NamedTuple):
    en: str
    de: str
    person: int
    plural: bool


def _nouns(animate: bool, rows: str) -> list[Noun]:
    """Parse compact "en_sg en_pl de_sg de_pl gender" lines."""
    return [Noun(*line.split(), animate=animate) for line in rows.strip().splitlines()]


# Plural classes mimic German ones: -e, -er, -en/-n, -s, zero plural (-el/-er/-chen) and umlaut.
NOUNS: list[Noun] = _nouns(True, """
man men Brunk Brunke m
woman women Frinne Frinnen f
child children Kelm Kelmer n
dog dogs Hufter Hufter m
cat cats Mauze Mauzen f
bird birds Vock Vöcke m
horse horses Pralm Pralme n
teacher teachers Wiesler Wiesler m
farmer farmers Bauk Bauken m
king kings Knöng Knönge m
queen queens Knöngin Knönginnen f
girl girls Flinchen Flinchen n
boy boys Jurk Jurks m
doctor doctors Arzel Arzel m
friend friends Freck Frecke m
sister sisters Schwelte Schwelten f
student students Plome Plomen f
mouse mice Mürne Mürnen f
baby babies Bobbel Bobbel n
cook cooks Kusch Kusche m
""") + _nouns(False, """
book books Bloch Blöcher n
ball balls Pollm Pollme m
apple apples Aptel Äptel m
table tables Tilp Tilpe m
car cars Rumpel Rumpel n
house houses Hüsel Hüsel n
letter letters Zettner Zettner m
flower flowers Blome Blomen f
key keys Schlopp Schloppe m
chair chairs Stolp Stölpe m
cup cups Kummel Kummeln f
picture pictures Bilk Bilker n
window windows Fenzel Fenzel n
door doors Porte Porten f
box boxes Kistel Kisteln f
bag bags Tüsche Tüschen f
stone stones Stien Stiene m
bottle bottles Flaske Flasken f
gift gifts Schenk Schenke n
shoe shoes Schuck Schucke m
boat boats Kahr Kahre n
song songs Lirr Lirre n
pen pens Kritz Kritze m
garden gardens Gortel Gortel m
""")

ADJECTIVES: list[Adjective] = [
    Adjective(*pair.split(":"))
    for pair in (
        "big:grosk small:klimm old:alk young:jumm red:rott blue:blauk green:grüll new:nüb "
        "good:gutt happy:frohl tired:müdl strong:stork fast:schnall cold:kolt"
    ).split()
]

# Stems never end in -s/-z/-t/-d, so the regular endings apply without e-insertion.
VERBS: list[Verb] = [
    Verb(*row.split(":"))
    for row in """
sleep:sleeps:schlumm::intr laugh:laughs:lauch::intr wait:waits:hopf::intr
swim:swims:schwimp::intr dance:dances:danf::intr work:works:warb::intr
arrive:arrives:komp:an:intr leave:leaves:fahl:ab:intr return:returns:kehm:zurück:intr
see:sees:spech::tr find:finds:fing::tr buy:buys:köf::tr need:needs:bruch::tr
like:likes:möch::tr hear:hears:hurch::tr paint:paints:pling::tr carry:carries:schlapp::tr
wash:washes:wäsk::tr hold:holds:hebb::tr
invite:invites:lapp:ein:tr open:opens:rüpp:auf:tr close:closes:klemm:zu:tr call:calls:bimm:an:tr
give:gives:gebb::ditr show:shows:zeich::ditr send:sends:schipp::ditr sell:sells:märk::ditr
offer:offers:bump:an:ditr bring:brings:bräng:mit:ditr
say:says:sprek::clause think:thinks:dunk::clause know:knows:wüsch::clause hope:hopes:harf::clause
""".split()
]

# Subject pronouns only ("you" is always the singular "du", so the source decides).
PRONOUNS: list[Pronoun] = [
    Pronoun("i", "ich", 1, False),
    Pronoun("you", "du", 2, False),
    Pronoun("he", "er", 3, False),
    Pronoun("she", "sie", 3, False),
    Pronoun("it", "es", 3, False),
    Pronoun("we", "wir", 1, True),
    Pronoun("they", "sie", 3, True),
]

TIME_ADVERBS: dict[str, str] = {
    "today": "hoit", "tomorrow": "morgel", "now": "jetzel", "often": "oftens",
    "sometimes": "manchmol", "usually": "meistel", "later": "spoter", "soon": "baltig",
}

# Each preposition governs one fixed case (no two-way prepositions, which would need semantics).
PREPOSITIONS: dict[str, tuple[str, str]] = {
    "with": ("mit", "dat"), "from": ("von", "dat"), "near": ("bei", "dat"), "to": ("zu", "dat"),
    "for": ("für", "acc"), "without": ("ohne", "acc"), "through": ("durch", "acc"),
    "against": ("gegen", "acc"),
}

# Adverbial subordinators (clause can precede or follow the main clause) and the complementizer.
SUBORDINATORS: dict[str, str] = {"because": "weil", "when": "wenn", "although": "obwohl"}
COMPLEMENTIZER: tuple[str, str] = ("that", "dass")
