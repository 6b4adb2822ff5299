"""Shape digests travel with every collective: their values are part of the wire.

The numbers below were computed with the code of 8e92c76 (zlib over Python's
repr of the shape, or of the list of shapes); ranks of one job must agree, so
a change of value is a change of protocol, never a refactoring.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytfcomm import _core
from pytfcomm._fusion import list_tag
from pytfcomm.communicator import shape_tag

SHAPE_TAGS = [
    ((), 1580606521),
    ((7,), 509958170),
    ((2, 3), 3853280804),
    ((0,), 455757471),
    ((1, 2, 3, 4), 1584751421),
    ((2**40, 3), 1973635853),
    (tuple(range(1, 21)), 2420498560),
]

LIST_TAGS = [
    ([], 223132457),
    ([(3,)], 2758764347),
    ([(2, 3), (), (4,)], 1927222616),
]


@pytest.mark.parametrize(("shape", "tag"), SHAPE_TAGS)
def test_shape_tag_values_are_pinned(shape: tuple[int, ...], tag: int) -> None:
    assert shape_tag(shape) == tag


@pytest.mark.parametrize(("shape", "tag"), [(s, t) for s, t in SHAPE_TAGS if len(s) <= 16])
def test_core_shape_digest_values_are_pinned(shape: tuple[int, ...], tag: int) -> None:
    assert _core.shape_digest(list(shape)) == tag


@pytest.mark.parametrize(("shapes", "tag"), LIST_TAGS)
def test_list_tag_values_are_pinned(shapes: list[tuple[int, ...]], tag: int) -> None:
    assert list_tag([np.zeros(s, np.float32) for s in shapes]) == tag
