"""Applying the tracker's metadata log (docs/metadata-log.md, "The apply
loop"): the operations an infofile's writes become (:mod:`.ops`), the one
place they are applied (:mod:`.applier`) and the log a tracker proposes them
to (:mod:`.oplog`). Tracker-side only."""
