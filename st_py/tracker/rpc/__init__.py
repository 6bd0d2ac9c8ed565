"""The parts of the tracker's gRPC servicer, one role each.

:class:`~st_py.tracker.service.TrackerService` (the master) and
:class:`~st_py.tracker.file_tracker.FileTrackerService` (a per-file tracker,
paper 3.5) are composed of these parts; each part reads the state the
composed servicer's ``__init__`` sets up (declared once in
:mod:`.parts`).
"""
