"""The AeroGround answer parser and scorer (airplay.aeroground.parsing / scoring): every
form of a valid answer is read, every malformed one scores incorrect."""

import pytest

from airplay.aeroground.parsing import parse_choice, parse_mapping
from airplay.aeroground.scoring import chance, score

OPTIONS = {"A": "candidate A", "B": "candidate B", "C": "candidate C", "D": "candidate D"}
ORDERINGS = {"A": "C, A, B", "B": "A, B, C", "C": "B, C, A", "D": "A, C, B"}


@pytest.mark.parametrize("reply", [
    "B", "b", "B.", "B)", "(B)", "[B]", "**B**", "\\boxed{B}", "<answer>B</answer>", " B \n", "B. candidate B",
    "B) candidate B", "B: candidate B", "Answer: B", "answer: (B)", "The answer is B.", "The answer is (B)",
    "Option B", "option: B", "The correct option is B", "Final answer: **B**", "candidate B",
    "The answer is B because it is the closest.",
])
def test_valid_choice_forms(reply):
    assert parse_choice(reply, OPTIONS) == "B"


@pytest.mark.parametrize("reply", [
    "", "   ", "A or B", "A, B", "A and B", "B, not A", "Answer: A. Option B.", "E", "(F)", "Answer: E",
    "I cannot determine this from the images.", "None of the above.", "A red car is nearest to the robot.",
    "The target is the tall building on the left.", "\u0412", "Answer: \u0412", "\uff22", "(\uff22)",
    "\U0001d401", "B\u0301",
])
def test_malformed_choices_give_no_answer(reply):
    assert parse_choice(reply, OPTIONS) is None


def test_option_text_answers_and_orderings():
    assert parse_choice("A, B, C", ORDERINGS) == "B"
    assert parse_choice("a, b, c.", ORDERINGS) == "B"
    assert parse_choice("B", ORDERINGS) == "B"
    assert parse_choice("A, B", ORDERINGS) is None  # not an option and several letters


@pytest.mark.parametrize("reply", [
    "1-B, 2-A", "1: B; 2: A", "1 -> B, 2 -> A", "1\u2192B, 2\u2192A", "1 = B and 2 = A", "1 to B, 2 to A",
    '{"1": "B", "2": "A"}', "Answer: 1-B, 2-A", "**1-B, 2-A**", "2-A, 1-B", "1-(B), 2-(A)",
])
def test_valid_mappings(reply):
    assert parse_mapping(reply, ["1", "2"], ["A", "B", "C"]) == {"1": "B", "2": "A"}


@pytest.mark.parametrize("reply", [
    "", "1-B", "1-B, 2-B", "1-B, 2-D", "1-B, 2-A, 3-C", "1-B, 1-A", "1-B, 2-A because they match",
    '{"1": "B"}', '{"1": "B", "2": 1}', "B, A", "1-\u0412, 2-A", "I am not sure.",
])
def test_malformed_mappings_give_no_answer(reply):
    assert parse_mapping(reply, ["1", "2"], ["A", "B", "C"]) is None


def test_scoring_rules_and_chance():
    choice = {"answer_type": "choice", "options": OPTIONS, "answer": "B"}
    mapping = {"answer_type": "mapping", "targets": ["1", "2"], "labels": ["A", "B", "C"],
               "answer": {"1": "B", "2": "A"}}
    assert score(choice, "B")["correct"] == 1
    assert score(choice, "C")["correct"] == 0
    assert score(choice, "B or C")["correct"] == 0
    assert score(mapping, "1-B, 2-A")["correct"] == 1
    assert score(mapping, "1-B, 2-C")["correct"] == 0
    assert score(mapping, "1-B")["correct"] == 0
    assert chance(choice) == 0.25
    assert chance(mapping) == pytest.approx(1 / 6)
