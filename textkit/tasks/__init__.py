"""Tasks: translation, language modelling and classification, each the same pieces.

Every task module exposes its data (``load_pairs`` / ``load_corpora`` / ``load_segments``), a
loader (``make_loader``), the loss for the generic train step (``make_loss``), parameter
initialisation (``init_params``), its default optimizer (``optimizer``) and ``evaluate``. None
owns a training loop: the recipes hand these pieces to ``textkit.training.fit``.
"""

from textkit.tasks import classification, language_model, translation

__all__ = ["classification", "language_model", "translation"]
