"""Constituency parsing scores following EVALB (Sekine & Collins) with COLLINS.prm.

Written from EVALB's documented rules (README and parameter file):

* labelled brackets: a test bracket is correct when a gold bracket has the
  same span and the same label; brackets are matched as multisets, so two
  identical ``(NP (NP ...))`` spans count twice;
* DELETE_LABEL ``TOP -NONE- , : `` '' .``: brackets with these labels are not
  counted; pre-terminals with these tags are removed together with their word
  before spans are computed (each tree by its own tags, as EVALB does);
  brackets left without words are not counted;
* a bracket's label is cut at its first ``-`` or ``=`` (``NP-SBJ-1`` -> ``NP``,
  EVALB's ``modify_label``), before the DELETE_LABEL test; POS tags are
  compared as written;
* every other bracket counts, the root included: the unlabelled root of a raw
  ``.mrg`` tree ``( (S ...) )`` is a bracket labelled ``""`` over the whole
  sentence (COLLINS.prm deletes only ``TOP``), so a prediction without the
  wrapper misses it (read such files with ``normalise_root=False`` to see
  them as EVALB does; the reader's default removes the wrapper);
* EQ_LABEL ``ADVP PRT``: the two labels are the same label;
* DELETE_LABEL_FOR_LENGTH ``-NONE-``: sentence length (for the ``len<=40``
  block) counts every word except traces, punctuation included;
* crossing brackets: the test brackets whose span overlaps some gold span
  without either containing the other;
* tagging accuracy over the words that remain after deletion;
* a sentence whose test tree has no words left is *skipped*; one whose words
  differ from the gold words (length or word mismatch) is an *error*; both are
  left out of the scores, as in EVALB.

Never hiding failed sentences, the report also gives recall and F1 with the
error and skipped sentences scored as empty parses (all their gold brackets
missed). Scores are percentages (0-100), like EVALB prints them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Optional, Sequence, Tuple

from .trees import Tree


@dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter (.prm) file."""

    name: str
    delete_labels: FrozenSet[str]
    delete_labels_for_length: FrozenSet[str]
    equivalent_labels: Tuple[Tuple[str, str], ...]
    cutoff_len: int = 40
    labeled: bool = True
    max_error: int = 10

    def canonical(self, label: str) -> str:
        """The label as compared: equivalent labels map to the first of their pair."""
        for first, second in self.equivalent_labels:
            if label == second:
                return first
        return label


#: COLLINS.prm, the parameters used for published Penn Treebank results.
COLLINS = EvalbParams(
    name="collins",
    delete_labels=frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."}),
    delete_labels_for_length=frozenset({"-NONE-"}),
    equivalent_labels=(("ADVP", "PRT"),),
)
PARAMS = {"collins": COLLINS}

STATUS_OK, STATUS_ERROR, STATUS_SKIP = 0, 1, 2

Bracket = Tuple[str, int, int]  # label, first word, one past the last word


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def _f1(precision: float, recall: float) -> float:
    # EVALB prints nan when both are 0; 0.0 is the useful value.
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@dataclass(frozen=True)
class SentenceResult:
    """One sentence's counts: one line of EVALB's per-sentence table."""

    sent_id: int
    length: int
    status: int
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    all_gold_brackets: int = 0  # gold brackets even when the sentence failed
    message: str = ""

    @property
    def recall(self) -> float:
        return _percent(self.matched, self.gold_brackets)

    @property
    def precision(self) -> float:
        return _percent(self.matched, self.test_brackets)

    @property
    def tag_accuracy(self) -> float:
        return _percent(self.correct_tags, self.words)


