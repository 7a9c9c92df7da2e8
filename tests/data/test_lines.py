"""Line ends of the text readers (``data/lines.py``): a bare carriage return (old Mac line
ends) is refused naming the file and line, in one process and in a shard; CRLF is read."""

import pytest

from torchrankboost.data import load_svmlight, load_svmlight_shard


def test_bare_cr_line_ends_are_refused_crlf_read(tmp_path):
    rows = ["2 qid:1 1:0.5 2:0.1 #docid = a", "0 qid:1 1:0.2 2:0.3 #docid = b",
            "1 qid:2 1:0.1 2:0.9 #docid = c"]
    cr = tmp_path / "cr.txt"
    cr.write_bytes(("\r".join(rows) + "\r").encode())
    with pytest.raises(ValueError, match=r"cr.txt:1: a bare carriage return .* tr '\\r'"):
        load_svmlight(cr)
    with pytest.raises(ValueError, match="bare carriage return"):
        load_svmlight_shard(cr, rank=0, world_size=2, n_features=2, zero_based=False)
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(("\n".join(rows[:2]) + "\n" + rows[2] + "\r0 qid:2 1:1\n").encode())
    with pytest.raises(ValueError, match="mixed.txt:3: a bare carriage return"):
        load_svmlight(mixed)
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(("\r\n".join(rows) + "\r\n").encode())
    d = load_svmlight(crlf)
    assert d.groups.sizes.tolist() == [2, 1] and d.labels.tolist() == [2, 0, 1]
