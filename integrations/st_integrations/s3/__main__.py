"""``python -m st_integrations.s3``: the ``storetorrent s3`` command."""

from st_integrations.commands import s3

if __name__ == "__main__":
    s3(prog_name="storetorrent s3")
