"""Programs built on StoreTorrent, outside its core packages: the demo on
real data (``storetorrent demo``), the data-loss analysis
(``python -m st_tools.dataloss``) and the reliability model
(``python -m st_tools.reliability``); :mod:`st_tools.reporting` is what the
last two share."""
