"""Functional twins of the loss modules: ``f(scores, labels, groups=None, *, ...)``.

Each function takes the module's options as keyword arguments and returns the reduced loss.
"""

# --- exponential family (exponential pairwise, AdaBoost/F-skew, p-norm push, smooth margin) ---

# --- quadratic family (pairwise hinge, QBRank) ---

# --- pointwise ---
