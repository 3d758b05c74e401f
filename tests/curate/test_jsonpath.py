from __future__ import annotations

import pickle

import pytest

from feedline.curate.errors import CurateError
from feedline.curate.jsonpath import JsonPath

ROW = {
    "id": "x",
    "text": "hello",
    "metadata": {"length": 3, "lang": "en", "tags": ["a", "b"]},
    "attributes": {
        "exp__ws__document": [[0, 5, 49.0]],
        "bff_duplicate_paragraph_spans": [[0, 3, 1], [4, 5, 1]],
        "empty": [],
        "x.y": [[0, 1, 0.5]],
    },
}


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ("$.attributes[?(@.exp__ws__document[0][2] < 50)]", True),
        ("$.attributes[?(@.exp__ws__document[0][2] < 49)]", False),
        ("$.attributes[?(@.exp__ws__document[0][2] == 49)]", True),  # float 49.0 == int 49
        ("$.attributes[?(@.bff_duplicate_paragraph_spans[0][2] >= 1.0)]", True),  # int 1 >= 1.0
        ("$.attributes[?(@.bff_duplicate_paragraph_spans[0][2] > 1.0)]", False),
        ("$@.attributes[?(@.bff_duplicate_paragraph_spans && @.bff_duplicate_paragraph_spans[0] "
         "&& @.bff_duplicate_paragraph_spans[0][2] >= 1.0)]", True),
        ("$.attributes[?(@.empty && @.empty[0] && @.empty[0][2] >= 1.0)]", False),
        ("$.attributes[?(@.missing[0][2] < 10)]", False),
        ("$.attributes[?(@.missing[0][2] != 10)]", False),
        ("$.attributes[?(!(@.missing))]", True),
        ("$.metadata[?(@.length < 10 && @.lang == 'en')]", True),
        ('$.metadata[?(@.lang == "fr" || @.length >= 3)]', True),
        ("$.metadata[?(@.lang > 5)]", False),  # string vs number: no order
        ("$.metadata.tags[?(@ == 'b')]", True),
        ("$.metadata.tags[*]", True),
        ("$.attributes['x.y'][0][2]", True),
        ("$.attributes[?(@['x.y'][0][2] == 0.5)]", True),
        ("$.attributes.bff_duplicate_paragraph_spans[-1][0]", True),
        ("$.attributes.bff_duplicate_paragraph_spans[5]", False),
        ("$.attributes.bff_duplicate_paragraph_spans[1:][1]", True),
        ("$.attributes[?(@.exp__ws__document[0][2] < 1e2)]", True),
        ("$.attributes[?(@.exp__ws__document[0][2] > -1)]", True),
        ("$.nothing", False),
    ],
)
def test_expressions(expression, matches):
    assert JsonPath(expression).matches(ROW) is matches


def test_select_values():
    assert JsonPath("$.attributes.bff_duplicate_paragraph_spans[*][2]").select(ROW) == [1, 1]
    assert JsonPath("$.metadata[?(@.length == 3)]").select(ROW) == [ROW["metadata"]]


def test_booleans_are_not_numbers():
    assert not JsonPath("$[?(@.flag == 1)]").matches({"flag": True})
    assert JsonPath("$[?(@.flag == true)]").matches({"flag": True})
    assert JsonPath("$[?(@.v == null)]").matches({"v": None})


@pytest.mark.parametrize("bad", ["attributes.x", "$.a[?(@.x < )]", "$.a[?(@.x < 1]", "$..deep", "$.a[", "$.a b"])
def test_parse_errors_name_the_expression(bad):
    with pytest.raises(CurateError, match="JSONPath"):
        JsonPath(bad)


def test_compiled_expressions_pickle():
    again = pickle.loads(pickle.dumps(JsonPath("$.attributes[?(@.exp__ws__document[0][2] < 50)]")))
    assert again.matches(ROW)