@dataclass(frozen=True)
class EvalbSummary:
    """Totals over a set of sentences: one block of EVALB's summary."""

    sentences: int
    error_sentences: int
    skip_sentences: int
    matched: int
    gold_brackets: int
    test_brackets: int
    complete_matches: int
    crossing: int
    no_crossing: int
    two_or_less_crossing: int
    words: int
    correct_tags: int
    failed_gold_brackets: int  # gold brackets of the error and skipped sentences

    @classmethod
    def of(cls, results: Sequence[SentenceResult]) -> "EvalbSummary":
        valid = [r for r in results if r.status == STATUS_OK]
        return cls(
            sentences=len(results),
            error_sentences=sum(r.status == STATUS_ERROR for r in results),
            skip_sentences=sum(r.status == STATUS_SKIP for r in results),
            matched=sum(r.matched for r in valid),
            gold_brackets=sum(r.gold_brackets for r in valid),
            test_brackets=sum(r.test_brackets for r in valid),
            complete_matches=sum(r.matched == r.gold_brackets == r.test_brackets for r in valid),
            crossing=sum(r.crossing for r in valid),
            no_crossing=sum(r.crossing == 0 for r in valid),
            two_or_less_crossing=sum(r.crossing <= 2 for r in valid),
            words=sum(r.words for r in valid),
            correct_tags=sum(r.correct_tags for r in valid),
            failed_gold_brackets=sum(r.all_gold_brackets for r in results if r.status != STATUS_OK),
        )

    @property
    def valid_sentences(self) -> int:
        return self.sentences - self.error_sentences - self.skip_sentences

    @property
    def recall(self) -> float:
        return _percent(self.matched, self.gold_brackets)

    @property
    def precision(self) -> float:
        return _percent(self.matched, self.test_brackets)

    @property
    def f1(self) -> float:
        return _f1(self.precision, self.recall)

    @property
    def complete_match(self) -> float:
        return _percent(self.complete_matches, self.valid_sentences)

    @property
    def average_crossing(self) -> float:
        return self.crossing / self.valid_sentences if self.valid_sentences else 0.0

    @property
    def no_crossing_rate(self) -> float:
        return _percent(self.no_crossing, self.valid_sentences)

    @property
    def two_or_less_crossing_rate(self) -> float:
        return _percent(self.two_or_less_crossing, self.valid_sentences)

    @property
    def tagging_accuracy(self) -> float:
        return _percent(self.correct_tags, self.words)

    @property
    def recall_with_failures(self) -> float:
        """Recall when error and skipped sentences count as empty parses."""
        return _percent(self.matched, self.gold_brackets + self.failed_gold_brackets)

    @property
    def f1_with_failures(self) -> float:
        """F1 when error and skipped sentences count as empty parses (precision is unchanged)."""
        return _f1(self.precision, self.recall_with_failures)


@dataclass(frozen=True)
class EvalbReport:
    """Per-sentence results, the all-lengths summary and the ``len<=cutoff`` summary."""

    sentences: Tuple[SentenceResult, ...]
    all: EvalbSummary
    short: EvalbSummary
    params: EvalbParams

    @property
    def f1(self) -> float:
        """EVALB's bracketing F-measure over all sentences."""
        return self.all.f1


@dataclass
class _Yield:
    """What EVALB sees of one tree: words, tags, length and countable brackets."""

    words: List[str]
    tags: List[str]
    length: int
    brackets: List[Bracket]


def evalb_label(label: str) -> str:
    """A bracket label as EVALB compares it: cut at the first ``-`` or ``=`` (``NP-SBJ=2`` -> ``NP``)."""
    return re.split(r"[-=]", label, maxsplit=1)[0]


def _evalb_view(tree: Tree, params: EvalbParams) -> _Yield:
    words: List[str] = []
    tags: List[str] = []
    length = 0
    spans: List[Tuple[str, int, int]] = []
    stack: List[object] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):  # closing marker: (label, first word)
            spans.append((item[0], item[1], len(words)))
        elif item.is_preterminal:
            if item.label not in params.delete_labels_for_length:
                length += 1
            if item.label not in params.delete_labels:  # a deleted tag takes its word along
                words.append(item.children[0])
                tags.append(item.label)
        else:
            stack.append((item.label, len(words)))
            stack.extend(reversed(item.children))
    brackets = []
    for label, start, end in spans:
        label = evalb_label(label)
        if start < end and label not in params.delete_labels:
            brackets.append((params.canonical(label) if params.labeled else "", start, end))
    return _Yield(words, tags, length, brackets)


