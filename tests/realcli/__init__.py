"""The real agent CLIs under test: their pinned install (``install``) and the mock model server they talk to
(``mockmodel``), for ``tests/hosts/test_realcli.py``."""
