"""The table (``README.md``) of ``scripts/gpu_check.py``'s results: the environment, the
seconds per tree beside LightGBM, the identity of the GPU and CPU trees, the Triton kernels,
the losses and the CUDA tests; a section not run (yet) says so."""

from __future__ import annotations

__all__ = ["markdown"]


def _skipped(sec: dict | None) -> str | None:
    if sec is None:
        return "not run"
    return sec.get("skipped") or sec.get("note")


def _trees(t: dict | None) -> list:
    md = ["## Tree growth", ""]
    why = _skipped(t)
    if why:
        return md + [f"Skipped: {why}.", ""]
    b = t["binning"]
    md += [f"{t['rows']} x {t['features']}, the median of up to {t['trees']} trees after a "
           f"warm-up (at most {t['cap_seconds']:.0f} s of fits per implementation). Binning: "
           f"the device's codes equal the CPU's: **{b['codes_identical']}**, edges: "
           f"**{b['edges_identical']}** (seconds: "
           + ", ".join(f"{k} {v:.1f}" for k, v in b["seconds"].items()) + ").", ""]
    for row in t["by_leaves"]:
        md += [f"### {row['leaves']} leaves", ""]
        if "skipped" in row:
            md += [f"Skipped: {row['skipped']}.", ""]
            continue
        secs = row["seconds_per_tree"]
        lgb = next((v for k, v in secs.items() if k.startswith("lightgbm")), None)
        md += ["| implementation | ms per tree | LightGBM / this |", "|---|---:|---:|"]
        for k, v in secs.items():
            ratio = f"{lgb / v:.2f}" if lgb else "-"
            md.append(f"| {k} | {v * 1e3:.1f} | {ratio} |")
        md += [""] + [f"- {k}: {v}" for k, v in row["notes"].items()]
        md += ["", "| same gradients, same prepared data | identical | tensors that differ |",
               "|---|---|---|"]
        for k, v in row["identity"].items():
            md.append(f"| {k} ({v['leaves']} leaves) | **{v['identical']}** | "
                      f"{', '.join(v['differs']) or '-'} |")
        md.append("")
    return md


def _kernels(k: dict | None) -> list:
    md = ["## Triton kernels", ""]
    why = _skipped(k)
    if why:
        return md + [f"Skipped: {why}.", ""]
    md += [f"{k['rows']} x {k['features']} codes, median ms.", "", "| kernel | ms |", "|---|---:|"]
    md += [f"| {name} | {v:.2f} |" for name, v in k["ms"].items()]
    md += ["", "Equal results: " + ", ".join(f"{n} **{v}**" for n, v in k["agree"].items()) + "."]
    md += [f"- {n}: {v}" for n, v in k["notes"].items()]
    return md + [""]


def _losses(lo: dict | None) -> list:
    md = ["## Losses, forward + backward", ""]
    why = _skipped(lo)
    if why:
        return md + [f"Skipped: {why}.", ""]
    md += [f"{lo['lists']} lists x {lo['docs']} documents, median of {lo['repeats']}.", "",
           "| loss | cuda ms | cpu ms | cpu / cuda |", "|---|---:|---:|---:|"]
    for name, row in lo["seconds"].items():
        cu = f"{row['cuda'] * 1e3:.2f}" if "cuda" in row else "-"
        cpu = f"{row['cpu'] * 1e3:.2f}" if "cpu" in row else row.get("note", "-")
        ratio = f"{row['cpu_over_cuda']:.1f}" if "cpu_over_cuda" in row else "-"
        md.append(f"| {name} | {cu} | {cpu} | {ratio} |")
    return md + [""]


def _neural(nn: dict | None) -> list:
    md = ["## Neural trainer (listwise Transformer, ListNet)", ""]
    why = _skipped(nn)
    if why:
        return md + [f"Skipped: {why}.", ""]
    md += [f"{nn['queries']} queries, {nn['documents']} documents, {nn['features']} features, "
           f"{nn['epochs']} epochs (median epoch after the first).", "",
           "| device, precision | s / epoch |", "|---|---:|"]
    md += [f"| {k} | {v:.3f} |" for k, v in nn["seconds_per_epoch"].items()]
    if "predict_max_diff_vs_cpu" in nn:
        md += ["", f"predict on the device vs the CPU: max |diff| "
                   f"{nn['predict_max_diff_vs_cpu']:.2e}."]
    return md + [""]


def _tests(ts: dict | None) -> list:
    md = ["## CUDA tests", ""]
    if ts is None or "command" not in ts:
        return md + [f"Skipped: {(ts or {}).get('skipped') or 'not run'}.", ""]
    md += [f"`{ts['command']}`: {ts['summary']} ({ts['passed']} passed, exit "
           f"{ts['returncode']}, {ts['seconds']:.0f} s; log: `{ts['log']}`)", ""]
    return md + [f"- {ln}" for ln in ts.get("failed", [])] + [""]


def markdown(r: dict) -> str:
    """The README table of a (possibly partial) result ``r``."""
    e = r["environment"]
    v = e["versions"]
    dry = " (dry run on the CPU, tiny sizes)" if e["dry_run"] else ""
    md = [f"# GPU check ({e['date']})", "",
          f"Device **{e['device']}**, torch {e['torch']}, CUDA {e['cuda']}, triton "
          f"{v['triton']}, LightGBM {v['lightgbm']}, {e['cpu_count']} CPUs ({e['threads']} "
          f"threads){dry}.", "",
          "Written by `python scripts/gpu_check.py`. Seconds per section: "
          + ", ".join(f"{k} {s:.0f}" for k, s in r.get("seconds", {}).items()) + ".", ""]
    md += _trees(r.get("trees")) + _kernels(r.get("kernels")) + _losses(r.get("losses"))
    md += _neural(r.get("neural")) + _tests(r.get("tests"))
    return "\n".join(md)
