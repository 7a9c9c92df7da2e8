"""CSV helpers shared by the experiment scripts (``scripts/exp_*.py``)."""

import csv


def write_csv(path, rows):
    """Write dict rows (columns: the union of keys, in first-seen order; floats to 6 places)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()})


def read_csv(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))
