"""Recordings in the app: open a bundled one from a link (`/?recording=NAME`, on any page) or the sidebar, or an
uploaded `.pdx`; the opened recording becomes the session's current run (the previous run moves to the history, so
Compare sets the two side by side), drawn under a banner that says it is recorded, where and when. No model is loaded
to show one: every page reads its trace and maps as it reads a live run's."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from explorer.core.errors import BadInput, ExplorerError
from explorer.recording.checks import read_recording
from explorer.recording.pdx import SUFFIX, Recording, RecordingMeta, bundled, recording_bytes
from explorer.ui.admission import count_run
from explorer.ui.shared import read_once
from explorer.ui.state import (
    RECORDING_LINKED,
    RECORDING_LINKED_PAIR,
    RECORDING_UPLOADED,
    RunResult,
    current_run,
    make_current,
)
from explorer.ui.widgets import show_error

UPLOAD_KEY = "recording-upload"  # the uploader's own key
NO_MAPS = "This recording holds no attention maps."
QUERY = "recording"
COMPARE_QUERY = "compare"  # ?recording=A&compare=B: B opens first, then A, so Compare sets the two side by side


def read_checked(path: Path) -> Recording | str:
    """A bundled file read and checked; a refusal is its line, kept like a recording, so a damaged file is not read
    again on every rerun (the sidebar names every bundled recording's title)."""
    try:
        return read_recording(path.read_bytes())
    except ExplorerError as exc:
        return str(exc)  # its line, not the exception: raising one object again would grow its traceback each time


def bundled_recording(path: Path) -> Recording:
    """A bundled file, read and checked once per server (and again if it changes on disk)."""
    stat = path.stat()
    key = ("recording", path, stat.st_size, stat.st_mtime_ns)
    opened = read_once().get(key, lambda: read_checked(path))
    if isinstance(opened, str):
        raise BadInput(opened)
    return opened  # type: ignore[return-value]


def as_result(recording: Recording) -> RunResult:
    note = recording.meta.attention_note or ("" if recording.attention else NO_MAPS)
    return RunResult(
        recording.trace, recording.attention, note, recorded_label(recording.meta.name), recorded=recording.meta
    )


def open_bundled(name: str) -> bool:
    """Make a bundled recording the current run; an unknown name or a damaged file is one line."""
    found = bundled()  # one listing of the folder for the check, the message and the read
    if name not in found:
        known = ", ".join(found) or "none"
        show_error(f"No bundled recording is called '{name[:60]}': the bundled ones are {known}.")
        return False
    try:
        make_current(as_result(bundled_recording(found[name])))
    except ExplorerError as exc:
        show_error(f"The recording '{name}' cannot be opened: {exc}")
        return False
    return True


def open_from_link() -> None:
    """`?recording=NAME` opens that recording once per session: a later Run is not replaced on the next click. With
    `&compare=OTHER`, OTHER opens first and NAME after it: NAME is the current run, OTHER the one before it, the pair
    Compare two runs shows."""
    name = st.query_params.get(QUERY)
    other = st.query_params.get(COMPARE_QUERY)
    if name and other and other != name and RECORDING_LINKED_PAIR.get() != (name, other):
        RECORDING_LINKED_PAIR.set((name, other))
        RECORDING_LINKED.set(name)
        if open_bundled(other):
            open_bundled(name)
        return
    if not name or RECORDING_LINKED.get() == name:
        return
    RECORDING_LINKED.set(name)
    open_bundled(name)


def compared_indices(labels: list[str]) -> tuple[int, int]:
    """Which of the session's runs (`labels`, oldest first) Compare shows first: the two a `?recording=A&compare=B`
    link opened (A, then B) while both are still there, else the last two."""
    pair = RECORDING_LINKED_PAIR.get()
    wanted = None if pair is None else [recorded_label(pair[0]), recorded_label(pair[1])]
    if wanted is not None and set(wanted) <= set(labels):
        return labels.index(wanted[0]), labels.index(wanted[1])
    return len(labels) - 2, len(labels) - 1


def recorded_label(name: str) -> str:
    return f"recorded: {name}"


def recordings_sidebar() -> None:
    """The bundled recordings to open, and an upload box for a `.pdx` (checked like any upload: one line if bad)."""
    found = bundled()
    run = current_run()
    with st.sidebar.expander("Open a recording", expanded=run is None):
        st.caption("A finished run saved earlier: its figures were measured then, on the device it names.")
        if found:
            name = st.selectbox(
                "Bundled recordings", list(found), format_func=lambda n: title_of(n, found[n]), key="recording-choice"
            )
            if st.button("Open this recording", width="stretch"):
                open_bundled(name)
        # Any type: a type filter makes Streamlit refuse a wrong file with its own message; this says one line.
        uploaded = st.file_uploader(f"…or upload a {SUFFIX} file", key=UPLOAD_KEY)
        if uploaded is not None and RECORDING_UPLOADED.get() != uploaded.file_id:
            RECORDING_UPLOADED.set(uploaded.file_id)
            open_upload(uploaded.name, uploaded.getvalue())


def title_of(name: str, path: Path) -> str:
    try:
        return f"{name}: {bundled_recording(path).meta.title}"
    except (ExplorerError, OSError):
        return f"{name} (cannot be read)"


def open_upload(file_name: str, raw: bytes) -> None:
    if not file_name.lower().endswith(SUFFIX):
        show_error(f"'{file_name[:60]}' is not a recording: open a {SUFFIX} file (`explorer run ... --record`).")
        return
    try:
        count_run()  # reading a file costs the server like a run: the same rate limit per session
        make_current(as_result(read_recording(raw)))
    except ExplorerError as exc:
        show_error(str(exc))


def needs_live_run(result: RunResult, what: str) -> bool:
    """True (with a line saying so) when `what` would run the model on a recorded run's tokens."""
    if result.recorded is None:
        return False
    st.info(f"{what} runs the model again: press **Run** in the sidebar for a live run first.")
    return True


def as_recording_bytes(result: RunResult) -> bytes:
    """The current run as a `.pdx` (a recorded one as it was opened; a live one with its maps, if captured)."""
    meta = result.recorded or RecordingMeta.of(result.trace, "explorer-run", "recorded in the app (Download recording)")
    return recording_bytes(meta, result.trace, result.attention)
