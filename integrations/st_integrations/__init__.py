"""Analysis engines over StoreTorrent: Ray Datasets and Dask DataFrames read
records where they lie through GET_LOCAL (paper 2, 3.7); DuckDB runs SQL over
infofiles on the client (paper 3.5).

Engines are imported only when used::

    from st_integrations.ray_reader import read_storetorrent      # -> ray.data.Dataset
    from st_integrations.dask_reader import read_storetorrent     # -> dask.dataframe.DataFrame
    from st_integrations.duckdb_sql import connect                # -> duckdb connection
"""
