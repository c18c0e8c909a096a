"""docs/protocol.md says what the code does: every frame's row is generated from its
declaration and must be in the page; every status is in the status table with its class."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hedwig.protocol import Error
from hedwig.protocol.codec import FRAME_TYPES, describe_body, describe_flags
from hedwig.protocol.schema import FrameBase
from hedwig.protocol.status import Status, error_from_frame

DOC = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text()


def wire_name(cls: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).upper()


@pytest.mark.parametrize("cls", FRAME_TYPES, ids=lambda c: c.__name__)
def test_every_frame_is_documented_as_declared(cls: type[FrameBase]) -> None:
    row = (
        f"| `0x{cls.TYPE:02X}` | {wire_name(cls)} | `{describe_body(cls)}` | "
        f"{describe_flags(cls)} |"
    )
    assert row in DOC, f"docs/protocol.md lacks or misstates:\n{row}"


def test_no_undeclared_frame_is_documented() -> None:
    documented = set(re.findall(r"^\| `0x([0-9A-F]{2})` \|", DOC, re.MULTILINE))
    assert documented == {f"{cls.TYPE:02X}" for cls in FRAME_TYPES}


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.OK], ids=str)
def test_every_status_is_documented_with_its_class(status: Status) -> None:
    cls = type(error_from_frame(Error(request_id=1, status=status, message="m")))
    assert re.search(
        rf"^\| {int(status)} \| {status.name} \|.*\| `{cls.__name__}` \|", DOC, re.MULTILINE
    ), f"docs/protocol.md: status {int(status)} {status.name} ({cls.__name__}) is missing"