def _crossing(gold: List[Bracket], test: List[Bracket]) -> int:
    gold_spans = {(start, end) for _, start, end in gold}
    count = 0
    for _, start, end in test:
        if any(g_start < start < g_end < end or start < g_start < end < g_end for g_start, g_end in gold_spans):
            count += 1
    return count


def score_sentence(sent_id: int, gold: Tree, test: Optional[Tree], params: EvalbParams = COLLINS) -> SentenceResult:
    """EVALB's counts for one sentence; ``test=None`` means no parse (skipped)."""
    g = _evalb_view(gold, params)
    failed = dict(sent_id=sent_id, length=g.length, all_gold_brackets=len(g.brackets))
    if test is None:
        return SentenceResult(status=STATUS_SKIP, message="no test parse", **failed)
    t = _evalb_view(test, params)
    if not t.words:
        return SentenceResult(status=STATUS_SKIP, message="the test parse has no words left after deletion",
                              **failed)
    if len(g.words) != len(t.words):
        return SentenceResult(status=STATUS_ERROR, message=f"Length unmatch ({len(g.words)}|{len(t.words)})",
                              **failed)
    for gold_word, test_word in zip(g.words, t.words):
        if gold_word != test_word:
            return SentenceResult(status=STATUS_ERROR, message=f"Words unmatch ({gold_word}|{test_word})",
                                  **failed)
    matched = sum((Counter(g.brackets) & Counter(t.brackets)).values())
    correct = sum(params.canonical(a) == params.canonical(b) for a, b in zip(g.tags, t.tags))
    return SentenceResult(sent_id=sent_id, length=g.length, status=STATUS_OK, matched=matched,
                          gold_brackets=len(g.brackets), test_brackets=len(t.brackets),
                          crossing=_crossing(g.brackets, t.brackets), words=len(g.words),
                          correct_tags=correct, all_gold_brackets=len(g.brackets))


def evalb_score(gold_trees: Sequence[Tree], pred_trees: Sequence[Optional[Tree]],
                params: EvalbParams = COLLINS) -> EvalbReport:
    """Score ``pred_trees`` against ``gold_trees`` (same order; ``None`` = no parse)."""
    if len(gold_trees) != len(pred_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(pred_trees)} predicted trees")
    results = tuple(score_sentence(number, gold, pred, params)
                    for number, (gold, pred) in enumerate(zip(gold_trees, pred_trees), start=1))
    short = [r for r in results if r.length <= params.cutoff_len]
    return EvalbReport(results, EvalbSummary.of(results), EvalbSummary.of(short), params)


def evalb_f1(gold_trees: Sequence[Tree], pred_trees: Sequence[Optional[Tree]], params: EvalbParams = COLLINS,
             count_failures_as_empty: bool = False) -> float:
    """EVALB's bracketing F1 (percent) over all sentences.

    With ``count_failures_as_empty=True`` error and skipped sentences count as
    empty parses instead of being left out.
    """
    summary = evalb_score(gold_trees, pred_trees, params).all
    return summary.f1_with_failures if count_failures_as_empty else summary.f1


# --------------------------------------------------------------------------- report

_HEADER = ("  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
           " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n")
_RULE = "=" * 76


def format_sentence(r: SentenceResult) -> str:
    """One per-sentence line in EVALB's column layout."""
    return (f"{r.sent_id:4d}  {r.length:3d}    {r.status:d}  {r.recall:6.2f} {r.precision:6.2f}   "
            f"{r.matched:3d}    {r.gold_brackets:3d}  {r.test_brackets:3d}    {r.crossing:3d}"
            f"   {r.words:4d}  {r.correct_tags:4d}   {r.tag_accuracy:6.2f}")


