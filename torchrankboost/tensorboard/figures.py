"""The ROC and precision-recall curves of a run's scores, as points and as a figure.

:func:`roc_curve_points` and :func:`pr_curve_points` pool every document (tie blocks as one
step); :func:`render_curves_figure` draws both curves with axes, ticks, labels, the AUC and
the average precision with Pillow (which ``SummaryWriter.add_image`` needs anyway;
matplotlib is not used); :func:`render_roc_image` is the older bare ROC picture.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from ..contract import ArrayLike

#: the figure's width in pixels: TensorBoard's image cards are about this wide
FIGURE_WIDTH = 420

__all__ = ["FIGURE_WIDTH", "to_numpy", "roc_curve_points", "pr_curve_points", "render_curves_figure",
           "render_roc_image"]


def to_numpy(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def roc_curve_points(labels: ArrayLike, scores: ArrayLike, *, relevance_threshold: float = 0.0
                     ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """ROC points ``(fpr, tpr)`` (numpy, float64) of ``scores`` for ``labels > threshold``.

    Tied scores form one step (a diagonal segment), as in scikit-learn's ``roc_curve``.
    Returns ``None`` when one of the two classes is empty.
    """
    y = to_numpy(labels).ravel() > relevance_threshold
    s = to_numpy(scores).ravel()
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        return None
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]  # last index of each tie block
    tp = np.cumsum(y)[last]
    fp = np.cumsum(~y)[last]
    tpr = np.r_[0.0, tp / npos]
    fpr = np.r_[0.0, fp / nneg]
    return fpr, tpr


def pr_curve_points(y: np.ndarray, s: np.ndarray) -> Optional[Tuple[np.ndarray, np.ndarray,
                                                                  float]]:
    """Precision-recall points (tie blocks as one step) and the average precision."""
    y = np.asarray(y, bool).ravel()
    s = np.asarray(s, np.float64).ravel()
    npos = int(y.sum())
    if npos == 0 or npos == y.size:
        return None
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tp = np.cumsum(y)[last].astype(np.float64)
    k = (last + 1).astype(np.float64)
    recall = np.r_[0.0, tp / npos]
    precision = np.r_[1.0, tp / k]
    ap = float(np.sum(np.diff(recall) * precision[1:]))
    return recall, precision, ap


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


def _panel(draw, box, xs, ys, *, title: str, xlabel: str, ylabel: str, diagonal: bool,
           fonts):
    """One chart: frame, ticks at 0, 0.25, ..., 1 with labels, grid, axis labels, title."""
    x0, y0, x1, y1 = box
    small, big = fonts
    grid, axis, curve = (225, 225, 225), (60, 60, 60), (31, 90, 200)

    def px(x, y):
        return x0 + x * (x1 - x0), y1 - y * (y1 - y0)

    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        gx, _ = px(t, 0)
        _, gy = px(0, t)
        draw.line([(gx, y0), (gx, y1)], fill=grid)
        draw.line([(x0, gy), (x1, gy)], fill=grid)
        lab = f"{t:g}"
        draw.text((gx, y1 + 4), lab, fill=axis, font=small, anchor="mt")
        draw.text((x0 - 5, gy), lab, fill=axis, font=small, anchor="rm")
    if diagonal:
        draw.line([px(0, 0), px(1, 1)], fill=(170, 170, 170))
    draw.rectangle([x0, y0, x1, y1], outline=axis)
    pts = [px(float(a), float(b)) for a, b in zip(xs, ys)]
    if len(pts) >= 2:
        draw.line(pts, fill=curve, width=3)
    draw.text(((x0 + x1) / 2, y1 + 26), xlabel, fill=axis, font=small, anchor="mt")
    draw.text(((x0 + x1) / 2, y0 - 10), title, fill=(0, 0, 0), font=big, anchor="md")
    # the y label, written vertically
    from PIL import Image, ImageDraw

    w = int(draw.textlength(ylabel, font=small)) + 4
    lab = Image.new("RGB", (w, 22), "white")
    ImageDraw.Draw(lab).text((2, 1), ylabel, fill=axis, font=small)
    lab = lab.rotate(90, expand=True)
    return lab, (int(x0 - 58), int((y0 + y1) / 2 - lab.size[1] / 2))


def render_curves_figure(y, s, *, title: str = "") -> Optional[np.ndarray]:
    """An ``(H, W, 3)`` uint8 figure, :data:`FIGURE_WIDTH` pixels wide: the ROC curve with
    its AUC above the precision-recall curve with its average precision, axes, ticks and
    labels (pooled over all documents; ``y`` boolean relevance). ``None`` when a class is
    empty."""
    from PIL import Image, ImageDraw

    y = np.asarray(y, bool).ravel()
    s = np.asarray(s, np.float64).ravel()
    roc = roc_curve_points(y.astype(np.float64), s, relevance_threshold=0.5)
    pr = pr_curve_points(y, s)
    if roc is None or pr is None:
        return None
    fpr, tpr = roc
    auc = float(np.trapz(tpr, fpr)) if hasattr(np, "trapz") else float(np.trapezoid(tpr, fpr))
    # one column, about TensorBoard's image card width (a wider figure is shrunk to the
    # card and its text becomes unreadable until "show actual image size" is ticked)
    W, side, gap = FIGURE_WIDTH, 300, 120
    top = 104
    H = top + 2 * side + gap + 60
    img = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(img)
    fonts = (_font(17), _font(19))
    x0 = 92
    boxes = [(x0, top, x0 + side, top + side),
             (x0, top + side + gap, x0 + side, top + 2 * side + gap)]
    labels = []
    labels.append(_panel(draw, boxes[0], fpr, tpr, title=f"ROC  (AUC {auc:.4f})",
                         xlabel="false positive rate", ylabel="true positive rate",
                         diagonal=True, fonts=fonts))
    rec, prec, ap = pr
    labels.append(_panel(draw, boxes[1], rec, prec, title=f"precision-recall  (AP {ap:.4f})",
                         xlabel="recall", ylabel="precision", diagonal=False, fonts=fonts))
    for lab, at in labels:
        img.paste(lab, at)
    npos = int(y.sum())
    if title:
        draw.text((W / 2, 10), title, fill=(0, 0, 0), font=fonts[1], anchor="mt")
    draw.text((W / 2, 36), f"{y.size} documents, {npos} relevant", fill=(0, 0, 0),
              font=fonts[0], anchor="mt")
    return np.asarray(img, dtype=np.uint8)


def render_roc_image(fpr: np.ndarray, tpr: np.ndarray, *, size: int = 240) -> np.ndarray:
    """Draw an ROC curve into an ``(size, size, 3)`` uint8 RGB image (no axes; kept for
    compatibility — the logger writes :func:`render_curves_figure`,
    the ROC and precision-recall curves with axes, labels, AUC and average precision).
    """
    img = np.full((size, size, 3), 255, dtype=np.uint8)
    pad = 12
    span = size - 2 * pad - 1

    def to_px(x, y):
        cols = np.clip(np.round(pad + np.asarray(x) * span), 0, size - 1).astype(int)
        rows = np.clip(np.round(size - 1 - pad - np.asarray(y) * span), 0, size - 1).astype(int)
        return rows, cols

    def polyline(xs, ys, color, width=1):
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        seg = np.hypot(np.diff(xs), np.diff(ys))
        n = max(2, int(seg.sum() * span * 2) + 2)
        t = np.linspace(0.0, 1.0, n)
        cum = np.r_[0.0, np.cumsum(seg)]
        if cum[-1] <= 0:
            return
        u = t * cum[-1]
        px = np.interp(u, cum, xs)
        py = np.interp(u, cum, ys)
        rows, cols = to_px(px, py)
        for dr in range(-(width // 2), width - width // 2):
            for dc in range(-(width // 2), width - width // 2):
                img[np.clip(rows + dr, 0, size - 1), np.clip(cols + dc, 0, size - 1)] = color

    grey = np.array([170, 170, 170], np.uint8)
    polyline([0, 1, 1, 0, 0], [0, 0, 1, 1, 0], grey)
    polyline([0, 1], [0, 1], grey)
    polyline(fpr, tpr, np.array([31, 90, 200], np.uint8), width=2)
    return img
