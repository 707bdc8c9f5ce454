"""The GPU suite: the explorer's CUDA path on real hardware, skipped (and said so) where torch sees no GPU."""

from collections.abc import Callable

import pytest
import torch

RecordProperty = Callable[[str, object], None]  # pytest's record_property: a figure kept in the JUnit report

# Every module here: `pytestmark = requires_cuda`, so a machine without a GPU collects the suite and skips it visibly.
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU SUITE SKIPPED: no CUDA device")