def _summary_block(title: str, s: EvalbSummary) -> List[str]:
    rows: List[Tuple[str, Callable[[], str]]] = [
        ("Number of sentence", lambda: f"{s.sentences:6d}"),
        ("Number of Error sentence", lambda: f"{s.error_sentences:6d}"),
        ("Number of Skip  sentence", lambda: f"{s.skip_sentences:6d}"),
        ("Number of Valid sentence", lambda: f"{s.valid_sentences:6d}"),
        ("Bracketing Recall", lambda: f"{s.recall:6.2f}"),
        ("Bracketing Precision", lambda: f"{s.precision:6.2f}"),
        ("Bracketing FMeasure", lambda: f"{s.f1:6.2f}"),
        ("Complete match", lambda: f"{s.complete_match:6.2f}"),
        ("Average crossing", lambda: f"{s.average_crossing:6.2f}"),
        ("No crossing", lambda: f"{s.no_crossing_rate:6.2f}"),
        ("2 or less crossing", lambda: f"{s.two_or_less_crossing_rate:6.2f}"),
        ("Tagging accuracy", lambda: f"{s.tagging_accuracy:6.2f}"),
    ]
    return [title] + [f"{name:<26}= {value()}" for name, value in rows]


def _failure_block(title: str, s: EvalbSummary) -> List[str]:
    return [
        title,
        f"{'Number of sentence':<26}= {s.sentences:6d}",
        f"{'Number of failed sentence':<26}= {s.error_sentences + s.skip_sentences:6d}",
        f"{'Bracketing Recall':<26}= {s.recall_with_failures:6.2f}",
        f"{'Bracketing Precision':<26}= {s.precision:6.2f}",
        f"{'Bracketing FMeasure':<26}= {s.f1_with_failures:6.2f}",
    ]


def format_report(report: EvalbReport, per_sentence: bool = True) -> str:
    """The report as EVALB prints it, followed by the failure-aware scores and the failed sentences."""
    lines = [_HEADER + _RULE]
    if per_sentence:
        lines.extend(format_sentence(r) for r in report.sentences)
    lines.append(_RULE)
    total = report.all
    totals = ""
    if total.gold_brackets > 0 and total.test_brackets > 0:  # EVALB omits these columns otherwise
        totals = (f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
                  f"{total.gold_brackets:5d} {total.test_brackets:5d}  {total.crossing:5d}")
    lines.append(totals + f"  {total.words:5d} {total.correct_tags:5d}   {total.tagging_accuracy:6.2f}")
    lines.append("=== Summary ===")
    lines.append("")
    lines += _summary_block("-- All --", total)
    lines.append("")
    lines += _summary_block(f"-- len<={report.params.cutoff_len} --", report.short)
    lines.append("")
    lines.append("=== Error and skipped sentences scored as empty parses ===")
    lines.append("")
    lines += _failure_block("-- All --", total)
    lines.append("")
    lines += _failure_block(f"-- len<={report.params.cutoff_len} --", report.short)
    lines.append("")
    failed = [r for r in report.sentences if r.status != STATUS_OK]
    lines.append(f"=== Error and skipped sentences ({len(failed)}) ===")
    for r in failed:
        kind = "error" if r.status == STATUS_ERROR else "skip"
        lines.append(f"{r.sent_id:4d} : {kind:5} : {r.message}")
    errors = total.error_sentences
    if errors > report.params.max_error + 1:
        # EVALB stops once more than MAX_ERROR errors have been counted; we score everything.
        lines.append(f"note: {errors} error sentences; the EVALB program (MAX_ERROR {report.params.max_error}) "
                     "would have stopped before the end of the files")
    return "\n".join(lines) + "\n"
