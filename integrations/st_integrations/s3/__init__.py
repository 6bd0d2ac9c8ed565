"""An S3-compatible endpoint over StoreTorrent files and records
(``storetorrent s3``, docs/s3.md): app and routing (:mod:`.app`), SigV4
(:mod:`.auth`), ``aws-chunked`` bodies and checksums (:mod:`.chunked`),
the operations (:mod:`.ops`; listings :mod:`.keylist` and
:mod:`.listing`, multipart uploads :mod:`.multipart`, ranges and
conditions :mod:`.objhttp`), XML (:mod:`.xml`), errors (:mod:`.errors`)
and the server (:mod:`.server`). Buckets and keys map onto files and
records through :mod:`st_integrations.keymap`."""
