"""Tests of ``torchrankboost/boosting/papers/`` (a package: its ``test_qbrank.py`` and
``tests/losses/test_qbrank.py`` share a basename)."""
