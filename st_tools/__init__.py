"""Programs built on StoreTorrent, outside its core packages: the demo on
real data (``storetorrent demo``) and the data-loss analysis
(``python -m st_tools.dataloss``)."""
